// SPDX-License-Identifier: Apache-2.0
// JUnit XML: the counts a reader sums, the outcome elements, and text that cannot break the
// document (markup characters and control characters in messages).
#include <gtest/gtest.h>

#include "io/junit.h"

using namespace mlarope::harness;

namespace {

JunitCase make_case(const std::string& name, JunitCase::Outcome outcome,
                    const std::string& message = "") {
  JunitCase c;
  c.classname = "mlarope.test";
  c.name = name;
  c.outcome = outcome;
  c.message = message;
  c.text = message.empty() ? "" : "details of " + name;
  return c;
}

}  // namespace

TEST(Junit, CountsEachOutcomePerSuiteAndOverall) {
  JunitSuite a{"a",
               1.5,
               "2026-12-05T00:00:00Z",
               {{"backend", "host"}},
               {make_case("p", JunitCase::Outcome::pass),
                make_case("f", JunitCase::Outcome::failure, "off"),
                make_case("e", JunitCase::Outcome::error, "unknown"),
                make_case("s", JunitCase::Outcome::skipped, "n/a")}};
  JunitSuite b{"b", 0.25, "", {}, {make_case("f2", JunitCase::Outcome::failure, "off")}};
  const std::string xml = junit_xml({a, b});
  EXPECT_NE(xml.find("<testsuites tests=\"5\" failures=\"2\" errors=\"1\" time=\"1.750\">"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<testsuite name=\"a\" tests=\"4\" failures=\"1\" errors=\"1\" skipped=\"1\" "
                     "time=\"1.500\" "
                     "timestamp=\"2026-12-05T00:00:00Z\">"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<property name=\"backend\" value=\"host\"/>"), std::string::npos);
  EXPECT_NE(xml.find("<testcase classname=\"mlarope.test\" name=\"p\" time=\"0.000\"/>"),
            std::string::npos);
  EXPECT_NE(xml.find("<failure message=\"off\" type=\"failure\">details of f</failure>"),
            std::string::npos)
      << xml;
  EXPECT_NE(xml.find("<error message=\"unknown\" type=\"error\">"), std::string::npos);
  EXPECT_NE(xml.find("<skipped message=\"n/a\">"), std::string::npos);
}

TEST(Junit, MessagesCannotBreakTheDocument) {
  JunitSuite s{"<suite & \"name\">",
               0,
               "",
               {},
               {make_case("x'y", JunitCase::Outcome::failure, "a < b && c > d\x01")}};
  const std::string xml = junit_xml({s});
  EXPECT_NE(xml.find("name=\"&lt;suite &amp; &quot;name&quot;&gt;\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("name=\"x&apos;y\""), std::string::npos);
  EXPECT_NE(xml.find("message=\"a &lt; b &amp;&amp; c &gt; d\xEF\xBF\xBD\""), std::string::npos)
      << xml;
  EXPECT_EQ(xml.find('\x01'), std::string::npos);
}
