// SPDX-License-Identifier: Apache-2.0
// Case files (docs/semantics.md §7): a directory with case.json and .npy inputs, read into host
// arrays, turned into a call descriptor of include/mlarope/ops.h, and outputs written back.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "io/npy.h"
#include "mlarope/ops.h"

namespace mlarope::harness {

/// A YaRN table named in case.json ("yarn": {...}) instead of shipped as cos.npy/sin.npy: rows
/// are positions offset .. offset + rows - 1, made by the reference in table_dtype and
/// table_layout when the case is read.
struct YarnTable {
  YarnParams params;
  std::int64_t rows = 0, offset = 0;
};

/// The scalar fields of case.json.
struct CaseConfig {
  Op op = Op::rope;
  TokenLayout layout = TokenLayout::sbhd;
  DType dtype = DType::f32;
  DType table_dtype = DType::f32;
  std::int64_t nope_dim = 0, emb_dim = 0, k_dim = 0, v_dim = 0;
  PairLayout in_layout = PairLayout::interleaved;
  PairLayout out_layout = PairLayout::half;
  PairLayout table_layout = PairLayout::half;
  bool inverse = false;
  bool in_place = false;
  std::int64_t cp_size = 1, cp_rank = 0;
  FreqMode freq_mode = FreqMode::per_sequence;
  std::int64_t max_seqlen = 0;
  std::map<std::string, std::string> inputs;  ///< input name -> file name in the directory
  std::optional<YarnTable> yarn;              ///< the tables, when named rather than shipped
};

/// "yarn" of case.json (and yarn.json of `mlarope yarn`) and back; throws mlarope::Error.
YarnTable parse_yarn(const nlohmann::json& json, const std::string& where);
nlohmann::json to_json(const YarnTable& yarn);
/// cos and sin [rows, emb_dim] of a YaRN table, by the reference, stored as `dtype`.
std::pair<npy::Array, npy::Array> yarn_arrays(const YarnTable& yarn, std::int64_t emb_dim,
                                              DType dtype, PairLayout layout);

/// A case in memory: its config and input arrays by input name ("t", "cos", ...).
struct Case {
  CaseConfig config;
  std::map<std::string, npy::Array> arrays;
};

/// Outputs of running a case, by their names in docs/semantics.md §7 ("out", "key", ...), in the
/// activation dtype.
struct CaseOutputs {
  std::map<std::string, npy::Array> arrays;
  DeviceStatus status = kStatusOk;
};

/// Parse case.json content; `where` prefixes error messages. Throws mlarope::Error.
CaseConfig parse_config(const nlohmann::json& json, const std::string& where);
/// The case.json of a config.
nlohmann::json to_json(const CaseConfig& config);

/// Read a case directory, checking that every file the op needs is there and that dtypes and
/// shapes agree with case.json. Throws mlarope::Error naming the file and the problem.
Case read_case(const std::filesystem::path& dir);
/// Write a case directory (case.json and one .npy per input); creates the directory.
void write_case(const std::filesystem::path& dir, const Case& c);
/// Write outputs as `<name>.npy` into `dir` (created if missing).
void write_outputs(const std::filesystem::path& dir, const CaseOutputs& outputs);

/// The names of the inputs an op reads (THD metadata included when the case is THD).
std::vector<std::string> required_inputs(const CaseConfig& config);

/// The npy dtype that stores `dtype` (bf16 as raw "<u2" bits).
npy::Dtype storage_dtype(DType dtype);

/// A tensor view of an array: contiguous, dtype `dtype`.
ConstTensorView view_of(const npy::Array& a, DType dtype);
TensorView view_of(npy::Array& a, DType dtype);

}  // namespace mlarope::harness
