// SPDX-License-Identifier: Apache-2.0
// The memory a check runs a call in: every tensor in its own buffer, laid out with gaps between
// heads and rows (LayoutPlan) and guard regions before and after, so that a check can see what
// a call wrote where it should not, left unwritten, or changed in its inputs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/case_run.h"
#include "checks/checks.h"
#include "io/case_file.h"

namespace mlarope::harness {

/// Which fill a buffer region gets: two output poisons (distinct NaNs) and the guard pattern.
enum class Fill : std::uint8_t { poison_a, poison_b, guard };

/// One tensor in a buffer of its own: strided elements, gaps, guards. Element sizes 2, 4, 8.
class GuardedTensor {
 public:
  /// Where a changed element lies.
  enum class Region : std::uint8_t { guard_before, gap, element, guard_after };
  /// One changed element of storage.
  struct Change {
    Region region;
    std::int64_t offset;  ///< elements from the first viewed element (negative in guard_before)
    std::int64_t flat;    ///< C-order index of the element; -1 outside elements
  };

  /// An empty tensor.
  GuardedTensor() = default;
  /// A tensor of `shape` and `strides` (elements, >= 0); `patterns` holds the bits of each Fill.
  GuardedTensor(std::size_t element_size, std::vector<std::int64_t> shape,
                std::vector<std::int64_t> strides, std::int64_t guard, bool misalign,
                std::array<std::uint64_t, 3> patterns);

  /// Pointer to element 0 of the view.
  void* data() { return storage_.data() + data_byte_; }
  const void* data() const { return storage_.data() + data_byte_; }
  /// Shape and strides (in elements) of the view.
  const std::vector<std::int64_t>& shape() const { return shape_; }
  const std::vector<std::int64_t>& strides() const { return strides_; }
  /// Number of elements of the view.
  std::int64_t numel() const { return static_cast<std::int64_t>(offsets_.size()); }
  /// Bytes per element.
  std::size_t element_size() const { return element_size_; }
  /// Bits of `fill` for this tensor's element type.
  std::uint64_t pattern(Fill fill) const { return patterns_[static_cast<int>(fill)]; }

  /// Write `fill` into the guards and gaps.
  void fill_outside(Fill fill);
  /// Write `fill` into every element.
  void fill_elements(Fill fill);
  /// Copy the elements of a contiguous array of the same element size and count.
  void store(const npy::Array& a);
  /// The elements as a contiguous array of `dtype` (its element size must match).
  npy::Array load(npy::Dtype dtype, const std::vector<std::int64_t>& shape) const;
  /// True when element `flat` holds the bits of `fill`.
  bool holds(std::int64_t flat, Fill fill) const;
  /// A copy of the whole storage.
  std::vector<std::byte> snapshot() const { return storage_; }
  /// Elements of storage that differ from `before` and that `keep` accepts, at most `limit`.
  std::vector<Change> changes(const std::vector<std::byte>& before, std::size_t limit,
                              const std::function<bool(const Change&)>& keep = {}) const;
  /// Index tuple of element `flat`.
  std::vector<std::int64_t> index_of(std::int64_t flat) const;
  /// In AddressSanitizer builds, every byte of the storage but the view's elements (guards,
  /// gaps) unaddressable until unpoison(), and known as tensor `name` to ASan's reports
  /// (asan_guards.h); elsewhere nothing.
  void poison_outside(const std::string& name) const;
  void unpoison() const;

 private:
  std::uint64_t element_bits(std::int64_t byte) const;
  void put_bits(std::int64_t byte, std::uint64_t bits);

  std::size_t element_size_ = 4;
  std::vector<std::int64_t> shape_, strides_;
  std::vector<std::int64_t> offsets_;  ///< element offset of each flat index
  std::vector<std::int32_t> role_;     ///< per storage element: flat index, or -1 (gap/guard)
  std::int64_t guard_elements_ = 0, span_ = 0, first_element_ = 0;
  std::int64_t data_byte_ = 0;
  std::vector<std::byte> storage_;
  std::array<std::uint64_t, 3> patterns_{};
};

/// One finding of a run: an element of a tensor that a call wrote, left or changed wrongly.
struct RunFinding {
  CheckKind check;
  std::string tensor;
  std::vector<std::int64_t> index;  ///< index tuple of the element; empty outside elements
  std::int64_t offset = 0;          ///< element offset from the first element of the view
  std::string message;
  std::int64_t token = -1, head = -1, dim = -1;  ///< of the element, for activations
};

/// The outputs of a run and what its audit found.
struct RunResult {
  CaseOutputs outputs;
  std::vector<RunFinding> findings;
  std::string error;        ///< what the backend threw, "" when it did not
  std::string unsupported;  ///< why the backend declined the call (Unsupported), "" when it ran
};

/// A case's call, laid out in guarded strided buffers. Build once, then load inputs, run or
/// capture, read outputs, audit.
class StridedCall {
 public:
  /// Buffers for the op of `c` (in place when `in_place`), laid out by `plan`.
  StridedCall(const Case& c, const LayoutPlan& plan, bool in_place);
  StridedCall(const StridedCall&) = delete;
  StridedCall& operator=(const StridedCall&) = delete;

  /// Write the inputs of `c` (same shapes as the constructor's case); fill guards and gaps,
  /// poison the outputs with `poison`, zero the status word, and take the snapshot for audit.
  void load(const Case& c, Fill poison = Fill::poison_a);
  /// Run the op on `backend` over these buffers (may throw what the backend throws).
  void call(const Backend& backend) const;
  /// A function that runs the op on `backend` over these buffers (for capture).
  std::function<void()> launcher(const Backend& backend) const;
  /// Run `f` (a call, or the replay of a captured one) with the guards and gaps of every
  /// buffer unaddressable in AddressSanitizer builds (asan_guards.h).
  void run_guarded(const std::function<void()>& f) const;
  /// The outputs, as contiguous arrays in the activation dtype, and the status word.
  CaseOutputs outputs() const;
  /// Coverage, immutability and bounds findings against the snapshot of the last load.
  std::vector<RunFinding> audit() const;

 private:
  struct Slot {
    GuardedTensor tensor;
    bool output = false;    ///< written by the op
    bool in_place = false;  ///< the tensor of an in-place call: only its rope slices may change
    npy::Dtype dtype = npy::Dtype::f32;
    std::vector<std::int64_t> case_shape;  ///< shape of the case's array
  };
  Slot& add(const std::string& name, const npy::Array& like, std::vector<std::int64_t> strides,
            bool output, DType dtype);
  void call_unguarded(const Backend& backend) const;
  void build_activations(const Case& c);
  void build_metadata(const Case& c);
  void audit_slot(const std::string& name, const Slot& slot, std::vector<RunFinding>& out) const;
  ConstTensorView input_view(const std::string& name) const;
  TensorView output_view(const std::string& name) const;
  RopeArgs rope_args() const;
  KvSplitArgs kv_args() const;

  CaseConfig config_;
  LayoutPlan plan_;
  bool in_place_ = false;
  std::map<std::string, Slot> slots_;
  std::map<std::string, std::vector<std::byte>> before_;
  Fill poison_ = Fill::poison_a;
  mutable std::vector<DeviceStatus> status_;  ///< guard words around the status word
};

/// True when every row of a [.., H, W] array holds H equal heads (H <= 1 included).
bool heads_identical(const npy::Array& a);

/// True when `bits` are one of the NaN patterns the runner fills outputs and guards with
/// (poison A, poison B, guard) for `dtype`: an input value with those bits would look unwritten.
bool is_fill_pattern(DType dtype, std::uint64_t bits);

/// The strides a LayoutPlan gives a tensor of `shape` ([S, B, H, D], [T, H, D] or a table).
std::vector<std::int64_t> planned_strides(const std::vector<std::int64_t>& shape,
                                          const LayoutPlan& plan, bool table, bool broadcast);

/// Run `c` once on `backend` in buffers laid out by `plan`, and audit the run.
RunResult run_strided(const Case& c, const Backend& backend, const LayoutPlan& plan, bool in_place,
                      Fill poison = Fill::poison_a);

}  // namespace mlarope::harness
