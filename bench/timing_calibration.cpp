// SPDX-License-Identifier: Apache-2.0
#include "timing_calibration.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "backends/device_backend.h"
#include "bench_calls.h"
#include "command_line.h"
#include "mlarope/error.h"
#include "shapes.h"

namespace mlarope::bench {
namespace {

constexpr std::int64_t kBlockStride = 16;  // a sample of 64 to 256 blocks of each launch

BenchOp op_named(const std::string& name) {
  for (BenchOp op : {BenchOp::rope, BenchOp::rope_inplace, BenchOp::rope_backward,
                     BenchOp::kv_split, BenchOp::kv_split_backward})
    if (to_string(op) == name) return op;
  throw Error("calibration: unknown op " + name);
}

Shape shape_labelled(const std::string& label) {
  for (const Shape& s : bench_shapes(false))
    if (shape_label(s) == label) return s;
  throw Error("calibration: no benchmark shape " + label);
}

// The fields of ModelLaunchStats the timing model reads, as JSON and back.
nlohmann::json stats_json(const ModelLaunchStats& s) {
  return {{"kernel", s.kernel},
          {"blocks", s.blocks},
          {"threads", s.threads},
          {"blocks_observed", s.blocks_observed},
          {"blocks_run", s.blocks_run},
          {"round_trips", s.round_trips},
          {"index_round_trips", s.index_round_trips},
          {"load_phases", s.load_phases},
          {"load_batches", s.load_batches},
          {"loaded_bytes", s.loaded_bytes},
          {"stored_bytes", s.stored_bytes},
          {"dram_bytes", s.dram_bytes},
          {"dram_chunks", s.dram_chunks},
          {"touched_bytes", s.touched_bytes}};
}

ModelLaunchStats stats_from(const nlohmann::json& j) {
  ModelLaunchStats s;
  s.kernel = j.at("kernel").get<std::string>();
  s.blocks = j.at("blocks").get<std::int64_t>();
  s.threads = j.at("threads").get<int>();
  s.blocks_observed = j.at("blocks_observed").get<std::int64_t>();
  s.blocks_run = j.at("blocks_run").get<std::int64_t>();
  s.round_trips = j.at("round_trips").get<std::int64_t>();
  s.index_round_trips = j.at("index_round_trips").get<std::int64_t>();
  s.load_phases = j.at("load_phases").get<std::int64_t>();
  s.load_batches = j.at("load_batches").get<std::int64_t>();
  s.loaded_bytes = j.at("loaded_bytes").get<std::int64_t>();
  s.stored_bytes = j.at("stored_bytes").get<std::int64_t>();
  s.dram_bytes = j.at("dram_bytes").get<std::int64_t>();
  s.dram_chunks = j.at("dram_chunks").get<std::int64_t>();
  s.touched_bytes = j.at("touched_bytes").get<std::int64_t>();
  return s;
}

}  // namespace

std::vector<CalibrationRow> calibration_rows(const std::string& devices_dir) {
  const nlohmann::json measured =
      nlohmann::json::parse(read_named_file(devices_dir + "/h200.calibration.json"));
  const std::vector<KernelResource> ptxas =
      parse_ptxas(read_named_file(devices_dir + "/h200.calibration.ptxas.txt"));
  std::vector<CalibrationRow> rows;
  for (const nlohmann::json& m : measured.at("rows")) {
    CalibrationRow row;
    row.op = m.at("op").get<std::string>();
    row.shape = m.at("shape").get<std::string>();
    row.seconds = m.at("time_us").get<double>() * 1e-6;
    row.copy_fraction = m.value("copy_fraction", -1.0);
    row.bytes = minimum_bytes(op_named(row.op), shape_labelled(row.shape));
    if (!m.contains("model"))
      throw Error("calibration: " + row.op + " " + row.shape + " has no recorded model figures");
    try {
      row.stats = stats_from(m.at("model"));
    } catch (const nlohmann::json::exception& e) {
      throw Error("calibration: " + row.op + " " + row.shape + ": " + e.what());
    }
    row.kernel = resource_of(row.stats.kernel, ptxas);
    rows.push_back(row);
  }
  return rows;
}

void record_calibration_model(const std::string& devices_dir) {
  const std::string path = devices_dir + "/h200.calibration.json";
  nlohmann::json measured = nlohmann::json::parse(read_named_file(path));
  for (nlohmann::json& m : measured.at("rows")) {
    const BenchOp op = op_named(m.at("op").get<std::string>());
    const Shape shape = shape_labelled(m.at("shape").get<std::string>());
    Fixture fixture(shape);
    const harness::Backend model =
        harness::host_backend(0, harness::HostMode::gpu_model, kBlockStride);
    make_call(op, fixture, model)();
    const std::vector<ModelLaunchStats> launches = model.take_model_stats();
    if (launches.size() != 1)
      throw Error("calibration: " + to_string(op) + " " + shape_label(shape) +
                  " is not one launch");
    m["model"] = stats_json(launches.front());
  }
  std::ofstream(path) << measured.dump(1) << "\n";
}

CalibrationErrors calibration_errors(const std::vector<CalibrationRow>& rows,
                                     const DeviceProfile& device) {
  CalibrationErrors e;
  std::vector<double> all;
  for (const CalibrationRow& row : rows) {
    const double predicted = predict_time(row.stats, row.kernel, device, row.bytes).seconds;
    e.time.push_back(std::fabs(predicted / row.seconds - 1));
    all.push_back(e.time.back());
  }
  for (const CalibrationRow& row : rows)
    if (row.copy_fraction > 0) {
      e.copy.push_back(
          std::fabs(predict_copy_time(row.bytes, device).floor_fraction / row.copy_fraction - 1));
      all.push_back(e.copy.back());
    }
  std::sort(all.begin(), all.end());
  e.median = all.empty() ? 0 : all[all.size() / 2];
  e.largest = all.empty() ? 0 : all.back();
  return e;
}

}  // namespace mlarope::bench
