// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "io/cases_dir.h"
#include "io/npy.h"

namespace {

namespace fs = std::filesystem;
namespace npy = mlarope::npy;
using namespace std::string_literals;

constexpr npy::Dtype kAllDtypes[] = {npy::Dtype::f16, npy::Dtype::f32, npy::Dtype::f64,
                                     npy::Dtype::u16, npy::Dtype::i32, npy::Dtype::i64};

/// The message of the npy::Error that `action` throws, or "" (and a test failure) if none.
std::string error_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const npy::Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected npy::Error";
  return "";
}

/// A .npy file with `header_dict` padded as numpy does and `data_size` zero data bytes.
std::string npy_file(const std::string& header_dict, std::size_t data_size, int major = 1) {
  const std::size_t preamble_size = major == 1 ? 10 : 12;
  std::string header = header_dict;
  header.append(63 - (preamble_size + header.size()) % 64, ' ');
  header += '\n';
  std::string result = "\x93NUMPY"s + static_cast<char>(major) + '\0';
  for (std::size_t index = 0; index < preamble_size - 8; ++index) {
    result += static_cast<char>((header.size() >> (8 * index)) & 0xff);
  }
  return result + header + std::string(data_size, '\0');
}

/// An array of `dtype` and `shape` whose bytes are 0, 1, 2, ... (mod 256).
npy::Array patterned(npy::Dtype dtype, std::vector<int64_t> shape) {
  npy::Array array = npy::make(dtype, std::move(shape));
  for (std::size_t index = 0; index < array.bytes.size(); ++index) {
    array.bytes[index] = static_cast<std::byte>(index * 7 + 3);
  }
  return array;
}

void expect_equal(const npy::Array& expected, const npy::Array& actual) {
  EXPECT_EQ(expected.dtype, actual.dtype);
  EXPECT_EQ(expected.shape, actual.shape);
  EXPECT_EQ(expected.bytes, actual.bytes);
}

std::string file_contents(const fs::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

TEST(NpyDtype, SizesAndDescriptors) {
  const std::pair<std::string_view, std::size_t> expected[] = {{"<f2", 2}, {"<f4", 4}, {"<f8", 8},
                                                               {"<u2", 2}, {"<i4", 4}, {"<i8", 8}};
  for (std::size_t index = 0; index < std::size(kAllDtypes); ++index) {
    EXPECT_EQ(npy::dtype_descr(kAllDtypes[index]), expected[index].first);
    EXPECT_EQ(npy::dtype_size(kAllDtypes[index]), expected[index].second);
  }
}

TEST(NpyMake, ZeroFilledWithSizes) {
  const npy::Array scalar = npy::make(npy::Dtype::f64, {});
  EXPECT_EQ(scalar.size(), 1);
  EXPECT_EQ(scalar.bytes, std::vector<std::byte>(8));
  const npy::Array empty = npy::make(npy::Dtype::i32, {0, 3});
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(empty.bytes.empty());
  npy::Array matrix = npy::make(npy::Dtype::i64, {2, 3});
  EXPECT_EQ(matrix.size(), 6);
  matrix.data<int64_t>()[5] = -2;
  EXPECT_EQ(std::as_const(matrix).data<int64_t>()[5], -2);
  EXPECT_EQ(matrix.data<int64_t>()[0], 0);
}

TEST(NpyMake, RejectsNegativeAndOverflowingShapes) {
  EXPECT_NE(error_message([] {
              npy::make(npy::Dtype::f32, {2, -1});
            }).find("invalid shape [2, -1]"),
            std::string::npos);
  EXPECT_NE(error_message([] {
              npy::make(npy::Dtype::f32, {1LL << 40, 1LL << 40});
            }).find("invalid shape"),
            std::string::npos);
  EXPECT_NE(error_message([] { npy::make(npy::Dtype::f64, {1LL << 61}); }).find("too large"),
            std::string::npos);
}

TEST(NpySerialize, RoundTripsEveryDtypeAndShape) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {0, 3}, {5}, {2, 3}, {2, 1, 3, 4}};
  for (npy::Dtype dtype : kAllDtypes) {
    for (const std::vector<int64_t>& shape : shapes) {
      SCOPED_TRACE(std::string(npy::dtype_descr(dtype)) + " ndim " + std::to_string(shape.size()));
      const npy::Array array = patterned(dtype, shape);
      const std::string bytes = npy::serialize(array);
      const std::size_t header_length =
          static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
      EXPECT_EQ((10 + header_length) % 64, 0u);
      EXPECT_EQ(bytes[10 + header_length - 1], '\n');
      EXPECT_EQ(bytes.size(), 10 + header_length + array.bytes.size());
      expect_equal(array, npy::parse(bytes, "memory"));
    }
  }
}

TEST(NpySerialize, MatchesNumpyBytes) {
  // np.save(f, np.arange(6, dtype='<i4').reshape(2, 3)) with numpy 1.x or 2.x.
  const std::string expected = "\x93NUMPY\x01\x00\x76\x00"s +
                               "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }" +
                               std::string(58, ' ') + "\n" +
                               "\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00"
                               "\x03\x00\x00\x00\x04\x00\x00\x00\x05\x00\x00\x00"s;
  ASSERT_EQ(expected.size(), 128u + 24u);
  npy::Array array = npy::make(npy::Dtype::i32, {2, 3});
  for (int32_t index = 0; index < 6; ++index) array.data<int32_t>()[index] = index;
  EXPECT_EQ(npy::serialize(array), expected);
  const npy::Array parsed = npy::parse(expected, "arange.npy");
  expect_equal(array, parsed);
  EXPECT_EQ(parsed.data<int32_t>()[4], 4);
}

TEST(NpySerialize, ScalarHeaderMatchesNumpy) {
  // np.save(f, np.float64(1.5)): no growth padding for a 0-d array.
  const std::string bytes = npy::serialize(npy::make(npy::Dtype::f64, {}));
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (), }";
  EXPECT_EQ(bytes.substr(10),
            dict + std::string(128 - 10 - dict.size() - 1, ' ') + "\n" + std::string(8, '\0'));
}

TEST(NpySerialize, RejectsInconsistentByteCount) {
  npy::Array array = npy::make(npy::Dtype::i32, {2, 3});
  array.bytes.resize(10);
  EXPECT_EQ(error_message([&] { npy::serialize(array); }),
            "serialize: array has 10 bytes, but shape [2, 3] of <i4 needs 24");
}

TEST(NpyParse, Version2Header) {
  const std::string bytes =
      npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", 24, /*major=*/2);
  ASSERT_EQ(bytes[6], '\x02');
  const npy::Array array = npy::parse(bytes, "v2.npy");
  EXPECT_EQ(array.dtype, npy::Dtype::f64);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(array.bytes.size(), 24u);
}

TEST(NpyParse, HeaderVariants) {
  const std::pair<std::string, std::vector<int64_t>> cases[] = {
      {"{'shape': (2, 3), 'fortran_order': False, 'descr': '<u2'}", {2, 3}},
      {"{ \"descr\" : \"<u2\" , 'fortran_order':False,'shape':( 4 , ) , }", {4}},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (1, 2, 3,), }", {1, 2, 3}},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (3L, 1L), }", {3, 1}},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (), }", {}},
  };
  for (const auto& [dict, shape] : cases) {
    SCOPED_TRACE(dict);
    int64_t count = 1;
    for (int64_t dimension : shape) count *= dimension;
    const npy::Array array = npy::parse(npy_file(dict, 2 * count), "variant.npy");
    EXPECT_EQ(array.dtype, npy::Dtype::u16);
    EXPECT_EQ(array.shape, shape);
  }
}

TEST(NpyParse, MalformedHeaders) {
  const std::pair<std::string, std::string> cases[] = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4), }", "'shape' is not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", "negative dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
       "dimension overflows"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
       "invalid shape [4294967296, 4294967296]"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (), }",
       "duplicate key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}",
       "unexpected key 'extra'"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (), }", "expected True or False"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (), }", "structured dtypes"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (), } x", "unexpected text after '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (", "at the end of the header"},
      {"{'descr: '<f4'", "expected ':' after key 'descr: '"},
      {"['descr', '<f4']", "expected '{'"},
  };
  for (const auto& [dict_binding, reason] : cases) {
    const std::string& dict = dict_binding;  // a lambda captures it: no structured binding
    SCOPED_TRACE(dict);
    const std::string message = error_message([&] { npy::parse(npy_file(dict, 4), "bad.npy"); });
    EXPECT_EQ(message.rfind("bad.npy: ", 0), 0u) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << message;
  }
}

TEST(NpyParse, UnsupportedVersion) {
  std::string bytes = npy::serialize(npy::make(npy::Dtype::f32, {1}));
  bytes[6] = '\x03';
  EXPECT_EQ(error_message([&] { npy::parse(bytes, "v3.npy"); }),
            "v3.npy: unsupported format version 3.0 (expected 1.0 or 2.0)");
}

/// Tests that need files: each gets a fresh directory under the system temp directory.
class NpyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device random;
    directory_ = fs::temp_directory_path() /
                 ("npy_test_" + std::to_string(random()) + "_" + std::to_string(random()));
    ASSERT_TRUE(fs::create_directory(directory_));
  }

  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }

  /// Writes `contents` to `t.npy` and returns the error message that reading it gives.
  std::string read_error(const std::string& contents) {
    const fs::path path = directory_ / "t.npy";
    std::ofstream(path, std::ios::binary) << contents;
    std::string message = error_message([&] { npy::read(path); });
    EXPECT_EQ(message.rfind(path.string() + ": ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }

  std::vector<fs::path> directory_entries() const {
    return {fs::directory_iterator(directory_), fs::directory_iterator()};
  }

  fs::path directory_;
};

TEST_F(NpyFileTest, WriteAndReadEveryDtype) {
  for (npy::Dtype dtype : kAllDtypes) {
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{}, {0, 3}, {3, 4}}) {
      const fs::path path = directory_ / "array.npy";
      const npy::Array array = patterned(dtype, shape);
      npy::write(path, array);
      expect_equal(array, npy::read(path));
      EXPECT_EQ(directory_entries(), std::vector<fs::path>{path}) << "temporary file left behind";
    }
  }
}

TEST_F(NpyFileTest, WriteFailureLeavesNoFile) {
  const fs::path missing = directory_ / "missing" / "a.npy";
  const std::string message =
      error_message([&] { npy::write(missing, npy::make(npy::Dtype::f32, {2})); });
  EXPECT_EQ(message.rfind(missing.string() + ": cannot create temporary file", 0), 0u) << message;
  EXPECT_NE(message.find("No such file or directory"), std::string::npos) << message;

  const fs::path occupied = directory_ / "occupied.npy";
  fs::create_directories(occupied / "child");
  const std::string rename_message =
      error_message([&] { npy::write(occupied, npy::make(npy::Dtype::f32, {2})); });
  EXPECT_EQ(rename_message.rfind(occupied.string() + ": cannot rename", 0), 0u) << rename_message;
  EXPECT_EQ(directory_entries(), std::vector<fs::path>{occupied});
}

TEST_F(NpyFileTest, BadMagic) {
  EXPECT_NE(read_error("PK\x03\x04 not numpy at all").find(": bad magic (not a .npy file)"),
            std::string::npos);
  EXPECT_NE(read_error("").find(": file is empty"), std::string::npos);
}

TEST_F(NpyFileTest, UnsupportedDtype) {
  const std::string message =
      read_error(npy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16));
  EXPECT_NE(message.find(": unsupported dtype '<c8' (expected one of <f2 <f4 <f8 <u2 <i4 <i8)"),
            std::string::npos)
      << message;
}

TEST_F(NpyFileTest, BigEndian) {
  const std::string message =
      read_error(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8));
  EXPECT_NE(message.find(": big-endian dtype '>f4' is not supported"), std::string::npos)
      << message;
}

TEST_F(NpyFileTest, TruncatedData) {
  const std::string message =
      read_error(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 6), }", 40));
  EXPECT_NE(message.find(": truncated data: header says 24 elements of 4 bytes (96 bytes), "
                         "file has 40"),
            std::string::npos)
      << message;
}

TEST_F(NpyFileTest, TrailingBytes) {
  const std::string message =
      read_error(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", 19));
  EXPECT_NE(message.find(": 3 trailing bytes after data"), std::string::npos) << message;
}

TEST_F(NpyFileTest, FortranOrder) {
  const std::string message =
      read_error(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16));
  EXPECT_NE(message.find(": fortran_order arrays are not supported"), std::string::npos) << message;
}

TEST_F(NpyFileTest, MissingKey) {
  const std::string message = read_error(npy_file("{'descr': '<f4', 'fortran_order': False}", 4));
  EXPECT_NE(message.find(": malformed header: missing 'shape'"), std::string::npos) << message;
}

TEST_F(NpyFileTest, TruncatedHeader) {
  const std::string whole = npy::serialize(npy::make(npy::Dtype::f32, {2, 3}));
  EXPECT_NE(read_error(whole.substr(0, 50))
                .find(": truncated header: header length is 118 bytes, file has 40 after the "
                      "preamble"),
            std::string::npos);
  EXPECT_NE(read_error(whole.substr(0, 9)).find(": truncated header: no header length"),
            std::string::npos);
  EXPECT_NE(read_error(whole.substr(0, 7)).find(": truncated header: no version bytes"),
            std::string::npos);
}

TEST_F(NpyFileTest, NonexistentFile) {
  const fs::path path = directory_ / "absent.npy";
  EXPECT_EQ(error_message([&] { npy::read(path); }),
            path.string() + ": cannot open: No such file or directory");
}

TEST_F(NpyFileTest, DirectoryIsNotAFile) {
  EXPECT_EQ(error_message([&] { npy::read(directory_); }),
            directory_.string() + ": cannot read: Is a directory");
}

/// The Megatron case directory ($MLAROPE_CASES_DIR, else CMake's), or empty when neither is set.
fs::path cases_directory() { return fs::path(mlarope::harness::megatron_cases_dir()); }

TEST(NpyCases, ReadsCuSeqlens) {
  const fs::path directory = cases_directory();
  const fs::path path = directory / "case_003" / "cu_seqlens.npy";
  if (directory.empty() || !fs::exists(path)) GTEST_SKIP() << "MLAROPE_CASES_DIR/case_003 absent";
  const npy::Array array = npy::read(path);
  EXPECT_EQ(array.dtype, npy::Dtype::i32);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(array.data<int32_t>()[0], 0);
}

TEST(NpyCases, ReserializesNumpyFilesByteForByte) {
  const fs::path directory = cases_directory() / "case_000";
  if (cases_directory().empty() || !fs::is_directory(directory)) {
    GTEST_SKIP() << "MLAROPE_CASES_DIR/case_000 absent";
  }
  int checked = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory)) {
    if (entry.path().extension() != ".npy") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_EQ(npy::serialize(npy::read(entry.path())), file_contents(entry.path()));
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
