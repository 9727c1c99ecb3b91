// SPDX-License-Identifier: Apache-2.0
// Sharding a fuzz campaign: which shard a process runs (flags, then SLURM, Kubernetes Indexed
// Jobs, GoogleTest-style farms), and that shards split one stream of cases without overlap.
#include <gtest/gtest.h>

#include <map>

#include "fuzz/fuzz.h"
#include "fuzz/shard.h"
#include "mlarope/error.h"

namespace mlarope::harness {
namespace {

using Env = std::map<std::string, std::string>;

Shard resolve(const Env& env, std::optional<std::int64_t> index = {},
              std::optional<std::int64_t> count = {}) {
  return resolve_shard(index, count, [env](const char* name) -> std::optional<std::string> {
    const auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  });
}

TEST(Shard, EachSourceInItsOrder) {
  EXPECT_EQ(resolve({}).count, 1);
  EXPECT_EQ(resolve({}).source, "none");
  const Shard slurm = resolve({{"SLURM_ARRAY_TASK_ID", "7"},
                               {"SLURM_ARRAY_TASK_MIN", "4"},
                               {"SLURM_ARRAY_TASK_COUNT", "5"},
                               {"GTEST_SHARD_INDEX", "0"},
                               {"GTEST_TOTAL_SHARDS", "2"}});
  EXPECT_EQ(slurm.index, 3);  // --array=4-8: task 7 is the fourth
  EXPECT_EQ(slurm.count, 5);
  EXPECT_EQ(slurm.source, "SLURM_ARRAY_TASK_ID");
  const Shard k8s = resolve({{"JOB_COMPLETION_INDEX", "2"}, {"MLAROPE_SHARD_COUNT", "3"}});
  EXPECT_EQ(k8s.index, 2);
  EXPECT_EQ(k8s.count, 3);
  EXPECT_EQ(resolve({{"JOB_COMPLETION_INDEX", "2"}}, {}, 10).count, 10);  // the flag's count
  const Shard gtest = resolve({{"GTEST_SHARD_INDEX", "1"}, {"GTEST_TOTAL_SHARDS", "4"}});
  EXPECT_EQ(gtest.index, 1);
  EXPECT_EQ(gtest.source, "GTEST_SHARD_INDEX");
  const Shard flags =
      resolve({{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "2"}}, 5, 6);
  EXPECT_EQ(flags.index, 5);  // explicit flags win
  EXPECT_EQ(flags.source, "flags");
}

TEST(Shard, BadValuesAreNamedErrors) {
  auto message = [](const Env& env, std::optional<std::int64_t> index = {},
                    std::optional<std::int64_t> count = {}) {
    try {
      resolve(env, index, count);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"SLURM_ARRAY_TASK_ID", "x"}, {"SLURM_ARRAY_TASK_COUNT", "2"}})
                .find("SLURM_ARRAY_TASK_ID='x'"),
            std::string::npos);
  EXPECT_NE(
      message({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_COUNT", "2"}}).find("outside 0..1"),
      std::string::npos);
  EXPECT_NE(message({{"JOB_COMPLETION_INDEX", "0"}}).find("MLAROPE_SHARD_COUNT"),
            std::string::npos);
  EXPECT_NE(message({{"GTEST_SHARD_INDEX", "0"}}).find("GTEST_TOTAL_SHARDS"), std::string::npos);
  EXPECT_NE(message({}, 1).find("--shard-count"), std::string::npos);
  EXPECT_NE(message({}, {}, 3).find("--shard-index"), std::string::npos);
}

TEST(Shard, FoldersSortByIndex) {
  EXPECT_EQ(shard_folder({3, 4, ""}), "shard-0003");
  EXPECT_EQ(shard_folder({42, 100000, ""}), "shard-00042");
}

// Four shards of 40 cases run exactly the 160 cases of the unsharded run: the same counts in
// every dimension, and no case twice.
TEST(Shard, ShardsSplitOneStreamWithoutOverlap) {
  const auto dir = std::filesystem::temp_directory_path() / "mlarope_shard_test";
  FuzzOptions whole;
  whole.cases = 160;
  whole.seed = 77;
  whole.out = dir / "whole";
  std::ostringstream quiet;
  const FuzzStats all = run_fuzz(whole, quiet, false);
  std::map<std::string, std::map<std::string, std::int64_t>> merged;
  std::int64_t cases = 0;
  for (std::int64_t i = 0; i < 4; ++i) {
    FuzzOptions part = whole;
    part.cases = 40;
    part.shard = {i, 4, "test"};
    part.out = dir / ("part" + std::to_string(i));
    const FuzzStats s = run_fuzz(part, quiet, false);
    cases += s.cases;
    for (const auto& [dim, values] : s.counts)
      for (const auto& [value, n] : values) merged[dim][value] += n;
  }
  EXPECT_EQ(cases, 160);
  EXPECT_EQ(merged, all.counts);
  // fuzz.json reads back into the same stats (how the report merges shards' files).
  const nlohmann::json written = to_json(all, whole);
  EXPECT_EQ(to_json(stats_from_json(written), whole), written);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mlarope::harness
