// SPDX-License-Identifier: Apache-2.0
// Test cases of the rope family and of kv_split: a small description (shape, flags, metadata,
// strides), tensors built from it deterministically, a run on a backend and on the reference,
// and the output checks that compare them (backend_test_util.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mlarope/megatron.h"
#include "test_support/backend_test_util.h"

namespace mlarope::test {

/// Row metadata of a case (docs/semantics.md §2).
struct CaseRows {
  TokenLayout layout = TokenLayout::sbhd;
  std::int64_t seq = 6;                  ///< SBHD: S
  std::int64_t batch = 2;                ///< SBHD: B
  std::vector<std::int64_t> cu_seqlens;  ///< THD: global cumulative lengths
  std::int64_t padding_rows = 0;         ///< THD: rows after the sequences
  std::int64_t thd_rows = -1;            ///< THD: T when >= 0 (else local lengths + padding)
  std::int64_t cp_size = 1, cp_rank = 0;
  FreqMode freq_mode = FreqMode::per_sequence;
  std::optional<IndexType> position_ids;  ///< THD: random position ids of this type
  bool seq_offsets = false;               ///< random offsets in [0, 4)
  std::int64_t table_rows = 0;            ///< 0: enough for every row
};

/// A rope-family case.
struct RopeCase {
  std::string name;
  CaseRows rows;
  DType dtype = DType::bf16;
  DType table_dtype = DType::f32;
  std::int64_t heads = 3, nope_dim = 8, emb_dim = 16;
  LayoutTriple layouts;
  bool inverse = false;
  bool in_place = false;
  bool backward = false;
  std::int64_t head_pad = 0;     ///< extra elements between heads
  std::int64_t row_pad = 0;      ///< extra elements between rows
  bool broadcast_heads = false;  ///< out of place: input head stride 0
  bool status_word = true;       ///< false: the call gets no status word (nullptr)
};

/// A kv_split / kv_split_backward case.
struct KvCase {
  std::string name;
  CaseRows rows;
  DType dtype = DType::bf16;
  DType table_dtype = DType::f32;
  std::int64_t heads = 3, k_dim = 8, v_dim = 8, emb_dim = 16;
  LayoutTriple layouts;
  bool inverse = false;
  bool backward = false;
  std::int64_t head_pad = 0;
  std::int64_t row_pad = 0;
  bool status_word = true;  ///< false: the call gets no status word (nullptr)
};

/// Number of THD rows T, or S * B.
std::int64_t row_count(const CaseRows& rows);

/// Metadata arrays of a case (host and device) and the Positions over them.
class CaseMetadata {
 public:
  /// Arrays for `rows`; position ids and offsets drawn from `seed`.
  CaseMetadata(const CaseRows& rows, std::int64_t table_rows, std::uint64_t seed);
  void upload(BackendKind kind);
  /// Positions over host (reference) or device (backend) arrays.
  Positions positions(bool device) const;
  IndexArray& cu_seqlens() { return cu_seqlens_; }
  IndexArray& position_ids() { return position_ids_; }
  IndexArray& seq_offsets() { return seq_offsets_; }

 private:
  CaseRows rows_;
  IndexArray cu_seqlens_, position_ids_, seq_offsets_;
};

/// The table rows a case needs so that every freq_row is inside.
std::int64_t needed_table_rows(const CaseRows& rows);

/// Everything of one rope-family case: inputs, outputs, tables, metadata, status words.
class RopeHarness {
 public:
  RopeHarness(const RopeCase& c, std::uint64_t data_seed);
  /// Upload every tensor and array to `kind`.
  void upload(BackendKind kind);
  /// Enqueue the call on `stream` (device views); download with `download`.
  void run_backend(Stream& stream);
  /// Synchronize-free download of the results and the status word (synchronize first).
  void download();
  /// Run the reference on the host copies (and the magnitude runs).
  void run_reference();
  /// The output checks (backend vs reference).
  std::vector<OutputCheck> checks() const;
  DeviceStatus backend_status() const { return backend_status_; }
  DeviceStatus reference_status() const { return reference_status_; }
  bool has_status_word() const { return case_.status_word; }
  const RopeCase& description() const { return case_; }
  /// The input tensor (t / grad_out / in-place tensor), e.g. to write new values.
  Tensor& input() { return input_; }
  Tensor& output() { return case_.in_place ? input_ : output_; }
  CaseMetadata& metadata() { return metadata_; }
  /// Start both status words (backend and reference) at `status` instead of 0.
  void preset_status(DeviceStatus status);
  /// New input values from `seed`, written into the same device buffer (after upload).
  void refill_input(std::uint64_t seed);
  /// The RopeArgs over device (backend) or host (reference) memory.
  RopeArgs args(bool device, DeviceStatus* status, const Tensor& cos, const Tensor& sin) const;

 private:
  void reference_into(Tensor& in, Tensor& out, const Tensor& cos, const Tensor& sin,
                      DeviceStatus* status) const;

  RopeCase case_;
  Tensor input_, input_before_, output_;
  Tensor cos_, sin_;
  CaseMetadata metadata_;
  DeviceBuffer status_;
  DeviceStatus backend_status_ = 0, reference_status_ = 0, initial_status_ = 0;
  Tensor reference_out_, magnitude_;
};

/// Everything of one kv_split / kv_split_backward case.
class KvHarness {
 public:
  KvHarness(const KvCase& c, std::uint64_t data_seed);
  void upload(BackendKind kind);
  void run_backend(Stream& stream);
  void download();
  void run_reference();
  std::vector<OutputCheck> checks() const;
  DeviceStatus backend_status() const { return backend_status_; }
  DeviceStatus reference_status() const { return reference_status_; }
  bool has_status_word() const { return case_.status_word; }

 private:
  KvSplitArgs args(bool device, DeviceStatus* status, const Tensor& cos, const Tensor& sin) const;
  void reference_into(const Tensor& in_a, const Tensor& in_b, Tensor& out_a, Tensor& out_b,
                      const Tensor& cos, const Tensor& sin, DeviceStatus* status) const;

  KvCase case_;
  // Forward: in_a = kv, in_b = k_pe, out_a = key, out_b = value.
  // Backward: in_a = grad_key, in_b = grad_value, out_a = grad_kv, out_b = grad_k_pe.
  Tensor in_a_, in_b_, out_a_, out_b_;
  Tensor in_a_before_, in_b_before_;
  Tensor cos_, sin_;
  CaseMetadata metadata_;
  DeviceBuffer status_;
  DeviceStatus backend_status_ = 0, reference_status_ = 0;
  Tensor ref_a_, ref_b_, magnitude_a_, magnitude_b_;
};

/// Build, run on `backend` (stream seed `seed`; host: under the GPU model when `gpu_model`, in
/// the fast mode otherwise) and on the reference, compare.
::testing::AssertionResult check_rope_case(const RopeCase& c, BackendKind backend,
                                           std::uint64_t seed = 1, ErrorStats* errors = nullptr,
                                           bool gpu_model = false);
::testing::AssertionResult check_kv_case(const KvCase& c, BackendKind backend,
                                         std::uint64_t seed = 1, ErrorStats* errors = nullptr,
                                         bool gpu_model = false);

/// A readable description of a layout triple.
std::string describe(const LayoutTriple& layouts);

/// All eight layout triples.
std::vector<LayoutTriple> all_triples();

}  // namespace mlarope::test
