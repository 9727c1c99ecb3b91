// SPDX-License-Identifier: Apache-2.0
// The report: parsing benchmark JSON, the stored-baseline gate, and what the page and summary show.
#include <gtest/gtest.h>

#include "baseline.h"
#include "compare.h"
#include "mlarope/error.h"
#include "report.h"

using namespace mlarope::reports;
using nlohmann::json;

namespace {

json bench_json(double host_fraction) {
  return json::parse(R"({"context": {}, "benchmarks": [
    {"name": "rope/host/dsv3/sbhd/T1024/bf16/real_time", "run_type": "iteration", "real_time": 2.5,
     "time_unit": "ms", "GBps": 20.0, "floor_fraction": )" +
                     std::to_string(host_fraction) + R"(, "bytes": 5e7,
     "model_sector_efficiency": 1.0, "model_dram_fraction": 1.0, "model_floor_fraction": 0.5,
     "model_time_us": 47.6, "model_blocks_per_sm": 6, "model_waves": 1.29, "model_KiB_in_flight_per_sm": 14.0,
     "model_bandwidth_drawn": 0.36, "model_bandwidth_available": 0.4},
    {"name": "rope/copy/dsv3/sbhd/T1024/bf16/real_time", "run_type": "iteration", "real_time": 1.5,
     "time_unit": "ms", "GBps": 30.0, "floor_fraction": 0.9, "bytes": 5e7, "model_floor_fraction": 0.87},
    {"name": "rope/reference/dsv3/sbhd/T1024/bf16/real_time", "run_type": "iteration", "real_time": 40000,
     "time_unit": "us", "GBps": 1.2, "floor_fraction": 0.04, "bytes": 5e7},
    {"name": "rope/host/dsv3/sbhd/T1024/bf16/real_time_mean", "run_type": "aggregate", "real_time": 1,
     "time_unit": "ms"}]})");
}

TEST(Report, ParsesMlaropeBenchNamesAndUnits) {
  const auto results = parse_benchmarks(bench_json(0.5), "b.json");
  ASSERT_EQ(results.size(), 3u);  // the aggregate is skipped
  EXPECT_EQ(results[0].op, "rope");
  EXPECT_EQ(results[0].backend, "host");
  EXPECT_EQ(results[0].shape, "dsv3/sbhd/T1024/bf16");
  EXPECT_DOUBLE_EQ(results[0].floor_fraction, 0.5);
  EXPECT_DOUBLE_EQ(results[2].time_ms, 40.0);
  EXPECT_DOUBLE_EQ(results[0].model_time_us, 47.6);
}

TEST(Report, SummaryShowsTheTimingModelsPredictionBesideTheSectorFigures) {
  const std::string md = markdown_summary(parse_benchmarks(bench_json(0.5), "b.json"), {}, nullptr);
  EXPECT_NE(md.find("| rope | dsv3/sbhd/T1024/bf16 | 1.00 | 1.00 | 47.6 us | 0.50 | 0.87 | 6 | "
                    "1.29 | 14.0 | 0.36 / 0.40 |"),
            std::string::npos)
      << md;
}

TEST(Report, RejectsJsonThatIsNotABenchmarkOutput) {
  EXPECT_THROW(parse_benchmarks(json::parse(R"({"cases": 3})"), "x.json"), mlarope::Error);
}

// A run of `reps` repetitions of rope/host near `fraction`, on the machine named by `host`
// and `copy` (GB/s).
json repeated_run(double fraction, int reps, const std::string& host = "m1", double copy = 30.0) {
  json j = {{"context",
             {{"host_name", host},
              {"num_cpus", 2},
              {"cpu_model", "Test CPU"},
              {"copy_GBps", std::to_string(copy)}}},
            {"benchmarks", json::array()}};
  for (int i = 0; i < reps; ++i)
    j["benchmarks"].push_back({{"name", "rope/host/dsv3/sbhd/T1024/bf16/real_time"},
                               {"run_type", "iteration"},
                               {"real_time", 2.5},
                               {"time_unit", "ms"},
                               {"GBps", 20.0},
                               {"floor_fraction", fraction * (1 + 0.002 * (i % 5))},
                               {"bytes", 5e7}});
  return j;
}

GateResult gate_of(const json& run, const json& baseline) {
  return check_baseline(parse_benchmarks(run, "run.json"), machine_of(run), baseline, "base.json",
                        CompareOptions{});
}

TEST(Report, StoredBaselineGatesItsOwnMachineByTheSameTest) {
  const json baseline = repeated_run(0.5, 9);
  const GateResult same = gate_of(repeated_run(0.5, 9), baseline);
  EXPECT_TRUE(same.applied);
  EXPECT_EQ(same.exit_status(), 0);
  const GateResult slow = gate_of(repeated_run(0.3, 9), baseline);  // -40%
  EXPECT_EQ(slow.exit_status(), 1);
  EXPECT_EQ(slow.comparison.slower_keys(),
            std::vector<std::string>{"rope/host/dsv3/sbhd/T1024/bf16"});
  const GateResult few =
      gate_of(repeated_run(0.3, 3), baseline);  // too few repetitions: never a pass
  EXPECT_EQ(few.exit_status(), 3);
}

TEST(Report, StoredBaselineOfAnotherMachineIsNotAppliedAndSaysSo) {
  const json baseline = repeated_run(0.9, 9, "m1", 30.0);
  for (const json& run : {repeated_run(0.4, 9, "m2", 30.0), repeated_run(0.4, 9, "m1", 46.0)}) {
    const GateResult g = gate_of(run, baseline);
    EXPECT_FALSE(g.applied);
    EXPECT_EQ(g.exit_status(), 0) << "a baseline of another machine must not fail a clean tree";
    EXPECT_NE(g.note.find("another machine"), std::string::npos) << g.note;
    EXPECT_NE(markdown_summary(parse_benchmarks(run, "r"), {}, &g).find("not applied"),
              std::string::npos);
  }
  EXPECT_NE(gate_of(repeated_run(0.4, 9, "m2"), baseline).note.find("host 'm1' vs 'm2'"),
            std::string::npos);
  EXPECT_NE(
      gate_of(repeated_run(0.4, 9, "m1", 46.0), baseline).note.find("copy bandwidth 30.0 vs 46.0"),
      std::string::npos);
  json unnamed = baseline;  // a baseline that does not say where it was recorded gates nothing
  unnamed["context"].erase("cpu_model");
  EXPECT_FALSE(gate_of(repeated_run(0.4, 9), unnamed).applied);
}

TEST(Report, BaselinesOfTheWrongKindAreNamedErrors) {
  const json best_of = json::parse(
      R"({"threshold": 0.5, "floor_fraction": {"rope/host/dsv3/sbhd/T1024/bf16": 0.9}})");
  try {
    gate_of(repeated_run(0.5, 9), best_of);
    FAIL() << "a best-of map was accepted";
  } catch (const mlarope::Error& e) {
    EXPECT_NE(std::string(e.what()).find("every repetition"), std::string::npos) << e.what();
  }
  json other_keys = repeated_run(0.5, 9);
  for (json& b : other_keys["benchmarks"])
    b["name"] = "kv_split/host/small/sbhd/T1024/f32/real_time";
  EXPECT_THROW(gate_of(repeated_run(0.5, 9), other_keys), mlarope::Error);
  json aggregates_only = repeated_run(0.5, 9);
  for (json& b : aggregates_only["benchmarks"]) b["run_type"] = "aggregate";
  EXPECT_THROW(gate_of(repeated_run(0.5, 9), aggregates_only), mlarope::Error);
}

TEST(Report, SummaryAndPageShowBenchmarksFuzzCountsFailuresAndGate) {
  const auto results = parse_benchmarks(bench_json(0.5), "b.json");
  const json fuzz = json::parse(R"({"cases": 1200, "cases_per_second": 300, "backend": "host",
    "counts": {"op": {"rope": 700, "kv_split": 500}, "dtype": {"bf16": 1200}},
    "ulp_histograms": {"bf16": {"0": 900, "0.5": 250, "1": 50}},
    "failures": [{"check": "value", "op": "rope", "message": "out[1, 0, 3] off by 3 ulp",
                  "replay": "mlarope check fuzz/failures/case_0001"}]})");
  const json run = repeated_run(0.5, 9);
  const GateResult gate = gate_of(run, run);
  const std::string md = markdown_summary(results, {{"fuzz.json", fuzz}}, &gate);
  EXPECT_NE(
      md.find(
          "| rope | dsv3/sbhd/T1024/bf16 | 30.0 GB/s, 0.90 | 20.0 GB/s, 0.50 | 1.2 GB/s, 0.04 |"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("1200 cases (300 cases/s) on host, 1 failure"), std::string::npos) << md;
  EXPECT_NE(md.find("mlarope check fuzz/failures/case_0001"), std::string::npos);
  EXPECT_NE(md.find("**pass**"), std::string::npos);
  const std::string html = html_page(results, {{"fuzz.json", fuzz}}, &gate);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("fraction of copy bandwidth"), std::string::npos);  // y axis label
  EXPECT_NE(html.find("error (ulp of the output dtype)"), std::string::npos);
  EXPECT_NE(html.find("<td>kv_split</td><td>500</td>"), std::string::npos);
  EXPECT_EQ(html.find("http"), html.find("http://www.w3.org/2000/svg"));  // no network references
}

TEST(Report, SummaryAndPageListWhatAPluginDeclined) {
  const json fuzz = json::parse(R"({"cases": 100, "cases_per_second": 50, "backend": "plugin:p.so",
    "support": {"combinations": 12, "supported_combinations": 9, "partly_supported_combinations": 1,
                "declined_cases": 7, "not_supported": {"rope: THD with inverse": 7}}})");
  const std::string md = markdown_summary({}, {{"fuzz.json", fuzz}}, nullptr);
  EXPECT_NE(
      md.find("supported: 9 of 12 flag combinations seen (1 more in part); 7 cases not supported"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("  - rope: THD with inverse (7)"), std::string::npos) << md;
  const std::string html = html_page({}, {{"fuzz.json", fuzz}}, nullptr);
  EXPECT_NE(html.find("<li>rope: THD with inverse (7)</li>"), std::string::npos);
  const json clean =
      json::parse(R"({"cases": 100, "support": {"combinations": 12, "declined_cases": 0}})");
  EXPECT_EQ(markdown_summary({}, {{"fuzz.json", clean}}, nullptr).find("not supported"),
            std::string::npos);
}

}  // namespace

// ptxas -v lines (build/ptxas.txt) as the report's kernel table: registers, spills, smem.
TEST(Report, KernelResourcesFromPtxasLines) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function "
      "'_ZN7mlarope11cuda_launch45_GLOBAL__N__d2e2af62_12_cuda_rope_cu_"
      "9dd4dda811rope_kernelINS_7kernels16RopeStagedRoundsIfEEEEvNS3_14RopeKernelArgsE' for "
      "'sm_90'\n"
      "ptxas info    : Function properties for "
      "_ZN7mlarope11cuda_launch45_GLOBAL__N__d2e2af62_12_cuda_rope_cu_"
      "9dd4dda811rope_kernelINS_7kernels16RopeStagedRoundsIfEEEEvNS3_14RopeKernelArgsE\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 80 registers, used 1 barriers, 536 bytes smem, 400 bytes cmem[0]\n";
  ASSERT_TRUE(mlarope::is_ptxas_log(log));
  const auto kernels = mlarope::parse_ptxas(log);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].kernel, "rope_kernel<RopeStagedRounds<float> >");
  EXPECT_EQ(kernels[0].arch, "sm_90");
  EXPECT_EQ(kernels[0].registers, 80);
  EXPECT_EQ(kernels[0].stack, 8);
  EXPECT_EQ(kernels[0].spill_stores, 4);
  EXPECT_EQ(kernels[0].spill_loads, 12);
  EXPECT_EQ(kernels[0].smem, 536);
  const std::string md = markdown_summary({}, {}, nullptr, kernels);
  EXPECT_NE(md.find("1 kernels, 1 with spills"), std::string::npos) << md;
  EXPECT_NE(md.find("| rope_kernel<RopeStagedRounds<float> > | sm_90 | 80 | 4 | 12 | 8 | 536 |"),
            std::string::npos)
      << md;
  EXPECT_NE(
      html_page({}, {}, nullptr, kernels).find("rope_kernel&lt;RopeStagedRounds&lt;float&gt; &gt;"),
      std::string::npos);
}
