// SPDX-License-Identifier: Apache-2.0
#include "io/npy.h"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <system_error>
#include <utility>

#include "mlarope/types.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mlarope::npy assumes a little-endian host"
#endif

namespace mlarope::npy {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::size_t kArrayAlign = 64;            // numpy's ARRAY_ALIGN
constexpr std::size_t kGrowthAxisMaxDigits = 21;   // numpy's GROWTH_AXIS_MAX_DIGITS
constexpr std::size_t kVersion1PreambleSize = 10;  // magic, version, u16 header length

struct DtypeInfo {
  std::string_view descr;
  std::size_t size;
};

/// Indexed by Dtype.
constexpr std::array<DtypeInfo, 6> kDtypes = {
    {{"<f2", 2}, {"<f4", 4}, {"<f8", 8}, {"<u2", 2}, {"<i4", 4}, {"<i8", 8}}};

const DtypeInfo& info(Dtype dtype) {
  const auto index = static_cast<std::size_t>(dtype);
  if (index >= kDtypes.size()) throw Error("invalid Dtype value " + std::to_string(index));
  return kDtypes[index];
}

/// Text safe to put in a one-line message: control and non-ASCII bytes become '?'.
std::string printable(std::string_view text) {
  std::string result(text);
  for (char& character : result) {
    if (character < 0x20 || character > 0x7e) character = '?';
  }
  return result;
}

/// The Python repr of a shape tuple: (), (4,), (2, 3).
// The shape as the .npy header writes it: a Python tuple, "(2, 3)", "(5,)", "()".
std::string python_tuple(const std::vector<int64_t>& shape) {
  std::string result = "(";
  for (std::size_t index = 0; index < shape.size(); ++index) {
    if (index > 0) result += ", ";
    result += std::to_string(shape[index]);
  }
  return result + (shape.size() == 1 ? ",)" : ")");
}

/// Product of the shape, or nothing when a dimension is negative or it does not fit int64.
std::optional<int64_t> element_count(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  bool has_zero = false;
  for (int64_t dimension : shape) {
    if (dimension < 0) return std::nullopt;
    if (dimension == 0) has_zero = true;
  }
  if (has_zero) return 0;
  for (int64_t dimension : shape) {
    if (count > std::numeric_limits<int64_t>::max() / dimension) return std::nullopt;
    count *= dimension;
  }
  return count;
}

/// Number of data bytes for `shape` of `dtype`; fails when it is negative or overflows.
std::size_t checked_byte_count(Dtype dtype, const std::vector<int64_t>& shape,
                               const std::string& name) {
  const std::optional<int64_t> count = element_count(shape);
  if (!count)
    throw Error(name + ": invalid shape " + shape_string(shape) + " (negative or overflowing)");
  const auto item_size = static_cast<int64_t>(dtype_size(dtype));
  if (*count > std::numeric_limits<int64_t>::max() / item_size) {
    throw Error(name + ": shape " + shape_string(shape) + " is too large");
  }
  return static_cast<std::size_t>(*count * item_size);
}

bool is_digit(char character) { return character >= '0' && character <= '9'; }

bool is_space(char character) {
  return character == ' ' || character == '\t' || character == '\n' || character == '\r';
}

struct Header {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

/// Parses the Python dict literal of a .npy header, never reading outside `text`.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::size_t file_offset, const std::string& name)
      : text_(text), file_offset_(file_offset), name_(name) {}

  Header parse() {
    Header header;
    skip_space();
    expect('{', "at the start of the header");
    parse_list('}', "in the header", [&] { parse_entry(header); });
    skip_space();
    if (position_ < text_.size()) fail_here("unexpected text after '}'");
    return header;
  }

 private:
  [[noreturn]] void fail_here(const std::string& what) const {
    const std::string where = position_ < text_.size()
                                  ? "at byte " + std::to_string(file_offset_ + position_)
                                  : "at the end of the header";
    throw Error(name_ + ": malformed header: " + what + " " + where);
  }

  char peek() const { return position_ < text_.size() ? text_[position_] : '\0'; }

  void skip_space() {
    while (position_ < text_.size() && is_space(text_[position_])) ++position_;
  }

  void expect(char wanted, const std::string& context) {
    if (peek() != wanted) fail_here(std::string("expected '") + wanted + "' " + context);
    ++position_;
  }

  std::string parse_string(const std::string& what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail_here("expected a quoted " + what);
    const std::size_t end = text_.find(quote, position_ + 1);
    if (end == std::string_view::npos) fail_here("unterminated " + what);
    std::string value(text_.substr(position_ + 1, end - position_ - 1));
    position_ = end + 1;
    return value;
  }

  /// Parses items separated by commas up to `close`; returns whether a comma followed the last.
  template <class ParseItem>
  bool parse_list(char close, const std::string& context, ParseItem parse_item) {
    bool comma_after_last = false;
    skip_space();
    while (peek() != close) {
      parse_item();
      skip_space();
      comma_after_last = peek() == ',';
      if (comma_after_last) {
        ++position_;
        skip_space();
      } else if (peek() != close) {
        fail_here(std::string("expected ',' or '") + close + "' " + context);
      }
    }
    ++position_;
    return comma_after_last;
  }

  bool parse_bool() {
    if (text_.substr(position_, 4) == "True") {
      position_ += 4;
      return true;
    }
    if (text_.substr(position_, 5) == "False") {
      position_ += 5;
      return false;
    }
    fail_here("expected True or False for 'fortran_order'");
  }

  int64_t parse_dimension() {
    if (peek() == '-') fail_here("negative dimension in 'shape'");
    if (!is_digit(peek())) fail_here("expected a dimension in 'shape'");
    int64_t value = 0;
    while (is_digit(peek())) {
      const int digit = peek() - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        fail_here("dimension overflows int64 in 'shape'");
      }
      value = value * 10 + digit;
      ++position_;
    }
    if (peek() == 'L') ++position_;  // Python 2 long suffix, as in (3L, 4L)
    return value;
  }

  std::vector<int64_t> parse_shape() {
    expect('(', "for 'shape'");
    std::vector<int64_t> shape;
    const bool comma_after_last =
        parse_list(')', "in 'shape'", [&] { shape.push_back(parse_dimension()); });
    if (shape.size() == 1 && !comma_after_last) fail_here("'shape' is not a tuple");
    return shape;
  }

  void parse_entry(Header& header) {
    const std::size_t key_position = position_;
    const std::string key = parse_string("key");
    if (!seen_keys_.insert(key).second) fail_here("duplicate key '" + printable(key) + "'");
    skip_space();
    expect(':', "after key '" + printable(key) + "'");
    skip_space();
    if (key == "descr") {
      if (peek() != '\'' && peek() != '"') {
        fail_here("'descr' is not a string (structured dtypes are not supported)");
      }
      header.descr = parse_string("'descr'");
    } else if (key == "fortran_order") {
      header.fortran_order = parse_bool();
    } else if (key == "shape") {
      header.shape = parse_shape();
    } else {
      position_ = key_position;
      fail_here("unexpected key '" + printable(key) + "'");
    }
  }

  std::string_view text_;
  std::size_t file_offset_;
  const std::string& name_;
  std::size_t position_ = 0;
  std::set<std::string> seen_keys_;
};

struct Preamble {
  std::size_t header_start = 0;
  std::size_t header_length = 0;
};

/// Checks the magic and version and decodes the header length.
Preamble parse_preamble(std::string_view bytes, const std::string& name) {
  if (bytes.empty()) throw Error(name + ": file is empty (not a .npy file)");
  if (bytes.substr(0, kMagic.size()) != kMagic) throw Error(name + ": bad magic (not a .npy file)");
  if (bytes.size() < kMagic.size() + 2) throw Error(name + ": truncated header: no version bytes");
  const auto major = static_cast<unsigned char>(bytes[6]);
  const auto minor = static_cast<unsigned char>(bytes[7]);
  if ((major != 1 && major != 2) || minor != 0) {
    throw Error(name + ": unsupported format version " + std::to_string(major) + "." +
                std::to_string(minor) + " (expected 1.0 or 2.0)");
  }
  const std::size_t length_size = major == 1 ? 2 : 4;
  Preamble preamble;
  preamble.header_start = 8 + length_size;
  if (bytes.size() < preamble.header_start)
    throw Error(name + ": truncated header: no header length");
  for (std::size_t index = 0; index < length_size; ++index) {
    const auto byte = static_cast<unsigned char>(bytes[8 + index]);
    preamble.header_length |= static_cast<std::size_t>(byte) << (8 * index);
  }
  const std::size_t available = bytes.size() - preamble.header_start;
  if (available < preamble.header_length) {
    throw Error(name + ": truncated header: header length is " +
                std::to_string(preamble.header_length) + " bytes, file has " +
                std::to_string(available) + " after the preamble");
  }
  return preamble;
}

Dtype dtype_from_descr(const std::string& descr, const std::string& name) {
  std::string expected;
  for (std::size_t index = 0; index < kDtypes.size(); ++index) {
    if (kDtypes[index].descr == descr) return static_cast<Dtype>(index);
    expected += (expected.empty() ? "" : " ") + std::string(kDtypes[index].descr);
  }
  if (!descr.empty() && descr[0] == '>') {
    throw Error(name + ": big-endian dtype '" + printable(descr) + "' is not supported (only '<')");
  }
  throw Error(name + ": unsupported dtype '" + printable(descr) + "' (expected one of " + expected +
              ")");
}

/// Checks a parsed header for completeness and support; returns an empty array of its type.
Array array_from_header(const Header& header, const std::string& name) {
  for (const auto& [present, key] : {std::pair{header.descr.has_value(), "descr"},
                                     std::pair{header.fortran_order.has_value(), "fortran_order"},
                                     std::pair{header.shape.has_value(), "shape"}}) {
    if (!present) throw Error(name + ": " + std::string("malformed header: missing '") + key + "'");
  }
  Array array;
  array.dtype = dtype_from_descr(*header.descr, name);
  if (*header.fortran_order) throw Error(name + ": fortran_order arrays are not supported");
  array.shape = *header.shape;
  return array;
}

/// The header text numpy writes: dict, growth spaces, padding to kArrayAlign, newline.
std::string header_text(const Array& array) {
  std::string header = "{'descr': '" + std::string(dtype_descr(array.dtype)) +
                       "', 'fortran_order': False, 'shape': " + python_tuple(array.shape) + ", }";
  if (!array.shape.empty()) {
    header.append(kGrowthAxisMaxDigits - std::to_string(array.shape[0]).size(), ' ');
  }
  const std::size_t unpadded = kVersion1PreambleSize + header.size() + 1;
  header.append(kArrayAlign - unpadded % kArrayAlign, ' ');
  return header + '\n';
}

std::string serialize_named(const Array& array, const std::string& name) {
  const std::size_t byte_count = checked_byte_count(array.dtype, array.shape, name);
  if (array.bytes.size() != byte_count) {
    throw Error(name + ": array has " + std::to_string(array.bytes.size()) + " bytes, but shape " +
                shape_string(array.shape) + " of " + std::string(dtype_descr(array.dtype)) +
                " needs " + std::to_string(byte_count));
  }
  const std::string header = header_text(array);
  if (header.size() > 0xffff) throw Error(name + ": header too long for format version 1.0");
  std::string result(kMagic);
  result += {'\x01', '\x00', static_cast<char>(header.size() & 0xff),
             static_cast<char>(header.size() >> 8)};
  result += header;
  result.append(reinterpret_cast<const char*>(array.bytes.data()), array.bytes.size());
  return result;
}

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using FilePointer = std::unique_ptr<std::FILE, FileCloser>;

std::string read_file(const fs::path& path, const std::string& name) {
  FilePointer file(std::fopen(path.c_str(), "rb"));
  if (!file) throw Error(name + ": " + std::string("cannot open: ") + std::strerror(errno));
  std::string contents;
  std::array<char, 1 << 16> chunk;
  while (const std::size_t count = std::fread(chunk.data(), 1, chunk.size(), file.get())) {
    contents.append(chunk.data(), count);
  }
  if (std::ferror(file.get()))
    throw Error(name + ": " + std::string("cannot read: ") + std::strerror(errno));
  return contents;
}

/// A fresh name beside `path`: ".<file name>.tmp-<random digits>".
fs::path temporary_path_for(const fs::path& path) {
  std::random_device random;
  const std::string suffix = std::to_string(random()) + std::to_string(random());
  return path.parent_path() / ("." + path.filename().string() + ".tmp-" + suffix);
}

/// Writes `contents` to a new file at `path` (which must not exist); removes it on failure.
void write_new_file(const fs::path& path, const std::string& contents, const std::string& name) {
  std::FILE* file = std::fopen(path.c_str(), "wbx");
  if (!file) {
    throw Error(name + ": " + std::string("cannot create temporary file '") + path.string() +
                "': " + std::strerror(errno));
  }
  const bool written = std::fwrite(contents.data(), 1, contents.size(), file) == contents.size();
  const int write_error = errno;
  if (std::fclose(file) != 0 || !written) {
    const int error = written ? errno : write_error;
    std::error_code ignored;
    fs::remove(path, ignored);
    throw Error(name + ": " + std::string("cannot write: ") + std::strerror(error));
  }
}

}  // namespace

std::size_t dtype_size(Dtype dtype) { return info(dtype).size; }

std::string_view dtype_descr(Dtype dtype) { return info(dtype).descr; }

int64_t Array::size() const { return element_count(shape).value_or(-1); }

Array parse(std::string_view bytes, const std::string& name_for_errors) {
  const std::string& name = name_for_errors;
  const Preamble preamble = parse_preamble(bytes, name);
  const std::string_view text = bytes.substr(preamble.header_start, preamble.header_length);
  Array array = array_from_header(HeaderParser(text, preamble.header_start, name).parse(), name);
  const std::size_t needed = checked_byte_count(array.dtype, array.shape, name);
  const std::size_t data_start = preamble.header_start + preamble.header_length;
  const std::size_t available = bytes.size() - data_start;
  if (available < needed) {
    throw Error(name + ": truncated data: header says " + std::to_string(array.size()) +
                " elements of " + std::to_string(dtype_size(array.dtype)) + " bytes (" +
                std::to_string(needed) + " bytes), file has " + std::to_string(available));
  }
  if (available > needed) {
    throw Error(name + ": " + std::to_string(available - needed) + " trailing bytes after data");
  }
  const auto* data = reinterpret_cast<const std::byte*>(bytes.data() + data_start);
  array.bytes.assign(data, data + needed);
  return array;
}

Array read(const std::filesystem::path& path) {
  const std::string name = path.string();
  return parse(read_file(path, name), name);
}

std::string serialize(const Array& array) { return serialize_named(array, "serialize"); }

void write(const std::filesystem::path& path, const Array& array) {
  const std::string name = path.string();
  const std::string contents = serialize_named(array, name);
  const fs::path temporary = temporary_path_for(path);
  write_new_file(temporary, contents, name);
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    throw Error(name + ": cannot rename temporary file into place: " + error.message());
  }
}

Array make(Dtype dtype, std::vector<int64_t> shape) {
  Array array;
  array.dtype = dtype;
  array.bytes.resize(checked_byte_count(dtype, shape, "make"));
  array.shape = std::move(shape);
  return array;
}

}  // namespace mlarope::npy
