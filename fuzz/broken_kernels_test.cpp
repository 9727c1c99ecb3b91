// SPDX-License-Identifier: Apache-2.0
// The checks catch broken kernels: copies of the real kernel sources with the
// edits of cuda/test_support/kernel_faults.txt (mlarope_host_faulty), one fault selected, through
// the fuzzer's path (random specs through run_checks) within the default budget; and the same
// library with no fault passes the very cases that caught each fault, so the test can fail both
// ways.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "fuzz/broken_kernels.h"
#include "mlarope/error.h"
#include "property_support.h"

using namespace mlarope;
using namespace mlarope::props;
using fault_injection::KernelFault;
using harness::CheckKind;

namespace {

// The budget of a backend-vs-reference property of the suite (its case count).
constexpr int kBudget = kCasesPerProperty;

std::uint64_t seed_of(int i) { return 0xFA017ull * 1000003ull + static_cast<std::uint64_t>(i); }

harness::CheckReport checked(const CaseSpec& spec, const harness::Backend& backend) {
  try {
    return harness::run_checks(materialize(spec), backend, check_options(spec));
  } catch (const Error& e) {
    ADD_FAILURE() << "generated an invalid case: " << describe(spec) << ": " << e.what();
    return {};
  }
}

std::string failures(const harness::CheckReport& report) {
  std::string s;
  for (const harness::CheckResult* r : report.failures()) s += harness::format_result(*r) + "\n";
  return s;
}

class BrokenKernels : public testing::TestWithParam<BrokenBackend> {};

// Random specs until a named check fails on the broken kernels; then the unbroken build of the
// same library passes every check on each of those specs.
TEST_P(BrokenKernels, TheChecksCatchItAndTheUnbrokenKernelsPass) {
  const BrokenBackend& broken = GetParam();
  const harness::Backend backend = broken.make();
  const harness::Backend unbroken = faulty_kernel_backend(KernelFault::none);
  int caught_after = 0;
  for (int i = 0; i < kBudget && caught_after == 0; ++i) {
    const CaseSpec spec = random_spec(seed_of(i), kDefaultSize, broken.cases);
    const harness::CheckReport report = checked(spec, backend);
    if (report.results.empty()) return;  // invalid case, already reported
    for (CheckKind k : broken.caught_by)
      if (!report.at(k).ok()) {
        caught_after = i + 1;
        RecordProperty("caught_after_cases", caught_after);
        std::cout << "  " << broken.name << ": caught by " << to_string(k) << " after "
                  << caught_after << " cases (" << describe(spec) << "): " << report.at(k).message
                  << "\n";
        break;
      }
  }
  ASSERT_GT(caught_after, 0) << broken.name << " passed " << kBudget << " cases";
  for (int i = 0; i < caught_after; ++i) {
    const CaseSpec spec = random_spec(seed_of(i), kDefaultSize, broken.cases);
    const harness::CheckReport report = checked(spec, unbroken);
    ASSERT_TRUE(report.ok()) << "the unbroken kernels fail case " << i << ": " << describe(spec)
                             << "\n"
                             << failures(report);
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, BrokenKernels, testing::ValuesIn(broken_kernel_variants()),
                         [](const testing::TestParamInfo<BrokenBackend>& info) {
                           return info.param.name;
                         });

// Every variant is registered and resolves by its broken-backend name.
TEST(BrokenKernelRegistry, EveryVariantResolvesByName) {
  for (const BrokenBackend& b : broken_kernel_variants())
    EXPECT_EQ(resolve_backend("broken:" + b.name).name, "broken:" + b.name);
}

// The library with no fault, and with the `slow` fault (a correct result, only slower), passes
// every check on a spread of cases of every op.
TEST(BrokenKernelRegistry, TheUnbrokenAndTheSlowKernelsPassEveryCheck) {
  for (KernelFault fault : {KernelFault::none, KernelFault::slow}) {
    const harness::Backend backend = faulty_kernel_backend(fault);
    for (int i = 0; i < 100; ++i) {
      const CaseSpec spec = random_spec(seed_of(10000 + i), kDefaultSize);
      const harness::CheckReport report = checked(spec, backend);
      ASSERT_TRUE(report.ok()) << backend.name << " fails case " << i << ": " << describe(spec)
                               << "\n"
                               << failures(report);
    }
  }
}

}  // namespace
