// SPDX-License-Identifier: Apache-2.0
// One launch per THD call (kernels/row_rounds.h): each block checks the call's whole
// cu_seqlens before it writes, so a bad sequence anywhere in the array (before, at and past
// the block's checking threads, the last one included) passes every row through and sets the
// status bits, in the host's fast mode and under the GPU model (the device code path). A THD
// grid of more than kSharedSequences sequences stops at LaunchProfile::max_thd_blocks, its
// blocks taking several rows each, and at fewer (not under min_thd_blocks) where the sequences
// outnumber the call's work; of fewer, it takes a block a row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/freq_row.h"
#include "launch/launch_builder.h"
#include "launch/stream_impl.h"
#include "mlarope/backend.h"
#include "mlarope/ops.h"

namespace mlarope::test {
namespace {

constexpr std::int64_t kHeads = 2, kNope = 4, kEmb = 8, kWidth = kNope + kEmb;
constexpr std::int64_t kSpareTableRows = 8;

struct ThdResult {
  std::vector<float> out;
  DeviceStatus status = kStatusOk;
  std::vector<ModelLaunchStats> launches;  ///< under the GPU model
};

// Out-of-place rope, f32, THD [rows, kHeads, kWidth], packed table of rows * cp_size rows and
// kSpareTableRows more (for a cu_seqlens whose first entry is not 0).
ThdResult run_rope_at(const std::vector<std::int32_t>& storage, std::size_t offset,
                      std::int64_t rows, bool gpu_model, std::int64_t cp_size = 1);

ThdResult run_rope(const std::vector<std::int32_t>& cu_seqlens, std::int64_t rows,
                   std::int64_t cp_size, bool gpu_model) {
  return run_rope_at(cu_seqlens, 0, rows, gpu_model, cp_size);
}

// The same, cu_seqlens being storage[offset:] (an address 4 x offset bytes past storage's).
ThdResult run_rope_at(const std::vector<std::int32_t>& storage, std::size_t offset,
                      std::int64_t rows, bool gpu_model, std::int64_t cp_size) {
  std::vector<float> t(static_cast<std::size_t>(rows * kHeads * kWidth));
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = 0.25f + static_cast<float>(i % 89) * 0.01f;
  const std::int64_t table_rows = rows * cp_size + kSpareTableRows;
  std::vector<float> cos(static_cast<std::size_t>(table_rows * kEmb), 0.6f);
  std::vector<float> sin(cos.size(), 0.8f);
  ThdResult r;
  r.out.assign(t.size(), 0.0f);
  RopeCall c;
  c.t = contiguous_view<const void>(t.data(), DType::f32, {rows, kHeads, kWidth});
  c.out = contiguous_view<void>(r.out.data(), DType::f32, {rows, kHeads, kWidth});
  c.args.nope_dim = kNope;
  c.args.emb_dim = kEmb;
  c.args.rotation.in_layout = c.args.rotation.out_layout = PairLayout::half;
  c.args.rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {table_rows, kEmb});
  c.args.rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {table_rows, kEmb});
  c.args.positions.layout = TokenLayout::thd;
  c.args.positions.freq_mode = FreqMode::packed;
  c.args.positions.cp_size = cp_size;
  c.args.positions.cu_seqlens = {storage.data() + offset, IndexType::i32,
                                 static_cast<std::int64_t>(storage.size() - offset)};
  c.args.status = &r.status;
  Stream s = Stream::host({3, 1, gpu_model});
  rope(c, s);
  s.synchronize();
  r.launches = take_model_stats(s);
  // Keep the input for comparisons: rows passed through equal it bit for bit.
  r.out.insert(r.out.end(), t.begin(), t.end());
  return r;
}

// Rows of `r` equal to the input, bit for bit (the input follows the output in r.out).
std::int64_t rows_passed_through(const ThdResult& r, std::int64_t rows) {
  const std::size_t row_floats = static_cast<std::size_t>(kHeads * kWidth);
  const float* out = r.out.data();
  const float* in = r.out.data() + rows * kHeads * kWidth;
  std::int64_t n = 0;
  for (std::int64_t row = 0; row < rows; ++row)
    // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison): bit for bit is meant (NaN payloads)
    n += std::memcmp(out + row * row_floats, in + row * row_floats, row_floats * sizeof(float)) == 0
             ? 1
             : 0;
  return n;
}

// N sequences of `length` global rows each.
std::vector<std::int32_t> uniform_cu_seqlens(std::int64_t n, std::int32_t length) {
  std::vector<std::int32_t> cu(static_cast<std::size_t>(n + 1));
  for (std::int64_t i = 0; i <= n; ++i)
    cu[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i) * length;
  return cu;
}

constexpr std::int64_t kSequences = 300;  // more than the 128 checking threads of a block

TEST(ThdGate, AValidCallRotatesEveryRowInOneLaunch) {
  for (bool model : {false, true}) {
    SCOPED_TRACE(model ? "GPU model" : "fast mode");
    const ThdResult r = run_rope(uniform_cu_seqlens(kSequences, 1), kSequences, 1, model);
    EXPECT_EQ(r.status, kStatusOk);
    EXPECT_EQ(rows_passed_through(r, kSequences), 0);
    if (model) {
      ASSERT_EQ(r.launches.size(), 1u) << "a THD call is one launch";
      EXPECT_EQ(r.launches[0].kernel, "rope/chunked_vector/f32");
    }
  }
}

TEST(ThdGate, ADecreasingSequenceAnywherePassesEveryRowThrough) {
  for (std::int64_t bad :
       std::vector<std::int64_t>{0, 1, 127, 128, 200, 255, 256, kSequences - 1}) {
    std::vector<std::int32_t> cu = uniform_cu_seqlens(kSequences, 1);
    cu[static_cast<std::size_t>(bad + 1)] = cu[static_cast<std::size_t>(bad)] - 1;  // length -1
    if (bad + 1 == kSequences) cu.back() = cu[static_cast<std::size_t>(bad)] - 1;
    for (bool model : {false, true}) {
      SCOPED_TRACE("bad sequence " + std::to_string(bad) + (model ? ", GPU model" : ", fast mode"));
      const ThdResult r = run_rope(cu, kSequences, 1, model);
      EXPECT_EQ(r.status, kStatusBadCuSeqlens);
      EXPECT_EQ(rows_passed_through(r, kSequences), kSequences);
      if (model) {
        EXPECT_EQ(r.launches.size(), 1u);
      }
    }
  }
}

TEST(ThdGate, ALengthNotDivisibleByTwiceCpSizeAnywherePassesEveryRowThrough) {
  for (std::int64_t bad : std::vector<std::int64_t>{0, 129, kSequences - 2}) {
    std::vector<std::int32_t> cu =
        uniform_cu_seqlens(kSequences, 4);       // cp_size 2: 2 local rows each
    cu[static_cast<std::size_t>(bad + 1)] += 2;  // lengths 6 and 2
    for (bool model : {false, true}) {
      SCOPED_TRACE("bad sequence " + std::to_string(bad) + (model ? ", GPU model" : ", fast mode"));
      const ThdResult r = run_rope(cu, 2 * kSequences, 2, model);
      EXPECT_EQ(r.status, kStatusBadSeqLength);
      EXPECT_EQ(rows_passed_through(r, 2 * kSequences), 2 * kSequences);
    }
  }
}

TEST(ThdGate, SequencesLongerThanTheRowsPassEveryRowThrough) {
  for (bool model : {false, true}) {
    SCOPED_TRACE(model ? "GPU model" : "fast mode");
    const ThdResult r = run_rope(uniform_cu_seqlens(kSequences, 1), kSequences - 1, 1, model);
    EXPECT_EQ(r.status, kStatusBadCuSeqlens);
    EXPECT_EQ(rows_passed_through(r, kSequences - 1), kSequences - 1);
  }
}

// The total-length rule takes cu[0] and cu[N] from the checking threads whose share loaded
// them, whether a lone sequence or a group of four holds each end, and from a first entry of
// 0 or not: sequences one row longer than the call close the gate for every layout of the
// gate's reads, sequences that fill it exactly do not. Without sequences every row is padding
// (and the rule reads nothing the block has not written).
TEST(ThdGate, TheTotalLengthRuleSeesBothEndsOfEveryLayoutOfTheReads) {
  for (const std::int32_t first : {0, 5})
    for (const std::int64_t n : {0, 1, 2, 5, 23})
      for (std::size_t offset = 0; offset < 4; ++offset) {
        std::vector<std::int32_t> storage(offset, 0);
        for (const std::int32_t entry : uniform_cu_seqlens(n, 1)) storage.push_back(first + entry);
        SCOPED_TRACE(std::to_string(n) + " sequences from " + std::to_string(first) + ", offset " +
                     std::to_string(offset));
        if (n > 1) {
          const ThdResult longer = run_rope_at(storage, offset, n - 1, true);
          EXPECT_EQ(longer.status, kStatusBadCuSeqlens);
          EXPECT_EQ(rows_passed_through(longer, n - 1), n - 1);
        }
        const std::int64_t rows = n > 0 ? n : 3;
        const ThdResult fits = run_rope_at(storage, offset, rows, true);
        EXPECT_EQ(fits.status, kStatusOk);
        EXPECT_EQ(rows_passed_through(fits, rows), n > 0 ? 0 : rows);
        ASSERT_EQ(fits.launches.size(), 1u);
        EXPECT_EQ(fits.launches[0].errors, 0);
      }
}

// The gate's round trips a block: its checking threads take the units of
// kernels::check_sequences (the sequences before cu + head, aligned to 16 bytes, and after the
// last whole group of four one at a time, the groups four at a time), one unit a round trip each.
std::int64_t gate_round_trips(const std::vector<std::int32_t>& cu, int threads) {
  const std::int64_t n = static_cast<std::int64_t>(cu.size()) - 1;
  const auto address = reinterpret_cast<std::uintptr_t>(cu.data());
  const auto misaligned = static_cast<std::int64_t>((16 - address % 16) % 16 / 4);
  const std::int64_t head = std::min(n, misaligned);
  const std::int64_t units = n - 3 * ((n - head) / 4);
  const std::int64_t checking = std::min(threads, kernels::kGateSlots);
  return (units + checking - 1) / checking;
}

// A block's index round trips: the gate's (the total-length rule reads no entry of its own),
// and none for its rows' plans up to kSharedSequences sequences (the gate's threads leave
// cu_seqlens in shared memory, where the searches run); with one sequence more, each row's
// search loads its entries: kSharedSequences + 2 candidates, 2 or 3 steps of 8 (the last
// steps' probes hold the sequence's start and end).
TEST(ThdGate, ABlockWaitsForTheGateOnceAndForItsRowsSearchesOnlyAboveTheSharedCopy) {
  for (const std::int64_t n : {std::int64_t{3}, std::int64_t{kernels::kSharedSequences}}) {
    const std::vector<std::int32_t> cu = uniform_cu_seqlens(n, 2);
    const ThdResult r = run_rope(cu, 2 * n, 1, true);
    ASSERT_EQ(r.launches.size(), 1u);
    const ModelLaunchStats& m = r.launches[0];
    EXPECT_EQ(r.status, kStatusOk);
    EXPECT_EQ(rows_passed_through(r, 2 * n), 0);
    EXPECT_GT(m.blocks_run, 0);
    EXPECT_EQ(m.index_round_trips, m.blocks_run * gate_round_trips(cu, m.threads))
        << m.blocks_run << " blocks, " << n << " sequences";
  }
  const std::int64_t n = kernels::kSharedSequences + 1, rows = n;
  const std::vector<std::int32_t> cu = uniform_cu_seqlens(n, 1);
  const ThdResult r = run_rope(cu, rows, 1, true);
  ASSERT_EQ(r.launches.size(), 1u);
  const ModelLaunchStats& m = r.launches[0];
  EXPECT_EQ(r.status, kStatusOk);
  EXPECT_EQ(rows_passed_through(r, rows), 0);
  const std::int64_t gate = m.blocks_run * gate_round_trips(cu, m.threads);
  EXPECT_GE(m.index_round_trips, gate + 2 * rows) << m.blocks_run << " blocks";
  EXPECT_LE(m.index_round_trips, gate + 3 * rows) << m.blocks_run << " blocks";
}

// Up to kSharedSequences sequences a block's gate leaves cu_seqlens in its shared memory and
// its rows' plans load nothing: a grid of a block a row, past max_thd_blocks.
TEST(ThdGate, FewSequencesTakeABlockARowPastMaxThdBlocks) {
  const std::int64_t rows = 4500;  // in 3 sequences
  const detail::LaunchProfile profile = detail::cuda_launch_profile();
  ASSERT_LT(profile.max_thd_blocks, rows);
  const std::vector<std::int32_t> cu = uniform_cu_seqlens(3, 1500);
  const ThdResult model = run_rope(cu, rows, 1, true);
  ASSERT_EQ(model.launches.size(), 1u);
  EXPECT_EQ(model.launches[0].blocks, rows);
  const ThdResult fast = run_rope(cu, rows, 1, false);
  EXPECT_EQ(model.out, fast.out);
  EXPECT_EQ(model.status, kStatusOk);
}

// Blocks of the grid the launch builder gives out-of-place rope, bf16 [rows, heads, 128 + 64],
// THD over n sequences (of one row each), under `profile` (the builder reads addresses, not
// elements).
std::int64_t thd_grid_blocks(std::int64_t rows, std::int64_t heads, std::int64_t n,
                             const detail::LaunchProfile& profile) {
  constexpr std::int64_t kRopeNope = 128, kRopeEmb = 64;
  alignas(16) static std::uint16_t element;
  const std::vector<float> table(static_cast<std::size_t>(kRopeEmb), 0.5f);
  const std::vector<std::int32_t> cu = uniform_cu_seqlens(n, 1);
  RopeArgs a;
  a.nope_dim = kRopeNope;
  a.emb_dim = kRopeEmb;
  a.rotation.cos = contiguous_view<const void>(table.data(), DType::f32, {1, kRopeEmb});
  a.rotation.sin = contiguous_view<const void>(table.data(), DType::f32, {1, kRopeEmb});
  a.positions.layout = TokenLayout::thd;
  a.positions.cu_seqlens = {cu.data(), IndexType::i32, static_cast<std::int64_t>(cu.size())};
  const TensorView t =
      contiguous_view<void>(&element, DType::bf16, {rows, heads, kRopeNope + kRopeEmb});
  return detail::make_rope_launch(t, t, a, {false, false}, profile).grid.blocks;
}

// Past kSharedSequences each row's plan searches cu_seqlens and the gate's reads grow with the
// sequences: the grid stops at max_thd_blocks, its blocks taking several rows each (a
// DeepSeek-V3 row, whose work keeps the gate's reads few).
TEST(ThdGate, ManySequencesStopAtMaxThdBlocks) {
  const detail::LaunchProfile profile = detail::cuda_launch_profile();
  const std::int64_t rows = 16384;
  ASSERT_LT(profile.max_thd_blocks, rows);
  EXPECT_EQ(thd_grid_blocks(rows, 128, kernels::kSharedSequences, profile), rows);
  EXPECT_EQ(thd_grid_blocks(rows, 128, kernels::kSharedSequences + 1, profile),
            profile.max_thd_blocks);
}

// However few blocks the sequences' rule allows (a profile without min_thd_blocks, a row's
// work below its sequences), a grid has a block: its status word still gets the gate's bits.
TEST(ThdGate, AGridKeepsABlockWhateverTheRuleAllows) {
  detail::LaunchProfile profile = detail::cuda_launch_profile();
  profile.min_thd_blocks = 0;
  EXPECT_EQ(thd_grid_blocks(1, 1, std::int64_t{2} * kernels::kSharedSequences, profile), 1);
}

// Where the sequences outnumber the call's work, the grid keeps the gate's reads (every block
// reads every sequence) near the work: min_thd_blocks blocks, each reading half an entry a
// sequence (16-byte loads), besides the row plans' searches.
TEST(ThdGate, ManySequencesBoundTheGatesReads) {
  const std::int64_t rows = 4500;
  const detail::LaunchProfile profile = detail::cuda_launch_profile();
  ASSERT_LT(profile.min_thd_blocks, rows);
  const ThdResult model = run_rope(uniform_cu_seqlens(rows, 1), rows, 1, true);
  ASSERT_EQ(model.launches.size(), 1u);
  const ModelLaunchStats& m = model.launches[0];
  EXPECT_EQ(m.blocks, profile.min_thd_blocks);
  // A row's plan: a search over 4501 entries, at most 5 steps of 8 entries, 4 more.
  const std::int64_t plan = 8 * 5 + 4;
  EXPECT_LE(m.index_loads, m.blocks * (rows / 2 + 16) + rows * plan) << "gate reads per call";
  // The model's state stays near the footprint (t, out, tables, cu_seqlens), however many
  // times the blocks read cu_seqlens.
  const std::int64_t footprint = 4 * (2 * rows * kHeads * kWidth + 2 * rows * kEmb + rows + 1);
  EXPECT_LE(m.model_bytes, 7 * footprint + (std::int64_t{1} << 20));
  const ThdResult fast = run_rope(uniform_cu_seqlens(rows, 1), rows, 1, false);
  EXPECT_EQ(model.out, fast.out);
  EXPECT_EQ(rows_passed_through(model, rows), 0);
}

// The gate reads cu_seqlens four entries at a time from its first entry aligned to 16 bytes:
// an array starting 0 to 3 entries past an aligned address has a head, groups and a tail of
// lone sequences (with 1 or 2 sequences, fewer than the head), and a bad sequence in any of
// them closes the gate.
TEST(ThdGate, ABadSequenceInTheHeadGroupsOrTailOfTheVectorReadsIsSeen) {
  for (const std::int64_t n : {1, 2, 23})
    for (std::size_t offset = 0; offset < 4; ++offset)
      for (std::int64_t bad = 0; bad < n; ++bad) {
        std::vector<std::int32_t> storage(offset, 0);
        const std::vector<std::int32_t> cu = uniform_cu_seqlens(n, 1);
        storage.insert(storage.end(), cu.begin(), cu.end());
        storage[offset + static_cast<std::size_t>(bad) + 1] -= 2;  // sequence `bad` has length -1
        SCOPED_TRACE(std::to_string(n) + " sequences, offset " + std::to_string(offset) +
                     ", bad sequence " + std::to_string(bad));
        const ThdResult r = run_rope_at(storage, offset, n, true);
        EXPECT_EQ(r.status, kStatusBadCuSeqlens);
        EXPECT_EQ(rows_passed_through(r, n), n);
      }
}

}  // namespace
}  // namespace mlarope::test
