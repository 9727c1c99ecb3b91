// SPDX-License-Identifier: Apache-2.0
// kv_split and kv_split_backward on each backend against the reference.
#include <gtest/gtest.h>

#include <iostream>
#include <vector>

#include "test_support/backend_cases.h"

namespace mlarope::test {
namespace {

class KvSplitBackendTest : public BackendTest {
 protected:
  void check_all(const std::vector<KvCase>& cases) {
    ErrorStats errors;
    for (const KvCase& c : cases) EXPECT_TRUE(check_kv_case(c, backend(), 1, &errors));
    std::cout << "  " << cases.size() << " cases, " << errors.describe() << "\n";
  }
};

std::vector<KvCase> both_directions(const std::vector<KvCase>& bases) {
  std::vector<KvCase> out;
  for (const KvCase& b : bases)
    for (bool backward : {false, true}) {
      KvCase c = b;
      c.backward = backward;
      c.name = b.name + (backward ? " backward" : " forward");
      out.push_back(c);
    }
  return out;
}

TEST_P(KvSplitBackendTest, AllTriplesAndDtypesMatchTheReference) {
  std::vector<KvCase> bases;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const LayoutTriple& t : all_triples())
      for (bool inverse : {false, true}) {
        KvCase c;
        c.dtype = dtype;
        c.layouts = t;
        c.inverse = inverse;
        c.name = std::string(to_string(dtype)) + " " + describe(t) + (inverse ? " inverse" : "");
        bases.push_back(c);
      }
  check_all(both_directions(bases));
}

// As RopeBackendTest.CallsWithoutAStatusWordEmptyCallsAndWideSlices: calls without a status
// word whose rows lie outside the table or whose cu_seqlens exceed the rows, and empty calls,
// in the fast mode and (host) under the GPU model.
TEST_P(KvSplitBackendTest, CallsWithoutAStatusWordAndEmptyCalls) {
  std::vector<KvCase> bases;
  KvCase outside;
  outside.rows.seq_offsets = true;  // offsets 0..3 past a table of S rows: some pass through
  outside.rows.table_rows = 6;
  outside.status_word = false;
  outside.name = "rows outside the table, no status word";
  bases.push_back(outside);
  KvCase gate = outside;
  gate.rows.layout = TokenLayout::thd;
  gate.rows.cu_seqlens = cumulative({5, 7});
  gate.rows.thd_rows = 9;
  gate.rows.seq_offsets = false;
  gate.rows.table_rows = 0;
  gate.name = "THD cu_seqlens past the rows, no status word";
  bases.push_back(gate);
  KvCase empty;
  empty.rows.seq = 0;
  empty.name = "SBHD without rows";
  bases.push_back(empty);
  const std::vector<KvCase> cases = both_directions(bases);
  for (const KvCase& c : cases) EXPECT_TRUE(check_kv_case(c, backend(), 1));
  if (backend() == BackendKind::host) {
    for (const KvCase& c : cases)
      EXPECT_TRUE(check_kv_case(c, backend(), 1, nullptr, true)) << "GPU model";
  }
}

TEST_P(KvSplitBackendTest, DimsOfEverySizeIncludingEmptyKeyAndValueParts) {
  std::vector<KvCase> bases;
  for (std::int64_t emb : {2, 6, 16, 64})
    for (std::int64_t k : {0, 5, 16})
      for (std::int64_t v : {0, 8, 13})
        for (std::int64_t heads : {1, 6}) {
          KvCase c;
          c.emb_dim = emb;
          c.k_dim = k;
          c.v_dim = v;
          c.heads = heads;
          c.rows.seq = 3;
          c.name = "emb " + std::to_string(emb) + " k " + std::to_string(k) + " v " +
                   std::to_string(v) + " heads " + std::to_string(heads);
          bases.push_back(c);
        }
  // Slices past kHostKvMaxEmbDim, where the fast mode takes the device paths too: scalar
  // (514, no whole vector chunks) and vector (520).
  for (std::int64_t emb : {514, 520}) {
    KvCase c;
    c.emb_dim = emb;
    c.k_dim = 5;
    c.v_dim = 8;
    c.heads = 6;
    c.rows.seq = 3;
    c.name = "wide slice: emb " + std::to_string(emb);
    bases.push_back(c);
  }
  check_all(both_directions(bases));
}

// kv_split_backward with few heads (at most kChunkSumMaxHeads) on the vector paths: a thread
// sums each pair chunk over the heads while the block's other threads copy, unless no thread
// is left over (as many pair chunks as threads, or more), where the staged sums take the row.
// 2 heads with k and v of 16 make blocks of 32 threads; the slices give 30, 32 and 34 chunks
// (2 pairs a chunk in f32, 4 in bf16). Then 16 and 11 heads of DeepSeek's dims. In the fast
// mode, and on the host under the GPU model (the device paths).
TEST_P(KvSplitBackendTest, FewHeadsWithAndWithoutThreadsLeftToCopy) {
  std::vector<KvCase> cases;
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::int64_t pairs_per_chunk = dtype == DType::f32 ? 2 : 4;
    for (std::int64_t chunks : {30, 32, 34}) {
      KvCase c;
      c.dtype = dtype;
      c.emb_dim = 2 * pairs_per_chunk * chunks;
      c.k_dim = c.v_dim = 16;
      c.heads = 2;
      c.name = std::string(to_string(dtype)) + ", " + std::to_string(chunks) + " chunks";
      cases.push_back(c);
    }
    for (std::int64_t heads : {16, 11}) {
      KvCase c;
      c.dtype = dtype;
      c.emb_dim = 64;
      c.k_dim = c.v_dim = 128;
      c.heads = heads;
      c.name = std::string(to_string(dtype)) + ", " + std::to_string(heads) + " heads";
      cases.push_back(c);
    }
  }
  for (KvCase& c : cases) {
    c.backward = true;
    c.rows.seq = 3;
    EXPECT_TRUE(check_kv_case(c, backend(), 1)) << c.name;
    if (backend() == BackendKind::host) {
      EXPECT_TRUE(check_kv_case(c, backend(), 1, nullptr, true)) << c.name << ", GPU model";
    }
  }
}

TEST_P(KvSplitBackendTest, ThdCpPackedPositionIdsAndStrides) {
  std::vector<KvCase> bases;
  for (std::int64_t cp_size : {1, 2})
    for (FreqMode mode : {FreqMode::per_sequence, FreqMode::packed})
      for (std::int64_t head_pad : {0, 3}) {
        KvCase c;
        c.rows.layout = TokenLayout::thd;
        c.rows.cu_seqlens = cumulative({8, 4, 12});
        c.rows.cp_size = cp_size;
        c.rows.cp_rank = cp_size - 1;
        c.rows.freq_mode = mode;
        c.rows.padding_rows = 2;
        c.rows.seq_offsets = true;
        c.head_pad = head_pad;
        c.row_pad = head_pad;
        c.name = "thd cp " + std::to_string(cp_size) + " " + std::string(to_string(mode)) +
                 " pad " + std::to_string(head_pad);
        bases.push_back(c);
      }
  KvCase ids;
  ids.rows.layout = TokenLayout::thd;
  ids.rows.cu_seqlens = cumulative({3, 7});
  ids.rows.position_ids = IndexType::i64;
  ids.name = "thd position ids";
  bases.push_back(ids);
  check_all(both_directions(bases));
}

TEST_P(KvSplitBackendTest, DeepSeekShapesInBf16) {
  KvCase c;
  c.heads = 8;
  c.k_dim = 128;
  c.v_dim = 128;
  c.emb_dim = 64;
  c.rows.seq = 4;
  c.table_dtype = DType::bf16;
  c.name = "deepseek";
  check_all(both_directions({c}));
}

MLAROPE_INSTANTIATE_BACKENDS(KvSplitBackendTest);

}  // namespace
}  // namespace mlarope::test
