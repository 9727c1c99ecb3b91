// Kernel bodies of kv_split and kv_split_backward (SPEC.md §4). One block iteration per row;
// the k_pe rope slice is rotated once per row (per pair chunk) and broadcast to every key head,
// and the backward sums the heads in f32, in head order, before the adjoint rotation.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/freq_row.h"
#include "kernels/kernel_args.h"
#include "kernels/pair_rotation.h"
#include "kernels/portability.h"
#include "kernels/rope_kernels.h"
#include "kernels/segment_copy.h"

namespace mlarope::kernels {

/// key[..., :k] = kv[..., :k] and value = kv[..., k:] for every head of one row.
template <class T>
MLAROPE_HD MLAROPE_INLINE void copy_kv_parts(const KvSplitKernelArgs& a, const T* kv, T* key,
                                            T* value, const GridCoord& g) {
  copy_head_segments<T>({kv, key, a.kv.head_stride, a.key.head_stride, a.heads, a.k_dim},
                        a.copy_vector, g.thread, g.num_threads);
  copy_head_segments<T>({kv + a.k_dim, value, a.kv.head_stride, a.value.head_stride, a.heads,
                         a.v_dim},
                        a.copy_vector, g.thread, g.num_threads);
}

#if !defined(__CUDA_ARCH__)
/// Largest emb_dim of the host's fast kv_split (its rotated slice lives on the stack).
inline constexpr std::int64_t kHostKvMaxEmbDim = 512;

/// The host's fast mode of kv_split_body, shaped like the reference: thread 0 of each block
/// takes the whole row, rotates its k_pe once, and writes each key and value head in one pass
/// (k part, rotated slice, v part), each part one streaming copy.
template <class T, int kPairs>
inline void kv_split_on_host(const KvSplitKernelArgs& a, const GridCoord& g) {
  if (g.thread != 0) return;
  const PositionArgs& p = a.positions;
  const PairRotation& r = a.rotation;
  const std::int64_t half_dim = a.emb_dim / 2;
  const bool pass_all = call_passes_through(p, g);
  T slice[kHostKvMaxEmbDim];
  const std::size_t k_bytes = static_cast<std::size_t>(a.k_dim) * sizeof(T);
  const std::size_t v_bytes = static_cast<std::size_t>(a.v_dim) * sizeof(T);
  const std::size_t slice_bytes = static_cast<std::size_t>(a.emb_dim) * sizeof(T);
  for (std::int64_t row = g.block; row < row_count(p); row += g.num_blocks) {
    const RowPlan plan = pass_all ? RowPlan{} : plan_row(p, row, true);
    const T* k_pe = row_pointer<T>(a.k_pe, row, p.batch);
    if (!plan.rotate) {  // pass through: k_pe unrotated, bit for bit
      std::memcpy(slice, k_pe, slice_bytes);
    } else {
      for (std::int64_t first = 0; first < half_dim; first += kPairs)
        store_pairs<T, kPairs>(slice, r.write_layout, half_dim, first,
                               rotate(load_pairs<T, kPairs>(k_pe, r.read_layout, half_dim, first),
                                      load_coefficients<kPairs>(r, plan.freq_row, half_dim, first)));
    }
    const T* kv = row_pointer<T>(a.kv, row, p.batch);
    T* key = row_pointer<T>(a.key, row, p.batch);
    T* value = row_pointer<T>(a.value, row, p.batch);
    for (std::int64_t h = 0; h < a.heads; ++h) {  // kv may be null when k + v = 0
      const T* kv_head = kv + h * a.kv.head_stride;
      T* key_head = key + h * a.key.head_stride;
      host_stream_copy(key_head, kv_head, k_bytes);
      host_stream_copy(key_head + a.k_dim, slice, slice_bytes);
      host_stream_copy(value + h * a.value.head_stride, kv_head + a.k_dim, v_bytes);
    }
  }
  host_store_fence();
}
#endif

/// kv_split. kPairs == kVectorPairs<T>: vector accesses on the rope slices; 1: scalar.
template <class T, int kPairs>
MLAROPE_HD inline void kv_split_body(const KvSplitKernelArgs& a, const GridCoord& g) {
#if !defined(__CUDA_ARCH__)
  if (!MLAROPE_DEVICE_PATHS() && a.emb_dim <= kHostKvMaxEmbDim) return kv_split_on_host<T, kPairs>(a, g);
#endif
  const PositionArgs& p = a.positions;
  const PairRotation& r = a.rotation;
  const std::int64_t half_dim = a.emb_dim / 2;
  const std::int64_t chunks = half_dim / kPairs;
  const std::int64_t groups = head_groups(chunks, a.heads, g.num_threads);
  const std::int64_t items = chunks * groups;
  const bool pass_all = call_passes_through(p, g);
  for (std::int64_t row = g.block; row < row_count(p); row += g.num_blocks) {
    const RowPlan plan = pass_all ? RowPlan{} : plan_row(p, row, g.thread == 0);
    const T* kv = row_pointer<T>(a.kv, row, p.batch);
    const T* k_pe = row_pointer<T>(a.k_pe, row, p.batch);
    T* key = row_pointer<T>(a.key, row, p.batch);
    T* value = row_pointer<T>(a.value, row, p.batch);
    copy_kv_parts(a, kv, key, value, g);
    if (!plan.rotate) {  // pass through: k_pe unrotated into every key head
      copy_head_segments<T>({k_pe, key + a.k_dim, 0, a.key.head_stride, a.heads, a.emb_dim},
                            false, g.thread, g.num_threads);
      continue;
    }
    for (std::int64_t item = g.thread; item < items; item += g.num_threads) {
      const std::int64_t group = quotient(item, chunks);
      const std::int64_t first = (item - group * chunks) * kPairs;
      const PairChunk<kPairs> y =
          rotate(load_pairs<T, kPairs>(k_pe, r.read_layout, half_dim, first),
                 load_coefficients<kPairs>(r, plan.freq_row, half_dim, first));
      for (std::int64_t h = group; h < a.heads; h += groups)
        store_pairs<T, kPairs>(key + h * a.key.head_stride + a.k_dim, r.write_layout, half_dim,
                               first, y);
    }
  }
}

/// grad_kv[..., :k] = grad_key[..., :k] and grad_kv[..., k:] = grad_value for one row.
template <class T>
MLAROPE_HD MLAROPE_INLINE void copy_grad_kv_parts(const KvSplitBackwardKernelArgs& a,
                                                 const T* grad_key, const T* grad_value,
                                                 T* grad_kv, const GridCoord& g) {
  copy_head_segments<T>({grad_key, grad_kv, a.grad_key.head_stride, a.grad_kv.head_stride,
                         a.heads, a.k_dim},
                        a.copy_vector, g.thread, g.num_threads);
  copy_head_segments<T>({grad_value, grad_kv + a.k_dim, a.grad_value.head_stride,
                         a.grad_kv.head_stride, a.heads, a.v_dim},
                        a.copy_vector, g.thread, g.num_threads);
}

/// sum += x, pair by pair (the head sums' one addition, in f32).
template <int kPairs>
MLAROPE_HD MLAROPE_INLINE void add_pairs(PairChunk<kPairs>& sum, const PairChunk<kPairs>& x) {
  MLAROPE_SIMD
  for (int j = 0; j < kPairs; ++j) {
    sum.u[j] += x.u[j];
    sum.v[j] += x.v[j];
  }
}

/// Sum over heads of pairs first .. first + kPairs - 1 of the key rope slices, in f32.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE PairChunk<kPairs> head_sum(const KvSplitBackwardKernelArgs& a,
                                                    const T* grad_key, std::int64_t first) {
  const std::int64_t half_dim = a.emb_dim / 2;
  PairChunk<kPairs> sum;
  MLAROPE_SIMD
  for (int j = 0; j < kPairs; ++j) sum.u[j] = sum.v[j] = 0.0f;
  for (std::int64_t h = 0; h < a.heads; ++h) {
    add_pairs(sum, load_pairs<T, kPairs>(grad_key + h * a.grad_key.head_stride + a.k_dim,
                                         a.rotation.read_layout, half_dim, first));
  }
  return sum;
}

/// Pairs first .. first + kPairs - 1 of grad_k_pe from their head sum: rotated by the adjoint,
/// or (a pass-through row) unrotated, positions kept.
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE void store_grad_k_pe_chunk(const PairRotation& r, T* grad_k_pe,
                                                    const RowPlan& plan, std::int64_t half_dim,
                                                    std::int64_t first, const PairChunk<kPairs>& sum) {
  if (plan.rotate)
    store_pairs<T, kPairs>(grad_k_pe, r.write_layout, half_dim, first,
                           rotate(sum, load_coefficients<kPairs>(r, plan.freq_row, half_dim, first)));
  else
    store_pairs<T, kPairs>(grad_k_pe, r.read_layout, half_dim, first, sum);
}

/// grad_k_pe of one row: the head sum of every pair chunk, rotated by the adjoint (or passed
/// through unrotated), chunks c = first_chunk, first_chunk + step, ...
template <class T, int kPairs>
MLAROPE_HD MLAROPE_INLINE void grad_k_pe_chunks(const KvSplitBackwardKernelArgs& a, const T* grad_key,
                                               T* grad_k_pe, const RowPlan& plan,
                                               std::int64_t first_chunk, std::int64_t step) {
  const PairRotation& r = a.rotation;
  const std::int64_t half_dim = a.emb_dim / 2;
  for (std::int64_t c = first_chunk; c < half_dim / kPairs; c += step) {
    const std::int64_t first = c * kPairs;
    store_grad_k_pe_chunk<T, kPairs>(r, grad_k_pe, plan, half_dim, first, head_sum<T, kPairs>(a, grad_key, first));
  }
}

#if !defined(__CUDA_ARCH__)
/// The host's fast mode of kv_split_backward_body: thread 0 of each block takes the whole row
/// in one pass over its heads (grad_kv = [grad_key k part, grad_value], two streaming copies a
/// head, and the head's rope slice added to the sums), so every byte of grad_key is read once.
/// The sums are the device path's (head_sum): f32 additions in head order, bit for bit.
template <class T, int kPairs>
inline void kv_split_backward_on_host(const KvSplitBackwardKernelArgs& a, const GridCoord& g) {
  constexpr int kMaxChunks = static_cast<int>(kHostKvMaxEmbDim / 2 / kPairs);
  if (g.thread != 0) return;
  const PositionArgs& p = a.positions;
  const PairRotation& r = a.rotation;
  const std::int64_t half_dim = a.emb_dim / 2;
  const std::int64_t chunks = half_dim / kPairs;
  const bool pass_all = call_passes_through(p, g);
  const std::size_t k_bytes = static_cast<std::size_t>(a.k_dim) * sizeof(T);
  const std::size_t v_bytes = static_cast<std::size_t>(a.v_dim) * sizeof(T);
  PairChunk<kPairs> sum[kMaxChunks];
  for (std::int64_t row = g.block; row < row_count(p); row += g.num_blocks) {
    const RowPlan plan = pass_all ? RowPlan{} : plan_row(p, row, true);
    const T* grad_key = row_pointer<T>(a.grad_key, row, p.batch);
    const T* grad_value = row_pointer<T>(a.grad_value, row, p.batch);
    T* grad_kv = row_pointer<T>(a.grad_kv, row, p.batch);
    for (std::int64_t c = 0; c < chunks; ++c)
      for (int j = 0; j < kPairs; ++j) sum[c].u[j] = sum[c].v[j] = 0.0f;
    for (std::int64_t h = 0; h < a.heads; ++h) {  // the views may be null when empty
      const T* key_head = grad_key + h * a.grad_key.head_stride;
      T* kv_head = grad_kv + h * a.grad_kv.head_stride;
      host_stream_copy(kv_head, key_head, k_bytes);
      host_stream_copy(kv_head + a.k_dim, grad_value + h * a.grad_value.head_stride, v_bytes);
      for (std::int64_t c = 0; c < chunks; ++c)
        add_pairs(sum[c], load_pairs<T, kPairs>(key_head + a.k_dim, r.read_layout, half_dim, c * kPairs));
    }
    T* grad_k_pe = row_pointer<T>(a.grad_k_pe, row, p.batch);
    for (std::int64_t c = 0; c < chunks; ++c)
      store_grad_k_pe_chunk<T, kPairs>(r, grad_k_pe, plan, half_dim, c * kPairs, sum[c]);
  }
  host_store_fence();
}
#endif

/// kv_split_backward. One thread per pair chunk sums every head (deterministic order).
template <class T, int kPairs>
MLAROPE_HD inline void kv_split_backward_body(const KvSplitBackwardKernelArgs& a,
                                              const GridCoord& g) {
#if !defined(__CUDA_ARCH__)
  if (!MLAROPE_DEVICE_PATHS() && a.emb_dim <= kHostKvMaxEmbDim)
    return kv_split_backward_on_host<T, kPairs>(a, g);
#endif
  const PositionArgs& p = a.positions;
  const bool pass_all = call_passes_through(p, g);
  for (std::int64_t row = g.block; row < row_count(p); row += g.num_blocks) {
    const RowPlan plan = pass_all ? RowPlan{} : plan_row(p, row, g.thread == 0);
    const T* grad_key = row_pointer<T>(a.grad_key, row, p.batch);
    const T* grad_value = row_pointer<T>(a.grad_value, row, p.batch);
    T* grad_kv = row_pointer<T>(a.grad_kv, row, p.batch);
    T* grad_k_pe = row_pointer<T>(a.grad_k_pe, row, p.batch);
    copy_grad_kv_parts(a, grad_key, grad_value, grad_kv, g);
    grad_k_pe_chunks<T, kPairs>(a, grad_key, grad_k_pe, plan, g.thread, g.num_threads);
  }
}

}  // namespace mlarope::kernels
