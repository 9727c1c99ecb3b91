#include "timing_calibration.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backends/device_backend.h"
#include "bench_calls.h"
#include "mlarope/error.h"
#include "shapes.h"

namespace mlarope::bench {
namespace {

constexpr std::int64_t kBlockStride = 16;  // a sample of 64 to 256 blocks of each launch

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

BenchOp op_named(const std::string& name) {
  for (BenchOp op : {BenchOp::rope, BenchOp::rope_inplace, BenchOp::rope_backward, BenchOp::kv_split,
                     BenchOp::kv_split_backward})
    if (to_string(op) == name) return op;
  throw Error("calibration: unknown op " + name);
}

Shape shape_labelled(const std::string& label) {
  for (const Shape& s : bench_shapes(false))
    if (shape_label(s) == label) return s;
  throw Error("calibration: no benchmark shape " + label);
}

}  // namespace

std::vector<CalibrationRow> calibration_rows(const std::string& devices_dir) {
  const nlohmann::json measured = nlohmann::json::parse(read_file(devices_dir + "/h200.calibration.json"));
  const std::vector<KernelResource> ptxas = parse_ptxas(read_file(devices_dir + "/h200.calibration.ptxas.txt"));
  std::vector<CalibrationRow> rows;
  for (const nlohmann::json& m : measured.at("rows")) {
    CalibrationRow row;
    row.op = m.at("op").get<std::string>();
    row.shape = m.at("shape").get<std::string>();
    row.seconds = m.at("time_us").get<double>() * 1e-6;
    row.copy_fraction = m.value("copy_fraction", -1.0);
    const BenchOp op = op_named(row.op);
    const Shape shape = shape_labelled(row.shape);
    row.bytes = minimum_bytes(op, shape);
    Fixture fixture(shape);
    const harness::Backend model = harness::host_backend(0, harness::HostMode::gpu_model, kBlockStride);
    make_call(op, fixture, model)();
    const std::vector<ModelLaunchStats> launches = model.take_model_stats();
    if (launches.size() != 1) throw Error("calibration: " + row.op + " " + row.shape + " is not one launch");
    row.stats = launches.front();
    row.kernel = resource_of(row.stats.kernel, ptxas);
    rows.push_back(row);
  }
  return rows;
}

CalibrationErrors calibration_errors(const std::vector<CalibrationRow>& rows, const DeviceProfile& device) {
  CalibrationErrors e;
  std::vector<double> all;
  for (const CalibrationRow& row : rows) {
    const double predicted = predict_time(row.stats, row.kernel, device, row.bytes).seconds;
    e.time.push_back(std::fabs(predicted / row.seconds - 1));
    all.push_back(e.time.back());
  }
  for (const CalibrationRow& row : rows)
    if (row.copy_fraction > 0) {
      e.copy.push_back(std::fabs(predict_copy_time(row.bytes, device).floor_fraction / row.copy_fraction - 1));
      all.push_back(e.copy.back());
    }
  std::sort(all.begin(), all.end());
  e.median = all.empty() ? 0 : all[all.size() / 2];
  e.largest = all.empty() ? 0 : all.back();
  return e;
}

}  // namespace mlarope::bench
