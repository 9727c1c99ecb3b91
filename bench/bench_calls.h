// SPDX-License-Identifier: Apache-2.0
// The calls the benchmarks time, on host buffers: one op at one benchmark shape, made once and
// run many times (mlarope_bench), or once under the GPU model (the timing model's calibration).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <vector>

#include "backends/case_run.h"
#include "shapes.h"

namespace mlarope::bench {

// Allocations aligned to 4 KiB, so that where the GPU model's 32-byte sectors and 1 KiB DRAM
// chunks fall in the buffers, and so its figures, do not depend on the host allocator. At
// cudaMalloc's guaranteed 256 bytes a buffer's offset in its 1 KiB chunk changed from run to
// run, and the model's times with it (0.1-0.2 us of 6-76 us, enough to move a row across its
// target); at 4 KiB the figures are those of any alignment of 1 KiB or more.
inline constexpr std::size_t kPageBytes = 4096;

template <class T>
struct PageAligned {
  using value_type = T;
  PageAligned() = default;
  template <class U>
  PageAligned(const PageAligned<U>&) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kPageBytes)));
  }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(kPageBytes)); }
  template <class U>
  bool operator==(const PageAligned<U>&) const {
    return true;
  }
  template <class U>
  bool operator!=(const PageAligned<U>&) const {
    return false;
  }
};
template <class T>
using DeviceLikeVector = std::vector<T, PageAligned<T>>;
using Bytes = DeviceLikeVector<std::byte>;

/// `count` random values in [-1, 1] of `dtype`: a tile of 64 Ki values repeated (filling is
/// not timed, but it runs for every shape, so it must be quick).
Bytes random_bytes(std::int64_t count, DType dtype, std::uint32_t seed);

/// The buffers and call descriptors of one benchmark: random inputs, f32 tables of the
/// standard frequencies (MLA layouts), the shape's cu_seqlens.
struct Fixture {
  Shape s;
  Bytes a, b, k_pe, out2;
  DeviceLikeVector<float> cos, sin;
  DeviceLikeVector<std::int32_t> cu;

  explicit Fixture(const Shape& shape);

  template <class Void>
  BasicTensorView<Void> heads_view(Void* data, std::int64_t heads, std::int64_t width) const {
    if (s.layout == TokenLayout::sbhd)
      return contiguous_view<Void>(data, s.dtype, {s.tokens, 1, heads, width});
    return contiguous_view<Void>(data, s.dtype, {s.tokens, heads, width});
  }
  Rotation rotation() const;
  Positions positions() const;
  RopeArgs rope_args() const { return {s.nope_dim, s.emb_dim, rotation(), positions(), nullptr}; }
  KvSplitArgs kv_args() const {
    return {s.k_dim, s.v_dim, s.emb_dim, rotation(), positions(), nullptr};
  }
  /// The bytes of every buffer.
  std::size_t bytes() const;
};

/// The call of `op` on `f`'s buffers through `backend`, made once.
std::function<void()> make_call(BenchOp op, Fixture& f, const harness::Backend& backend);

}  // namespace mlarope::bench
