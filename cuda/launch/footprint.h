// SPDX-License-Identifier: Apache-2.0
// The footprint of a call: every tensor it was given, where its elements are and what the
// call may do with them. The GPU model of the host backend (host/gpu_model.h) allows a kernel
// exactly these bytes; the CUDA backend ignores it. Made from the call's views, not from the
// kernel arguments, so a wrong launch builder cannot make its own mistakes look allowed.
#pragma once

#include <array>
#include <cstdint>

#include "mlarope/ops.h"

namespace mlarope::detail {

/// What a call may do with a tensor's bytes.
enum class RegionUse : std::uint8_t {
  read,        ///< an input
  write,       ///< an output
  read_write,  ///< in place
  atomic,      ///< a status word: atomic accesses only
};

/// One tensor: the bytes of its elements (not the gaps between rows of a view).
struct TensorRegion {
  const char* name = "";
  const void* data = nullptr;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};  ///< elements; the last is 1
  int element_bytes = 0;
  RegionUse use = RegionUse::read;
  bool index = false;  ///< an index array (cu_seqlens, ...): its values are addresses to be
};

/// Every tensor of a call (fixed capacity: a call allocates nothing).
struct Footprint {
  static constexpr int kCapacity = 12;
  std::array<TensorRegion, kCapacity> regions{};
  int count = 0;

  /// Add a view (skipped when it has no data or no elements).
  template <class Void>
  void add(const char* name, const BasicTensorView<Void>& v, RegionUse use);
  /// Add a one-dimensional index array (skipped when absent).
  void add(const char* name, const IndexView& v);
  /// Add a status word (skipped when null).
  void add_status(const char* name, const DeviceStatus* word);
};

Footprint footprint_of(const RopeCall& call);
Footprint footprint_of(const RopeInplaceCall& call);
Footprint footprint_of(const RopeBackwardCall& call);
Footprint footprint_of(const RopeBackwardInplaceCall& call);
Footprint footprint_of(const KvSplitCall& call);
Footprint footprint_of(const KvSplitBackwardCall& call);
Footprint footprint_of(const YarnTablesCall& call);

}  // namespace mlarope::detail
