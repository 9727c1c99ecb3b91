// SPDX-License-Identifier: Apache-2.0
// The dispatch decisions (see dispatch.h).
#include "launch/dispatch.h"

#include <cstdint>

#include "kernels/rope_kernels.h"

namespace mlarope::detail {
namespace {

bool same(const LayoutTriple& a, PairLayout in, PairLayout out, PairLayout table) {
  return a.in_layout == in && a.out_layout == out && a.table_layout == table;
}

bool vector_ready(std::int64_t emb_dim, const LayoutTriple& layouts, bool aligned) {
  return emb_dim % kernels::kVectorEmbMultiple == 0 && is_megatron_mode(layouts) && aligned;
}

}  // namespace

bool is_megatron_mode(const LayoutTriple& l) {
  constexpr PairLayout kHalf = PairLayout::half, kInter = PairLayout::interleaved;
  return same(l, kInter, kHalf, kHalf)        // MLA
         || same(l, kInter, kInter, kHalf)    // MLA, output interleaving kept (DSv4)
         || same(l, kHalf, kHalf, kHalf)      // NeoX
         || same(l, kInter, kInter, kInter);  // GPT-J
}

RopeVariant choose_rope_variant(const RopeDispatchFacts& f) {
  const bool vector = vector_ready(f.emb_dim, f.layouts, f.rope_slices_aligned);
  const bool layout_change = f.layouts.in_layout != f.layouts.out_layout;
  if (f.in_place && layout_change) {
    return vector && f.emb_dim <= kernels::kStagedMaxEmbDim ? RopeVariant::staged_vector
                                                            : RopeVariant::whole_slice_scalar;
  }
  return vector ? RopeVariant::chunked_vector : RopeVariant::chunked_scalar;
}

KvVariant choose_kv_variant(const KvDispatchFacts& f) {
  return vector_ready(f.emb_dim, f.layouts, f.rope_slices_aligned) ? KvVariant::vector
                                                                   : KvVariant::scalar;
}

bool aligned_view(const ConstTensorView& v, std::int64_t start, std::size_t bytes) {
  const auto size = static_cast<std::int64_t>(dtype_size(v.dtype));
  const auto b = static_cast<std::int64_t>(bytes);
  const auto address = reinterpret_cast<std::uintptr_t>(v.data);
  if ((static_cast<std::int64_t>(address % bytes) + start * size) % b != 0) return false;
  for (int d = 0; d + 1 < v.rank; ++d)
    if (v.shape[d] > 1 && (v.strides[d] * size) % b != 0) return false;
  return true;
}

}  // namespace mlarope::detail
