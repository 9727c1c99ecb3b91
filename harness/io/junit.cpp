// SPDX-License-Identifier: Apache-2.0
#include "io/junit.h"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "mlarope/error.h"

namespace mlarope::harness {
namespace {

// Text as XML character data or an attribute value: the five markup characters escaped, and
// the control characters XML 1.0 forbids (all below 0x20 but tab, newline and return)
// replaced by U+FFFD, so that no message can make the document unreadable.
std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\t' && ch != '\n' && ch != '\r')
          out += "\xEF\xBF\xBD";
        else out += ch;
    }
  }
  return out;
}

// Seconds with three decimals and no exponent: the form the schema's time type accepts.
std::string seconds_text(double seconds) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f", seconds > 0 ? seconds : 0.0);
  return buf;
}

const char* element_of(JunitCase::Outcome outcome) {
  switch (outcome) {
    case JunitCase::Outcome::failure: return "failure";
    case JunitCase::Outcome::error: return "error";
    case JunitCase::Outcome::skipped: return "skipped";
    case JunitCase::Outcome::pass: break;
  }
  return nullptr;
}

struct Totals {
  int tests = 0, failures = 0, errors = 0, skipped = 0;
  double seconds = 0;
  void add(const JunitCase& c) {
    ++tests;
    failures += c.outcome == JunitCase::Outcome::failure;
    errors += c.outcome == JunitCase::Outcome::error;
    skipped += c.outcome == JunitCase::Outcome::skipped;
  }
};

void write_case(std::ostringstream& x, const JunitCase& c) {
  x << "    <testcase classname=\"" << escape(c.classname) << "\" name=\"" << escape(c.name)
    << "\" time=\"" << seconds_text(c.seconds) << "\"";
  const char* element = element_of(c.outcome);
  if (!element) {
    x << "/>\n";
    return;
  }
  x << ">\n      <" << element << " message=\"" << escape(c.message) << "\"";
  if (c.outcome != JunitCase::Outcome::skipped) x << " type=\"" << element << "\"";
  x << ">" << escape(c.text) << "</" << element << ">\n    </testcase>\n";
}

}  // namespace

std::string junit_xml(const std::vector<JunitSuite>& suites) {
  std::ostringstream x;
  Totals all;
  for (const JunitSuite& s : suites) {
    for (const JunitCase& c : s.cases) all.add(c);
    all.seconds += s.seconds;
  }
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites tests=\"" << all.tests
    << "\" failures=\"" << all.failures << "\" errors=\"" << all.errors << "\" time=\""
    << seconds_text(all.seconds) << "\">\n";
  for (const JunitSuite& s : suites) {
    Totals t;
    for (const JunitCase& c : s.cases) t.add(c);
    x << "  <testsuite name=\"" << escape(s.name) << "\" tests=\"" << t.tests << "\" failures=\""
      << t.failures << "\" errors=\"" << t.errors << "\" skipped=\"" << t.skipped << "\" time=\""
      << seconds_text(s.seconds) << "\"";
    if (!s.timestamp.empty()) x << " timestamp=\"" << escape(s.timestamp) << "\"";
    x << ">\n";
    if (!s.properties.empty()) {
      x << "    <properties>\n";
      for (const auto& [name, value] : s.properties)
        x << "      <property name=\"" << escape(name) << "\" value=\"" << escape(value)
          << "\"/>\n";
      x << "    </properties>\n";
    }
    for (const JunitCase& c : s.cases) write_case(x, c);
    x << "  </testsuite>\n";
  }
  x << "</testsuites>\n";
  return x.str();
}

void write_junit(const std::string& path, const std::vector<JunitSuite>& suites) {
  std::ofstream out(path);
  out << junit_xml(suites);
  if (!out) throw Error(path + ": cannot write");
}

std::string iso8601_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

}  // namespace mlarope::harness
