// SPDX-License-Identifier: Apache-2.0
// rope: the backend under test against the reference, with every check of docs/architecture.md.
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
  require_case_passes(spec, {CheckKind::value, CheckKind::immutability, CheckKind::bounds,
                             CheckKind::in_place});
}

// Strided views with gaps between heads and rows, misaligned data and broadcast heads.
MLAROPE_PROPERTY(RopeProps, StridedViewsMatchTheReference, kCasesPerIdentity) {
  const CaseSpec spec = *rc::gen::map(case_spec(rope_cases()), [](CaseSpec s) {
    s.plan.head_gap = 1 + s.plan.head_gap;
    s.plan.row_gap = 3 + s.plan.row_gap;
    s.plan.misalign = true;
    return s;
  });
  require_case_passes(spec, {CheckKind::value, CheckKind::coverage, CheckKind::bounds,
                             CheckKind::immutability});
}

// The staged in-place body in rounds of whole slices (512 / chunks a round: 64 at bf16 emb 64,
// 32 at f32) with a last round shorter than the others: head counts that are not a multiple
// of a round, which the generator's head counts rarely give with the staged body's conditions.
MLAROPE_PROPERTY(RopeProps, StagedRoundsWithAShortLastRound, kCasesPerIdentity / 5) {
  GenOptions o = rope_cases();
  o.layouts = {TokenLayout::sbhd};
  o.triple = LayoutTriple{PairLayout::interleaved, PairLayout::half, PairLayout::half};
  CaseSpec spec = *case_spec(o);
  spec.in_place = true;
  spec.emb_dim = 64;
  spec.nope_dim = 8 * *rc::gen::inRange<std::int64_t>(0, 3);
  const std::int64_t per_round = spec.dtype == DType::f32 ? 32 : 64;
  spec.heads =
      per_round + *rc::gen::inRange<std::int64_t>(1, per_round);  // one full round, one short
  spec.seq = std::min<std::int64_t>(spec.seq, 3);
  spec.batch = 1;
  spec.cp_size = 1, spec.cp_rank = 0;
  spec.seq_offsets = false;
  spec.fault = MetadataFault::none;
  spec.plan = harness::LayoutPlan{};  // aligned, no gaps: the vector path
  RC_TAG(std::string(to_string(spec.dtype)));
  require_case_passes(spec, {CheckKind::value, CheckKind::immutability, CheckKind::bounds});
}
