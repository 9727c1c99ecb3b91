// SPDX-License-Identifier: Apache-2.0
// yarn_tables: the backend under test against the reference's exact values (harness/checks/
// yarn_check.h): every element within one rounding of a value the double computation can
// reach, every element written, nothing outside the tables, two runs bitwise equal.
#include "property_support.h"

using namespace mlarope;
using namespace mlarope::props;

MLAROPE_PROPERTY(YarnProps, BackendTablesMatchTheReference, kCasesPerProperty) {
  const harness::YarnCase c = *yarn_case();
  RC_TAG(std::string(to_string(c.dtype)), std::string(to_string(c.table_layout)));
  require_yarn_case_passes(c);
}

// Positions past 2^20, where the angle's absolute error is largest, and the DeepSeek-V3
// parameters (scaling 40, beta 32/1, mscale 1/1, emb 64).
MLAROPE_PROPERTY(YarnProps, LongContextDeepSeekTables, kCasesPerIdentity) {
  harness::YarnCase c = *yarn_case();
  c.params = YarnParams{};
  c.params.scaling_factor = 40;
  c.params.mscale = c.params.mscale_all_dim = 1.0;
  c.emb_dim = 64;
  c.offset = *rc::gen::inRange<std::int64_t>(std::int64_t{1} << 20, std::int64_t{1} << 25);
  require_yarn_case_passes(c);
}
