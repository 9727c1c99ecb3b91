// SPDX-License-Identifier: Apache-2.0
// The fuzzer behind `mlarope fuzz`: random cases (fuzz/generators.h) through every check
// until a time or case budget ends; counts, ulp histograms and failure directories in
// DIR/fuzz.json and DIR/failures/, and a JUnit report (a test case per check) in DIR/junit.xml.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/case_run.h"
#include "backends/worker_process.h"
#include "checks/checks.h"
#include "fuzz/shard.h"
#include "io/case_file.h"
#include "io/junit.h"

namespace mlarope::harness {

/// What `mlarope fuzz` was asked to do.
struct FuzzOptions {
  double seconds = 0;      ///< stop after this many seconds (0: no time limit)
  std::int64_t cases = 0;  ///< stop after this many cases (0: no count limit); both 0: 60 s
  std::uint64_t seed = 1;  ///< case i is drawn from a seed derived from (seed, i)
  std::string backend = "reference";
  std::vector<Op> ops;  ///< empty: every op
  /// Draw yarn_tables cases too, as one op among the others, when the backend has yarn_tables
  /// (a plugin or Python backend without it is not offered them).
  bool yarn = true;
  /// Draw only yarn_tables cases (`--ops yarn_tables`), whatever the backend has.
  bool yarn_only = false;
  std::vector<DType> dtypes;        ///< activation dtypes drawn; empty: all three
  std::vector<DType> table_dtypes;  ///< table dtypes drawn; empty: all three
  bool in_place = true;             ///< rope ops may be drawn in place
  std::string layouts;       ///< "IN/OUT/TABLE" pair layouts drawn, each half, interleaved or *
  bool position_ids = true;  ///< THD cases may have position ids
  bool seq_offsets = true;   ///< cases may have sequence offsets
  bool packed = true;        ///< THD cases may use the packed frequency mode
  std::vector<TokenLayout> tokens;     ///< token layouts drawn; empty: SBHD and THD
  std::vector<std::int64_t> cp_sizes;  ///< CP sizes drawn; empty: 1, 2, 3, 4, 8
  /// Steer the draws to what the backend's `supports` accepts (fuzz/steering.h), where it has
  /// one (plugin and Python backends).
  bool steer = true;
  bool power_of_two_dims = false;  ///< emb_dim / 2, k_dim, v_dim powers of two (Triton)
  /// Shard `shard.index` of `shard.count` runs the cases index, index + count, ... of the run
  /// seed's one stream: shards never draw the same case; `cases` is per shard.
  Shard shard;
  std::filesystem::path out = "fuzz-out";
  int size = 100;                      ///< generator size (properties::kDefaultSize)
  int jobs = 1;                        ///< worker threads
  std::int64_t max_failure_dirs = 20;  ///< failure directories written at most
  /// Optional: makes each worker's backend instead of resolving `backend` by name (the Python
  /// package's callable backends); `backend` is then only the name shown.
  std::function<Backend()> make_backend;
  /// Variants of the one backend (a Triton kernel's autotune configs): each drawn case runs
  /// once per variant, selected through Backend::select_variant, and each run is a case,
  /// counted under "variant" (and "variant_failing") and named in its failure. Empty: one run.
  std::vector<std::string> variants;
  /// What fuzz.json records of the backend's environment (library versions); null: nothing.
  nlohmann::json environment;
  /// Where the backend runs: in worker processes (a crash or a hang is a failing case and the
  /// campaign goes on) or in this one (faster: no boundary). `automatic` isolates plugin and
  /// Python backends (make_backend) and runs ours (reference, host, cuda, broken:) in process.
  enum class Isolation { automatic, process, in_process };
  Isolation isolation = Isolation::automatic;
  CallLimit call_limit;  ///< how long an isolated backend's call may take
  ForkHooks fork_hooks;  ///< around each worker's fork (the Python package's interpreter)
  /// Optional: a signal number a handler stores to end the run early (SIGTERM, SIGINT, SIGHUP):
  /// the cases under way finish (an isolated one gets a few seconds), fuzz.json says which
  /// signal, and the same command run again resumes the rest (run_fuzz).
  const std::atomic<int>* interrupt = nullptr;
  /// Start afresh even when `out` holds an interrupted run of the same arguments.
  bool fresh = false;
};

/// Whether `options` run the backend in worker processes.
bool isolated(const FuzzOptions& options);

/// One failing case.
struct FuzzFailure {
  std::int64_t index = 0;
  std::uint64_t seed = 0;   ///< the seed random_spec drew it from
  std::string description;  ///< props::describe of its spec
  std::string dir;  ///< its case directory, relative to the output directory ("" if not written)
  std::vector<std::pair<std::string, std::string>> checks;  ///< (check, message) that failed
  std::string variant;  ///< the variant that failed ("" without variants)
};

/// What the host backend's GPU model measured of one kernel over a run, and what the timing
/// model predicts of its launches on an H200.
struct ModelTally {
  std::int64_t launches = 0;
  std::int64_t useful_bytes = 0, warp_sector_bytes = 0, dram_bytes = 0;
  double round_trips = 0;        ///< per block, summed over the launches
  double predicted_seconds = 0;  ///< on an H200, summed over the launches
  /// Count one launch (and predict its time where a CUDA kernel runs it).
  void add(const ModelLaunchStats& s);
  void merge(const ModelTally& o) {
    launches += o.launches;
    useful_bytes += o.useful_bytes;
    warp_sector_bytes += o.warp_sector_bytes;
    dram_bytes += o.dram_bytes;
    round_trips += o.round_trips;
    predicted_seconds += o.predicted_seconds;
  }
  /// Distinct bytes asked for / sector bytes fetched, over every warp access of the kernel.
  double sector_efficiency() const {
    return warp_sector_bytes > 0
               ? static_cast<double>(useful_bytes) / static_cast<double>(warp_sector_bytes)
               : 1.0;
  }
};

/// What a fuzz run saw.
struct FuzzStats {
  std::int64_t cases = 0;
  std::int64_t failing_cases = 0;
  double seconds = 0;
  std::map<std::string, std::map<std::string, std::int64_t>>
      counts;                                                 ///< dimension -> value -> cases
  std::map<std::string, std::array<std::int64_t, 3>> checks;  ///< check -> pass, fail, skip
  std::map<std::string, UlpHistogram> ulps;                   ///< dtype -> value errors
  /// "op/dtype" -> each case's worst error as a fraction of its tolerance (value check).
  std::map<std::string, FractionHistogram> fractions;
  std::map<std::string, ModelTally> model;  ///< kernel -> the GPU model's tally (backend host)
  /// Flag combination (op, layout, dtype, layout triple, inverse, in place, CP) -> cases the
  /// backend ran, cases it declined (Unsupported).
  std::map<std::string, std::array<std::int64_t, 2>> combinations;
  std::map<std::string, std::int64_t> unsupported;  ///< the backend's reason -> declined cases
  std::vector<FuzzFailure> failures;
  /// The signal that ended the run early ("SIGTERM"), "" when it ran to its budget.
  std::string interrupted;
  /// Where an interrupted run resumes: the shard's cases below `next` ran, but `pending`.
  std::int64_t next = 0;
  std::vector<std::int64_t> pending;
  int resumed = 0;  ///< times the run was resumed after an interruption
  /// What steering learned (fuzz/steering.h), as fuzz.json's "steering" (JSON text); "" when
  /// it was not asked for.
  std::string steering;

  /// Add the counts of another worker.
  void merge(const FuzzStats& other);
  /// Cases per second.
  double rate() const { return seconds > 0 ? static_cast<double>(cases) / seconds : 0.0; }
};

/// The fuzz.json document of a run.
nlohmann::json to_json(const FuzzStats& stats, const FuzzOptions& options);
/// A fuzz.json read back (what to_json wrote), so that shards' files merge with
/// FuzzStats::merge. Throws mlarope::Error on a document of another shape.
FuzzStats stats_from_json(const nlohmann::json& json);
/// The short summary printed at the end.
std::string summary(const FuzzStats& stats, const FuzzOptions& options);
/// The run as a JUnit suite: a test case per check, failed when any case failed it, with
/// each failing case's description, message and the command that replays it (at most 20 a
/// check; the count says how many failed). Written as out/junit.xml beside fuzz.json.
JunitSuite junit_suite(const FuzzStats& stats, const FuzzOptions& options);

/// The seed case `index` of a run with `seed` is drawn from.
std::uint64_t case_seed(std::uint64_t seed, std::int64_t index);

/// What fuzz.json keeps of the options, to tell whether a second run has the same arguments.
nlohmann::json run_arguments(const FuzzOptions& options);

/// Run the fuzzer, showing progress on `progress` (one updating line when `tty`, else a line
/// every few seconds); writes out/fuzz.json, out/junit.xml and out/failures/. When `out` holds a
/// run of the same arguments that a signal interrupted, resumes it (says so on `progress`);
/// one of other arguments is an error unless `fresh`. Throws mlarope::Error on bad options or an
/// unusable output directory.
FuzzStats run_fuzz(const FuzzOptions& options, std::ostream& progress, bool tty);

}  // namespace mlarope::harness
