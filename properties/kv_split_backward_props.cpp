// SPDX-License-Identifier: Apache-2.0
// kv_split_backward: the backend under test against the reference, with every check of
// docs/architecture.md; the head sum with many heads.
#include "property_support.h"

using namespace mlarope;
using namespace mlarope::props;
using harness::CheckKind;

namespace {

GenOptions kv_backward_cases() {
  GenOptions o;
  o.ops = {Op::kv_split_backward};
  return o;
}

}  // namespace

MLAROPE_PROPERTY(KvSplitBackwardProps, BackendPassesEveryCheck, kCasesPerProperty) {
  const CaseSpec spec = *case_spec(kv_backward_cases());
  RC_TAG(std::string(to_string(spec.layout)), spec.heads > 20 ? "many heads" : "few heads");
  require_case_passes(spec);
}

// grad_k_pe sums every head before the adjoint rotation: many heads, large and cancelling values.
MLAROPE_PROPERTY(KvSplitBackwardProps, HeadSumWithManyHeads, kCasesPerIdentity) {
  GenOptions o = kv_backward_cases();
  o.min_heads = 32;
  const CaseSpec spec = *case_spec(o);
  require_case_passes(spec, {CheckKind::value, CheckKind::coverage, CheckKind::adjoint});
}
