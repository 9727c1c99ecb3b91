// SPDX-License-Identifier: Apache-2.0
// Which shard of a long fuzz campaign this process runs: from flags, or from the job arrays
// people already run (SLURM, Kubernetes Indexed Jobs, GoogleTest-style CI farms).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace mlarope::harness {

struct Shard {
  std::int64_t index = 0, count = 1;
  std::string source = "none";  ///< "flags", "SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", ...
};

/// The shard, first match wins: --shard-index with --shard-count; SLURM_ARRAY_TASK_ID (minus
/// SLURM_ARRAY_TASK_MIN when set) of SLURM_ARRAY_TASK_COUNT; JOB_COMPLETION_INDEX of --shard-count
/// or MLAROPE_SHARD_COUNT; GTEST_SHARD_INDEX of GTEST_TOTAL_SHARDS (a --shard-count flag wins over
/// each count variable); else shard 0 of 1. `env` reads a variable (std::getenv by default). Throws
/// mlarope::Error naming the variable on bad values.
Shard resolve_shard(std::optional<std::int64_t> index_flag, std::optional<std::int64_t> count_flag,
                    const std::function<std::optional<std::string>(const char*)>& env = {});

/// "shard-0003" for shard 3 of 1000: the folder a shard writes into, sortable by index.
std::string shard_folder(const Shard& s);

}  // namespace mlarope::harness
