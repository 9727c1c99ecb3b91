// SPDX-License-Identifier: Apache-2.0
// The sequence of a THD row (kernels/freq_row.h find_sequence) against a scan of cu_seqlens,
// on random arrays with empty sequences, a nonzero first entry, CP and padding rows, searched
// in the array and in the copy a block keeps in shared memory; and the round trips its search
// waits for under the GPU model (steps of kSearchProbes entries each).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "host/gpu_model.h"
#include "kernels/freq_row.h"
#include "launch/footprint.h"

namespace mlarope::kernels {
namespace {

PositionArgs thd_positions(const std::vector<std::int32_t>& cu, std::int64_t cp_size) {
  PositionArgs p;
  p.layout = TokenLayout::thd;
  p.cp_size = cp_size;
  p.cu_seqlens = cu.data();
  p.num_sequences = static_cast<std::int64_t>(cu.size()) - 1;
  return p;
}

// The largest i in [0, N] with cu[i] - cu[0] <= r * cp_size, by looking at every entry.
std::int64_t scanned_sequence(const std::vector<std::int32_t>& cu, std::int64_t r,
                              std::int64_t cp_size) {
  std::int64_t found = 0;
  for (std::size_t i = 0; i < cu.size(); ++i)
    if (cu[i] - cu[0] <= r * cp_size) found = static_cast<std::int64_t>(i);
  return found;
}

// The copy of cu_seqlens a block's gate leaves in shared memory (N <= kSharedSequences); the
// entries past cu[N] hold 0, which a search reading them would take for a sequence start.
SharedCuSeqlens shared_copy(const std::vector<std::int32_t>& cu) {
  SharedCuSeqlens copy{};
  for (std::size_t i = 0; i < cu.size(); ++i) copy.entry[i] = cu[i];
  return copy;
}

TEST(FindSequence, EqualsAScanOfEveryEntryOnEveryRow) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t cp_size = std::int64_t{1} << (trial % 3);  // 1, 2, 4
    // Half the trials at most kSharedSequences sequences: searched in the copy too.
    const int n = trial < 20       ? trial
                  : trial % 2 == 0 ? static_cast<int>(rng() % 700)
                                   : static_cast<int>(rng() % (kSharedSequences + 1));
    std::vector<std::int32_t> cu = {static_cast<std::int32_t>(rng() % 50)};
    for (int i = 0; i < n; ++i) {  // lengths of 0 .. 9 local rows, some sequences empty
      const auto local = static_cast<std::int32_t>(rng() % 10);
      cu.push_back(cu.back() + local * 2 * static_cast<std::int32_t>(cp_size));
    }
    const PositionArgs p = thd_positions(cu, cp_size);
    const SharedCuSeqlens copy = n <= kSharedSequences ? shared_copy(cu) : SharedCuSeqlens{};
    const std::int64_t rows = (cu.back() - cu.front()) / cp_size + 3;  // 3 padding rows
    for (std::int64_t r = 0; r < rows; ++r)
      for (const SharedCuSeqlens* shared_cu :
           {static_cast<const SharedCuSeqlens*>(nullptr), &copy}) {
        if (shared_cu != nullptr && n > kSharedSequences) continue;
        const RowSequence s = find_sequence(p, r, shared_cu);
        const std::int64_t want = scanned_sequence(cu, r, cp_size);
        ASSERT_EQ(s.index, want) << "trial " << trial << " N " << n << " row " << r
                                 << (shared_cu != nullptr ? " in the copy" : "");
        if (want < n) {
          ASSERT_EQ(s.first, cu[0]) << "row " << r;
          ASSERT_EQ(s.start, cu[static_cast<std::size_t>(want)]) << "row " << r;
          ASSERT_EQ(s.end, cu[static_cast<std::size_t>(want) + 1]) << "row " << r;
        }
      }
  }
}

// Where the gate is closed (entries that fall), the search is meaningless but stays inside the
// array and ends: under the GPU model, no out-of-bounds read and an index in [0, N].
TEST(FindSequence, FallingEntriesStayInsideTheArray) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300);
    std::vector<std::int32_t> cu(static_cast<std::size_t>(n + 1));
    for (auto& entry : cu) entry = static_cast<std::int32_t>(rng() % 1000) - 300;
    detail::Footprint footprint;
    footprint.add("cu_seqlens", IndexView{cu.data(), IndexType::i32, n + 1});
    gpu_model::Recorder recorder("search", footprint);
    recorder.begin_thread(GridCoord{});
    gpu_model::t_recorder = &recorder;
    for (std::int64_t r = 0; r < 40; ++r) {
      const RowSequence s = find_sequence(thd_positions(cu, 1), r * 17);
      ASSERT_GE(s.index, 0);
      ASSERT_LE(s.index, n);
    }
    gpu_model::t_recorder = nullptr;
    recorder.finish();
    ASSERT_EQ(recorder.stats().errors, 0) << "trial " << trial;
  }
}

// Index round trips of one row's search under the GPU model, where cu_seqlens has n + 1
// entries of one row each.
std::int64_t search_round_trips(std::int64_t n, std::int64_t row) {
  std::vector<std::int32_t> cu(static_cast<std::size_t>(n + 1));
  for (std::size_t i = 0; i < cu.size(); ++i) cu[i] = static_cast<std::int32_t>(i);
  detail::Footprint footprint;
  footprint.add("cu_seqlens", IndexView{cu.data(), IndexType::i32, n + 1});
  gpu_model::Recorder recorder("search", footprint);
  recorder.begin_thread(GridCoord{});
  gpu_model::t_recorder = &recorder;
  const RowSequence s = find_sequence(thd_positions(cu, 1), row);
  gpu_model::t_recorder = nullptr;
  recorder.finish();
  EXPECT_EQ(s.index, row);
  EXPECT_EQ(recorder.stats().errors, 0);
  return recorder.stats().index_round_trips;
}

// Steps of a search whose every step keeps at most ceil(n / kSearchProbes) of its n
// candidates: 0 for one candidate.
std::int64_t most_steps(std::int64_t candidates) {
  std::int64_t steps = 0;
  for (; candidates > 1; ++steps) candidates = (candidates + kSearchProbes - 1) / kSearchProbes;
  return steps;
}

// A step is one round trip, whatever the row and the number of sequences, and the sequence's
// start and end come from the last steps' probes, no round trip of their own: with steps of 8,
// at most 5 round trips for 4,501 entries where halving took 15 (log2(n) and cu[0] and
// cu[i + 1]); up to 8 entries take one step, and no sequence none.
TEST(FindSequence, AStepOfEntriesInFlightTogetherIsOneRoundTrip) {
  static_assert(kSearchProbes == 8, "the figures below are written for steps of 8 entries");
  EXPECT_EQ(most_steps(4501), 5);
  EXPECT_EQ(search_round_trips(0, 0), 0);
  EXPECT_EQ(search_round_trips(7, 3), 1);
  EXPECT_EQ(search_round_trips(7, 7), 1);
  for (const auto& [n, row] : {std::pair<std::int64_t, std::int64_t>{63, 0},
                               {63, 63},
                               {122, 77},
                               {4500, 0},
                               {4500, 4321},
                               {4500, 4500}}) {
    const std::int64_t trips = search_round_trips(n, row);
    EXPECT_LE(trips, most_steps(n + 1)) << n << " sequences, row " << row;
    EXPECT_GE(trips, 2) << n << " sequences, row " << row;
  }
}

}  // namespace
}  // namespace mlarope::kernels
