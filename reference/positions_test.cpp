// SPDX-License-Identifier: Apache-2.0
// Which table row each row uses (docs/semantics.md §2): map_rows and cp_pos directly, and end to
// end through rope and kv_split with a table whose rows can be told apart.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "positions.h"
#include "reference.h"
#include "test_util.h"

namespace mlarope {
namespace {

using reference::RowMap;
using test::HostTensor;
using test::Table;

constexpr std::int64_t kPass = RowMap::kPassThrough;

// A table whose row r is recognisable: with emb_dim 2, cos = r + 1 and sin = 100 + r, so rotating
// the slice [1, 0] gives [r + 1, 100 + r].
Table recognisable_table(std::int64_t rows) {
  Table t{HostTensor(DType::f32, {rows, 2}), HostTensor(DType::f32, {rows, 2})};
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t k = 0; k < 2; ++k) {
      t.cos.set({r, k}, r + 1.0);
      t.sin.set({r, k}, 100.0 + r);
    }
  return t;
}

// The table row an output slice [y0, y1] came from, or kPass when it is the input [1, 0].
std::int64_t row_of(double y0, double y1) {
  if (y0 == 1.0 && y1 == 0.0) return kPass;
  EXPECT_EQ(y1 - y0, 99.0) << "not a row of the recognisable table";
  return static_cast<std::int64_t>(y0) - 1;
}

// The rows that rope (H = 3 heads, one nope element) and kv_split (H = 2) used for each row of a
// call with `positions` over `rows`, ordered as map_rows orders them. All heads must agree.
std::vector<std::int64_t> rows_used(const Positions& positions, RowShape rows,
                                    std::int64_t table_rows) {
  const Table table = recognisable_table(table_rows);
  Rotation rotation;
  rotation.cos = table.cos.cview();
  rotation.sin = table.sin.cview();
  const bool sbhd = positions.layout == TokenLayout::sbhd;
  auto shape = [&](std::int64_t heads, std::int64_t width) {
    return sbhd ? std::vector<std::int64_t>{rows.seq, rows.batch, heads, width}
                : std::vector<std::int64_t>{rows.seq, heads, width};
  };
  auto index = [&](std::int64_t row, std::int64_t head, std::int64_t k) {
    return sbhd ? std::vector<std::int64_t>{row / rows.batch, row % rows.batch, head, k}
                : std::vector<std::int64_t>{row, head, k};
  };
  const std::int64_t count = rows.seq * rows.batch;

  HostTensor t(DType::f32, shape(3, 3));
  for (std::int64_t row = 0; row < count; ++row)
    for (std::int64_t h = 0; h < 3; ++h) {
      t.set(index(row, h, 0), -5.0);
      t.set(index(row, h, 1), 1.0);
      t.set(index(row, h, 2), 0.0);
    }
  const HostTensor out = test::run_rope(t, test::rope_args(1, 2, rotation, positions));

  HostTensor kv(DType::f32, shape(2, 1)), k_pe(DType::f32, shape(1, 2));
  for (std::int64_t row = 0; row < count; ++row) {
    k_pe.set(index(row, 0, 0), 1.0);
    k_pe.set(index(row, 0, 1), 0.0);
  }
  HostTensor key(DType::f32, shape(2, 3)), value(DType::f32, shape(2, 0));
  reference::kv_split({kv.cview(), k_pe.cview(), key.view(), value.view(),
                       test::kv_args(1, 0, 2, rotation, positions)});

  std::vector<std::int64_t> used(static_cast<std::size_t>(count));
  for (std::int64_t row = 0; row < count; ++row) {
    used[row] = row_of(out.get(index(row, 0, 1)), out.get(index(row, 0, 2)));
    for (std::int64_t h = 0; h < 3; ++h) {
      EXPECT_EQ(out.get(index(row, h, 0)), -5.0) << "nope part of row " << row;
      EXPECT_EQ(row_of(out.get(index(row, h, 1)), out.get(index(row, h, 2))), used[row])
          << "rope, row " << row << " head " << h;
    }
    for (std::int64_t h = 0; h < 2; ++h)
      EXPECT_EQ(row_of(key.get(index(row, h, 1)), key.get(index(row, h, 2))), used[row])
          << "kv_split, row " << row << " head " << h;
  }
  return used;
}

// map_rows and the end-to-end rows agree, and both equal `expected`.
void expect_rows(const Positions& positions, RowShape rows, std::int64_t table_rows,
                 const std::vector<std::int64_t>& expected) {
  const RowMap map = reference::map_rows(positions, rows, table_rows);
  EXPECT_EQ(map.freq_row, expected) << "map_rows";
  EXPECT_EQ(map.status, kStatusOk);
  EXPECT_EQ(check_device_metadata(positions, rows, table_rows), kStatusOk);
  EXPECT_EQ(rows_used(positions, rows, table_rows), expected) << "end to end";
}

TEST(CpPos, IsTheIdentityWithoutContextParallelism) {
  for (std::int64_t lp = 0; lp < 5; ++lp) EXPECT_EQ(mlarope::cp_pos(lp, 5, 1, 0), lp);
}

TEST(CpPos, RankHoldsChunksRankAndMirror) {
  // Local length 4 on 2 ranks: global length 8 in chunks [0,1] [2,3] [4,5] [6,7].
  std::vector<std::int64_t> rank0, rank1;
  for (std::int64_t lp = 0; lp < 4; ++lp) {
    rank0.push_back(mlarope::cp_pos(lp, 4, 2, 0));
    rank1.push_back(mlarope::cp_pos(lp, 4, 2, 1));
  }
  EXPECT_EQ(rank0, (std::vector<std::int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(rank1, (std::vector<std::int64_t>{2, 3, 4, 5}));
  // 4 ranks, local length 2: rank 2 holds chunks 2 and 5 of 8.
  EXPECT_EQ(mlarope::cp_pos(0, 2, 4, 2), 2);
  EXPECT_EQ(mlarope::cp_pos(1, 2, 4, 2), 5);
}

// Megatron's THD examples.
TEST(ThdRows, PackedTableWithContextParallelismRankZero) {
  const std::vector<std::int32_t> cu{0, 4, 8};
  expect_rows(test::thd_positions(cu, FreqMode::packed, 2, 0), {4, 1}, 8, {0, 3, 4, 7});
}

TEST(ThdRows, PerSequenceTableWithContextParallelismRankOne) {
  const std::vector<std::int32_t> cu{0, 4, 8};
  expect_rows(test::thd_positions(cu, FreqMode::per_sequence, 2, 1, 4), {4, 1}, 4, {1, 2, 1, 2});
}

TEST(ThdRows, PerSequenceTableRestartsAtZeroForEverySequence) {
  const std::vector<std::int32_t> cu{0, 3, 6};
  expect_rows(test::thd_positions(cu, FreqMode::per_sequence, 1, 0, 3), {6, 1}, 4,
              {0, 1, 2, 0, 1, 2});
}

TEST(ThdRows, PackedTableWithoutContextParallelismUsesTheGlobalRow) {
  const std::vector<std::int32_t> cu{0, 3, 6};
  expect_rows(test::thd_positions(cu, FreqMode::packed), {6, 1}, 6, {0, 1, 2, 3, 4, 5});
}

TEST(ThdRows, PackedTableFollowsCuSeqlensThatDoNotStartAtZero) {
  const std::vector<std::int32_t> cu{2, 4, 7};
  expect_rows(test::thd_positions(cu, FreqMode::packed), {5, 1}, 8, {2, 3, 4, 5, 6});
}

TEST(ThdRows, PaddingRowsPastTheLocalLengthsPassThrough) {
  const std::vector<std::int32_t> cu{0, 2, 4};
  expect_rows(test::thd_positions(cu), {6, 1}, 4, {0, 1, 0, 1, kPass, kPass});
  // With CP: local lengths 2 + 2 of T = 5.
  const std::vector<std::int32_t> cu_cp{0, 4, 8};
  expect_rows(test::thd_positions(cu_cp, FreqMode::per_sequence, 2, 0), {5, 1}, 4,
              {0, 3, 0, 3, kPass});
}

TEST(ThdRows, EmptySequencesTakeNoRows) {
  const std::vector<std::int32_t> cu{0, 0, 2, 2, 3};
  expect_rows(test::thd_positions(cu), {4, 1}, 4, {0, 1, 0, kPass});
}

TEST(ThdRows, SeqOffsetsAreAddedPerSequence) {
  const std::vector<std::int32_t> cu{0, 3, 6}, offsets{2, 10};
  Positions p = test::thd_positions(cu);
  p.seq_offsets = test::index_view(offsets);
  expect_rows(p, {6, 1}, 16, {2, 3, 4, 10, 11, 12});
  // packed + CP + offsets: cu_seqlens[i] + cp_pos(lp) + offset.
  const std::vector<std::int32_t> cu_cp{0, 4, 8};
  Positions q = test::thd_positions(cu_cp, FreqMode::packed, 2, 1);
  q.seq_offsets = test::index_view(offsets);
  expect_rows(q, {4, 1}, 20, {1 + 2, 2 + 2, 4 + 1 + 10, 4 + 2 + 10});
}

TEST(ThdRows, PositionIdsReplaceTheMapping) {
  const std::vector<std::int32_t> cu{0, 3, 5}, offsets{100, 200};
  const std::vector<std::int32_t> ids32{7, 0, 3, 3, 9, 1};
  const std::vector<std::int64_t> ids64{7, 0, 3, 3, 9, 1};
  for (FreqMode mode : {FreqMode::per_sequence, FreqMode::packed})
    for (bool wide : {false, true}) {
      SCOPED_TRACE(std::string(to_string(mode)) + (wide ? " i64" : " i32"));
      Positions p = test::thd_positions(cu, mode);
      p.position_ids = wide ? test::index_view(ids64) : test::index_view(ids32);
      // Row 5 is padding: it passes through whatever position_ids holds there.
      expect_rows(p, {6, 1}, 10, {7, 0, 3, 3, 9, kPass});
      p.seq_offsets = test::index_view(offsets);  // replaced too
      expect_rows(p, {6, 1}, 10, {7, 0, 3, 3, 9, kPass});
    }
}

TEST(ThdRows, PositionIdsReplaceTheMappingWithContextParallelism) {
  const std::vector<std::int32_t> cu{0, 4, 8};
  const std::vector<std::int64_t> ids{5, 4, 0, 1};
  Positions p = test::thd_positions(cu, FreqMode::per_sequence, 2, 1);
  p.position_ids = test::index_view(ids);
  expect_rows(p, {4, 1}, 6, {5, 4, 0, 1});
}

TEST(ThdRows, MaxSeqlenDoesNotChangeTheMapping) {
  const std::vector<std::int32_t> cu{0, 3, 6};
  expect_rows(test::thd_positions(cu, FreqMode::per_sequence, 1, 0, 0), {6, 1}, 4,
              {0, 1, 2, 0, 1, 2});
  expect_rows(test::thd_positions(cu, FreqMode::per_sequence, 1, 0, 4), {6, 1}, 4,
              {0, 1, 2, 0, 1, 2});
}

// SBHD rows are ordered s * B + b.
TEST(SbhdRows, RowIsTheSequencePosition) {
  expect_rows(test::sbhd_positions(), {3, 2}, 3, {0, 0, 1, 1, 2, 2});
}

TEST(SbhdRows, ContextParallelRanksUseTheirTwoChunksOfOneFullTable) {
  // S = 8 local rows on each of 2 ranks: global 16 in chunks of 4.
  std::vector<std::int64_t> rank0, rank1;
  for (std::int64_t s : {0, 1, 2, 3, 12, 13, 14, 15}) rank0.insert(rank0.end(), {s, s});
  for (std::int64_t s = 4; s < 12; ++s) rank1.insert(rank1.end(), {s, s});
  expect_rows(test::sbhd_positions(2, 0), {8, 2}, 16, rank0);
  expect_rows(test::sbhd_positions(2, 1), {8, 2}, 16, rank1);
}

TEST(SbhdRows, SeqOffsetsAreAddedPerBatchEntry) {
  const std::vector<std::int32_t> offsets{0, 5};
  Positions p = test::sbhd_positions();
  p.seq_offsets = test::index_view(offsets);
  expect_rows(p, {3, 2}, 8, {0, 5, 1, 6, 2, 7});
  // With CP: cp_pos(s) + offset.
  const std::vector<std::int32_t> offsets_cp{1, 3};
  Positions q = test::sbhd_positions(2, 1);
  q.seq_offsets = test::index_view(offsets_cp);
  // S = 4, rank 1: cp_pos = [2, 3, 4, 5].
  expect_rows(q, {4, 2}, 9, {3, 5, 4, 6, 5, 7, 6, 8});
}

}  // namespace
}  // namespace mlarope
