// SPDX-License-Identifier: Apache-2.0
// rope, rope_inplace, rope_backward and rope_backward_inplace on each backend against the
// reference, over a grid of small fixed cases (layouts, dtypes, triples, CP, packed and
// per-sequence THD, padding rows, position ids, offsets, strided and broadcast views).
#include <gtest/gtest.h>

#include <iostream>
#include <vector>

#include "test_support/backend_cases.h"

namespace mlarope::test {
namespace {

class RopeBackendTest : public BackendTest {
 protected:
  // Check every case; print the largest error seen, in ulps.
  void check_all(const std::vector<RopeCase>& cases) {
    ErrorStats errors;
    for (const RopeCase& c : cases) EXPECT_TRUE(check_rope_case(c, backend(), 1, &errors));
    std::cout << "  " << cases.size() << " cases, " << errors.describe() << "\n";
  }
};

// The four rope-family calls of one base case.
std::vector<RopeCase> four_calls(const RopeCase& base) {
  std::vector<RopeCase> out;
  for (bool backward : {false, true})
    for (bool in_place : {false, true}) {
      RopeCase c = base;
      c.backward = backward;
      c.in_place = in_place;
      c.name = base.name + (backward ? " backward" : " forward") + (in_place ? " in place" : "");
      out.push_back(c);
    }
  return out;
}

std::vector<RopeCase> with_all_calls(const std::vector<RopeCase>& bases) {
  std::vector<RopeCase> out;
  for (const RopeCase& b : bases)
    for (const RopeCase& c : four_calls(b)) out.push_back(c);
  return out;
}

CaseRows thd_rows(const std::vector<std::int64_t>& lengths, std::int64_t cp_size = 1,
                  std::int64_t cp_rank = 0, FreqMode mode = FreqMode::per_sequence,
                  std::int64_t padding = 0) {
  CaseRows r;
  r.layout = TokenLayout::thd;
  r.cu_seqlens = cumulative(lengths);
  r.cp_size = cp_size;
  r.cp_rank = cp_rank;
  r.freq_mode = mode;
  r.padding_rows = padding;
  return r;
}

TEST_P(RopeBackendTest, AllTriplesDtypesAndDirectionsMatchTheReference) {
  std::vector<RopeCase> bases;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const LayoutTriple& t : all_triples())
      for (bool inverse : {false, true}) {
        RopeCase c;
        c.dtype = dtype;
        c.layouts = t;
        c.inverse = inverse;
        c.name = std::string(to_string(dtype)) + " " + describe(t) + (inverse ? " inverse" : "");
        bases.push_back(c);
      }
  check_all(with_all_calls(bases));
}

TEST_P(RopeBackendTest, TableDtypeIsIndependentOfTheActivations) {
  std::vector<RopeCase> bases;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (DType table : {DType::f32, DType::f16, DType::bf16}) {
      RopeCase c;
      c.dtype = dtype;
      c.table_dtype = table;
      c.name = std::string(to_string(dtype)) + " with " + std::string(to_string(table)) + " tables";
      bases.push_back(c);
    }
  check_all(with_all_calls(bases));
}

TEST_P(RopeBackendTest, EmbDimsHeadsAndNopeDimsOfEverySize) {
  std::vector<RopeCase> bases;
  for (std::int64_t emb : {2, 6, 8, 12, 18, 24, 64, 72, 128})
    for (std::int64_t heads : {1, 5, 17})
      for (std::int64_t nope : {0, 3, 16}) {
        RopeCase c;
        c.emb_dim = emb;
        c.heads = heads;
        c.nope_dim = nope;
        c.rows.seq = 3;
        c.name = "emb " + std::to_string(emb) + " heads " + std::to_string(heads) + " nope " +
                 std::to_string(nope);
        bases.push_back(c);
      }
  check_all(with_all_calls(bases));
}

// Calls at the edges of the kernels' work sharing, on the host both in the fast mode and under
// the GPU model (the device paths): calls without a status word whose rows lie outside the table
// or whose cu_seqlens are bad (they pass through, and nothing is written anywhere else);
// empty calls (one block without rows); the staged in-place body with two rounds per row whose
// rows lie outside the table (only its first round reports); a slice wider than the fast
// mode's branch holds.
TEST_P(RopeBackendTest, CallsWithoutAStatusWordEmptyCallsAndWideSlices) {
  std::vector<RopeCase> bases;
  for (bool status_word : {false, true}) {
    RopeCase outside;
    outside.rows.seq_offsets = true;  // offsets 0..3 past a table of S rows: some pass through
    outside.rows.table_rows = 6;
    outside.status_word = status_word;
    outside.name = std::string("rows outside the table") + (status_word ? "" : ", no status word");
    bases.push_back(outside);
    RopeCase gate = outside;
    gate.rows = thd_rows({5, 7});
    gate.rows.thd_rows = 9;
    gate.rows.table_rows = 0;  // the sequences need 12 rows: the gate closes
    gate.name =
        std::string("THD cu_seqlens past the rows") + (status_word ? "" : ", no status word");
    bases.push_back(gate);
    RopeCase decreasing = gate;  // a sequence of length -2: the per-sequence rules fail
    decreasing.rows.cu_seqlens = {0, 5, 3};
    decreasing.rows.thd_rows = 6;
    decreasing.name =
        std::string("THD decreasing cu_seqlens") + (status_word ? "" : ", no status word");
    bases.push_back(decreasing);
    RopeCase staged;  // f32, emb 512: 128 chunks a slice, rounds of 16 slices and of 5 a row
    staged.dtype = DType::f32;
    staged.layouts = {PairLayout::interleaved, PairLayout::half, PairLayout::half};
    staged.heads = 21;
    staged.emb_dim = 512;
    staged.rows.seq_offsets = true;
    staged.rows.table_rows = 6;
    staged.status_word = status_word;
    staged.name = std::string("staged, two rounds a row, rows outside the table") +
                  (status_word ? "" : ", no status word");
    bases.push_back(staged);
  }
  RopeCase empty_sbhd;
  empty_sbhd.rows.seq = 0;
  empty_sbhd.name = "SBHD without rows";
  bases.push_back(empty_sbhd);
  RopeCase empty_thd;
  empty_thd.rows = thd_rows({0, 0});
  empty_thd.name = "THD without rows";
  bases.push_back(empty_thd);
  RopeCase wide;
  wide.emb_dim = 520;  // past kHostRopeMaxEmbDim: the fast mode takes the device paths
  wide.heads = 2;
  wide.name = "emb 520";
  bases.push_back(wide);
  const std::vector<RopeCase> cases = with_all_calls(bases);
  for (const RopeCase& c : cases) EXPECT_TRUE(check_rope_case(c, backend(), 1));
  if (backend() == BackendKind::host) {
    for (const RopeCase& c : cases)
      EXPECT_TRUE(check_rope_case(c, backend(), 1, nullptr, true)) << "GPU model";
  }
}

TEST_P(RopeBackendTest, MegatronModesInEveryDtypeWithRealisticDims) {
  const std::vector<LayoutTriple> modes = {
      {PairLayout::interleaved, PairLayout::half, PairLayout::half},
      {PairLayout::interleaved, PairLayout::interleaved, PairLayout::half},
      {PairLayout::half, PairLayout::half, PairLayout::half},
      {PairLayout::interleaved, PairLayout::interleaved, PairLayout::interleaved}};
  std::vector<RopeCase> bases;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (const LayoutTriple& t : modes) {
      RopeCase c;
      c.dtype = dtype;
      c.layouts = t;
      c.heads = 4;
      c.nope_dim = 128;
      c.emb_dim = 64;
      c.rows.seq = 4;
      c.name = "megatron " + std::string(to_string(dtype)) + " " + describe(t);
      bases.push_back(c);
    }
  check_all(with_all_calls(bases));
}

TEST_P(RopeBackendTest, StridedAndBroadcastViews) {
  std::vector<RopeCase> bases;
  for (std::int64_t head_pad : {0, 1, 8})
    for (std::int64_t row_pad : {0, 3})
      for (DType dtype : {DType::f32, DType::bf16}) {
        RopeCase c;
        c.dtype = dtype;
        c.head_pad = head_pad;
        c.row_pad = row_pad;
        c.name = "head pad " + std::to_string(head_pad) + " row pad " + std::to_string(row_pad) +
                 " " + std::string(to_string(dtype));
        bases.push_back(c);
      }
  std::vector<RopeCase> cases = with_all_calls(bases);
  for (bool backward : {false, true}) {
    RopeCase c;
    c.broadcast_heads = true;
    c.backward = backward;
    c.name = std::string("broadcast heads (input head stride 0)") + (backward ? " backward" : "");
    cases.push_back(c);
  }
  check_all(cases);
}

TEST_P(RopeBackendTest, SbhdContextParallelAndOffsets) {
  std::vector<RopeCase> bases;
  for (std::int64_t cp_size : {1, 2, 4})
    for (std::int64_t cp_rank = 0; cp_rank < cp_size; ++cp_rank)
      for (bool offsets : {false, true}) {
        RopeCase c;
        c.rows.seq = 8;
        c.rows.batch = 3;
        c.rows.cp_size = cp_size;
        c.rows.cp_rank = cp_rank;
        c.rows.seq_offsets = offsets;
        c.name = "sbhd cp " + std::to_string(cp_rank) + "/" + std::to_string(cp_size) +
                 (offsets ? " offsets" : "");
        bases.push_back(c);
      }
  check_all(with_all_calls(bases));
}

TEST_P(RopeBackendTest, ThdPerSequenceAndPackedWithContextParallel) {
  std::vector<RopeCase> bases;
  for (FreqMode mode : {FreqMode::per_sequence, FreqMode::packed})
    for (std::int64_t cp_size : {1, 2, 4})
      for (std::int64_t cp_rank : {std::int64_t{0}, cp_size - 1}) {
        RopeCase c;
        c.rows = thd_rows({8, 0, 16, 24, 8}, cp_size, cp_rank, mode, 3);
        c.name = "thd " + std::string(to_string(mode)) + " cp " + std::to_string(cp_rank) + "/" +
                 std::to_string(cp_size) + " + 3 padding rows";
        bases.push_back(c);
      }
  check_all(with_all_calls(bases));
}

TEST_P(RopeBackendTest, ThdPositionIdsAndOffsets) {
  std::vector<RopeCase> bases;
  for (IndexType type : {IndexType::i32, IndexType::i64})
    for (bool offsets : {false, true}) {
      RopeCase c;
      c.rows = thd_rows({5, 1, 9, 4}, 1, 0, FreqMode::packed, 2);
      c.rows.position_ids = type;
      c.rows.seq_offsets = offsets;
      c.name = "thd position ids " + std::string(to_string(type)) + (offsets ? " + offsets" : "");
      bases.push_back(c);
    }
  for (bool packed : {false, true}) {
    RopeCase c;
    c.rows = thd_rows({4, 12, 8}, 2, 1, packed ? FreqMode::packed : FreqMode::per_sequence, 1);
    c.rows.seq_offsets = true;
    c.name = std::string("thd offsets with cp 1/2 ") + (packed ? "packed" : "per sequence");
    bases.push_back(c);
  }
  check_all(with_all_calls(bases));
}

// --- Determinism -------------------------------------------------------------------------------

RopeCase determinism_case(bool in_place) {
  RopeCase c;
  c.rows = thd_rows({6, 10, 4}, 1, 0, FreqMode::per_sequence, 2);
  c.heads = 7;
  c.emb_dim = 64;
  c.nope_dim = 16;
  c.in_place = in_place;
  c.name = in_place ? "determinism in place" : "determinism";
  return c;
}

std::vector<unsigned char> run_once(const RopeCase& c, BackendKind kind, std::uint64_t seed,
                                    int repeats = 1) {
  RopeHarness h(c, 5);
  h.upload(kind);
  Stream stream = kind == BackendKind::host ? Stream::host({seed, 3}) : Stream::cuda();
  for (int i = 0; i < repeats; ++i) h.run_backend(stream);
  stream.synchronize();
  h.download();
  return h.output().storage();
}

TEST_P(RopeBackendTest, TwoExecutorSeedsGiveBitwiseEqualResults) {
  for (bool in_place : {false, true}) {
    const RopeCase c = determinism_case(in_place);
    EXPECT_EQ(run_once(c, backend(), 1), run_once(c, backend(), 2)) << c.name;
  }
}

TEST_P(RopeBackendTest, WorkerCountsAndSeedsGiveBitwiseEqualResults) {
  if (backend() != BackendKind::host) GTEST_SKIP() << "host executor workers: host backend only";
  RopeCase c;
  c.rows.seq = 300;  // 600 rows: the executor starts its workers
  c.rows.batch = 2;
  c.heads = 5;
  c.emb_dim = 64;
  c.dtype = DType::f32;
  c.name = "workers";
  auto run = [&](std::uint64_t seed, int workers) {
    RopeHarness h(c, 6);
    h.upload(BackendKind::host);
    Stream stream = Stream::host({seed, workers});
    h.run_backend(stream);
    h.download();
    return h.output().storage();
  };
  const std::vector<unsigned char> one = run(1, 1);
  EXPECT_EQ(one, run(2, 4));
  EXPECT_EQ(one, run(3, 2));
}

TEST_P(RopeBackendTest, RepeatedCallsGiveBitwiseEqualResults) {
  const RopeCase c = determinism_case(false);
  EXPECT_EQ(run_once(c, backend(), 3), run_once(c, backend(), 3));
  EXPECT_EQ(run_once(c, backend(), 3, 1), run_once(c, backend(), 3, 2));
}

TEST_P(RopeBackendTest, InPlaceEqualsOutOfPlaceBitwise) {
  for (const LayoutTriple& t : all_triples())
    for (bool backward : {false, true}) {
      RopeCase c = determinism_case(false);
      c.layouts = t;
      c.backward = backward;
      RopeCase in_place = c;
      in_place.in_place = true;
      EXPECT_EQ(run_once(c, backend(), 1), run_once(in_place, backend(), 1)) << describe(t);
    }
}

MLAROPE_INSTANTIATE_BACKENDS(RopeBackendTest);

}  // namespace
}  // namespace mlarope::test
