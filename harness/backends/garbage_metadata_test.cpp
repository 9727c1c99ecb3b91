// SPDX-License-Identifier: Apache-2.0
// Garbage device metadata on every backend (docs/semantics.md §5): cu_seqlens, position_ids and
// seq_offsets that no host check can see raise the status bits of check_device_metadata, pass
// the right rows through, and write nothing but the outputs (every backend's whole memory must
// equal the reference's byte for byte: the data is chosen so that every result is exact).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/bad_input_util.h"
#include "backends/case_run.h"
#include "mlarope/backend.h"
#include "mlarope/error.h"
#include "mlarope/validate.h"
#include "reference.h"

namespace mlarope::bad_input {
namespace {

class GarbageMetadata : public BackendTest {};

// --- Garbage device metadata ---------------------------------------------------------------------

// Offset of element (row, head, k) of an activation view; SBHD rows are s * B + b.
std::int64_t element_offset(const Built& b, const ConstTensorView& v, std::int64_t row,
                            std::int64_t h, std::int64_t k) {
  if (b.spec.layout == TokenLayout::thd)
    return row * v.strides[0] + h * v.strides[1] + k * v.strides[2];
  const std::int64_t s = row / b.spec.B, bb = row % b.spec.B;
  return s * v.strides[0] + bb * v.strides[1] + h * v.strides[2] + k * v.strides[3];
}

// Checks that each row of `passed` passed through in `b` (after the backend ran), against the
// inputs of a pristine build of the same spec.
void expect_passed_through(Built& b, const std::vector<std::int64_t>& passed) {
  Built p;
  build(p, b.spec);
  auto at = [&](const ConstTensorView& v, std::int64_t row, std::int64_t h, std::int64_t k) {
    return load_as_double(v.data, v.dtype, element_offset(b, v, row, h, k));
  };
  const Spec& s = b.spec;
  for (std::int64_t row : passed) {
    SCOPED_TRACE("row " + std::to_string(row));
    bool ok = true;
    for (std::int64_t h = 0; h < s.H; ++h) switch (s.op) {
        case EntryPoint::rope:
        case EntryPoint::rope_backward:
          for (std::int64_t k = 0; k < s.nope + s.emb; ++k)
            ok = ok && at(b.out, row, h, k) == at(p.in, row, h, k);
          break;
        case EntryPoint::rope_inplace:
        case EntryPoint::rope_backward_inplace:
          for (std::int64_t k = 0; k < s.nope + s.emb; ++k)
            ok = ok && at(b.io, row, h, k) == at(p.io, row, h, k);
          break;
        case EntryPoint::kv_split:
          for (std::int64_t k = 0; k < s.k; ++k)
            ok = ok && at(b.out0, row, h, k) == at(p.in0, row, h, k);
          for (std::int64_t e = 0; e < s.emb; ++e)
            ok = ok && at(b.out0, row, h, s.k + e) == at(p.in1, row, 0, e);
          for (std::int64_t j = 0; j < s.v; ++j)
            ok = ok && at(b.out1, row, h, j) == at(p.in0, row, h, s.k + j);
          break;
        case EntryPoint::kv_split_backward:
          for (std::int64_t k = 0; k < s.k; ++k)
            ok = ok && at(b.out0, row, h, k) == at(p.in0, row, h, k);
          for (std::int64_t j = 0; j < s.v; ++j)
            ok = ok && at(b.out0, row, h, s.k + j) == at(p.in1, row, h, j);
          break;
      }
    if (s.op == EntryPoint::kv_split_backward)
      for (std::int64_t e = 0; e < s.emb; ++e) {
        double sum = 0;
        for (std::int64_t h = 0; h < s.H; ++h) sum += at(p.in0, row, h, s.k + e);
        ok = ok && at(b.out1, row, 0, e) == sum;
      }
    EXPECT_TRUE(ok) << "row " << row << " did not pass through";
  }
}

// Runs the call on the reference and the backend (memories must agree byte for byte), checks
// the status word against check_device_metadata on the same host arrays and against `expected`
// (when given), and the rows of `passed`.
void expect_metadata_outcome(const Runner& runner, Built& b, const DeviceStatus* expected,
                             const std::vector<std::int64_t>* passed) {
  const DeviceStatus validator =
      check_device_metadata(b.positions(), b.row_shape(), b.spec.table_rows);
  if (expected) {
    EXPECT_EQ(validator, *expected) << "check_device_metadata: " << describe_status(validator);
  }
  // A call that writes no element is a no-op (docs/semantics.md §5): nothing runs to raise a bit.
  bool writes_nothing = true;
  for (Built::Named& v : b.activations())
    if (v.output && v.numel() != 0) writes_nothing = false;
  const DeviceStatus status = expect_matches_reference(runner, b);
  EXPECT_EQ(status, writes_nothing ? b.spec.initial_status : b.spec.initial_status | validator)
      << runner.name() << ": " << describe_status(status)
      << ", check_device_metadata: " << describe_status(validator);
  if (passed) expect_passed_through(b, *passed);
}

std::vector<std::int64_t> all_rows(std::int64_t n) {
  std::vector<std::int64_t> rows;
  for (std::int64_t r = 0; r < n; ++r) rows.push_back(r);
  return rows;
}

// Bit patterns that a round trip through arithmetic would change: signalling and quiet NaNs
// with payloads, signed zeros, a subnormal and an infinity.
std::vector<std::uint32_t> special_bits(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return {0x7F800001u, 0xFFC00123u, 0x80000000u, 0x00000001u, 0xFF800000u, 0x7FBFFFFFu};
    case DType::bf16: return {0x7F81u, 0xFFC3u, 0x8000u, 0x0001u, 0xFF80u, 0x7FBFu};
    case DType::f16: return {0x7C01u, 0xFE03u, 0x8000u, 0x0001u, 0xFC00u, 0x7DFFu};
  }
  return {};
}

void set_element_bits(const ConstTensorView& v, std::int64_t offset, std::uint32_t bits) {
  auto* p = static_cast<unsigned char*>(const_cast<void*>(v.data)) +
            offset * static_cast<std::int64_t>(dtype_size(v.dtype));
  if (dtype_size(v.dtype) == 4) {
    std::memcpy(p, &bits, 4);
  } else {
    const auto half = static_cast<std::uint16_t>(bits);
    std::memcpy(p, &half, 2);
  }
}

std::uint32_t bits_at(const Built& b, const ConstTensorView& v, std::int64_t row, std::int64_t h,
                      std::int64_t k) {
  const auto* p = static_cast<const unsigned char*>(v.data) +
                  element_offset(b, v, row, h, k) * static_cast<std::int64_t>(dtype_size(v.dtype));
  std::uint32_t bits = 0;
  std::memcpy(&bits, p, dtype_size(v.dtype));
  return bits;
}

// docs/semantics.md §5: pass-through rows (padding rows, invalid metadata) are copied bit for bit,
// NaN payloads and signed zeros included, by the reference and every backend; so are the copied
// parts of kv_split and kv_split_backward. Checked against the inputs themselves, not only
// against the reference.
TEST_P(GarbageMetadata, PassThroughIsBitwise) {
  for (EntryPoint op : all_entry_points())
    for (DType dtype : {DType::bf16, DType::f16, DType::f32})
      for (bool bad_metadata : {false, true}) {
        Spec s;
        s.op = op;
        s.layout = TokenLayout::thd;
        s.act = dtype;
        s.cu =
            bad_metadata ? std::vector<std::int64_t>{0, 4, 2} : std::vector<std::int64_t>{0, 2, 4};
        Built b;
        build(b, s);
        // Rows that pass through: the padding rows 4 and 5, or every row of bad cu_seqlens.
        const std::vector<std::int64_t> passed =
            bad_metadata ? all_rows(s.T) : std::vector<std::int64_t>{4, 5};
        const std::vector<std::uint32_t> bits = special_bits(dtype);
        std::size_t next = 0;
        auto fill = [&](const ConstTensorView& v, std::int64_t heads, std::int64_t from,
                        std::int64_t to) {
          for (std::int64_t row : passed)
            for (std::int64_t h = 0; h < heads; ++h)
              for (std::int64_t k = from; k < to; ++k)
                set_element_bits(v, element_offset(b, v, row, h, k), bits[next++ % bits.size()]);
        };
        const std::int64_t width = s.nope + s.emb;
        switch (op) {
          case EntryPoint::rope:
          case EntryPoint::rope_backward: fill(b.in, s.H, 0, width); break;
          case EntryPoint::rope_inplace:
          case EntryPoint::rope_backward_inplace: fill(b.io, s.H, 0, width); break;
          case EntryPoint::kv_split:
            fill(b.in0, s.H, 0, s.k + s.v);
            fill(b.in1, 1, 0, s.emb);
            break;
          case EntryPoint::kv_split_backward:  // grad_k_pe is a head sum, not a copy: the k and v
                                               // parts only
            fill(b.in0, s.H, 0, s.k);
            fill(b.in1, s.H, 0, s.v);
            break;
        }
        SCOPED_TRACE(trace(s) + " " + std::string(to_string(dtype)) +
                     (bad_metadata ? " bad cu_seqlens" : " padding"));
        Built pristine;  // the inputs as they were, for in-place calls
        build(pristine, s);
        const std::vector<unsigned char> inputs = b.arena.snapshot();
        expect_matches_reference(runner(), b);
        pristine.arena.restore(inputs);
        int mismatches = 0;
        auto expect_same = [&](const ConstTensorView& out, std::int64_t oh, std::int64_t ok,
                               const ConstTensorView& in, std::int64_t ih, std::int64_t ik,
                               std::int64_t row) {
          if (bits_at(b, out, row, oh, ok) != bits_at(pristine, in, row, ih, ik) &&
              ++mismatches <= 3)
            ADD_FAILURE() << "row " << row << " head " << oh << " element " << ok << ": bits 0x"
                          << std::hex << bits_at(b, out, row, oh, ok) << ", input bits 0x"
                          << bits_at(pristine, in, row, ih, ik);
        };
        for (std::int64_t row : passed)
          for (std::int64_t h = 0; h < s.H; ++h) switch (op) {
              case EntryPoint::rope:
              case EntryPoint::rope_backward:
                for (std::int64_t k = 0; k < width; ++k)
                  expect_same(b.out, h, k, pristine.in, h, k, row);
                break;
              case EntryPoint::rope_inplace:
              case EntryPoint::rope_backward_inplace:
                for (std::int64_t k = 0; k < width; ++k)
                  expect_same(b.io, h, k, pristine.io, h, k, row);
                break;
              case EntryPoint::kv_split:
                for (std::int64_t k = 0; k < s.k; ++k)
                  expect_same(b.out0, h, k, pristine.in0, h, k, row);
                for (std::int64_t e = 0; e < s.emb; ++e)
                  expect_same(b.out0, h, s.k + e, pristine.in1, 0, e, row);
                for (std::int64_t j = 0; j < s.v; ++j)
                  expect_same(b.out1, h, j, pristine.in0, h, s.k + j, row);
                break;
              case EntryPoint::kv_split_backward:
                for (std::int64_t k = 0; k < s.k; ++k)
                  expect_same(b.out0, h, k, pristine.in0, h, k, row);
                for (std::int64_t j = 0; j < s.v; ++j)
                  expect_same(b.out0, h, s.k + j, pristine.in1, h, j, row);
                break;
            }
        EXPECT_EQ(mismatches, 0);
      }
}

struct NamedCase {
  const char* name;
  SpecEdit edit;
  DeviceStatus expected;
  std::vector<std::int64_t> passed;  ///< rows that pass through (those of check: all rows)
};

TEST_P(GarbageMetadata, NamedCases) {
  const std::vector<NamedCase> cases = {
      {"decreasing cu_seqlens",
       [](Spec& s) {
         s.cu = {0, 4, 2};
       },
       kStatusBadCuSeqlens, all_rows(6)},
      {"negative first length",
       [](Spec& s) {
         s.cu = {3, 1, 6};
       },
       kStatusBadCuSeqlens, all_rows(6)},
      {"length not divisible by 2 * cp_size",
       [](Spec& s) {
         s.T = 5;
         s.cu = {0, 4, 10};
         s.cp_size = 2;
       },
       kStatusBadSeqLength, all_rows(5)},
      {"both cu_seqlens errors",
       [](Spec& s) {
         s.T = 5;
         s.cu = {0, 6, 4};
         s.cp_size = 2;
         s.cp_rank = 1;
       },
       kStatusBadCuSeqlens | kStatusBadSeqLength, all_rows(5)},
      {"cu_seqlens past the rows",
       [](Spec& s) {
         s.cu = {0, 4, 8};
       },
       kStatusBadCuSeqlens, all_rows(6)},
      {"cu_seqlens past the rows with CP",
       [](Spec& s) {
         s.T = 3;
         s.cu = {0, 4, 8};
         s.cp_size = 2;
       },
       kStatusBadCuSeqlens, all_rows(3)},
      {"cu_seqlens INT32_MIN .. INT32_MAX",
       [](Spec& s) {
         s.cu = {kI32Min, 0, kI32Max};
       },
       kStatusBadCuSeqlens, all_rows(6)},
      {"cu_seqlens near INT32_MAX, packed",
       [](Spec& s) {
         s.cu = {kI32Max - 6, kI32Max - 3, kI32Max};
         s.freq_mode = FreqMode::packed;
       },
       kStatusRowOutsideTable, all_rows(6)},
      {"packed near INT32_MAX with INT32_MIN offsets",
       [](Spec& s) {
         s.cu = {kI32Max - 6, kI32Max - 3, kI32Max};
         s.freq_mode = FreqMode::packed;
         s.has_seq_offsets = true;
         s.seq_offsets = {kI32Min, kI32Min};  // rows -7 .. -1
       },
       kStatusRowOutsideTable, all_rows(6)},
      {"position_ids beyond the table, negative, INT32_MAX",
       [](Spec& s) {
         s.cu = {0, 3, 6};
         s.has_position_ids = true;
         s.position_ids = {0, 8, -1, 2, 7, kI32Max};
       },
       kStatusRowOutsideTable,
       {1, 2, 5}},
      {"position_ids INT32_MIN",
       [](Spec& s) {
         s.cu = {0, 3, 6};
         s.has_position_ids = true;
         s.position_ids = {kI32Min, 1, 2, 3, 4, 5};
       },
       kStatusRowOutsideTable,
       {0}},
      {"int64 position_ids beyond the table",
       [](Spec& s) {
         s.cu = {0, 3, 6};
         s.has_position_ids = true;
         s.position_ids_type = IndexType::i64;
         s.position_ids = {kI64Max, 1, kI64Min, std::int64_t{1} << 32, 7, -(std::int64_t{1} << 32)};
       },
       kStatusRowOutsideTable,
       {0, 2, 3, 5}},
      {"padding rows ignore their bad position_ids",
       [](Spec& s) {
         s.cu = {0, 2, 4};
         s.has_position_ids = true;
         s.position_ids = {1, 2, 3, 4, -5, kI32Max};  // rows 4, 5 are padding
       },
       kStatusOk,
       {4, 5}},
      {"negative seq_offsets",
       [](Spec& s) {
         s.cu = {0, 3, 6};
         s.has_seq_offsets = true;
         s.seq_offsets = {0, -2};  // sequence 1: rows -2, -1, 0
       },
       kStatusRowOutsideTable,
       {3, 4}},
      {"seq_offsets INT32_MAX",
       [](Spec& s) {
         s.cu = {0, 3, 6};
         s.has_seq_offsets = true;
         s.seq_offsets = {kI32Max, 0};
       },
       kStatusRowOutsideTable,
       {0, 1, 2}},
      {"SBHD seq_offsets before and past the table",
       [](Spec& s) {
         s.layout = TokenLayout::sbhd;
         s.S = 3;
         s.table_rows = 4;
         s.has_seq_offsets = true;
         s.seq_offsets = {-1, 2};  // rows [-1, 0, 1] and [2, 3, 4]; row = s * 2 + b
       },
       kStatusRowOutsideTable,
       {0, 5}},
      {"SBHD seq_offsets INT32_MIN and INT32_MAX with CP",
       [](Spec& s) {
         s.layout = TokenLayout::sbhd;
         s.cp_size = 2;
         s.cp_rank = 1;
         s.has_seq_offsets = true;
         s.seq_offsets = {kI32Min, kI32Max};
       },
       kStatusRowOutsideTable, all_rows(8)},
  };
  for (const NamedCase& c : cases)
    for (EntryPoint op : all_entry_points())
      for (DeviceStatus initial : {kStatusOk, kStatusBadSeqLength}) {
        Spec s;
        s.op = op;
        s.layout = TokenLayout::thd;
        s.initial_status = initial;
        c.edit(s);
        Built b;
        build(b, s);
        SCOPED_TRACE(std::string(c.name) + ": " + trace(s));
        expect_metadata_outcome(runner(), b, &c.expected, &c.passed);
      }
}

// A random value of the kinds that break metadata: small, negative, near the table, extremes.
std::int64_t garbage(test::Rng& rng, std::int64_t table_rows, bool wide) {
  switch (rng.next() % 10) {
    case 0: return -1 - static_cast<std::int64_t>(rng.next() % 4);
    case 1: return table_rows + static_cast<std::int64_t>(rng.next() % 3) - 1;
    case 2: return (rng.next() & 1) ? kI32Max : kI32Min;
    case 3:
      if (wide) return (rng.next() & 1) ? kI64Max : kI64Min;
      return kI32Max - static_cast<std::int64_t>(rng.next() % 8);
    default:
      return static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(table_rows + 1));
  }
}

Spec random_thd_spec(std::uint64_t seed) {
  test::Rng rng(seed * 7919 + 17);
  Spec s;
  s.seed = seed;
  s.op = all_entry_points()[seed % 6];
  s.layout = TokenLayout::thd;
  s.T = static_cast<std::int64_t>(rng.next() % 13);
  s.H = 1 + static_cast<std::int64_t>(rng.next() % 3);
  s.nope = static_cast<std::int64_t>(rng.next() % 3);
  s.emb = 2 * (1 + static_cast<std::int64_t>(rng.next() % 3));
  s.k = static_cast<std::int64_t>(rng.next() % 3);
  s.v = 1 + static_cast<std::int64_t>(rng.next() % 3);
  const DType types[] = {DType::f32, DType::f16, DType::bf16};
  s.act = types[rng.next() % 3];
  s.table_dtype = types[rng.next() % 3];
  s.pad = static_cast<std::int64_t>(rng.next() % 3);
  s.table_rows = 1 + static_cast<std::int64_t>(rng.next() % 24);
  const std::int64_t cps[] = {1, 2, 4};
  s.cp_size = cps[rng.next() % 3];
  s.cp_rank = static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(s.cp_size));
  s.freq_mode = (rng.next() & 1) ? FreqMode::packed : FreqMode::per_sequence;
  s.layouts = test::all_triples()[rng.next() % 8];
  s.inverse = rng.next() & 1;
  if (rng.next() % 4 == 0) s.initial_status = static_cast<DeviceStatus>(rng.next() % 8);
  const std::int64_t n = static_cast<std::int64_t>(rng.next() % 5);
  s.cu.assign(1, 0);
  const std::uint64_t kind = rng.next() % 7;
  if (kind == 1) s.cu[0] = static_cast<std::int64_t>(rng.next() % 20);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t unit = 2 * s.cp_size;
    std::int64_t next = 0;
    switch (kind) {
      case 0:
      case 1:  // valid lengths (the total may or may not fit in T)
        next = s.cu.back() + unit * static_cast<std::int64_t>(rng.next() % 3);
        break;
      case 2:  // arbitrary small values
        next = static_cast<std::int64_t>(rng.next() % 40) - 10;
        break;
      case 3:  // decreasing somewhere
        next = s.cu.back() + (i == n / 2 ? -unit : unit);
        break;
      case 4:  // lengths not divisible by 2 * cp_size (when cp_size > 1)
        next = s.cu.back() + 1 + static_cast<std::int64_t>(rng.next() % 5);
        break;
      case 5:  // extremes
        next = (rng.next() & 1) ? kI32Max : kI32Min;
        break;
      default:  // valid lengths, total past the rows
        next = s.cu.back() + unit * (s.T + 1);
        break;
    }
    s.cu.push_back(std::max<std::int64_t>(kI32Min, std::min<std::int64_t>(kI32Max, next)));
  }
  if (rng.next() % 3 == 0) {
    s.has_position_ids = true;
    s.position_ids_type = (rng.next() & 1) ? IndexType::i64 : IndexType::i32;
    for (std::int64_t r = 0; r < s.T; ++r)
      s.position_ids.push_back(garbage(rng, s.table_rows, s.position_ids_type == IndexType::i64));
  }
  if (rng.next() % 3 == 0) {
    s.has_seq_offsets = true;
    for (std::int64_t i = 0; i < n; ++i)
      s.seq_offsets.push_back(rng.next() % 3 == 0 ? garbage(rng, s.table_rows, false)
                                                  : static_cast<std::int64_t>(rng.next() % 9) - 4);
  }
  return s;
}

Spec random_sbhd_spec(std::uint64_t seed) {
  test::Rng rng(seed * 104729 + 5);
  Spec s = random_thd_spec(seed);  // dims, dtypes, layouts
  s.layout = TokenLayout::sbhd;
  s.freq_mode = FreqMode::per_sequence;
  s.has_position_ids = false;
  s.position_ids.clear();
  s.S = (s.cp_size > 1 ? 2 : 1) * static_cast<std::int64_t>(rng.next() % 4);
  s.B = 1 + static_cast<std::int64_t>(rng.next() % 3);
  s.has_seq_offsets = rng.next() % 4 != 0;
  s.seq_offsets.clear();
  if (s.has_seq_offsets) {
    for (std::int64_t b = 0; b < s.B; ++b)
      s.seq_offsets.push_back(rng.next() % 3 == 0 ? garbage(rng, s.table_rows, false)
                                                  : static_cast<std::int64_t>(rng.next() % 9) - 4);
  } else {
    s.table_rows = std::max<std::int64_t>(s.table_rows, s.S * s.cp_size);  // the host-known rule
  }
  return s;
}

TEST_P(GarbageMetadata, RandomThdMetadata) {
  DeviceStatus seen = kStatusOk;
  for (std::uint64_t seed = 0; seed < 3000; ++seed) {
    const Spec s = random_thd_spec(seed);
    Built b;
    build(b, s);
    seen |= check_device_metadata(b.positions(), b.row_shape(), s.table_rows);
    SCOPED_TRACE(trace(s));
    expect_metadata_outcome(runner(), b, nullptr, nullptr);
    if (HasFailure()) break;  // one seed's report is enough
  }
  EXPECT_EQ(seen, kStatusBadCuSeqlens | kStatusBadSeqLength | kStatusRowOutsideTable)
      << "the generator misses a kind of error";
}

TEST_P(GarbageMetadata, RandomSbhdSeqOffsets) {
  DeviceStatus seen = kStatusOk;
  for (std::uint64_t seed = 0; seed < 1200; ++seed) {
    const Spec s = random_sbhd_spec(seed);
    Built b;
    build(b, s);
    seen |= check_device_metadata(b.positions(), b.row_shape(), s.table_rows);
    SCOPED_TRACE(trace(s));
    expect_metadata_outcome(runner(), b, nullptr, nullptr);
    if (HasFailure()) break;
  }
  EXPECT_EQ(seen, kStatusRowOutsideTable);
}

INSTANTIATE_TEST_SUITE_P(Backends, GarbageMetadata, ::testing::Values("reference", "host", "cuda"),
                         backend_param_name);

}  // namespace
}  // namespace mlarope::bad_input
