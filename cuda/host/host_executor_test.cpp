// SPDX-License-Identifier: Apache-2.0
// The host grid executor: every (block, thread) runs exactly once, orders follow the seed,
// results are the same with one worker and many.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <set>
#include <vector>

#include "host/host_executor.h"

namespace mlarope::host {
namespace {

struct Counts {
  std::vector<std::atomic<int>>* hits;
  int threads;
};

void count_body(const Counts& c, const GridCoord& g) {
  (*c.hits)[static_cast<std::size_t>(g.block * c.threads + g.thread)].fetch_add(1);
}

TEST(IndexPermutation, IsABijectionForManySizes) {
  for (std::uint64_t size : {1ull, 2ull, 3ull, 5ull, 16ull, 17ull, 100ull, 1000ull, 65537ull}) {
    const IndexPermutation p(size, size * 31 + 7);
    std::vector<bool> seen(size, false);
    for (std::uint64_t i = 0; i < size; ++i) {
      const std::uint64_t x = p(i);
      ASSERT_LT(x, size);
      ASSERT_FALSE(seen[x]) << "size " << size << " index " << i;
      seen[x] = true;
    }
  }
}

TEST(IndexPermutation, DifferentKeysGiveDifferentOrders) {
  const IndexPermutation a(1000, 1), b(1000, 2);
  int same = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
  EXPECT_LT(same, 50);
}

TEST(HostExecutor, RunsEveryBlockAndThreadOnce) {
  for (int workers : {1, 2, 5}) {
    const GridShape grid{337, 13};  // enough calls for the workers to start
    std::vector<std::atomic<int>> hits(std::size_t{337} * 13);
    const Counts counts{&hits, 13};
    launch(HostExecutor(std::uint64_t{17} * static_cast<std::uint64_t>(workers), workers), grid,
           &count_body, counts);
    for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

struct Order {
  std::vector<std::int64_t>* sequence;
};

void record_body(const Order& o, const GridCoord& g) {
  o.sequence->push_back(g.block * 1000 + g.thread);
}

std::vector<std::int64_t> order_of(std::uint64_t seed) {
  std::vector<std::int64_t> sequence;
  launch(HostExecutor(seed, 1), GridShape{20, 10}, &record_body, Order{&sequence});
  return sequence;
}

TEST(HostExecutor, OrderFollowsTheSeed) {
  EXPECT_EQ(order_of(3), order_of(3));
  EXPECT_NE(order_of(3), order_of(4));
  const std::vector<std::int64_t> order = order_of(5);
  EXPECT_EQ(std::set<std::int64_t>(order.begin(), order.end()).size(), 200u);
}

TEST(HostExecutor, LargeGridsShuffleTilesAndRotateThreads) {
  std::vector<std::int64_t> a, b;
  launch(HostExecutor(1, 1), GridShape{5000, 7}, &record_body, Order{&a});
  launch(HostExecutor(2, 1), GridShape{5000, 7}, &record_body, Order{&b});
  EXPECT_NE(a, b);
  EXPECT_EQ(std::set<std::int64_t>(a.begin(), a.end()).size(), 5000u * 7);
  std::vector<std::atomic<int>> hits(std::size_t{5000} * 7);
  launch(HostExecutor(3, 3), GridShape{5000, 7}, &count_body, Counts{&hits, 7});
  for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(HostExecutor, RunThreadZeroRunsEachBlocksFirstThreadOnce) {
  for (int workers : {1, 2, 5}) {
    const GridShape grid{3000, 13};  // a large grid: tiles of blocks over the workers
    std::vector<std::atomic<int>> hits(std::size_t{3000} * 13);
    launch_thread_zero(HostExecutor(7, workers), grid, &count_body, Counts{&hits, 13});
    for (std::size_t i = 0; i < hits.size(); ++i)
      ASSERT_EQ(hits[i].load(), i % 13 == 0 ? 1 : 0) << "block " << i / 13 << " thread " << i % 13;
  }
}

void record_thread_zero(const Order& o, const GridCoord& g) {
  o.sequence->push_back(g.block * 1000 + g.num_threads);
}

TEST(HostExecutor, RunThreadZeroTakesRunsBlockOrderAndGrid) {
  std::vector<std::int64_t> all, first;
  launch(HostExecutor(9, 1), GridShape{20, 10}, &record_body, Order{&all});
  launch_thread_zero(HostExecutor(9, 1), GridShape{20, 10}, &record_thread_zero, Order{&first});
  std::vector<std::int64_t> blocks_of_all;  // each block's first appearance in run's order
  for (std::int64_t x : all)
    if (blocks_of_all.empty() || blocks_of_all.back() != x / 1000)
      blocks_of_all.push_back(x / 1000);
  ASSERT_EQ(first.size(), 20u);
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i] / 1000, blocks_of_all[i]);
    EXPECT_EQ(first[i] % 1000, 10) << "num_threads as the grid's";
  }
}

TEST(HostExecutor, EmptyGridRunsNothing) {
  std::vector<std::int64_t> sequence;
  launch(HostExecutor(1, 2), GridShape{0, 4}, &record_body, Order{&sequence});
  launch(HostExecutor(1, 2), GridShape{4, 0}, &record_body, Order{&sequence});
  launch_thread_zero(HostExecutor(1, 2), GridShape{0, 4}, &record_body, Order{&sequence});
  launch_thread_zero(HostExecutor(1, 2), GridShape{4, 0}, &record_body, Order{&sequence});
  EXPECT_TRUE(sequence.empty());
}

TEST(HostExecutor, DefaultUsesHardwareThreads) { EXPECT_GE(HostExecutor().threads(), 1); }

}  // namespace
}  // namespace mlarope::host
