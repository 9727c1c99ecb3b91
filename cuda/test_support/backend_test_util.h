// SPDX-License-Identifier: Apache-2.0
// Shared helpers of the backend tests: the backend as a GoogleTest value parameter, tensors
// kept on the host and mirrored into a backend's DeviceBuffer (with guard bytes around the
// viewed span), deterministic data, and the comparison with the reference under
// docs/architecture.md's tolerance model, reported in ulps.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "mlarope/backend.h"
#include "mlarope/ops.h"
#include "rng.h"

namespace mlarope {
/// gtest printer: the backend's name.
inline void PrintTo(BackendKind kind, std::ostream* os) { *os << to_string(kind); }
}  // namespace mlarope

namespace mlarope::test {

/// Backend tests: the backend is the parameter; the CUDA instance skips without a device.
class BackendTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override;
  /// A stream of the test's backend (host: executor seed `seed`, two workers).
  Stream make_stream(std::uint64_t seed = 1) const;
  /// The backend under test.
  BackendKind backend() const { return GetParam(); }
};

/// "host" / "cuda" test-name suffixes.
std::string backend_name(const ::testing::TestParamInfo<BackendKind>& info);

/// Instantiate a BackendTest suite for both backends.
#define MLAROPE_INSTANTIATE_BACKENDS(Suite)                                         \
  INSTANTIATE_TEST_SUITE_P(Backends, Suite,                                         \
                           ::testing::Values(BackendKind::host, BackendKind::cuda), \
                           ::mlarope::test::backend_name)

/// The tests' generator (reference/rng.h).
using Rng = ::mlarope::Rng;

/// Bytes of poison around and between the viewed elements of every test tensor.
inline constexpr std::size_t kGuardBytes = 64;

/// A strided tensor: host storage (guard, span, guard) and, when uploaded, a mirror of the
/// same bytes in a backend's DeviceBuffer. Strides are in elements and >= 0.
class Tensor {
 public:
  Tensor() = default;
  /// A tensor of `shape` with `strides` (empty: C order), every storage byte 0xA5.
  Tensor(DType dtype, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides = {});

  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  const std::vector<std::int64_t>& strides() const { return strides_; }
  std::int64_t numel() const;
  int rank() const { return static_cast<int>(shape_.size()); }

  /// Views of the host storage (what the reference reads and writes).
  TensorView host_view();
  ConstTensorView host_view() const;
  /// Views of the device mirror (upload first).
  TensorView device_view();
  ConstTensorView device_view() const;

  /// Copy the host storage into a fresh DeviceBuffer of `kind`.
  void upload(BackendKind kind);
  /// Copy the device mirror back over the host storage.
  void download();
  /// Copy the host storage into the existing device mirror (same buffer: graph replays).
  void sync_to_device();

  /// Element offset of `index`.
  std::int64_t offset(const std::vector<std::int64_t>& index) const;
  /// Value of an element of the host storage (exact).
  double get(const std::vector<std::int64_t>& index) const;
  /// Store x, rounded once, into the host storage.
  void set(const std::vector<std::int64_t>& index, double x);
  /// Every element of the view to f(index).
  void fill(const std::function<double(const std::vector<std::int64_t>&)>& f);
  /// Every element of the view uniform in [lo, hi).
  void fill_uniform(Rng& rng, double lo = -1.0, double hi = 1.0);
  /// Call f(index) for every index in C order.
  void for_each_index(const std::function<void(const std::vector<std::int64_t>&)>& f) const;

  /// The host storage bytes (guards and gaps included).
  const std::vector<unsigned char>& storage() const { return bytes_; }
  /// Element `element` of the storage (0 = first guard element) as raw bits.
  std::uint32_t storage_bits(std::int64_t element) const;
  /// Storage element index of view offset 0.
  std::int64_t first_element() const {
    return static_cast<std::int64_t>(kGuardBytes / dtype_size(dtype_));
  }

  /// A host-only copy (storage bit for bit, no device mirror).
  Tensor host_copy() const;
  /// A host-only copy whose view elements are |x|.
  Tensor absolute() const;

 private:
  DType dtype_ = DType::f32;
  std::vector<std::int64_t> shape_, strides_;
  std::vector<unsigned char> bytes_;
  DeviceBuffer device_;
  std::size_t device_offset_ = 0;  ///< where the storage's copy starts in device_ (place_copy)
};

/// An index array (cu_seqlens, position_ids, seq_offsets) on the host and mirrored.
class IndexArray {
 public:
  IndexArray() = default;
  /// The values as `type`.
  IndexArray(std::vector<std::int64_t> values, IndexType type = IndexType::i32);
  IndexView host_view() const;
  IndexView device_view() const;
  void upload(BackendKind kind);
  /// Change the values (same size) on the host and, when uploaded, on the device.
  void assign(const std::vector<std::int64_t>& values);
  const std::vector<std::int64_t>& values() const { return values_; }

 private:
  void encode();
  std::vector<std::int64_t> values_;
  IndexType type_ = IndexType::i32;
  std::vector<unsigned char> bytes_;
  DeviceBuffer device_;
  std::size_t device_offset_ = 0;
};

/// One output of a call, compared with the reference's: which last-dim indices are rotated
/// (judged by the tolerance model; every other storage element must be bitwise equal: nope
/// parts, copies, guards and gaps).
struct OutputCheck {
  std::string name;
  const Tensor* backend = nullptr;    ///< downloaded result of the backend
  const Tensor* reference = nullptr;  ///< the reference's result
  const Tensor* magnitude = nullptr;  ///< M = |u c| + |v s| per element (reference on |inputs|)
  std::int64_t rotated_begin = 0;     ///< last-dim indices [rotated_begin, end) are rotated
  double extra_eps = 0;               ///< added to 4 (kv_split_backward: H)
};

/// The largest errors seen: in ulps of the output type, and as a fraction of the bound of the
/// tolerance model (f32 outputs near cancellation show many ulps well inside the bound).
struct ErrorStats {
  double max_ulp = 0;
  double max_bound_fraction = 0;
  /// Fold in another comparison's errors.
  void merge(const ErrorStats& other);
  /// "max error 0.5 ulp (12% of the bound)".
  std::string describe() const;
};

/// Result of a comparison.
struct Comparison {
  std::int64_t mismatches = 0;
  ErrorStats errors;
  std::string report;
};

/// Compare under |y - ref| <= ulp_out(ref) + (4 + extra_eps) eps_f32 M (rotated elements) and
/// bitwise (everything else in the storage).
Comparison compare(const OutputCheck& check);

/// gtest assertion over several outputs; folds the errors seen into `errors`.
::testing::AssertionResult outputs_match(const std::vector<OutputCheck>& checks,
                                         ErrorStats* errors = nullptr);

/// A random table [rows, emb_dim] (entries independent, uniform in [-1, 1)).
Tensor random_table(DType dtype, std::int64_t rows, std::int64_t emb_dim, Rng& rng);

/// cu_seqlens of global sequence lengths.
std::vector<std::int64_t> cumulative(const std::vector<std::int64_t>& lengths);

}  // namespace mlarope::test
