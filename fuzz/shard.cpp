// SPDX-License-Identifier: Apache-2.0
#include "fuzz/shard.h"

#include <algorithm>
#include <cstdlib>

#include "mlarope/error.h"

namespace mlarope::harness {
namespace {

std::int64_t parse_count_or_index(const std::string& value, const std::string& name) {
  std::size_t used = 0;
  long long n = -1;
  try {
    n = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || n < 0)
    throw Error(name + "='" + value + "': expected a whole number >= 0");
  return n;
}

Shard checked(Shard s) {
  if (s.count < 1)
    throw Error(s.source + ": shard count " + std::to_string(s.count) + ", expected >= 1");
  if (s.index < 0 || s.index >= s.count)
    throw Error(s.source + ": shard index " + std::to_string(s.index) + " outside 0.." +
                std::to_string(s.count - 1));
  return s;
}

}  // namespace

Shard resolve_shard(std::optional<std::int64_t> index_flag, std::optional<std::int64_t> count_flag,
                    const std::function<std::optional<std::string>(const char*)>& env_in) {
  const auto env = env_in ? env_in : [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  auto number = [&](const char* name) -> std::optional<std::int64_t> {
    const auto v = env(name);
    return v ? std::optional<std::int64_t>(parse_count_or_index(*v, name)) : std::nullopt;
  };
  if (index_flag && count_flag) return checked({*index_flag, *count_flag, "flags"});
  if (const auto id = number("SLURM_ARRAY_TASK_ID"); id && !index_flag) {
    const auto count = number("SLURM_ARRAY_TASK_COUNT");
    if (!count && !count_flag)
      throw Error("SLURM_ARRAY_TASK_ID is set but not SLURM_ARRAY_TASK_COUNT (or --shard-count)");
    const std::int64_t first = number("SLURM_ARRAY_TASK_MIN").value_or(0);
    return checked({*id - first, count_flag.value_or(count.value_or(1)), "SLURM_ARRAY_TASK_ID"});
  }
  if (const auto id = number("JOB_COMPLETION_INDEX"); id && !index_flag) {
    const auto count = count_flag ? count_flag : number("MLAROPE_SHARD_COUNT");
    if (!count)
      throw Error("JOB_COMPLETION_INDEX is set: give the job's completions as --shard-count or "
                  "MLAROPE_SHARD_COUNT");
    return checked({*id, *count, "JOB_COMPLETION_INDEX"});
  }
  if (const auto id = number("GTEST_SHARD_INDEX"); id && !index_flag) {
    const auto count = count_flag ? count_flag : number("GTEST_TOTAL_SHARDS");
    if (!count)
      throw Error("GTEST_SHARD_INDEX is set but not GTEST_TOTAL_SHARDS (or --shard-count)");
    return checked({*id, *count, "GTEST_SHARD_INDEX"});
  }
  if (index_flag)
    throw Error("--shard-index needs --shard-count (or a job array's count in the environment)");
  if (count_flag)
    throw Error("--shard-count needs --shard-index (or a job array's index in the environment)");
  return {};
}

std::string shard_folder(const Shard& s) {
  const std::size_t width = std::max<std::size_t>(4, std::to_string(s.count - 1).size());
  std::string index = std::to_string(s.index);
  return "shard-" + std::string(width - std::min(width, index.size()), '0') + index;
}

}  // namespace mlarope::harness
