// SPDX-License-Identifier: Apache-2.0
// The mlarope command line: check and fuzz on real cases, and one-line errors (never a crash)
// for malformed case files and command lines.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "fuzz/failure.h"
#include "fuzz/generators.h"
#include "io/case_file.h"
#include "io/npy.h"

namespace fs = std::filesystem;
using namespace mlarope;

namespace {

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("mlarope_cli_test_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct Result {
  int status = 0;
  std::string out, err;
  int err_lines() const { return static_cast<int>(std::count(err.begin(), err.end(), '\n')); }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result mlarope(const std::string& args, const TempDir& tmp) {
  const fs::path out = tmp.path() / "stdout.txt", err = tmp.path() / "stderr.txt";
  const std::string command =
      std::string(MLAROPE_CLI) + " " + args + " > " + out.string() + " 2> " + err.string();
  const int raw = std::system(command.c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, slurp(out), slurp(err)};
}

// A generated case written as a directory (with checks.json), as a failure would be.
fs::path write_generated_case(const TempDir& tmp, std::uint64_t seed) {
  const props::CaseSpec spec = props::random_spec(seed, props::kDefaultSize);
  fs::path dir = tmp.path() / ("case_" + std::to_string(seed));
  props::write_failure(dir, spec, props::materialize(spec), props::check_options(spec), {},
                       "reference");
  return dir;
}

TEST(Cli, CheckRunsEveryCheckOnAGeneratedCase) {
  TempDir tmp;
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    const fs::path dir = write_generated_case(tmp, seed);
    const Result r = mlarope("check " + dir.string() + " --backend reference", tmp);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    for (const char* check :
         {"value", "coverage", "immutability", "bounds", "round_trip", "adjoint", "in_place",
          "graph_replay", "determinism", "order_independence", "races"})
      EXPECT_NE(r.out.find(check), std::string::npos) << check;
  }
}

TEST(Cli, CheckRunsASubset) {
  TempDir tmp;
  const fs::path dir = write_generated_case(tmp, 4);
  const Result r =
      mlarope("check " + dir.string() + " --backend reference --checks value,bounds --seed 9", tmp);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 passed"), std::string::npos) << r.out;
}

TEST(Cli, MalformedInputsGiveOneLineErrors) {
  TempDir tmp;
  const fs::path good = write_generated_case(tmp, 5);
  const fs::path bad_json = tmp.path() / "bad_json";
  fs::create_directories(bad_json);
  std::ofstream(bad_json / "case.json") << "{ not json";
  const fs::path bad_checks = tmp.path() / "bad_checks";
  fs::copy(good, bad_checks);
  std::ofstream(bad_checks / "checks.json") << R"({"checks": ["value", "nonsense"]})";
  const fs::path truncated = tmp.path() / "truncated";
  fs::copy(good, truncated);
  std::ofstream(truncated / "cos.npy") << "\x93NUMPY";
  const fs::path empty = tmp.path() / "empty";
  fs::create_directories(empty);
  const std::vector<std::string> commands = {
      "check " + bad_json.string(),
      "check " + bad_checks.string() + " --backend reference",
      "check " + truncated.string() + " --backend reference",
      "check " + (tmp.path() / "missing").string(),
      "check " + good.string() + " --backend nonsense",
      "check " + good.string() + " --checks nonsense --backend reference",
      "fuzz --ops rope,nonsense --cases 1",
      "fuzz --jobs 0",
      "fuzz --seconds -1",
      "fuzz --cases 1 --backend nonsense",
      "fuzz --cases 1 --out /proc/forbidden",
      "fuzz --cases 1 --dtypes f32,f64",
      "fuzz --cases 1 --table-dtypes half",
      "fuzz --cases 1 --layouts half/half",
      "fuzz --cases 1 --shard-index 3",
      "fuzz --cases 1 --shard-index 3 --shard-count 3",
      "report " + (tmp.path() / "missing").string(),
      "report '" + (tmp.path() / "nothing-*").string() + "'",
      "report " + empty.string(),
      "fuzz --cases 1 --layouts half/sideways/*",
      "nonsense",
      "",
  };
  for (const std::string& c : commands) {
    const Result r = mlarope(c, tmp);
    EXPECT_EQ(r.status, 2) << c << "\n" << r.out << r.err;
    EXPECT_EQ(r.err_lines(), 1) << c << "\n" << r.err;
  }
}

TEST(Cli, FuzzWritesItsReport) {
  TempDir tmp;
  const fs::path out = tmp.path() / "fuzz";
  const Result r =
      mlarope("fuzz --cases 60 --seed 3 --backend reference --ops rope,kv_split --jobs 2 --out " +
                  out.string(),
              tmp);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("cases/s"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(slurp(out / "fuzz.json"));
  EXPECT_EQ(j["cases"], 60);
  EXPECT_EQ(j["failing_cases"], 0);
  EXPECT_EQ(j["counts"]["op"].size(), 2u);
  for (const char* key : {"layout", "dtype", "triple", "cp_size"})
    EXPECT_TRUE(j["counts"].contains(key)) << key;
  EXPECT_EQ(j["checks"]["value"]["pass"], 60);
  EXPECT_TRUE(j["ulp_histograms"].contains("f32"));
}

// --dtypes, --table-dtypes and --no-in-place narrow what is drawn, and fuzz.json says so.
TEST(Cli, FuzzDrawsOnlyTheDtypesAsked) {
  TempDir tmp;
  const fs::path out = tmp.path() / "fuzz";
  const Result r =
      mlarope("fuzz --cases 200 --seed 4 --backend reference --ops rope --dtypes bf16,bf16 "
              "--table-dtypes f16,f32 --no-in-place --layouts interleaved/half/* --out " +
                  out.string(),
              tmp);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(out / "fuzz.json"));
  EXPECT_EQ(j["counts"]["dtype"], nlohmann::json({{"bf16", 200}}));
  EXPECT_EQ(j["counts"]["table_dtype"].size(), 2u);  // both asked for, and only those
  EXPECT_FALSE(j["counts"]["table_dtype"].contains("bf16"));
  EXPECT_EQ(j["counts"]["in_place"], nlohmann::json({{"false", 200}}));
  EXPECT_EQ(j["dtypes"], nlohmann::json({"bf16"}));
  EXPECT_EQ(j["in_place"], false);
  for (const auto& [triple, n] : j["counts"]["triple"].items())  // the table layout still varies
    EXPECT_TRUE(triple == "interleaved/half/half" || triple == "interleaved/half/interleaved")
        << triple;
  EXPECT_EQ(j["counts"]["triple"].size(), 2u);
}

// The edge-value generators reach every class of edge value (ties, near and past the
// largest finite value, subnormals, signed zeros, copied NaN payloads), and the summary and
// fuzz.json count them; yarn_tables is drawn among the ops on a backend that has it.
TEST(Cli, FuzzReachesEveryEdgeValueAndDrawsYarnTables) {
  TempDir tmp;
  const fs::path out = tmp.path() / "fuzz";
  const Result r =
      mlarope("fuzz --cases 1500 --seed 5 --backend reference --jobs 2 --out " + out.string(), tmp);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("edge values reached"), std::string::npos) << r.out;
  const nlohmann::json j = nlohmann::json::parse(slurp(out / "fuzz.json"));
  for (const char* edge :
       {"tie", "near_max", "overflow", "subnormal", "signed_zero", "nan_payload"}) {
    ASSERT_TRUE(j["counts"]["edge_values"].contains(edge)) << edge << " never reached\n" << r.out;
    EXPECT_GT(j["counts"]["edge_values"][edge].get<int>(), 0) << edge;
  }
  EXPECT_GT(j["counts"]["op"]["yarn_tables"].get<int>(), 100) << r.out;
  EXPECT_EQ(j["ops"].back(), "yarn_tables");
  for (const char* values : {"ties", "nan_payloads"})
    EXPECT_TRUE(j["counts"]["values"].contains(values)) << values;
  // --ops without yarn_tables draws none; --ops yarn_tables draws only it, and a yarn case
  // directory replays with mlarope check.
  const Result none =
      mlarope("fuzz --cases 50 --backend reference --ops rope --out " + (tmp.path() / "a").string(),
              tmp);
  ASSERT_EQ(none.status, 0) << none.out << none.err;
  EXPECT_FALSE(
      nlohmann::json::parse(slurp(tmp.path() / "a" / "fuzz.json"))["counts"]["op"].contains(
          "yarn_tables"));
  const Result only = mlarope(
      "fuzz --cases 50 --backend host --ops yarn_tables --out " + (tmp.path() / "b").string(), tmp);
  ASSERT_EQ(only.status, 0) << only.out << only.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(tmp.path() / "b" / "fuzz.json"))["counts"]["op"],
            nlohmann::json({{"yarn_tables", 50}}));
  const fs::path dir = tmp.path() / "yarn_case";
  fs::create_directories(dir);
  std::ofstream(dir / "yarn_case.json")
      << R"({"yarn": {"rows": 9, "offset": 4000, "scaling_factor": 40}, "emb_dim": 64,
            "table_layout": "interleaved", "dtype": "bf16", "row_gap": 3, "misalign": true})";
  const Result check = mlarope("check " + dir.string() + " --backend host", tmp);
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  EXPECT_NE(check.out.find("4 passed, 0 failed"), std::string::npos) << check.out;
}

// mlarope yarn writes the reference's tables, and the host kernel's are the same bits.
TEST(Cli, YarnWritesTheTablesOfTheReferenceAndTheKernel) {
  TempDir tmp;
  const std::string args = " --rows 300 --emb-dim 64 --offset 7 --scaling-factor 40 --mscale 0.9 "
                           "--mscale-all-dim 0.7 --original-max-position-embeddings 64 ";
  for (const char* variant :
       {"--dtype f32", "--dtype bf16 --table-layout interleaved", "--dtype f16"}) {
    const fs::path ref = tmp.path() / "ref", host = tmp.path() / "host";
    ASSERT_EQ(mlarope("yarn" + args + variant + " --out " + ref.string(), tmp).status, 0)
        << variant;
    ASSERT_EQ(
        mlarope("yarn" + args + variant + " --backend host --out " + host.string(), tmp).status, 0);
    for (const char* table : {"cos.npy", "sin.npy"})
      EXPECT_EQ(slurp(ref / table), slurp(host / table)) << variant << " " << table;
    const nlohmann::json j = nlohmann::json::parse(slurp(ref / "yarn.json"));
    const harness::YarnTable y =
        harness::parse_yarn(j["yarn"], "yarn.json");  // the form case.json takes
    EXPECT_EQ(y.rows, 300);
    EXPECT_EQ(y.params.mscale, 0.9);
    const npy::Array cos = npy::read(ref / "cos.npy");
    EXPECT_EQ(cos.shape, (std::vector<std::int64_t>{300, 64}));
    EXPECT_EQ(cos.bytes,
              harness::yarn_arrays(y, 64, parse_dtype(j["table_dtype"].get<std::string>()),
                                   parse_pair_layout(j["table_layout"].get<std::string>()))
                  .first.bytes);
  }
  EXPECT_EQ(mlarope("yarn --rows 2 --emb-dim 7 --out " + (tmp.path() / "odd").string(), tmp).status,
            2);
  EXPECT_EQ(mlarope("yarn --rows 2 --emb-dim 8 --backend cuda --out " + (tmp.path() / "c").string(),
                    tmp)
                .status,
            2);
}

TEST(Cli, RunStillWorks) {
  TempDir tmp;
  const fs::path example = fs::path(MLAROPE_SOURCE_DIR) / "examples";
  if (!fs::exists(example)) GTEST_SKIP() << "no examples folder";
  for (const auto& entry : fs::directory_iterator(example)) {
    if (!fs::exists(entry.path() / "case.json")) continue;
    const Result r =
        mlarope("run " + entry.path().string() + " --out " + (tmp.path() / "out").string(), tmp);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
  }
}

// A device status word other than ok (invalid metadata) is a failure of its own: exit status 4
// in run and check, on every backend, with the status named; the valid case exits 0.
TEST(Cli, InvalidMetadataExitsWithStatusFour) {
  TempDir tmp;
  const fs::path example =
      fs::path(MLAROPE_SOURCE_DIR) / "examples" / "mla_kv_split_backward_thd_cp4";
  if (!fs::exists(example / "case.json")) GTEST_SKIP() << "no example case " << example;
  const fs::path bad = tmp.path() / "bad_cu_seqlens";
  fs::copy(example, bad);
  for (const auto& entry : fs::directory_iterator(bad))
    if (entry.path().filename().string().rfind("expected_", 0) == 0) fs::remove(entry.path());
  npy::Array cu = npy::read(bad / "cu_seqlens.npy");
  ASSERT_GE(cu.size(), 3);
  ASSERT_EQ(cu.dtype, npy::Dtype::i32);
  cu.data<std::int32_t>()[1] += 1;  // two sequence lengths no longer divisible by 2 * cp_size
  npy::write(bad / "cu_seqlens.npy", cu);
  for (const char* backend : {"reference", "host", "host-fast"}) {
    for (const std::string command : {"run", "check"}) {
      const Result r = mlarope(command + " " + bad.string() + " --backend " + backend, tmp);
      EXPECT_EQ(r.status, 4) << command << " " << backend << "\n" << r.out << r.err;
      EXPECT_NE(r.err.find("device status word"), std::string::npos) << r.err;  // a diagnostic
      EXPECT_NE(r.err.find("divisible"), std::string::npos) << r.err;
      EXPECT_EQ(r.out.find("device status word"), std::string::npos) << r.out;
    }
    const Result ok = mlarope("run " + example.string() + " --backend " + backend, tmp);
    EXPECT_EQ(ok.status, 0) << backend << "\n" << ok.out << ok.err;
  }
  const Result help = mlarope("--help", tmp);
  EXPECT_NE(help.out.find("4 (run, check)"), std::string::npos) << help.out;
}

}  // namespace

namespace {

// Every subcommand writes its results to stdout and its diagnostics (why the exit status is not
// 0, progress, errors) to stderr, so that stdout can be a pipe of results.
TEST(Cli, DiagnosticsGoToStderrAndResultsToStdout) {
  TempDir tmp;
  // run: outputs off their expected values -> exit 3; the comparison is a result, the verdict not.
  const fs::path example = fs::path(MLAROPE_SOURCE_DIR) / "examples" / "mla_rope_sbhd_f16";
  ASSERT_TRUE(fs::exists(example / "case.json")) << example;
  const fs::path off = tmp.path() / "off";
  fs::copy(example, off);
  npy::Array expected = npy::read(off / "expected_out.npy");
  for (std::int64_t i = 0; i < expected.size(); ++i) expected.data<double>()[i] += 1.0;
  npy::write(off / "expected_out.npy", expected);
  Result r = mlarope("run " + off.string() + " --backend reference", tmp);
  EXPECT_EQ(r.status, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("vs expected_out.npy"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("differ from expected"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("differ from expected"), std::string::npos) << r.out;
  // fuzz: a failing run -> exit 1; the summary on stdout, the failures' verdict and progress on
  // stderr.
  const fs::path fuzz = tmp.path() / "fuzz";
  r = mlarope("fuzz --seconds 6 --backend broken:dropped_inverse --out " + fuzz.string(), tmp);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("mlarope fuzz:"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("failing case(s)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cases/s"), std::string::npos) << "no progress line on stderr: " << r.err;
  EXPECT_EQ(r.out.find("failing case(s), written"), std::string::npos) << r.out;
  // check: a failing check -> exit 1; each check's line on stdout, the failed ones named on stderr.
  fs::path failure;
  for (const auto& entry : fs::directory_iterator(fuzz / "failures")) failure = entry.path();
  ASSERT_FALSE(failure.empty());
  r = mlarope("check " + failure.string() + " --backend broken:dropped_inverse", tmp);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("failed"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("failed: "), std::string::npos) << r.err;
  // compare and report: a slower change -> exit 1; the table on stdout, the verdict on stderr.
  nlohmann::json base = {
      {"context", {{"host_name", "m"}, {"num_cpus", 2}, {"cpu_model", "c"}, {"copy_GBps", "30"}}},
      {"benchmarks", nlohmann::json::array()}};
  nlohmann::json slow = base;
  for (int i = 0; i < 9; ++i) {
    nlohmann::json b = {{"name", "rope/host/s/real_time"},
                        {"run_type", "iteration"},
                        {"real_time", 1.0},
                        {"time_unit", "ms"},
                        {"floor_fraction", 0.8 + 0.001 * i}};
    base["benchmarks"].push_back(b);
    b["floor_fraction"] = 0.4 + 0.001 * i;
    slow["benchmarks"].push_back(b);
  }
  std::ofstream(tmp.path() / "base.json") << base.dump();
  std::ofstream(tmp.path() / "slow.json") << slow.dump();
  r = mlarope("compare --base " + (tmp.path() / "base.json").string() + " --change " +
                  (tmp.path() / "slow.json").string() + " --out " + (tmp.path() / "cmp").string(),
              tmp);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("**SLOWER**"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("SLOWER (exit status 1)"), std::string::npos) << r.err;
  r = mlarope("report " + (tmp.path() / "slow.json").string() + " --baseline " +
                  (tmp.path() / "base.json").string() + " --out " + (tmp.path() / "rep").string(),
              tmp);
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("# mlarope report"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("SLOWER (exit status 1)"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("exit status 1"), std::string::npos) << r.out;
  // yarn: the tables on stdout; a bad parameter one error line on stderr, nothing on stdout.
  r = mlarope("yarn --rows 8 --emb-dim 8 --out " + (tmp.path() / "yarn").string(), tmp);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("yarn: cos.npy"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
  r = mlarope("yarn --rows 8 --emb-dim 7 --out " + (tmp.path() / "yarn2").string(), tmp);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err_lines(), 1) << r.err;
}

}  // namespace
