// SPDX-License-Identifier: Apache-2.0
#include "property_support.h"

#include <algorithm>

#include "backends/case_run.h"
#include "fuzz/broken_backends.h"
#include "fuzz/failure.h"
#include "mlarope/error.h"

namespace mlarope::props {
namespace fs = std::filesystem;

const harness::Backend& backend_under_test() {
  static const harness::Backend backend = [] {
    const char* env = std::getenv("MLAROPE_BACKEND");
    std::string name = env && *env ? env : "";
    if (name.empty()) {
      const auto names = harness::backend_names();
      name = std::find(names.begin(), names.end(), "host") != names.end() ? "host" : "reference";
    }
    return resolve_backend(name);
  }();
  return backend;
}

std::uint64_t property_seed(const std::string& test_id) {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (char ch : test_id) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001B3ull;
  return h;
}

rc::detail::TestParams property_params(const std::string& test_id, int cases) {
  rc::detail::TestParams p = rc::detail::configuration().testParams;
  const char* env = std::getenv("RC_PARAMS");
  const std::string given = env ? env : "";
  if (given.find("seed=") == std::string::npos) p.seed = property_seed(test_id);
  if (given.find("max_success=") == std::string::npos) {
    const char* scale = std::getenv("MLAROPE_PROPERTY_SCALE");
    p.maxSuccess = std::max(1, static_cast<int>(cases * (scale ? std::atof(scale) : 1.0)));
  }
  if (given.find("max_size=") == std::string::npos) p.maxSize = 100;
  return p;
}

namespace {

fs::path failure_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "property";
  std::replace(name.begin(), name.end(), '/', '.');
  return failure_root() / name;
}

std::string write_or_explain(const CaseSpec& spec, const harness::Case& c,
                             const harness::CheckOptions& options,
                             const harness::CheckReport& report, const std::string& note,
                             const std::string& backend) {
  const fs::path dir = failure_dir();
  try {
    return "case written to " + dir.string() +
           "; replay: " + write_failure(dir, spec, c, options, report, backend, note);
  } catch (const std::exception& e) {
    return "could not write " + dir.string() + ": " + e.what();
  }
}

}  // namespace

void require_checks_pass(const CaseSpec& spec, const harness::Case& c,
                         const harness::CheckOptions& options, const harness::CheckReport& report,
                         const harness::Backend& backend) {
  if (report.ok()) return;
  std::string message = describe(spec) + "\nbackend " + backend.name + "\n";
  for (const harness::CheckResult* r : report.failures())
    message += harness::format_result(*r) + "\n";
  message += write_or_explain(spec, c, options, report, "", backend.name);
  RC_FAIL(message);
}

void require_yarn_case_passes(const harness::YarnCase& c) {
  const harness::Backend& backend = backend_under_test();
  harness::CheckReport report;
  std::string message;
  try {
    report = harness::check_yarn(c, backend);
    if (report.ok()) return;
    for (const harness::CheckResult* r : report.failures())
      message += harness::format_result(*r) + "\n";
  } catch (const Error& e) {
    message = std::string("the generated case is invalid: ") + e.what() + "\n";
  }
  const fs::path dir = failure_dir();
  try {
    message += "case written to " + dir.string() +
               "; replay: " + write_yarn_failure(dir, c, report, backend.name, message);
  } catch (const std::exception& e) {
    message += "could not write " + dir.string() + ": " + e.what();
  }
  RC_FAIL(harness::describe(c) + "\nbackend " + backend.name + "\n" + message);
}

void require_case_passes(const CaseSpec& spec, const std::vector<harness::CheckKind>& checks) {
  require_case_passes(spec, checks, backend_under_test());
}

void require_case_passes(const CaseSpec& spec, const std::vector<harness::CheckKind>& checks,
                         const harness::Backend& backend) {
  const harness::Case c = materialize(spec);
  harness::CheckOptions options = check_options(spec);
  options.checks = checks;
  harness::CheckReport report;
  try {
    report = harness::run_checks(c, backend, options);
  } catch (const Error& e) {
    fail_with_case(spec, c, e.what());
  }
  require_checks_pass(spec, c, options, report, backend);
}

void fail_with_case(const CaseSpec& spec, const harness::Case& c, const std::string& message) {
  const std::string where =
      write_or_explain(spec, c, check_options(spec), {}, message, backend_under_test().name);
  RC_FAIL(describe(spec) + "\n" + message + "\n" + where);
}

}  // namespace mlarope::props
