// SPDX-License-Identifier: Apache-2.0
// Which kernel variant a call takes: small pure functions of host-known facts, unit tested.
// The fast (vector) paths serve Megatron's four modes with emb_dim a multiple of 8 and aligned
// memory; everything else takes a general path. A flag is never dropped: a combination the
// fast path does not cover takes the general path, never a wrong one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "launch/launches.h"
#include "mlarope/megatron.h"
#include "mlarope/tensor.h"

namespace mlarope::detail {

/// What the rope-family dispatcher looks at.
struct RopeDispatchFacts {
  std::int64_t emb_dim = 0;
  LayoutTriple layouts;
  bool in_place = false;
  bool rope_slices_aligned = false;  ///< every rope slice access 16-byte aligned (aligned_view)
};

/// What the kv_split dispatchers look at.
struct KvDispatchFacts {
  std::int64_t emb_dim = 0;
  LayoutTriple layouts;
  bool rope_slices_aligned = false;
};

/// True for the layout triples of Megatron's four modes (docs/semantics.md §3 table).
bool is_megatron_mode(const LayoutTriple& layouts);

/// The rope / rope_backward variant.
RopeVariant choose_rope_variant(const RopeDispatchFacts& facts);

/// The kv_split / kv_split_backward variant.
KvVariant choose_kv_variant(const KvDispatchFacts& facts);

/// True when element `start` of every index of `view` is aligned to `bytes`: the base
/// address plus `start` elements, and the stride of every dimension but the last that has
/// more than one index, are multiples of `bytes`.
bool aligned_view(const ConstTensorView& view, std::int64_t start, std::size_t bytes);

}  // namespace mlarope::detail
