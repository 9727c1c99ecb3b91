// SPDX-License-Identifier: Apache-2.0
// The checks can fail: every deliberately broken backend of broken_backends.h
// is caught, within the default budget, by the check it names (the fuzzer's way: random specs
// through run_checks), and by the RapidCheck property (which shrinks it and writes the case).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "checks/asan_guards.h"
#include "fuzz/broken_backends.h"
#include "fuzz/failure.h"
#include "mlarope/error.h"
#include "property_support.h"

namespace fs = std::filesystem;
using namespace mlarope;
using namespace mlarope::props;
using harness::CheckKind;

namespace {

// The budget of a backend-vs-reference property of the suite (its case count).
constexpr int kBudget = kCasesPerProperty;

std::uint64_t seed_of(int i) { return 0xB40CE7ull * 1000003ull + static_cast<std::uint64_t>(i); }

std::string names(const std::vector<CheckKind>& kinds) {
  std::string s;
  for (CheckKind k : kinds) s += (s.empty() ? "" : ", ") + std::string(to_string(k));
  return s;
}

class BrokenBackends : public testing::TestWithParam<BrokenBackend> {};

// Random specs through every check until one of the named checks fails.
// The checks' own findings are under test: in the sanitizer build the guards' poisoning would
// stop the backends that write past a tensor before the bounds check sees them.
TEST_P(BrokenBackends, TheChecksCatchIt) {
  const harness::asan_guards::Suspended unpoisoned;
  const BrokenBackend& broken = GetParam();
  const harness::Backend backend = broken.make();
  for (int i = 0; i < kBudget; ++i) {
    const CaseSpec spec = random_spec(seed_of(i), kDefaultSize, broken.cases);
    harness::CheckReport report;
    try {
      report = harness::run_checks(materialize(spec), backend, check_options(spec));
    } catch (const Error&) {
      FAIL() << "generated an invalid case: " << describe(spec);
    }
    for (CheckKind k : broken.caught_by)
      if (!report.at(k).ok()) {
        RecordProperty("caught_after_cases", i + 1);
        std::cout << "  " << broken.name << ": caught by " << to_string(k) << " after " << i + 1
                  << " cases: " << report.at(k).message << "\n";
        return;
      }
  }
  FAIL() << broken.name << " passed " << kBudget << " cases; expected " << names(broken.caught_by)
         << " to fail";
}

// A fresh directory for failure cases, removed afterwards.
class TempFailureDir {
 public:
  TempFailureDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("mlarope_broken_" + std::to_string(rd()));
    setenv("MLAROPE_FAILURE_DIR", path_.c_str(), 1);
  }
  ~TempFailureDir() {
    unsetenv("MLAROPE_FAILURE_DIR");
    fs::remove_all(path_);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct Quiet : rc::detail::TestListener {
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

// The property of the suite fails on it, shrinks, and leaves a replayable case directory.
TEST_P(BrokenBackends, ThePropertyCatchesItAndWritesTheCase) {
  const harness::asan_guards::Suspended unpoisoned;
  const BrokenBackend& broken = GetParam();
  const harness::Backend backend = broken.make();
  const TempFailureDir dir;
  const GenOptions cases = broken.cases;
  const std::vector<CheckKind> checks = broken.caught_by;
  const auto property = [&] { require_case_passes(*case_spec(cases), checks, backend); };
  rc::detail::TestMetadata metadata;
  metadata.id = broken.name;
  Quiet quiet;
  const auto result =
      rc::detail::checkTestable(property, metadata, property_params(broken.name, kBudget), quiet);
  ASSERT_TRUE(result.template is<rc::detail::FailureResult>()) << broken.name << " was not caught";
  const std::string message = result.template get<rc::detail::FailureResult>().description;
  EXPECT_NE(message.find("replay: "), std::string::npos) << message;
  std::vector<fs::path> written;
  for (const auto& entry : fs::directory_iterator(dir.path())) written.push_back(entry.path());
  ASSERT_EQ(written.size(), 1u);
  for (const char* file : {"case.json", "spec.json", "checks.json", "report.txt"})
    EXPECT_TRUE(fs::exists(written[0] / file)) << file;
  EXPECT_NO_THROW(harness::read_case(written[0]));
}

INSTANTIATE_TEST_SUITE_P(Wrappers, BrokenBackends, testing::ValuesIn(broken_backends()),
                         [](const testing::TestParamInfo<BrokenBackend>& info) {
                           return info.param.name;
                         });

}  // namespace
