// SPDX-License-Identifier: Apache-2.0
// Case files: round trips (bf16 included) and one test per malformed-file error.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "backends/case_run.h"
#include "host_convert.h"
#include "io/case_file.h"
#include "mlarope/error.h"

namespace fs = std::filesystem;
using namespace mlarope;
using namespace mlarope::harness;

namespace {

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("mlarope_case_test_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

npy::Array random_array(DType dtype, std::vector<std::int64_t> shape, std::mt19937& rng) {
  npy::Array a = npy::make(storage_dtype(dtype), std::move(shape));
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  for (std::int64_t i = 0; i < a.size(); ++i) store_rounded(a.bytes.data(), dtype, i, dist(rng));
  return a;
}

npy::Array int32_array(std::vector<std::int32_t> values) {
  npy::Array a = npy::make(npy::Dtype::i32, {static_cast<std::int64_t>(values.size())});
  std::copy(values.begin(), values.end(), a.data<std::int32_t>());
  return a;
}

// A THD bf16 rope case: 2 sequences of 3 and 5 tokens, 3 heads, nope 4, emb 6.
Case small_thd_case() {
  std::mt19937 rng(7);
  Case c;
  CaseConfig& k = c.config;
  k.op = Op::rope;
  k.layout = TokenLayout::thd;
  k.dtype = DType::bf16;
  k.table_dtype = DType::f32;
  k.nope_dim = 4;
  k.emb_dim = 6;
  k.max_seqlen = 5;
  k.inputs = {
      {"t", "t.npy"}, {"cos", "cos.npy"}, {"sin", "sin.npy"}, {"cu_seqlens", "cu_seqlens.npy"}};
  c.arrays["t"] = random_array(DType::bf16, {8, 3, 10}, rng);
  c.arrays["cos"] = random_array(DType::f32, {5, 6}, rng);
  c.arrays["sin"] = random_array(DType::f32, {5, 6}, rng);
  c.arrays["cu_seqlens"] = int32_array({0, 3, 8});
  return c;
}

void expect_same_case(const Case& a, const Case& b) {
  EXPECT_EQ(to_json(a.config), to_json(b.config));
  ASSERT_EQ(a.arrays.size(), b.arrays.size());
  for (const auto& [name, array] : a.arrays) {
    const npy::Array& other = b.arrays.at(name);
    EXPECT_EQ(array.dtype, other.dtype) << name;
    EXPECT_EQ(array.shape, other.shape) << name;
    EXPECT_EQ(array.bytes, other.bytes) << name;
  }
}

// Expect read_case(dir) to throw an Error whose message contains every one of `parts`.
void expect_read_error(const fs::path& dir, const std::vector<std::string>& parts) {
  try {
    read_case(dir);
    ADD_FAILURE() << "read_case accepted " << dir;
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message '" << e.what() << "' lacks '" << part << "'";
  }
}

void rewrite_json(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(std::ifstream(dir / "case.json"));
  edit(j);
  std::ofstream(dir / "case.json") << j.dump(1);
}

TEST(CaseFile, Bf16ThdCaseRoundTripsBitForBit) {
  TempDir tmp;
  const Case original = small_thd_case();
  write_case(tmp.path(), original);
  expect_same_case(original, read_case(tmp.path()));
}

TEST(CaseFile, RunningAReadBackCaseGivesTheSameOutputs) {
  TempDir tmp;
  const Case original = small_thd_case();
  write_case(tmp.path(), original);
  const CaseOutputs before = run_case(original, reference_backend());
  const CaseOutputs after = run_case(read_case(tmp.path()), reference_backend());
  EXPECT_EQ(before.arrays.at("out").bytes, after.arrays.at("out").bytes);
  write_outputs(tmp.path() / "out", after);
  const npy::Array written = npy::read(tmp.path() / "out" / "out.npy");
  EXPECT_EQ(written.dtype, npy::Dtype::u16);  // bf16 stored as raw bits
  EXPECT_EQ(written.bytes, after.arrays.at("out").bytes);
}

TEST(CaseFile, ConfigJsonRoundTripsEveryField) {
  CaseConfig k = small_thd_case().config;
  k.op = Op::kv_split_backward;
  k.k_dim = 3;
  k.v_dim = 0;
  k.in_layout = PairLayout::half;
  k.out_layout = PairLayout::interleaved;
  k.table_layout = PairLayout::interleaved;
  k.inverse = true;
  k.cp_size = 4;
  k.cp_rank = 3;
  k.freq_mode = FreqMode::packed;
  EXPECT_EQ(to_json(parse_config(to_json(k), "x")), to_json(k));
}

TEST(CaseFile, MissingCaseJsonIsNamed) {
  TempDir tmp;
  expect_read_error(tmp.path(), {"case.json", "cannot open"});
}

TEST(CaseFile, InvalidJsonIsNamed) {
  TempDir tmp;
  std::ofstream(tmp.path() / "case.json") << "{\"op\": ";
  expect_read_error(tmp.path(), {"case.json", "not valid JSON"});
}

TEST(CaseFile, MissingKeyIsNamed) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  rewrite_json(tmp.path(), [](nlohmann::json& j) { j.erase("emb_dim"); });
  expect_read_error(tmp.path(), {"case.json", "missing key 'emb_dim'"});
}

TEST(CaseFile, UnknownKeyIsNamedWithTheNearestKnownKey) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  rewrite_json(tmp.path(), [](nlohmann::json& j) { j["cp_szie"] = 2; });
  expect_read_error(tmp.path(), {"case.json", "unknown key 'cp_szie'", "did you mean 'cp_size'"});
  rewrite_json(tmp.path(), [](nlohmann::json& j) {
    j.erase("cp_szie");
    j["maxseqlen"] = 8;
  });
  expect_read_error(tmp.path(), {"unknown key 'maxseqlen'", "did you mean 'max_seqlen'"});
  rewrite_json(tmp.path(), [](nlohmann::json& j) {
    j.erase("maxseqlen");
    j["comment"] = "far from every key";
  });
  expect_read_error(tmp.path(), {"unknown key 'comment'", "not one of docs/semantics.md"});
  rewrite_json(tmp.path(), [](nlohmann::json& j) {
    j.erase("comment");
    j["inputs"]["postion_ids"] = "position_ids.npy";
  });
  expect_read_error(tmp.path(), {"unknown input 'postion_ids'", "did you mean 'position_ids'"});
  rewrite_json(tmp.path(), [](nlohmann::json& j) { j["inputs"].erase("postion_ids"); });
  EXPECT_NO_THROW(read_case(tmp.path()));
}

TEST(CaseFile, UnknownOpIsNamed) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  rewrite_json(tmp.path(), [](nlohmann::json& j) { j["op"] = "rope_forward"; });
  expect_read_error(tmp.path(), {"op = 'rope_forward'", "expected rope"});
}

TEST(CaseFile, WrongValueTypesAndSpellingsAreNamed) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  rewrite_json(tmp.path(), [](nlohmann::json& j) { j["nope_dim"] = "4"; });
  expect_read_error(tmp.path(), {"'nope_dim' must be an integer"});
  rewrite_json(tmp.path(), [](nlohmann::json& j) {
    j["nope_dim"] = 4;
    j["dtype"] = "bfloat16";
  });
  expect_read_error(tmp.path(), {"dtype = 'bfloat16'", "f32, f16 or bf16"});
}

TEST(CaseFile, InputThatTheOpNeedsMustBeListed) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  rewrite_json(tmp.path(), [](nlohmann::json& j) { j["inputs"].erase("cu_seqlens"); });
  expect_read_error(tmp.path(), {"no 'cu_seqlens'", "THD"});
}

TEST(CaseFile, MissingNpyFileIsNamed) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  fs::remove(tmp.path() / "sin.npy");
  expect_read_error(tmp.path(), {"sin.npy", "cannot open"});
}

TEST(CaseFile, TruncatedNpyFileIsNamed) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  fs::resize_file(tmp.path() / "t.npy", fs::file_size(tmp.path() / "t.npy") - 6);
  expect_read_error(tmp.path(), {"t.npy", "truncated"});
}

TEST(CaseFile, BadMagicIsNamed) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  std::ofstream(tmp.path() / "cos.npy") << "PK\x03\x04 not numpy";
  expect_read_error(tmp.path(), {"cos.npy", "magic"});
}

TEST(CaseFile, DtypeThatDisagreesWithTheJsonIsNamed) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  rewrite_json(tmp.path(), [](nlohmann::json& j) { j["dtype"] = "f32"; });
  expect_read_error(tmp.path(), {"t.npy", "<u2", "dtype f32"});
}

TEST(CaseFile, ShapeThatDisagreesWithTheJsonIsNamed) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  rewrite_json(tmp.path(), [](nlohmann::json& j) { j["nope_dim"] = 2; });
  expect_read_error(tmp.path(), {"t.npy", "last dim 10", "nope_dim + emb_dim = 8"});
  rewrite_json(tmp.path(), [](nlohmann::json& j) {
    j["nope_dim"] = 4;
    j["layout"] = "sbhd";
  });
  expect_read_error(tmp.path(), {"t.npy", "rank 3", "expected 4"});
}

TEST(CaseFile, InPlaceKvSplitIsRejected) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  rewrite_json(tmp.path(), [](nlohmann::json& j) {
    j["op"] = "kv_split";
    j["in_place"] = true;
    j["k_dim"] = 1;
    j["v_dim"] = 1;
  });
  expect_read_error(tmp.path(), {"in_place = true", "kv_split"});
}

// A size key at 2^62 or 2^63 - 1 is named before any shape is made from it (the output of a
// kv_split with k_dim 2^63 - 1 would have a last dim k_dim + emb_dim), and one beyond a signed
// 64-bit integer too.
TEST(CaseFile, SizesBeyondTheLargestAreNamedBeforeAnyShapeIsMade) {
  TempDir tmp;
  write_case(tmp.path(), small_thd_case());
  for (const char* key : {"emb_dim", "nope_dim"})
    for (std::int64_t value : {std::int64_t{1} << 62, INT64_MAX}) {
      rewrite_json(tmp.path(), [&](nlohmann::json& j) {
        j["emb_dim"] = 4;
        j["nope_dim"] = 4;
        j[key] = value;
      });
      expect_read_error(tmp.path(),
                        {"case.json", std::string(key) + " = " + std::to_string(value), "2^61"});
    }
  rewrite_json(tmp.path(), [](nlohmann::json& j) {
    j["emb_dim"] = 4;
    j["op"] = "kv_split";
    j.erase("nope_dim");
    j["k_dim"] = 1;
    j["v_dim"] = 1;
  });
  for (const char* key : {"k_dim", "v_dim"})
    for (std::int64_t value : {std::int64_t{1} << 62, INT64_MAX}) {
      rewrite_json(tmp.path(), [&](nlohmann::json& j) {
        j["k_dim"] = 1;
        j["v_dim"] = 1;
        j[key] = value;
      });
      expect_read_error(tmp.path(),
                        {"case.json", std::string(key) + " = " + std::to_string(value)});
    }
  rewrite_json(tmp.path(), [](nlohmann::json& j) { j["k_dim"] = std::uint64_t{1} << 63; });
  expect_read_error(tmp.path(),
                    {"'k_dim' = 9223372036854775808", "beyond a 64-bit signed integer"});
}

TEST(CaseFile, InvalidCallIsRejectedByTheBackendWithTheArgumentNamed) {
  Case c = small_thd_case();
  c.config.cp_size = 2;
  c.config.cp_rank = 2;
  try {
    run_case(c, reference_backend());
    ADD_FAILURE() << "cp_rank 2 of 2 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cp_rank"), std::string::npos) << e.what();
  }
}

}  // namespace

// A case may name a YaRN table ("yarn" in case.json) instead of shipping cos.npy and sin.npy:
// reading it makes the tables with the reference, and it runs like the shipped case.
TEST(CaseFile, YarnNamedTablesReadLikeShippedOnes) {
  TempDir tmp;
  Case shipped = small_thd_case();
  YarnTable y;
  y.rows = 5;
  y.offset = 3;
  y.params.scaling_factor = 40;
  y.params.original_max_position_embeddings = 64;
  y.params.mscale = 1.0;
  y.params.mscale_all_dim = 0.5;
  auto [cos, sin] = yarn_arrays(y, 6, DType::f32, PairLayout::half);
  shipped.arrays["cos"] = cos;
  shipped.arrays["sin"] = sin;
  Case named = shipped;
  named.config.yarn = y;
  named.config.inputs.erase("cos");
  named.config.inputs.erase("sin");
  write_case(tmp.path() / "named", named);
  EXPECT_FALSE(fs::exists(tmp.path() / "named" / "cos.npy"));
  const Case back = read_case(tmp.path() / "named");
  EXPECT_EQ(back.arrays.at("cos").bytes, cos.bytes);
  EXPECT_EQ(back.arrays.at("sin").bytes, sin.bytes);
  ASSERT_TRUE(back.config.yarn);
  EXPECT_EQ(back.config.yarn->offset, 3);
  EXPECT_EQ(back.config.yarn->params.mscale_all_dim, 0.5);
  EXPECT_EQ(run_case(back, reference_backend()).arrays.at("out").bytes,
            run_case(shipped, reference_backend()).arrays.at("out").bytes);
  // Both ways at once, an unknown parameter: named errors; too few rows: the call is refused.
  write_case(tmp.path() / "both", shipped);
  rewrite_json(tmp.path() / "both", [&](nlohmann::json& j) { j["yarn"] = to_json(y); });
  expect_read_error(tmp.path() / "both", {"inputs.cos and yarn both given"});
  rewrite_json(tmp.path() / "named", [](nlohmann::json& j) { j["yarn"]["beta_fats"] = 1; });
  expect_read_error(tmp.path() / "named", {"yarn", "beta_fats", "beta_fast"});
  rewrite_json(tmp.path() / "named", [](nlohmann::json& j) {
    j["yarn"].erase("beta_fats");
    j["yarn"]["rows"] = 2;
  });
  EXPECT_THROW(run_case(read_case(tmp.path() / "named"), reference_backend()), Error);
}
