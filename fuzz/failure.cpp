// SPDX-License-Identifier: Apache-2.0
#include "fuzz/failure.h"

#include <cstdlib>
#include <fstream>

#include "mlarope/error.h"

#ifndef MLAROPE_DEFAULT_FAILURE_DIR
#define MLAROPE_DEFAULT_FAILURE_DIR "build/failures"
#endif
#ifndef MLAROPE_CLI_PATH
#define MLAROPE_CLI_PATH "mlarope"
#endif

namespace mlarope::props {
namespace fs = std::filesystem;

fs::path failure_root() {
  const char* env = std::getenv("MLAROPE_FAILURE_DIR");
  return env && *env ? fs::path(env) : fs::path(MLAROPE_DEFAULT_FAILURE_DIR);
}

std::string replay_command(const fs::path& dir, const std::string& backend) {
  std::string command =
      std::string(MLAROPE_CLI_PATH) + " check " + dir.string() + " --backend " + backend;
  if (backend.rfind("broken:", 0) != 0)
    command += "  (outputs: " + std::string(MLAROPE_CLI_PATH) + " run " + dir.string() +
               " --backend " + backend + ")";
  return command;
}

namespace {
void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file);
  out << text;
  if (!out) throw Error(file.string() + ": cannot write");
}
}  // namespace

std::string write_failure(const fs::path& dir, const CaseSpec& spec, const harness::Case& c,
                          const harness::CheckOptions& options, const harness::CheckReport& report,
                          const std::string& backend, const std::string& note) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  harness::write_case(dir, c);
  write_text(dir / "spec.json", to_json(spec).dump(1) + "\n");
  write_text(dir / "checks.json", harness::to_json(options).dump(1) + "\n");
  std::string command = replay_command(dir, backend);
  write_text(dir / "report.txt",
             describe(spec) + "\nbackend " + backend + "\n" + harness::format_report(report) +
                 (note.empty() ? "" : note + "\n") + "replay: " + command + "\n");
  return command;
}

std::string write_yarn_failure(const fs::path& dir, const harness::YarnCase& c,
                               const harness::CheckReport& report, const std::string& backend,
                               const std::string& note) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create the directory");
  write_text(dir / "yarn_case.json", harness::to_json(c).dump(1) + "\n");
  std::string command =
      std::string(MLAROPE_CLI_PATH) + " check " + dir.string() + " --backend " + backend;
  write_text(dir / "report.txt",
             harness::describe(c) + "\nbackend " + backend + "\n" + harness::format_report(report) +
                 (note.empty() ? "" : note + "\n") + "replay: " + command + "\n");
  return command;
}

}  // namespace mlarope::props
