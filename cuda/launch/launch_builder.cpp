// SPDX-License-Identifier: Apache-2.0
// Call descriptors -> launch descriptors (see launch_builder.h).
#include "launch/launch_builder.h"

#include <algorithm>
#include <cmath>

#include "kernels/kv_split_kernels.h"
#include "kernels/pair_rotation.h"
#include "kernels/rope_kernels.h"
#include "launch/dispatch.h"
#include "mlarope/validate.h"

namespace mlarope::detail {
namespace {

template <class Void>
kernels::ActivationView<Void> activation_view(const BasicTensorView<Void>& v, TokenLayout layout) {
  if (layout == TokenLayout::sbhd) return {v.data, v.strides[0], v.strides[1], v.strides[2]};
  return {v.data, v.strides[0], 0, v.strides[1]};
}

kernels::TableView table_view(const ConstTensorView& table) {
  return {table.data, table_row_stride(table)};
}

kernels::PairRotation pair_rotation(const Rotation& r, bool adjoint) {
  kernels::PairRotation p;
  p.read_layout = adjoint ? r.out_layout : r.in_layout;
  p.write_layout = adjoint ? r.in_layout : r.out_layout;
  p.table_layout = r.table_layout;
  p.sign = r.inverse ? -1.0f : 1.0f;
  p.adjoint = adjoint;
  p.table_dtype = r.cos.dtype;
  p.cos = table_view(r.cos);
  p.sin = table_view(r.sin);
  // cos and sin are validated tables ([R, emb] or [R, 1, 1, emb]), so size(-1) exists.
  p.table_vector = r.table_layout == PairLayout::half && r.cos.dtype == DType::f32 &&
                   r.cos.size(-1) % kernels::kVectorEmbMultiple == 0 &&
                   aligned_view(r.cos, 0, 16) && aligned_view(r.sin, 0, 16);
  return p;
}

kernels::PositionArgs position_args(const Positions& p, const ConstTensorView& rows,
                                    const Rotation& rotation, DeviceStatus* status) {
  kernels::PositionArgs a;
  a.layout = p.layout;
  a.freq_mode = p.freq_mode;
  a.seq_len = rows.shape[0];
  a.batch = p.layout == TokenLayout::sbhd ? rows.shape[1] : 1;
  a.cp_size = p.cp_size;
  a.cp_rank = p.cp_rank;
  a.table_rows = table_rows(rotation);
  a.cu_seqlens = static_cast<const std::int32_t*>(p.cu_seqlens.data);
  a.num_sequences = p.layout == TokenLayout::thd ? p.cu_seqlens.size - 1 : 0;
  a.position_ids = p.position_ids.data;
  a.position_ids_type = p.position_ids.type;
  a.seq_offsets = static_cast<const std::int32_t*>(p.seq_offsets.data);
  a.status = status;
  return a;
}

LayoutTriple layouts_of(const Rotation& r) { return {r.in_layout, r.out_layout, r.table_layout}; }

std::int64_t heads_of(const ConstTensorView& v) { return v.size(-2); }

// 16-byte pieces (and tail elements) of a segment of `length` elements.
std::int64_t copy_items(std::int64_t length, DType dtype) {
  const std::int64_t per_vector = 16 / static_cast<std::int64_t>(dtype_size(dtype));
  return length / per_vector + length % per_vector;
}

// How the threads of a body share a row's work items: one each at least, or, in the bodies
// that load in batches, enough for a batch (LaunchProfile::batched_work_per_thread).
enum class Sharing { one_each, batched };

// A grid of one block per row (capped: the bodies loop over rows) with enough threads for
// `work` items per row, profile.min_work_per_thread or more each, and as `sharing` says (at
// least one thread).
kernels::GridShape row_grid(std::int64_t rows, std::int64_t work, Sharing sharing,
                            const LaunchProfile& profile) {
  const std::int64_t g = profile.thread_granularity;
  const std::int64_t least = sharing == Sharing::batched ? profile.batched_work_per_thread : 1;
  const std::int64_t per = std::max(least, profile.min_work_per_thread);
  const std::int64_t wanted = (work + per - 1) / per;
  const std::int64_t threads =
      std::clamp<std::int64_t>((wanted + g - 1) / g * g, g, profile.max_threads);
  // At least one block, whatever `rows` (a launched call has one at least: a call without rows
  // writes nothing and is never launched), so that the status word always gets its bits.
  return {std::clamp<std::int64_t>(rows, 1, profile.max_blocks), static_cast<int>(threads)};
}

// `grid` with THD's cap on blocks (LaunchProfile::max_thd_blocks, min_thd_blocks): `work`
// items in each of `rows` rows, `sequences` to check in every block. Up to
// kSharedSequences sequences, a block's gate leaves cu_seqlens in its shared memory and its
// rows' plans wait for no load: a block costs the gate's one to three round trips more than
// SBHD's, and a grid of a block a row (as SBHD's) beats max_thd_blocks of several rows each.
kernels::GridShape capped_for_layout(kernels::GridShape grid, TokenLayout layout, std::int64_t rows,
                                     std::int64_t work, std::int64_t sequences,
                                     const LaunchProfile& profile) {
  if (layout != TokenLayout::thd) return grid;
  const std::int64_t items = rows * work;  // at most the call's elements: no overflow
  const std::int64_t by_work = std::max(profile.min_thd_blocks, items / (sequences + 1));
  const std::int64_t most =
      sequences <= kernels::kSharedSequences ? profile.max_blocks : profile.max_thd_blocks;
  grid.blocks = std::max<std::int64_t>(1, std::min({grid.blocks, most, by_work}));
  return grid;
}

// Pairs per chunk of a variant: kernels::kVectorPairs<T> of the dtype on the vector paths.
std::int64_t pairs_per_chunk(bool vector, DType dtype) {
  return vector ? 8 / static_cast<std::int64_t>(dtype_size(dtype)) : 1;
}

}  // namespace

RopeLaunch make_rope_launch(const ConstTensorView& in, const TensorView& out, const RopeArgs& args,
                            RopeMode mode, const LaunchProfile& profile) {
  RopeLaunch l;
  const TokenLayout layout = args.positions.layout;
  l.dtype = in.dtype;
  l.args.in = activation_view(in, layout);
  l.args.out = activation_view(out, layout);
  l.args.heads = heads_of(in);
  l.args.nope_dim = args.nope_dim;
  l.args.emb_dim = args.emb_dim;
  l.args.in_place = mode.in_place;
  l.args.copy_vector = aligned_view(in, 0, 16) && aligned_view(out, 0, 16);
  l.args.rotation = pair_rotation(args.rotation, mode.adjoint);
  l.args.positions = position_args(args.positions, in, args.rotation, args.status);
  const bool aligned = aligned_view(in, args.nope_dim, 16) && aligned_view(out, args.nope_dim, 16);
  l.variant =
      choose_rope_variant({args.emb_dim, layouts_of(args.rotation), mode.in_place, aligned});
  const std::int64_t rows = l.args.positions.seq_len * l.args.positions.batch;
  if (l.variant == RopeVariant::staged_vector) {  // rounds of whole rows, or slices of one row
    const std::int64_t chunks = args.emb_dim / 2 / pairs_per_chunk(true, in.dtype);
    const std::int64_t per_round = kernels::staged_slices_per_round(l.args.heads, chunks);
    const std::int64_t round_rows =
        kernels::staged_rows_per_round(l.args.heads, chunks, args.emb_dim);
    const std::int64_t rounds = round_rows > 1
                                    ? (rows + round_rows - 1) / round_rows
                                    : rows * ((l.args.heads + per_round - 1) / per_round);
    l.work = round_rows > 1 ? round_rows * l.args.heads * chunks : per_round * chunks;
    l.grid = capped_for_layout(row_grid(rounds, l.work, Sharing::one_each, profile), layout, rounds,
                               l.work, l.args.positions.num_sequences, profile);
    return l;
  }
  const bool whole_slice = l.variant == RopeVariant::whole_slice_scalar;
  const std::int64_t chunks =
      args.emb_dim / 2 / pairs_per_chunk(l.variant == RopeVariant::chunked_vector, in.dtype);
  l.work = whole_slice
               ? l.args.heads
               : std::max(chunks * l.args.heads,
                          mode.in_place ? 0 : l.args.heads * copy_items(args.nope_dim, in.dtype));
  const Sharing sharing = whole_slice ? Sharing::one_each : Sharing::batched;
  l.grid = capped_for_layout(row_grid(rows, l.work, sharing, profile), layout, rows, l.work,
                             l.args.positions.num_sequences, profile);
  return l;
}

KvSplitLaunch make_kv_split_launch(const KvSplitCall& c, const LaunchProfile& profile) {
  KvSplitLaunch l;
  const KvSplitArgs& a = c.args;
  const TokenLayout layout = a.positions.layout;
  l.dtype = c.kv.dtype;
  l.args.kv = activation_view(c.kv, layout);
  l.args.k_pe = activation_view(c.k_pe, layout);
  l.args.key = activation_view(c.key, layout);
  l.args.value = activation_view(c.value, layout);
  l.args.heads = heads_of(c.kv);
  l.args.k_dim = a.k_dim;
  l.args.v_dim = a.v_dim;
  l.args.emb_dim = a.emb_dim;
  l.args.copy_vector = aligned_view(c.kv, 0, 16) && aligned_view(c.kv, a.k_dim, 16) &&
                       aligned_view(c.key, 0, 16) && aligned_view(c.value, 0, 16);
  l.args.rotation = pair_rotation(a.rotation, false);
  l.args.positions = position_args(a.positions, c.kv, a.rotation, a.status);
  const bool aligned = aligned_view(c.k_pe, 0, 16) && aligned_view(c.key, a.k_dim, 16);
  l.variant = choose_kv_variant({a.emb_dim, layouts_of(a.rotation), aligned});
  const std::int64_t rows = l.args.positions.seq_len * l.args.positions.batch;
  const std::int64_t chunks =
      a.emb_dim / 2 / pairs_per_chunk(l.variant == KvVariant::vector, l.dtype);
  const std::int64_t copies = copy_items(a.k_dim, c.kv.dtype) + copy_items(a.v_dim, c.kv.dtype);
  l.work = l.args.heads * std::max(chunks, copies);
  l.grid = capped_for_layout(row_grid(rows, l.work, Sharing::batched, profile), layout, rows,
                             l.work, l.args.positions.num_sequences, profile);
  return l;
}

KvSplitBackwardLaunch make_kv_split_backward_launch(const KvSplitBackwardCall& c,
                                                    const LaunchProfile& profile) {
  KvSplitBackwardLaunch l;
  const KvSplitArgs& a = c.args;
  const TokenLayout layout = a.positions.layout;
  l.dtype = c.grad_key.dtype;
  l.args.grad_key = activation_view(c.grad_key, layout);
  l.args.grad_value = activation_view(c.grad_value, layout);
  l.args.grad_kv = activation_view(c.grad_kv, layout);
  l.args.grad_k_pe = activation_view(c.grad_k_pe, layout);
  l.args.heads = heads_of(c.grad_key);
  l.args.k_dim = a.k_dim;
  l.args.v_dim = a.v_dim;
  l.args.emb_dim = a.emb_dim;
  l.args.copy_vector = aligned_view(c.grad_key, 0, 16) && aligned_view(c.grad_value, 0, 16) &&
                       aligned_view(c.grad_kv, 0, 16) && aligned_view(c.grad_kv, a.k_dim, 16);
  l.args.rotation = pair_rotation(a.rotation, true);
  l.args.positions = position_args(a.positions, c.grad_key, a.rotation, a.status);
  const bool aligned = aligned_view(c.grad_key, a.k_dim, 16) && aligned_view(c.grad_k_pe, 0, 16);
  l.variant = choose_kv_variant({a.emb_dim, layouts_of(a.rotation), aligned});
  const std::int64_t rows = l.args.positions.seq_len * l.args.positions.batch;
  const std::int64_t chunks =
      a.emb_dim / 2 / pairs_per_chunk(l.variant == KvVariant::vector, l.dtype);
  const std::int64_t copies =
      l.args.heads * (copy_items(a.k_dim, l.dtype) + copy_items(a.v_dim, l.dtype));
  const std::int64_t partial_sums = chunks * kernels::kv_sum_groups(l.args.heads, chunks);
  l.work = std::max(partial_sums, copies);
  l.grid = capped_for_layout(row_grid(rows, l.work, Sharing::batched, profile), layout, rows,
                             l.work, l.args.positions.num_sequences, profile);
  return l;
}

YarnLaunch make_yarn_launch(const YarnTablesCall& c, const LaunchProfile& profile) {
  YarnLaunch l;
  kernels::YarnKernelArgs& a = l.args;
  const YarnParams& p = c.params;
  a.cos = c.cos.data;
  a.sin = c.sin.data;
  a.dtype = c.cos.dtype;
  a.rows = c.cos.shape[0];
  a.emb_dim = c.cos.size(-1);
  a.cos_row_stride = c.cos.strides[0];
  a.sin_row_stride = c.sin.strides[0];
  a.offset = c.offset;
  a.table_layout = c.table_layout;
  a.rotary_base = p.rotary_base;
  a.scaling_factor = p.scaling_factor;
  // Megatron's _yarn_find_correction_range (rounded to integers) and _yarn_linear_ramp_mask.
  const double two_pi = 6.283185307179586476925286766559;
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(a.emb_dim) *
           std::log(p.original_max_position_embeddings / (rotations * two_pi)) /
           (2.0 * std::log(p.rotary_base));
  };
  a.ramp_low = std::max(std::floor(correction_dim(p.beta_fast)), 0.0);
  a.ramp_high =
      std::min(std::ceil(correction_dim(p.beta_slow)), static_cast<double>(a.emb_dim - 1));
  if (a.ramp_low == a.ramp_high) a.ramp_high += 0.001;
  auto mscale = [&](double m) {
    return p.scaling_factor <= 1.0 ? 1.0 : 0.1 * m * std::log(p.scaling_factor) + 1.0;
  };
  a.concentration = std::isnan(p.concentration_override)
                        ? mscale(p.mscale) / mscale(p.mscale_all_dim)
                        : p.concentration_override;
  l.work = a.emb_dim / 2;
  l.grid =
      a.rows == 0 ? kernels::GridShape{} : row_grid(a.rows, l.work, Sharing::one_each, profile);
  return l;
}

}  // namespace mlarope::detail
