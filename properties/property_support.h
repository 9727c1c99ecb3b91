// SPDX-License-Identifier: Apache-2.0
// What the property tests share: the backend under test, a GoogleTest wrapper that runs a
// RapidCheck property with a fixed case count and seed (RC_PARAMS overrides them), and the
// assertion that writes a failing case to a directory and names the command that replays it.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>

#include "checks/checks.h"
#include "fuzz/case_spec.h"
#include "fuzz/generators.h"

namespace mlarope::props {

/// Cases of each backend-vs-reference property (the default budget); targeted properties and
/// identities run half as many. MLAROPE_PROPERTY_SCALE multiplies every count.
inline constexpr int kCasesPerProperty = 1000;
/// Cases of a targeted property or an identity.
inline constexpr int kCasesPerIdentity = kCasesPerProperty / 2;

/// The backend under test: $MLAROPE_BACKEND (a backend name, or "broken:NAME" for one of
/// broken_backends.h), else "host" when this build has it, else "reference".
const harness::Backend& backend_under_test();

/// The seed of a property: fixed per test name, so CI is reproducible.
std::uint64_t property_seed(const std::string& test_id);

/// Test parameters: `cases` cases, sizes up to 100, the property's seed; RC_PARAMS (seed=...,
/// max_success=..., reproduce=...) overrides what it names.
rc::detail::TestParams property_params(const std::string& test_id, int cases);

/// Run `testable` as the body of the current GoogleTest test.
template <class Testable>
void check_property(int cases, Testable&& testable) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  const rc::detail::TestParams params = property_params(metadata.id, cases);
  std::cout << "property " << metadata.id << ": " << params.maxSuccess << " cases, seed "
            << params.seed << ", backend " << backend_under_test().name << std::endl;
  const auto result = rc::detail::checkTestable(std::forward<Testable>(testable), metadata, params);
  std::ostringstream s;
  rc::detail::printResultMessage(result, s);
  if (!result.template is<rc::detail::SuccessResult>()) FAIL() << s.str();
  if (!result.template get<rc::detail::SuccessResult>().distribution.empty())
    std::cout << s.str() << std::endl;
}

/// Inside a property: when `report` has a failure, write the case to
/// failure_root()/<suite>.<test> and fail with the failures and the replay command.
/// Inside a property: run every yarn_tables check of `c` on the backend under test; on a
/// failure write the case to failure_root()/<suite>.<test> and fail with the replay command.
void require_yarn_case_passes(const harness::YarnCase& c);

void require_checks_pass(const CaseSpec& spec, const harness::Case& c,
                         const harness::CheckOptions& options, const harness::CheckReport& report,
                         const harness::Backend& backend);

/// Inside a property: materialize `spec` and require that every check of `checks` passes on
/// `backend` (the backend under test by default).
void require_case_passes(const CaseSpec& spec,
                         const std::vector<harness::CheckKind>& checks = harness::all_checks());
void require_case_passes(const CaseSpec& spec, const std::vector<harness::CheckKind>& checks,
                         const harness::Backend& backend);

/// Inside a property: fail with `message` after writing `c` as the failure directory.
[[noreturn]] void fail_with_case(const CaseSpec& spec, const harness::Case& c,
                                 const std::string& message);

}  // namespace mlarope::props

/// A RapidCheck property run as GoogleTest Suite.Name with `Cases` cases and a fixed seed.
#define MLAROPE_PROPERTY(Suite, Name, Cases)                                     \
  static void mlarope_property_##Suite##_##Name();                               \
  TEST(Suite, Name) {                                                            \
    ::mlarope::props::check_property(Cases, &mlarope_property_##Suite##_##Name); \
  }                                                                              \
  static void mlarope_property_##Suite##_##Name()
