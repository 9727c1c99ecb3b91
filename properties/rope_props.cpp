// rope: the backend under test against the reference, with every check of DESIGN.md.
#include "property_support.h"

using namespace mlarope;
using namespace mlarope::props;
using harness::CheckKind;

namespace {

GenOptions rope_cases() {
  GenOptions o;
  o.ops = {Op::rope};
  return o;
}

}  // namespace

// Every check: value, coverage, immutability, bounds, round trip, adjoint, in place, graph
// replay, determinism, order independence.
MLAROPE_PROPERTY(RopeProps, BackendPassesEveryCheck, kCasesPerProperty) {
  const CaseSpec spec = *case_spec(rope_cases());
  RC_TAG(std::string(to_string(spec.layout)), spec.in_place ? "in place" : "out of place");
  require_case_passes(spec);
}

// In place writes only the rope slices, and gives the bits of the out-of-place call.
MLAROPE_PROPERTY(RopeProps, InPlaceWritesOnlyRopeSlices, kCasesPerIdentity) {
  const CaseSpec spec = *rc::gen::map(case_spec(rope_cases()), [](CaseSpec s) {
    s.in_place = true;
    s.plan.broadcast_heads = false;
    return s;
  });
  require_case_passes(spec, {CheckKind::value, CheckKind::immutability, CheckKind::bounds, CheckKind::in_place});
}

// Strided views with gaps between heads and rows, misaligned data and broadcast heads.
MLAROPE_PROPERTY(RopeProps, StridedViewsMatchTheReference, kCasesPerIdentity) {
  const CaseSpec spec = *rc::gen::map(case_spec(rope_cases()), [](CaseSpec s) {
    s.plan.head_gap = 1 + s.plan.head_gap;
    s.plan.row_gap = 3 + s.plan.row_gap;
    s.plan.misalign = true;
    return s;
  });
  require_case_passes(spec, {CheckKind::value, CheckKind::coverage, CheckKind::bounds, CheckKind::immutability});
}
