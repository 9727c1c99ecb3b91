// SPDX-License-Identifier: Apache-2.0
// Every backend on every Megatron case of data/megatron (float64 answers of Megatron-LM's
// unfused PyTorch path, data/README.md). The folder is $MLAROPE_CASES_DIR, else the one CMake
// was configured with; a folder without cases fails: the cases are part of the repository.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "backends/case_run.h"
#include "checks/compare.h"
#include "checks/tolerance.h"
#include "io/cases_dir.h"
#include "mlarope/backend.h"
#include "mlarope/op_schema.h"

namespace fs = std::filesystem;
using namespace mlarope;
using namespace mlarope::harness;

namespace {

std::vector<fs::path> case_dirs() {
  std::vector<fs::path> dirs;
  const std::string root = megatron_cases_dir();
  if (root.empty() || !fs::is_directory(root)) return dirs;
  for (const auto& entry : fs::directory_iterator(root))
    if (fs::exists(entry.path() / "case.json")) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

class MegatronCases : public testing::TestWithParam<std::string> {};

// The reference rounds the exact result once: at most half an ulp from Megatron's float64.
// An f32-computing backend must meet the tolerance model (docs/architecture.md).
TEST_P(MegatronCases, EveryOutputMatchesMegatron) {
  const std::vector<fs::path> dirs = case_dirs();
  ASSERT_FALSE(dirs.empty()) << "no Megatron cases in '" << megatron_cases_dir()
                             << "': the repository's are in data/megatron (MLAROPE_CASES_DIR "
                                "overrides the folder)";
  if (GetParam() == "cuda" && !cuda_device_available())
    GTEST_SKIP() << "no CUDA device here: the CUDA backend runs these cases where one is present";
  // NOTE: the CTest test megatron_cases_dir_from_environment reads this line.
  std::cout << "[ INFO     ] " << dirs.size() << " Megatron cases from " << megatron_cases_dir()
            << "\n";
  const Backend backend = find_backend(GetParam());
  const bool is_reference = backend.name == "reference";
  int outputs_checked = 0;
  for (const fs::path& dir : dirs) {
    SCOPED_TRACE(dir.string());
    const Case c = read_case(dir);
    const CaseOutputs outputs = run_case(c, backend);
    EXPECT_EQ(outputs.status, kStatusOk);
    std::map<std::string, npy::Array> expected;
    for (const std::string& name : schema_of(c.config.op).output_names()) {
      const fs::path file = dir / ("expected_" + name + ".npy");
      ASSERT_TRUE(fs::exists(file)) << file;
      expected[name] = npy::read(file);
      const npy::Array& got = outputs.arrays.at(name);
      const Comparison cmp = compare_ulps(got, c.config.dtype, expected[name]);
      ASSERT_TRUE(cmp.same_shape) << name;
      if (is_reference) {
        EXPECT_LE(cmp.max_ulps, 0.5) << name << ": " << cmp.summary(got.shape);
      }
      EXPECT_EQ(cmp.nan_mismatches, 0) << name;
      ++outputs_checked;
    }
    const ToleranceResult tolerance = check_tolerance(c, outputs.arrays, expected);
    EXPECT_TRUE(tolerance.ok()) << tolerance.violations << " violations, first "
                                << tolerance.first_violation;
  }
  EXPECT_GE(outputs_checked, static_cast<int>(dirs.size()));
}

INSTANTIATE_TEST_SUITE_P(Backends, MegatronCases,
                         testing::Values(std::string("reference"), std::string("host"),
                                         std::string("cuda")),
                         [](const auto& info) { return info.param; });

}  // namespace
