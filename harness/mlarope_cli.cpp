// The mlarope command-line tool: run case files (SPEC.md §7) on a backend.
#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "case_run.h"
#include "compare.h"
#include "mlarope/error.h"

namespace fs = std::filesystem;
using namespace mlarope;
using namespace mlarope::harness;

namespace {

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// One line describing a case: op, layout, dtypes, flags.
std::string describe(const Case& c) {
  const CaseConfig& k = c.config;
  std::string s = std::string(to_string(k.op)) + " " + std::string(to_string(k.layout)) + " " +
                  std::string(to_string(k.dtype)) + " (table " + std::string(to_string(k.table_dtype)) +
                  "), layouts in=" + std::string(to_string(k.in_layout)) +
                  " out=" + std::string(to_string(k.out_layout)) +
                  " table=" + std::string(to_string(k.table_layout));
  if (k.inverse) s += ", inverse";
  if (k.in_place) s += ", in place";
  if (k.cp_size > 1) s += ", cp " + std::to_string(k.cp_rank) + "/" + std::to_string(k.cp_size);
  if (k.layout == TokenLayout::thd) s += ", " + std::string(to_string(k.freq_mode));
  return s;
}

struct RunOptions {
  std::string case_dir;
  std::string backend = "reference";
  std::string out_dir;
};

// mlarope run: read, run, write, and compare with expected_<name>.npy where the case has them.
int run_command(const RunOptions& o) {
  const Case c = read_case(o.case_dir);
  const Backend backend = find_backend(o.backend);
  std::cout << o.case_dir << ": " << describe(c) << "\n";
  const auto start = std::chrono::steady_clock::now();
  const CaseOutputs outputs = run_case(c, backend);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::cout << "  backend " << backend.name << ": " << ms << " ms, device status "
            << describe_status(outputs.status) << "\n";
  if (!o.out_dir.empty()) write_outputs(o.out_dir, outputs);
  int worse_than_one_ulp = 0;
  for (const auto& [name, array] : outputs.arrays) {
    std::cout << "  " << name << " " << shape_string(array.shape);
    if (!o.out_dir.empty()) std::cout << " -> " << (fs::path(o.out_dir) / (name + ".npy")).string();
    const fs::path expected = fs::path(o.case_dir) / ("expected_" + name + ".npy");
    if (fs::exists(expected)) {
      const Comparison cmp = compare_ulps(array, c.config.dtype, npy::read(expected));
      std::cout << "\n    vs " << expected.filename().string() << ": " << cmp.summary(array.shape);
      if (!cmp.same_shape || cmp.max_ulps > 1.0 || cmp.nan_mismatches) ++worse_than_one_ulp;
    }
    std::cout << "\n";
  }
  if (worse_than_one_ulp) {
    std::cout << "  " << worse_than_one_ulp << " output(s) differ from expected by more than 1 ulp\n";
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "mlarope: MLA RoPE primitives and the harness that checks them.\n"
      "Case files (a directory with case.json and .npy inputs) are described in SPEC.md §7."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mlarope 0.1.0");

  RunOptions run;
  CLI::App* run_cmd = app.add_subcommand(
      "run",
      "Run one case on a backend, write its outputs (out.npy, grad_t.npy, key.npy + value.npy, or "
      "grad_kv.npy + grad_k_pe.npy) in the activation dtype, and compare them with any "
      "expected_<output>.npy in the case directory (exit status 3 if one differs by > 1 ulp).");
  run_cmd->add_option("CASE_DIR", run.case_dir, "case directory holding case.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  run_cmd->add_option("--backend", run.backend, "reference (CPU, double precision)")
      ->capture_default_str();
  run_cmd->add_option("--out", run.out_dir, "directory for the outputs (created if missing)");
  run_cmd->callback([&] {});

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (run_cmd->parsed()) return run_command(run);
  } catch (const std::exception& e) {
    std::cerr << "mlarope: error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
