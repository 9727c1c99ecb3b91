// SPDX-License-Identifier: Apache-2.0
// Sizes past the limits a careless kernel has: more than 65,535 sequences and rows in one
// launch (grid dims, 16-bit counts), and a tensor spanning more than 2^31 elements (32-bit
// offsets), the latter on the host backend through a sparse MAP_NORESERVE mapping and on CUDA
// in real device memory.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "device/cuda_backend.h"
#include "host_convert.h"
#include "reference.h"
#include "test_support/backend_cases.h"

namespace mlarope::test {
namespace {

class LargeBackendTest : public BackendTest {};

TEST_P(LargeBackendTest, MoreThan65535SequencesAndRowsInOneLaunch) {
  std::vector<std::int64_t> lengths(70001, 1);
  for (std::size_t i = 0; i < lengths.size(); i += 7) lengths[i] = 2;
  RopeCase c;
  c.rows.layout = TokenLayout::thd;
  c.rows.cu_seqlens = cumulative(lengths);
  c.rows.padding_rows = 5;
  c.rows.freq_mode = FreqMode::packed;
  c.dtype = DType::f32;
  c.heads = 1;
  c.nope_dim = 0;
  c.emb_dim = 8;
  c.name = "70001 sequences";
  EXPECT_TRUE(check_rope_case(c, backend()));
  KvCase k;
  k.rows = c.rows;
  k.heads = 1;
  k.k_dim = 2;
  k.v_dim = 2;
  k.emb_dim = 8;
  k.name = "kv_split, 70001 sequences";
  EXPECT_TRUE(check_kv_case(k, backend()));
}

TEST_P(LargeBackendTest, MoreThan65535SbhdRows) {
  RopeCase c;
  c.rows.seq = 40000;
  c.rows.batch = 2;
  c.rows.cp_size = 2;
  c.rows.cp_rank = 1;
  c.heads = 1;
  c.nope_dim = 2;
  c.emb_dim = 8;
  c.name = "80000 SBHD rows with CP";
  EXPECT_TRUE(check_rope_case(c, backend()));
}

// A sparse host mapping; only touched pages take memory.
class SparseMapping {
 public:
  explicit SparseMapping(std::size_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    data_ = p == MAP_FAILED ? nullptr : p;
  }
  ~SparseMapping() {
    if (data_) munmap(data_, bytes_);
  }
  SparseMapping(const SparseMapping&) = delete;
  SparseMapping& operator=(const SparseMapping&) = delete;
  void* data() const { return data_; }

 private:
  void* data_;
  std::size_t bytes_;
};

// Memory of a backend for a tensor that spans more than 2^31 elements, of which only a few
// rows are used: a sparse host mapping on the host backend, device memory on CUDA. The rows
// are written and read one at a time, never the whole span.
class SpanMemory {
 public:
  SpanMemory(BackendKind kind, std::size_t bytes) {
    if (kind == BackendKind::host) host_ = std::make_unique<SparseMapping>(bytes);
    else device_ = DeviceBuffer(kind, bytes);
  }
  void* data() { return host_ ? host_->data() : device_.data(); }
  void write(std::size_t offset, const void* src, std::size_t bytes) {
    if (host_) std::memcpy(static_cast<char*>(host_->data()) + offset, src, bytes);
    else device_.copy_from_host(src, bytes, offset);
  }
  void read(std::size_t offset, void* dst, std::size_t bytes) const {
    if (host_) std::memcpy(dst, static_cast<const char*>(host_->data()) + offset, bytes);
    else device_.copy_to_host(dst, bytes, offset);
  }

 private:
  std::unique_ptr<SparseMapping> host_;
  DeviceBuffer device_;
};

TEST_P(LargeBackendTest, TensorSpanningMoreThan2To31Elements) {
  constexpr std::int64_t kRows = 3, kHeads = 2, kNope = 8, kEmb = 16, kD = kNope + kEmb;
  constexpr std::int64_t kRowStride = (std::int64_t{1} << 30) + 24;  // row 2 at > 2^31 elements
  constexpr std::int64_t kRowElements = kHeads * kD;                 // contiguous in a row
  const std::size_t bytes = static_cast<std::size_t>(kRowStride * (kRows - 1) + kRowElements) * 2;
  if (backend() == BackendKind::cuda && detail::cuda::free_memory() < 2 * bytes + (64u << 20))
    GTEST_SKIP() << "the CUDA device has " << detail::cuda::free_memory() << " bytes free; this "
                 << "test needs " << 2 * bytes << " (two bf16 tensors spanning > 2^31 elements)";
  SpanMemory in_mem(backend(), bytes), out_mem(backend(), bytes);
  if (backend() == BackendKind::host) {
    ASSERT_NE(in_mem.data(), nullptr);
    ASSERT_NE(out_mem.data(), nullptr);
  }
  auto big_view = [&](void* data) {
    TensorView v;
    v.data = data;
    v.dtype = DType::bf16;
    v.rank = 3;
    v.shape = {kRows, kHeads, kD, 0};
    v.strides = {kRowStride, kD, 1, 0};
    return v;
  };
  auto row_offset = [&](std::int64_t row) {
    return static_cast<std::size_t>(row * kRowStride * 2);
  };
  // The same rows, compactly, for the reference.
  Tensor compact(DType::bf16, {kRows, kHeads, kD});
  Rng rng(8);
  compact.fill_uniform(rng);
  for (std::int64_t r = 0; r < kRows; ++r) {
    std::vector<std::uint16_t> row(kRowElements);
    for (std::int64_t e = 0; e < kRowElements; ++e)
      row[e] = bf16_bits_from_double(compact.get({r, e / kD, e % kD}));
    in_mem.write(row_offset(r), row.data(), row.size() * 2);
  }
  Tensor cos = random_table(DType::f32, 8, kEmb, rng), sin = random_table(DType::f32, 8, kEmb, rng);
  IndexArray cu({0, 1, 3});
  for (Tensor* t : {&cos, &sin}) t->upload(backend());
  cu.upload(backend());
  RopeArgs a;
  a.nope_dim = kNope;
  a.emb_dim = kEmb;
  a.rotation.cos = cos.device_view();
  a.rotation.sin = sin.device_view();
  a.positions.layout = TokenLayout::thd;
  a.positions.cu_seqlens = cu.device_view();
  Stream stream = make_stream();
  rope({big_view(in_mem.data()), big_view(out_mem.data()), a}, stream);
  rope_inplace({big_view(in_mem.data()), a}, stream);
  stream.synchronize();
  RopeArgs host_args = a;
  host_args.rotation.cos = cos.host_view();
  host_args.rotation.sin = sin.host_view();
  host_args.positions.cu_seqlens = cu.host_view();
  Tensor expected(DType::bf16, {kRows, kHeads, kD});
  reference::rope({compact.host_view(), expected.host_view(), host_args});
  std::int64_t mismatches = 0;
  for (std::int64_t r = 0; r < kRows; ++r) {
    std::vector<std::uint16_t> out(kRowElements), in(kRowElements);
    out_mem.read(row_offset(r), out.data(), out.size() * 2);
    in_mem.read(row_offset(r), in.data(), in.size() * 2);
    for (std::int64_t e = 0; e < kRowElements; ++e) {
      const std::uint16_t want = bf16_bits_from_double(expected.get({r, e / kD, e % kD}));
      // f32 arithmetic vs exact: allow one bf16 ulp on the rotated part.
      const int diff = std::abs(static_cast<int>(out[e]) - static_cast<int>(want));
      const int diff_in_place = std::abs(static_cast<int>(in[e]) - static_cast<int>(want));
      mismatches += (e % kD < kNope ? diff != 0 : diff > 1) + (diff_in_place > 1);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// kv_split and its backward with THD views whose last row starts past 2^31 elements (kv and
// key; grad_key and grad_kv) give, element for element, the bits the same backend gives on the
// same rows laid out compactly: where a row lies must not change what is computed there.
TEST_P(LargeBackendTest, KvSplitAndItsBackwardOnRowsPast2To31ElementsMatchCompactRows) {
  constexpr std::int64_t kRows = 3, kHeads = 2, kK = 8, kV = 8, kEmb = 16;
  constexpr std::int64_t kRowStride = (std::int64_t{1} << 30) + 24;  // row 2 at > 2^31 elements
  constexpr std::int64_t kKv = kK + kV, kKey = kK + kEmb;
  auto span_bytes = [&](std::int64_t head_width) {
    return static_cast<std::size_t>(kRowStride * (kRows - 1) + kHeads * head_width) * 2;
  };
  const std::size_t total = 2 * span_bytes(kKv) + 2 * span_bytes(kKey);
  if (backend() == BackendKind::cuda && detail::cuda::free_memory() < total + (64u << 20))
    GTEST_SKIP() << "the CUDA device has " << detail::cuda::free_memory() << " bytes free; this "
                 << "test needs " << total << " (four bf16 views spanning > 2^31 elements)";
  SpanMemory kv_span(backend(), span_bytes(kKv)), key_span(backend(), span_bytes(kKey));
  SpanMemory grad_key_span(backend(), span_bytes(kKey)), grad_kv_span(backend(), span_bytes(kKv));
  if (backend() == BackendKind::host) {
    for (SpanMemory* m : {&kv_span, &key_span, &grad_key_span, &grad_kv_span})
      ASSERT_NE(m->data(), nullptr);
  }
  auto span_view = [&](SpanMemory& m, std::int64_t head_width) {
    TensorView v;
    v.data = m.data();
    v.dtype = DType::bf16;
    v.rank = 3;
    v.shape = {kRows, kHeads, head_width, 0};
    v.strides = {kRowStride, head_width, 1, 0};
    return v;
  };
  auto row_bytes = [](std::int64_t head_width) {
    return static_cast<std::size_t>(kHeads * head_width) * 2;
  };
  auto row_at = [](std::int64_t row) { return static_cast<std::size_t>(row * kRowStride * 2); };
  auto compact_row = [&](const Tensor& t, std::int64_t row, std::int64_t head_width) {
    return t.storage().data() + kGuardBytes + row * row_bytes(head_width);
  };
  Rng rng(10);
  Tensor kv(DType::bf16, {kRows, kHeads, kKv}), k_pe(DType::bf16, {kRows, 1, kEmb});
  Tensor grad_key(DType::bf16, {kRows, kHeads, kKey}), grad_value(DType::bf16, {kRows, kHeads, kV});
  for (Tensor* t : {&kv, &k_pe, &grad_key, &grad_value}) t->fill_uniform(rng);
  for (std::int64_t r = 0; r < kRows; ++r) {
    kv_span.write(row_at(r), compact_row(kv, r, kKv), row_bytes(kKv));
    grad_key_span.write(row_at(r), compact_row(grad_key, r, kKey), row_bytes(kKey));
  }
  Tensor key(DType::bf16, {kRows, kHeads, kKey}), value(DType::bf16, {kRows, kHeads, kV});
  Tensor spread_value(DType::bf16, {kRows, kHeads, kV});
  Tensor grad_kv(DType::bf16, {kRows, kHeads, kKv}), grad_k_pe(DType::bf16, {kRows, 1, kEmb});
  Tensor spread_grad_k_pe(DType::bf16, {kRows, 1, kEmb});
  Tensor cos = random_table(DType::f32, 8, kEmb, rng), sin = random_table(DType::f32, 8, kEmb, rng);
  IndexArray cu({0, 1, 3});
  for (Tensor* t : {&kv, &k_pe, &grad_key, &grad_value, &key, &value, &spread_value, &grad_kv,
                    &grad_k_pe, &spread_grad_k_pe, &cos, &sin})
    t->upload(backend());
  cu.upload(backend());
  KvSplitArgs a;
  a.k_dim = kK;
  a.v_dim = kV;
  a.emb_dim = kEmb;
  a.rotation.cos = cos.device_view();
  a.rotation.sin = sin.device_view();
  a.positions.layout = TokenLayout::thd;
  a.positions.cu_seqlens = cu.device_view();
  // On the host, the GPU model first (it names a wrapped offset as an access outside the call's
  // tensors instead of making it), then the executor as built.
  for (const bool model :
       backend() == BackendKind::host ? std::vector<bool>{true, false} : std::vector<bool>{false}) {
    SCOPED_TRACE(model ? "GPU model" : "as built");
    Stream stream = model ? Stream::host({1, 1, true}) : make_stream();
    kv_split({span_view(kv_span, kKv), k_pe.device_view(), span_view(key_span, kKey),
              spread_value.device_view(), a},
             stream);
    kv_split({kv.device_view(), k_pe.device_view(), key.device_view(), value.device_view(), a},
             stream);
    kv_split_backward({span_view(grad_key_span, kKey), grad_value.device_view(),
                       span_view(grad_kv_span, kKv), spread_grad_k_pe.device_view(), a},
                      stream);
    kv_split_backward({grad_key.device_view(), grad_value.device_view(), grad_kv.device_view(),
                       grad_k_pe.device_view(), a},
                      stream);
    stream.synchronize();
    for (Tensor* t : {&key, &value, &spread_value, &grad_kv, &grad_k_pe, &spread_grad_k_pe})
      t->download();
    std::int64_t rows_differing = 0;
    for (std::int64_t r = 0; r < kRows; ++r) {
      std::vector<unsigned char> spread_key(row_bytes(kKey)), spread_grad_kv(row_bytes(kKv));
      key_span.read(row_at(r), spread_key.data(), spread_key.size());
      grad_kv_span.read(row_at(r), spread_grad_kv.data(), spread_grad_kv.size());
      rows_differing +=
          std::memcmp(spread_key.data(), compact_row(key, r, kKey), row_bytes(kKey)) != 0;
      rows_differing +=
          std::memcmp(spread_grad_kv.data(), compact_row(grad_kv, r, kKv), row_bytes(kKv)) != 0;
    }
    EXPECT_EQ(rows_differing, 0) << "key or grad_kv rows differ from the compact run's";
    EXPECT_EQ(spread_value.storage(), value.storage());
    EXPECT_EQ(spread_grad_k_pe.storage(), grad_k_pe.storage());
  }
}

// A dense SBHD tensor of more than 2^31 elements in device memory (the host backend runs the
// sparse test above): every row is computed, the last rows (past 2^31 elements) are checked.
TEST_P(LargeBackendTest, DenseTensorOfMoreThan2To31ElementsOnTheDevice) {
  if (backend() != BackendKind::cuda)
    GTEST_SKIP() << "device memory only; on the host backend the sparse test above spans 2^31";
  constexpr std::int64_t kSeq = 4, kHeads = 1, kNope = 8, kEmb = 16, kD = kNope + kEmb;
  constexpr std::int64_t kBatch = (std::int64_t{1} << 31) / (kSeq * kD) + 1;  // > 2^31 elements
  constexpr std::int64_t kChecked = 64;  // the last rows of the last sequence position
  const std::size_t bytes = static_cast<std::size_t>(kSeq * kBatch * kHeads * kD) * 2;
  if (detail::cuda::free_memory() < 2 * bytes + (64u << 20))
    GTEST_SKIP() << "the CUDA device has " << detail::cuda::free_memory() << " bytes free; this "
                 << "test needs " << 2 * bytes << " (two dense bf16 tensors of > 2^31 elements)";
  DeviceBuffer in(backend(), bytes), out(backend(), bytes);
  in.fill_bytes(0x3f);
  Tensor last(DType::bf16, {1, kChecked, kHeads, kD});  // rows (kSeq - 1, kBatch - kChecked ...)
  Rng rng(9);
  last.fill_uniform(rng);
  const std::size_t last_offset = bytes - static_cast<std::size_t>(kChecked * kHeads * kD) * 2;
  const std::size_t last_bytes = bytes - last_offset;
  const auto* last_data = last.storage().data() + kGuardBytes;
  in.copy_from_host(last_data, last_bytes, last_offset);
  Tensor cos = random_table(DType::f32, kSeq, kEmb, rng),
         sin = random_table(DType::f32, kSeq, kEmb, rng);
  cos.upload(backend());
  sin.upload(backend());
  auto view = [&](void* data) {
    TensorView v;
    v.data = data;
    v.dtype = DType::bf16;
    v.rank = 4;
    v.shape = {kSeq, kBatch, kHeads, kD};
    v.strides = {kBatch * kHeads * kD, kHeads * kD, kD, 1};
    return v;
  };
  RopeArgs a;
  a.nope_dim = kNope;
  a.emb_dim = kEmb;
  a.rotation.cos = cos.device_view();
  a.rotation.sin = sin.device_view();
  Stream stream = make_stream();
  rope({view(in.data()), view(out.data()), a}, stream);
  rope_inplace({view(in.data()), a}, stream);
  stream.synchronize();
  // The reference on the checked rows alone: sequence position kSeq - 1 is table row kSeq - 1.
  RopeArgs host_args = a;
  host_args.rotation.cos = cos.host_view();
  host_args.rotation.sin = sin.host_view();
  for (ConstTensorView* t : {&host_args.rotation.cos, &host_args.rotation.sin}) {
    t->data = static_cast<const float*>(t->data) + (kSeq - 1) * kEmb;
    t->shape[0] = 1;
  }
  Tensor expected(DType::bf16, {1, kChecked, kHeads, kD});
  reference::rope({last.host_view(), expected.host_view(), host_args});
  std::vector<std::uint16_t> got_out(last_bytes / 2), got_in(last_bytes / 2);
  out.copy_to_host(got_out.data(), last_bytes, last_offset);
  in.copy_to_host(got_in.data(), last_bytes, last_offset);
  std::int64_t mismatches = 0;
  expected.for_each_index([&](const std::vector<std::int64_t>& i) {
    const std::int64_t e = (i[1] * kHeads + i[2]) * kD + i[3];
    const std::uint16_t want = bf16_bits_from_double(expected.get(i));
    const int diff = std::abs(static_cast<int>(got_out[e]) - static_cast<int>(want));
    const int diff_in_place = std::abs(static_cast<int>(got_in[e]) - static_cast<int>(want));
    mismatches += (i[3] < kNope ? diff != 0 : diff > 1) + (diff_in_place > 1);
  });
  EXPECT_EQ(mismatches, 0);
}

MLAROPE_INSTANTIATE_BACKENDS(LargeBackendTest);

}  // namespace
}  // namespace mlarope::test
