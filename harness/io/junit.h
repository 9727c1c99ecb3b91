// SPDX-License-Identifier: Apache-2.0
// JUnit XML, the test report format CI systems read (GitHub, GitLab and Jenkins show it):
// <testsuites> of <testsuite>s of <testcase>s, each passing, failed, in error or skipped.
// What is written validates against the JUnit schema Jenkins publishes (junit-10.xsd).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mlarope::harness {

/// One test case and how it ended.
struct JunitCase {
  enum class Outcome { pass, failure, error, skipped };
  std::string classname;  ///< the group it belongs to ("mlarope.fuzz.host", ...)
  std::string name;
  double seconds = 0;
  Outcome outcome = Outcome::pass;
  std::string message;  ///< one line: what failed
  std::string text;     ///< the details: counts, the command that replays it
};

/// A suite of cases, with properties (backend, seed, machine, ...).
struct JunitSuite {
  std::string name;
  double seconds = 0;
  std::string timestamp;  ///< ISO 8601, or empty
  std::vector<std::pair<std::string, std::string>> properties;
  std::vector<JunitCase> cases;
};

/// The XML document of `suites`.
std::string junit_xml(const std::vector<JunitSuite>& suites);

/// Writes junit_xml(suites) to `path`; throws mlarope::Error when it cannot.
void write_junit(const std::string& path, const std::vector<JunitSuite>& suites);

/// The time now as ISO 8601 UTC ("2026-12-05T01:02:03Z").
std::string iso8601_now();

}  // namespace mlarope::harness
