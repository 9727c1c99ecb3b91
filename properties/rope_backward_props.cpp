// SPDX-License-Identifier: Apache-2.0
// rope_backward: the backend under test against the reference, with every check of
// docs/architecture.md, and the adjoint identity on arbitrary (non-unit) tables.
#include "property_support.h"

using namespace mlarope;
using namespace mlarope::props;
using harness::CheckKind;

namespace {

GenOptions backward_cases() {
  GenOptions o;
  o.ops = {Op::rope_backward};
  return o;
}

}  // namespace

MLAROPE_PROPERTY(RopeBackwardProps, BackendPassesEveryCheck, kCasesPerProperty) {
  const CaseSpec spec = *case_spec(backward_cases());
  RC_TAG(std::string(to_string(spec.layout)), spec.in_place ? "in place" : "out of place");
  require_case_passes(spec);
}

// For arbitrary tables rope_backward is the transpose of rope, not its inverse.
MLAROPE_PROPERTY(RopeBackwardProps, IsTheTransposeForArbitraryTables, kCasesPerIdentity) {
  GenOptions o = backward_cases();
  o.table_kinds = {TableKind::random};
  require_case_passes(*case_spec(o), {CheckKind::value, CheckKind::adjoint});
}
