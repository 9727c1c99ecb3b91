// Sizes past the limits a careless kernel has: more than 65,535 sequences and rows in one
// launch (grid dims, 16-bit counts), and a tensor spanning more than 2^31 elements (32-bit
// offsets), the latter on the host backend through a sparse MAP_NORESERVE mapping.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "testing/backend_cases.h"
#include "mlarope/host_convert.h"
#include "reference.h"

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
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
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

TEST_P(LargeBackendTest, TensorSpanningMoreThan2To31Elements) {
  if (backend() != BackendKind::host)
    GTEST_SKIP() << "the sparse mapping is host memory; this test runs on the host backend";
  constexpr std::int64_t kRows = 3, kHeads = 2, kNope = 8, kEmb = 16, kD = kNope + kEmb;
  constexpr std::int64_t kRowStride = (std::int64_t{1} << 30) + 24;  // row 2 at > 2^31 elements
  const std::size_t bytes = static_cast<std::size_t>(kRowStride * (kRows - 1) + kHeads * kD) * 2;
  SparseMapping in_map(bytes), out_map(bytes);
  ASSERT_NE(in_map.data(), nullptr);
  ASSERT_NE(out_map.data(), nullptr);
  auto big_view = [&](void* data) {
    TensorView v;
    v.data = data;
    v.dtype = DType::bf16;
    v.rank = 3;
    v.shape = {kRows, kHeads, kD, 0};
    v.strides = {kRowStride, kD, 1, 0};
    return v;
  };
  // The same rows, compactly, for the reference.
  Tensor compact(DType::bf16, {kRows, kHeads, kD});
  Rng rng(8);
  compact.fill_uniform(rng);
  auto* in = static_cast<std::uint16_t*>(in_map.data());
  compact.for_each_index([&](const std::vector<std::int64_t>& i) {
    in[i[0] * kRowStride + i[1] * kD + i[2]] = bf16_bits_from_double(compact.get(i));
  });
  Tensor cos = random_table(DType::f32, 8, kEmb, rng), sin = random_table(DType::f32, 8, kEmb, rng);
  IndexArray cu({0, 1, 3});
  RopeArgs a;
  a.nope_dim = kNope;
  a.emb_dim = kEmb;
  a.rotation.cos = cos.host_view();
  a.rotation.sin = sin.host_view();
  a.positions.layout = TokenLayout::thd;
  a.positions.cu_seqlens = cu.host_view();
  Stream stream = make_stream();
  rope({big_view(in_map.data()), big_view(out_map.data()), a}, stream);
  rope_inplace({big_view(in_map.data()), a}, stream);
  Tensor expected(DType::bf16, {kRows, kHeads, kD});
  reference::rope({compact.host_view(), expected.host_view(), a});
  const auto* out = static_cast<const std::uint16_t*>(out_map.data());
  std::int64_t mismatches = 0;
  expected.for_each_index([&](const std::vector<std::int64_t>& i) {
    const std::int64_t off = i[0] * kRowStride + i[1] * kD + i[2];
    const std::uint16_t want = bf16_bits_from_double(expected.get(i));
    // f32 arithmetic vs exact: allow one bf16 ulp on the rotated part.
    const int diff = std::abs(static_cast<int>(out[off]) - static_cast<int>(want));
    const int diff_in_place = std::abs(static_cast<int>(in[off]) - static_cast<int>(want));
    mismatches += (i[2] < kNope ? diff != 0 : diff > 1) + (diff_in_place > 1);
  });
  EXPECT_EQ(mismatches, 0);
}

MLAROPE_INSTANTIATE_BACKENDS(LargeBackendTest);

}  // namespace
}  // namespace mlarope::test
