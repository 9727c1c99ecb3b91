// SPDX-License-Identifier: Apache-2.0
// The generators: independent fields first (gen::build), then the rows, which depend on the
// dims through the element budget (gen::mapcat), then one normalization that makes the fields
// consistent (in place only for rope ops, faults only where they exist, ...).
#include "fuzz/generators.h"

#include <algorithm>
#include <cmath>
#include <ostream>

namespace mlarope::props {
namespace {

namespace gen = rc::gen;
using rc::Gen;
using I = std::int64_t;

// Uniform in [lo, hi] whatever the size; shrinks towards lo.
Gen<I> uniform(I lo, I hi) { return gen::resize(100, gen::inRange<I>(lo, std::max(lo, hi) + 1)); }

// Uniform in [lo, lo + (hi - lo) * size / 100] (sizes above 100 count as 100).
Gen<I> scaled(I lo, I hi) {
  return gen::withSize(
      [lo, hi](int size) { return uniform(lo, lo + (hi - lo) * std::min(size, 100) / 100); });
}

// An index drawn with `weights`; shrinks towards index 0 (RapidCheck's element generators
// do not shrink at all).
Gen<I> weighted_index(const std::vector<std::size_t>& weights) {
  std::vector<I> ends;
  ends.reserve(weights.size());
  I total = 0;
  for (std::size_t w : weights) ends.push_back(total += static_cast<I>(w));
  return gen::map(uniform(0, total - 1), [ends](I r) {
    return static_cast<I>(std::upper_bound(ends.begin(), ends.end(), r) - ends.begin());
  });
}

// One of `choices` by weight; shrinks towards the first.
template <class T>
Gen<T> pick(std::vector<std::pair<std::size_t, T>> choices) {
  std::vector<std::size_t> weights;
  weights.reserve(choices.size());
  for (const auto& c : choices) weights.push_back(c.first);
  return gen::map(weighted_index(weights), [choices](I i) { return choices[i].second; });
}

// One of `values`, uniformly; shrinks towards the first.
template <class T>
Gen<T> any_of(std::vector<T> values) {
  return gen::map(uniform(0, static_cast<I>(values.size()) - 1),
                  [values](I i) { return values[i]; });
}

// A value of one of `gens`, chosen by weight; shrinks the choice towards the first, then the value.
template <class T>
Gen<T> pick_gen(std::vector<std::pair<std::size_t, Gen<T>>> gens) {
  std::vector<std::size_t> weights;
  weights.reserve(gens.size());
  for (const auto& g : gens) weights.push_back(g.first);
  return gen::mapcat(weighted_index(weights), [gens](I i) { return gens[i].second; });
}

Gen<bool> sometimes(std::size_t percent) {
  return pick<bool>({{100 - percent, false}, {percent, true}});
}

// Marks a draw of wide heads, sized by widened() once emb_dim is drawn.
constexpr I kWideHeads = -1;

Gen<I> heads() {
  return pick_gen<I>({{40, any_of<I>({1, 3, 5, 7, 12, 20})},
                      {38, scaled(1, 16)},
                      {14, scaled(1, 128)},
                      {3, gen::just(kWideHeads)},
                      {5, gen::just<I>(0)}});
}

Gen<I> emb_dim() {
  return pick_gen<I>({{30, any_of<I>({2, 6, 10, 50})},
                      {40, gen::map(scaled(1, 128), [](I x) { return 2 * x; })},
                      {30, gen::just<I>(64)}});
}

Gen<I> nope_dim() {
  return pick_gen<I>({{20, gen::just<I>(0)},
                      {45, scaled(0, 64)},
                      {15, any_of<I>({16, 32, 64, 128})},
                      {20, scaled(0, 256)}});
}

Gen<I> kv_dim() {
  return pick_gen<I>({{15, gen::just<I>(0)},
                      {50, scaled(0, 64)},
                      {15, any_of<I>({64, 128})},
                      {20, scaled(0, 256)}});
}

Gen<I> cp_size(const std::vector<I>& sizes) {
  std::vector<I> others;
  for (I s : sizes)
    if (s != 1) others.push_back(s);
  const bool has_one = others.size() < sizes.size();
  if (others.empty()) return gen::just<I>(1);
  if (!has_one) return any_of(others);
  return pick_gen<I>({{50, gen::just<I>(1)}, {50, any_of(others)}});
}

Gen<I> gap() {
  return pick_gen<I>({{50, gen::just<I>(0)}, {35, uniform(1, 4)}, {15, uniform(16, 64)}});
}

Gen<harness::LayoutPlan> plan(bool broadcast) {
  return gen::build<harness::LayoutPlan>(
      gen::set(&harness::LayoutPlan::head_gap, gap()),
      gen::set(&harness::LayoutPlan::row_gap, gap()),
      gen::set(&harness::LayoutPlan::table_gap,
               pick_gen<I>({{60, gen::just<I>(0)}, {40, uniform(1, 8)}})),
      gen::set(&harness::LayoutPlan::misalign, sometimes(20)),
      gen::set(&harness::LayoutPlan::broadcast_heads,
               broadcast ? sometimes(15) : gen::just(false)));
}

Gen<PairLayout> pair_layout() {
  return any_of<PairLayout>({PairLayout::interleaved, PairLayout::half});
}

// Table dtypes: f32 60% of the time when all three are allowed, else uniform.
Gen<DType> table_dtype(const std::vector<DType>& allowed) {
  if (allowed.size() == 3)
    return pick<DType>({{60, DType::f32}, {20, DType::bf16}, {20, DType::f16}});
  return any_of(allowed);
}

Gen<CaseSpec> head(const GenOptions& o) {
  return gen::build<CaseSpec>(
      gen::set(&CaseSpec::op, any_of(o.ops)), gen::set(&CaseSpec::layout, any_of(o.layouts)),
      gen::set(&CaseSpec::dtype, any_of(o.dtypes)),
      gen::set(&CaseSpec::table_dtype, table_dtype(o.table_dtypes)),
      gen::set(&CaseSpec::heads, heads()), gen::set(&CaseSpec::nope_dim, nope_dim()),
      gen::set(&CaseSpec::emb_dim, emb_dim()), gen::set(&CaseSpec::k_dim, kv_dim()),
      gen::set(&CaseSpec::v_dim, kv_dim()), gen::set(&CaseSpec::cp_size, cp_size(o.cp_sizes)),
      gen::set(&CaseSpec::freq_mode, any_of<FreqMode>({FreqMode::per_sequence, FreqMode::packed})),
      gen::set(&CaseSpec::position_ids, sometimes(20)),
      gen::set(&CaseSpec::position_ids_type, any_of<IndexType>({IndexType::i32, IndexType::i64})),
      gen::set(&CaseSpec::seq_offsets, sometimes(30)),
      gen::set(&CaseSpec::max_seqlen_known, pick<bool>({{70, true}, {30, false}})),
      gen::set(&CaseSpec::fault, pick<MetadataFault>({{85, MetadataFault::none},
                                                      {4, MetadataFault::bad_length},
                                                      {4, MetadataFault::decreasing},
                                                      {3, MetadataFault::too_long},
                                                      {4, MetadataFault::row_outside_table}})),
      gen::set(&CaseSpec::extra_table_rows,
               pick_gen<I>({{50, gen::just<I>(0)}, {50, uniform(1, 7)}})),
      gen::set(&CaseSpec::table_rank4, sometimes(15)),
      gen::set(&CaseSpec::in_layout, pair_layout()), gen::set(&CaseSpec::out_layout, pair_layout()),
      gen::set(&CaseSpec::table_layout, pair_layout()),
      gen::set(&CaseSpec::inverse, any_of<bool>({false, true})),
      gen::set(&CaseSpec::in_place, sometimes(35)),
      gen::set(&CaseSpec::table_kind, any_of(o.table_kinds)),
      gen::set(&CaseSpec::mscale, any_of<double>({0.5, 0.75, 1.5, 2.0})),
      gen::set(&CaseSpec::yarn_scaling, pick<double>({{60, 1.0}, {20, 4.0}, {20, 40.0}})),
      gen::set(&CaseSpec::table_offset,
               pick_gen<I>({{30, gen::just<I>(0)}, {70, uniform(1, 100000)}})),
      gen::set(&CaseSpec::values, pick<Values>({{47, Values::normal},
                                                {8, Values::large},
                                                {8, Values::tiny},
                                                {8, Values::signed_zeros},
                                                {13, Values::cancelling},
                                                {10, Values::ties},
                                                {6, Values::nan_payloads}})),
      gen::set(&CaseSpec::plan, plan(o.broadcast)),
      gen::set(&CaseSpec::data_seed,
               gen::noShrink(gen::resize(100, gen::arbitrary<std::uint64_t>()))));
}

// How a draw is shaped for the kernels' vector paths (GenOptions::vector_path_share): the
// dispatcher (cuda/launch/dispatch.h) takes them for emb_dim a multiple of 8, one of
// Megatron's four layout modes and every rope slice access 16-byte aligned; the staged
// in-place path also needs MLA's layout change. The dims are the drawn ones rounded, never
// replaced, so that a failing case still shrinks to small dims.
struct PathShape {
  bool on = false;
  bool power_of_two = false;  ///< dims rounded down to powers of two rather than to 8
  I mode = 0;                 ///< which of Megatron's modes, out of place
  bool in_place = false;      ///< rope ops: in place, MLA's layout change
};

Gen<PathShape> path_shape(int share) {
  return gen::build<PathShape>(
      gen::set(&PathShape::on, sometimes(static_cast<std::size_t>(std::clamp(share, 0, 100)))),
      gen::set(&PathShape::power_of_two, sometimes(50)), gen::set(&PathShape::mode, uniform(0, 3)),
      gen::set(&PathShape::in_place, sometimes(67)));
}

I multiple_of_8(I x) { return x - x % 8; }

// The largest power of two not above n (n itself when 0).
I power_of_two_floor(I n) {
  I p = 1;
  while (p * 2 <= n) p *= 2;
  return n > 0 ? p : 0;
}

// `s` with the path shape applied: everything a multiple of 8 elements is 16 bytes in every
// activation and table dtype (2 or 4 bytes). The options apply after, in finish().
CaseSpec shaped(CaseSpec s, const PathShape& p) {
  if (!p.on) return s;
  const auto round = [&p](I x) {
    return p.power_of_two && x >= 8 ? power_of_two_floor(x) : multiple_of_8(x);
  };
  s.nope_dim = round(s.nope_dim);
  s.emb_dim = std::max<I>(8, round(s.emb_dim));
  s.k_dim = round(s.k_dim);
  s.v_dim = round(s.v_dim);
  s.plan.head_gap = multiple_of_8(s.plan.head_gap);
  s.plan.row_gap = multiple_of_8(s.plan.row_gap);
  s.plan.table_gap = multiple_of_8(s.plan.table_gap);
  s.plan.misalign = false;
  constexpr PairLayout kI = PairLayout::interleaved, kH = PairLayout::half;
  static const LayoutTriple modes[4] = {{kI, kH, kH}, {kI, kI, kH}, {kH, kH, kH}, {kI, kI, kI}};
  const LayoutTriple& mode = modes[p.in_place ? 0 : p.mode];  // MLA first
  s.in_layout = mode.in_layout;
  s.out_layout = mode.out_layout;
  s.table_layout = mode.table_layout;
  s.in_place = p.in_place;
  return s;
}

// Wide heads, at every size: H x emb_dim / 2 in (1024, 1280], so that a Triton kernel that
// tiles a token's heads into programs of 1024 lanes (Unsloth's) needs a second program.
// emb_dim at least 64 (at most 40 heads: a kernel with a program per head, run by Triton's
// interpreter, pays for each) and the nope, k and v parts at most 8 keep a row within 2,880
// elements: the checks' cost grows with both.
Gen<CaseSpec> widened(CaseSpec h) {
  if (h.heads != kWideHeads) return gen::just(h);
  h.emb_dim = std::max<I>(h.emb_dim, 64);
  const I half = h.emb_dim / 2;
  h.nope_dim = std::min<I>(h.nope_dim, 8);
  h.k_dim = std::min<I>(h.k_dim, 8);
  h.v_dim = std::min<I>(h.v_dim, 8);
  return gen::map(uniform(1024 / half + 1, 1280 / half), [h](I heads) {
    CaseSpec s = h;
    s.heads = heads;
    return s;
  });
}

// The row structure, drawn after the dims.
struct Rows {
  I seq = 0, batch = 1;
  std::vector<I> units;  // THD: sequence lengths in units of 2 * cp_size (or 1)
  I padding = 0;
  I cp_rank = 0;
};

bool wide_heads(const CaseSpec& s) { return s.heads * (s.emb_dim / 2) > 1024; }

// Rows a case may have: an element budget of 256 + 40 * size per tensor, at most 2 + 0.3 size,
// at least 1, or 2 for wide heads (so that such a case has a row more often than not: with
// context parallelism an SBHD sequence has an even length).
I max_rows(const CaseSpec& s, int size) {
  const bool rope = s.op == Op::rope || s.op == Op::rope_backward;
  const I widest = rope ? s.nope_dim + s.emb_dim : std::max(s.k_dim + s.v_dim, s.k_dim + s.emb_dim);
  const I per_row = std::max<I>(1, s.heads) * std::max<I>(1, widest);
  const I budget = 256 + 40 * static_cast<I>(std::max(size, 0));
  const I least = wide_heads(s) ? 2 : 1;
  return std::clamp<I>(budget / per_row, least, 2 + 3 * static_cast<I>(std::max(size, 0)) / 10);
}

Gen<std::vector<I>> sequences(I rows) {
  const Gen<I> unit = pick_gen<I>({{15, gen::just<I>(0)}, {85, uniform(1, rows)}});
  return pick_gen<std::vector<I>>(
      {{10, gen::just(std::vector<I>{})},
       {25, gen::container<std::vector<I>>(1, unit)},
       {40, gen::mapcat(uniform(2, 6),
                        [unit](I n) { return gen::container<std::vector<I>>(n, unit); })},
       {25, gen::mapcat(uniform(8, 32), [](I n) {
          return gen::container<std::vector<I>>(n, pick<I>({{30, 0}, {70, 1}}));
        })}});
}

Gen<Rows> rows(const CaseSpec& s, I limit, bool batch_one) {
  const bool sbhd = s.layout == TokenLayout::sbhd;
  return gen::build<Rows>(
      gen::set(&Rows::seq,
               sbhd ? pick_gen<I>(
                          {{4, gen::just<I>(0)}, {8, gen::just<I>(1)}, {88, uniform(0, limit)}})
                    : gen::just<I>(0)),
      // With seq_offsets, two batch entries or more, so that entries read different rows
      // (Hugging Face's per-batch position_ids and [B, S, D] tables): one entry would make
      // the offsets a shift of the whole batch.
      gen::set(&Rows::batch, !sbhd || batch_one ? gen::just<I>(1)
                             : s.seq_offsets    ? pick<I>({{50, 2}, {25, 3}, {25, 4}})
                                             : pick<I>({{4, 0}, {60, 1}, {20, 2}, {8, 3}, {8, 4}})),
      gen::set(&Rows::units, sbhd ? gen::just(std::vector<I>{}) : sequences(limit)),
      gen::set(&Rows::padding,
               sbhd ? gen::just<I>(0) : pick<I>({{60, 0}, {15, 1}, {10, 2}, {10, 3}, {5, 7}})),
      gen::set(&Rows::cp_rank, uniform(0, s.cp_size - 1)));
}

void finish_sbhd(CaseSpec& s, const Rows& r, I limit) {
  s.batch = r.batch;
  // A case of wide heads keeps its tokens: fewer batch entries rather than no sequence.
  const I even = s.cp_size > 1 ? 2 : 1;
  if (wide_heads(s) && r.seq > 0) s.batch = std::min(r.batch, std::max<I>(1, limit / even));
  s.seq = std::min(r.seq, limit / std::max<I>(1, s.batch));
  if (s.cp_size > 1) s.seq -= s.seq % 2;
  s.seq_lengths.clear();
  s.padding_rows = 0;
  s.freq_mode = FreqMode::per_sequence;
  s.position_ids = false;
  s.max_seqlen_known = false;
}

void finish_thd(CaseSpec& s, const Rows& r, I limit) {
  const I local_unit = s.cp_size > 1 ? 2 : 1;
  s.padding_rows = std::min(r.padding, limit);
  I room = limit - s.padding_rows;
  s.seq_lengths.clear();
  for (I units : r.units) {
    units = std::min(units, room / local_unit);
    s.seq_lengths.push_back(units * local_unit * s.cp_size);
    room -= units * local_unit;
  }
  s.seq = s.batch = 1;
}

// Make the fields of a drawn spec agree with each other and with the options.
CaseSpec finish(CaseSpec s, const Rows& r, const GenOptions& o, I limit) {
  const bool rope = s.op == Op::rope || s.op == Op::rope_backward;
  if (o.power_of_two_dims) {  // only ever smaller: the element budget still holds
    s.emb_dim = 2 * power_of_two_floor(s.emb_dim / 2);
    s.k_dim = power_of_two_floor(s.k_dim);
    s.v_dim = power_of_two_floor(s.v_dim);
  }
  if (!o.packed) s.freq_mode = FreqMode::per_sequence;
  if (rope) s.k_dim = s.v_dim = 0;
  else s.nope_dim = 0;
  s.in_place = s.in_place && rope && o.in_place;
  if (o.triple) {
    s.in_layout = o.triple->in_layout;
    s.out_layout = o.triple->out_layout;
    s.table_layout = o.triple->table_layout;
  }
  if (o.in_layout) s.in_layout = *o.in_layout;
  if (o.out_layout) s.out_layout = *o.out_layout;
  if (o.table_layout) s.table_layout = *o.table_layout;
  s.cp_rank = r.cp_rank % s.cp_size;
  s.position_ids = s.position_ids && o.position_ids;
  s.seq_offsets = s.seq_offsets && o.seq_offsets;
  const bool thd = s.layout == TokenLayout::thd;
  if (thd) finish_thd(s, r, limit);
  else finish_sbhd(s, r, limit);
  const bool sequences = thd && !s.seq_lengths.empty();
  switch (s.fault) {
    case MetadataFault::none: break;
    case MetadataFault::bad_length:
      if (!sequences || s.cp_size == 1) s.fault = MetadataFault::none;
      break;
    case MetadataFault::decreasing:
    case MetadataFault::too_long:
      if (!sequences) s.fault = MetadataFault::none;
      break;
    case MetadataFault::row_outside_table:
      if (!s.position_ids && !s.seq_offsets && o.seq_offsets) s.seq_offsets = true;
      if (!s.position_ids && !s.seq_offsets) s.fault = MetadataFault::none;
      break;
  }
  if (!o.faults) s.fault = MetadataFault::none;
  if (s.table_kind != TableKind::mscale) s.mscale = 1.0;
  if (s.table_kind == TableKind::random) s.yarn_scaling = 1.0, s.table_offset = 0;
  if (s.in_place || !o.broadcast) s.plan.broadcast_heads = false;
  return s;
}

}  // namespace

rc::Gen<CaseSpec> case_spec(const GenOptions& o) {
  const Gen<CaseSpec> shaped_draw = gen::mapcat(head(o), [o](const CaseSpec& h) {
    return gen::map(path_shape(o.vector_path_share),
                    [h](const PathShape& p) { return shaped(h, p); });
  });
  const Gen<CaseSpec> drawn = gen::mapcat(shaped_draw, widened);
  return gen::mapcat(drawn, [o](CaseSpec h) {
    h.heads = std::max(h.heads, o.min_heads);
    return gen::withSize([o, h](int size) {
      const I limit = max_rows(h, size);
      return gen::map(rows(h, limit, o.batch_one),
                      [o, h, limit](const Rows& r) { return finish(h, r, o, limit); });
    });
  });
}

namespace {

// Log-uniform in [lo, hi] (1,000 steps); shrinks towards lo.
Gen<double> log_uniform(double lo, double hi) {
  return gen::map(uniform(0, 1000), [lo, hi](I k) {
    return lo * std::pow(hi / lo, static_cast<double>(k) / 1000.0);
  });
}

// Uniform in [lo, hi] (1,000 steps); shrinks towards lo.
Gen<double> linear(double lo, double hi) {
  return gen::map(uniform(0, 1000),
                  [lo, hi](I k) { return lo + (hi - lo) * static_cast<double>(k) / 1000.0; });
}

Gen<YarnParams> yarn_params() {
  return gen::build<YarnParams>(
      gen::set(&YarnParams::rotary_base, pick_gen<double>({{40, gen::just(10000.0)},
                                                           {20, any_of<double>({50000.0, 1e6})},
                                                           {40, log_uniform(1.5, 1e7)}})),
      gen::set(&YarnParams::scaling_factor,
               pick_gen<double>(
                   {{25, gen::just(1.0)}, {25, gen::just(40.0)}, {50, log_uniform(0.5, 128.0)}})),
      gen::set(&YarnParams::original_max_position_embeddings,
               pick_gen<double>({{50, gen::just(4096.0)}, {50, log_uniform(16.0, 131072.0)}})),
      gen::set(&YarnParams::beta_fast,
               pick_gen<double>({{50, gen::just(32.0)}, {50, linear(1.0, 64.0)}})),
      gen::set(&YarnParams::beta_slow,
               pick_gen<double>({{50, gen::just(1.0)}, {50, log_uniform(0.25, 8.0)}})),
      gen::set(&YarnParams::mscale,
               pick_gen<double>(
                   {{40, gen::just(1.0)}, {20, gen::just(0.707)}, {40, linear(0.0, 2.0)}})),
      gen::set(&YarnParams::mscale_all_dim, pick_gen<double>({{40, gen::just(0.0)},
                                                              {20, any_of<double>({0.707, 1.0})},
                                                              {40, linear(0.0, 2.0)}})),
      gen::set(&YarnParams::concentration_override,
               pick_gen<double>({{90, gen::just(std::nan(""))}, {10, linear(-2.0, 2.0)}})));
}

}  // namespace

Gen<harness::YarnCase> yarn_case() {
  using harness::YarnCase;
  return gen::build<YarnCase>(
      gen::set(&YarnCase::params, yarn_params()),
      gen::set(&YarnCase::rows, pick_gen<I>({{80, scaled(0, 64)}, {20, scaled(0, 300)}})),
      gen::set(&YarnCase::emb_dim, pick_gen<I>({{85, emb_dim()}, {15, any_of<I>({128, 512})}})),
      gen::set(&YarnCase::offset,
               pick_gen<I>({{30, gen::just<I>(0)},
                            {40, scaled(0, 5000)},
                            {20, uniform(0, 1000000)},
                            {10, uniform((I{1} << 24) - 64, (I{1} << 24) + 64)}})),
      gen::set(&YarnCase::table_layout,
               any_of<PairLayout>({PairLayout::half, PairLayout::interleaved})),
      gen::set(&YarnCase::dtype, any_of<DType>({DType::f32, DType::bf16, DType::f16})),
      gen::set(&YarnCase::rank4, sometimes(20)),
      gen::set(&YarnCase::row_gap, pick_gen<I>({{70, gen::just<I>(0)}, {30, uniform(1, 9)}})),
      gen::set(&YarnCase::misalign, sometimes(20)));
}

harness::YarnCase random_yarn_case(std::uint64_t seed, int size) {
  return yarn_case()(rc::Random(seed), size).value();
}

CaseSpec random_spec(std::uint64_t seed, int size) { return random_spec(seed, size, GenOptions{}); }

CaseSpec random_spec(std::uint64_t seed, int size, const GenOptions& options) {
  return case_spec(options)(rc::Random(seed), size).value();
}

}  // namespace mlarope::props

namespace mlarope::harness {
void showValue(const YarnCase& c, std::ostream& os) { os << describe(c); }
}  // namespace mlarope::harness
