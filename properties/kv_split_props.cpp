// SPDX-License-Identifier: Apache-2.0
// kv_split: the backend under test against the reference, with every check of docs/architecture.md.
#include "property_support.h"

using namespace mlarope;
using namespace mlarope::props;
using harness::CheckKind;

namespace {

GenOptions kv_cases() {
  GenOptions o;
  o.ops = {Op::kv_split};
  return o;
}

}  // namespace

MLAROPE_PROPERTY(KvSplitProps, BackendPassesEveryCheck, kCasesPerProperty) {
  const CaseSpec spec = *case_spec(kv_cases());
  RC_TAG(std::string(to_string(spec.layout)), spec.k_dim == 0 ? "k_dim 0" : "k_dim > 0",
         spec.v_dim == 0 ? "v_dim 0" : "v_dim > 0");
  require_case_passes(spec);
}

// key and value are copies where the semantics say so (bitwise), key's rope part the rotation of
// k_pe in every head, with k_dim = 0 and v_dim = 0 drawn often.
MLAROPE_PROPERTY(KvSplitProps, EmptyKeyOrValuePartsAreFine, kCasesPerIdentity) {
  const CaseSpec spec = *rc::gen::map(case_spec(kv_cases()), [](CaseSpec s) {
    if (s.data_seed % 2) s.k_dim = 0;
    else s.v_dim = 0;
    return s;
  });
  require_case_passes(spec, {CheckKind::value, CheckKind::coverage, CheckKind::bounds,
                             CheckKind::adjoint});
}
