// SPDX-License-Identifier: Apache-2.0
// The portability header's conversions against Eigen's (exact IEEE round to nearest even),
// on every f16 / bf16 value and on floats around every rounding boundary.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "host/gpu_model.h"
#include "host/host_avx2.h"
#include "host_convert.h"
#include "kernels/element_io.h"
#include "kernels/float_convert.h"
#include "kernels/host_simd.h"
#include "kernels/host_slice_rotation.h"
#include "kernels/portability.h"
#include "kernels/segment_copy.h"
#include "kernels/work_division.h"
#include "launch/footprint.h"

#if defined(MLAROPE_HOST_AVX2)  // GCC or Clang on x86-64: the guard pages' calls
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace mlarope::kernels {
namespace {

std::uint16_t eigen_half_bits(float x) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::half(x));
}
std::uint16_t eigen_bf16_bits(float x) {
  return Eigen::numext::bit_cast<std::uint16_t>(Eigen::bfloat16(x));
}

// Floats whose low 13 (f16) or 16 (bf16) bits sit at and around the rounding boundaries, for
// every combination of the upper bits, plus random ones.
std::vector<std::uint32_t> boundary_floats(int dropped_bits) {
  const std::uint32_t half_ulp = 1u << (dropped_bits - 1);
  const std::uint32_t lows[] = {0, 1, half_ulp - 1, half_ulp, half_ulp + 1, (half_ulp << 1) - 1};
  std::vector<std::uint32_t> out;
  for (std::uint32_t high = 0; high < (1u << (32 - dropped_bits)); ++high)
    for (std::uint32_t low : lows) out.push_back((high << dropped_bits) | low);
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) out.push_back(rng());
  return out;
}

TEST(Portability, HalfToFloatIsExactForEveryHalf) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float expected =
        static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(static_cast<std::uint16_t>(h)));
    const float got = half_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(expected)) EXPECT_TRUE(std::isnan(got)) << h;
    else EXPECT_EQ(float_bits(expected), float_bits(got)) << "half bits " << h;
  }
}

TEST(Portability, FloatToHalfRoundsToNearestEven) {
  for (std::uint32_t bits : boundary_floats(13)) {
    const float x = float_from_bits(bits);
    const std::uint16_t got = float_to_half(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(half_to_float(got))) << "NaN must stay NaN: " << bits;
      continue;
    }
    ASSERT_EQ(eigen_half_bits(x), got) << "float bits 0x" << std::hex << bits;
  }
}

TEST(Portability, HalfRoundTripIsBitExact) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const std::uint16_t back = float_to_half(half_to_float(bits));
    if ((h & 0x7fffu) > 0x7c00u) EXPECT_GT(back & 0x7fffu, 0x7c00u) << h;
    else EXPECT_EQ(bits, back) << h;
  }
}

TEST(Portability, FloatToBf16RoundsToNearestEven) {
  for (std::uint32_t bits : boundary_floats(16)) {
    const float x = float_from_bits(bits);
    const std::uint16_t got = float_to_bf16(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(got))) << "NaN must stay NaN: " << bits;
      continue;
    }
    ASSERT_EQ(eigen_bf16_bits(x), got) << "float bits 0x" << std::hex << bits;
  }
}

TEST(Portability, Bf16ToFloatIsExact) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float expected =
        static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(static_cast<std::uint16_t>(b)));
    const float got = bf16_to_float(static_cast<std::uint16_t>(b));
    if (std::isnan(expected)) EXPECT_TRUE(std::isnan(got));
    else EXPECT_EQ(float_bits(expected), float_bits(got)) << b;
  }
}

TEST(Portability, RoundToOddMatchesTheHostConversion) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (int i = 0; i < 200000; ++i) {
    const double x = unit(rng) * std::ldexp(1.0, static_cast<int>(rng() % 60) - 30);
    EXPECT_EQ(float_bits(round_to_odd_float(x)), float_bits(double_to_float_round_odd(x))) << x;
  }
  EXPECT_EQ(double_to_float_round_odd(0.5), 0.5f);
}

TEST(Portability, RoundToOddKeepsNanAndInfinityAndOverflows) {
  EXPECT_TRUE(std::isnan(double_to_float_round_odd(std::nan(""))));
  EXPECT_EQ(double_to_float_round_odd(HUGE_VAL), HUGE_VALF);
  EXPECT_EQ(double_to_float_round_odd(-HUGE_VAL), -HUGE_VALF);
  // Past the largest float (not exactly representable): the conversion overflows to infinity,
  // which round-to-odd keeps (rounding it again to f16/bf16 gives infinity too).
  EXPECT_EQ(double_to_float_round_odd(1e39), HUGE_VALF);
  EXPECT_EQ(double_to_float_round_odd(-1e39), -HUGE_VALF);
}

TEST(Portability, QuotientIsExactOnBothSidesOfThe32BitPath) {
  const std::int64_t big = std::int64_t{1} << 40;
  EXPECT_EQ(quotient(big + 5, 3), (big + 5) / 3);
  EXPECT_EQ(quotient(12, big), 0);
  EXPECT_EQ(quotient(big * 3 + 1, big), 3);
  EXPECT_EQ(quotient(0xffffffffLL, 7), 0xffffffffLL / 7);  // the largest 32-bit operand
  EXPECT_EQ(quotient(0x100000000LL, 2), 0x80000000LL);     // the smallest 64-bit one
}

TEST(Portability, AtomicOrAccumulates) {
  std::uint32_t word = 0;
  atomic_or(&word, 1u);
  atomic_or(&word, 4u);
  atomic_or(&word, 1u);
  EXPECT_EQ(word, 5u);
}

// Without the GPU model an asynchronous copy is a copy: the bytes are there at once, and the
// wait has nothing to do (the model's delayed landing: gpu_model_test).
TEST(Portability, AsyncCopiesInTheFastModeAreCopies) {
  alignas(16) const std::uint32_t from[6] = {1, 2, 3, 4, 5, 6};
  alignas(16) std::uint32_t to[6] = {};
  async_copy_to_shared<16>(to, from);
  async_copy_to_shared<8>(to + 4, from + 4);
  wait_async_copies();
  EXPECT_TRUE(std::equal(std::begin(from), std::end(from), std::begin(to)));
}

// copy_head_segments in the host's fast mode (no GPU model: each thread one contiguous range
// of (head, item) pairs, copied by memcpy per head): over lengths with and without a tail of
// single elements, head counts and thread counts, the threads together copy every element of
// every head's segment exactly once and touch nothing between the segments.
TEST(SegmentCopy, TheFastModeSharesCopyEveryElementOnce) {
  for (bool vector : {false, true})
    for (std::int64_t length = 0; length <= 21; ++length)
      for (std::int64_t heads = 1; heads <= 3; ++heads)
        for (int threads = 1; threads <= 5; ++threads) {
          const std::int64_t stride = 24;  // 16-byte aligned heads, a gap after each segment
          alignas(16) float src[3 * 24], dst[3 * 24];
          for (int i = 0; i < 3 * 24; ++i) src[i] = static_cast<float>(i + 1), dst[i] = -1.0f;
          const HeadSegments<float> s{src, dst, stride, stride, heads, length};
          for (int t = 0; t < threads; ++t) copy_head_segments(s, vector, t, threads);
          for (std::int64_t i = 0; i < 3 * stride; ++i) {
            const bool inside = i / stride < heads && i % stride < length;
            ASSERT_EQ(dst[i], inside ? src[i] : -1.0f)
                << "element " << i << ", length " << length << ", heads " << heads << ", threads "
                << threads << (vector ? ", vector" : "");
          }
        }
}

// The GPU model allows a kernel the bytes of its call's footprint: an index array that is
// absent (even with a size) or empty adds no region, a given one adds one.
TEST(Footprint, HoldsOnlyTheArraysACallGives) {
  std::int32_t ids[2] = {};
  detail::Footprint f;
  f.add("absent", IndexView{nullptr, IndexType::i32, 5});
  f.add("empty", IndexView{ids, IndexType::i32, 0});
  EXPECT_EQ(f.count, 0);
  f.add("ids", IndexView{ids, IndexType::i32, 2});
  ASSERT_EQ(f.count, 1);
  EXPECT_STREQ(f.regions[0].name, "ids");
  EXPECT_EQ(f.regions[0].shape[0], 2);
}

TEST(Portability, RawVectorAccessesCopyTheirBytes) {  // the host's plain path (no GPU model)
  alignas(16) std::uint32_t in[7] = {1, 2, 3, 4, 5, 6, 7}, out[7] = {};
  store_raw<16>(out, load_raw<16>(in));
  store_raw<8>(out + 4, load_raw<8>(in + 4));
  store_raw<4>(out + 6, load_raw<4>(in + 6));
  for (int i = 0; i < 7; ++i) EXPECT_EQ(out[i], in[i]) << i;
}

TEST(Portability, VectorLoadsAndStoresRoundTrip) {
  alignas(16) BFloat16 in[8], out[8];
  for (int i = 0; i < 8; ++i) in[i] = from_float<BFloat16>(0.25f * static_cast<float>(i) - 1.0f);
  float x[8];
  load_vector<BFloat16, 8>(in, x);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x[i], 0.25f * static_cast<float>(i) - 1.0f);
  store_vector<BFloat16, 8>(out, x);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(in[i].bits, out[i].bits);
  alignas(16) float f_in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, f_out[8];
  load_vector<float, 8>(f_in, x);
  store_vector<float, 8>(f_out, x);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(f_in[i], f_out[i]);
}

// The device paths of vector loads and stores (pieces of at most 16 bytes) under the GPU
// model, which the test above, without it, leaves to the memcpy branch: 32 bytes, two pieces.
TEST(Portability, VectorLoadsAndStoresOfTwoPiecesOnTheDevicePaths) {
  alignas(16) float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {};
  alignas(16) BFloat16 b_in[16], b_out[16] = {};
  for (int i = 0; i < 16; ++i) b_in[i] = from_float<BFloat16>(static_cast<float>(i) - 4.0f);
  detail::Footprint footprint;
  footprint.add("in", contiguous_view<const void>(in, DType::f32, {8}), detail::RegionUse::read);
  footprint.add("out", contiguous_view<void>(out, DType::f32, {8}), detail::RegionUse::write);
  footprint.add("b_in", contiguous_view<const void>(b_in, DType::bf16, {16}),
                detail::RegionUse::read);
  footprint.add("b_out", contiguous_view<void>(b_out, DType::bf16, {16}), detail::RegionUse::write);
  gpu_model::Recorder recorder("pieces", footprint);
  recorder.begin_thread(GridCoord{});
  gpu_model::t_recorder = &recorder;
  float x[8], y[16];
  load_vector<float, 8>(in, x);
  store_vector<float, 8>(out, x);
  load_vector<BFloat16, 16>(b_in, y);
  store_vector<BFloat16, 16>(b_out, y);
  gpu_model::t_recorder = nullptr;
  recorder.finish();
  EXPECT_EQ(recorder.stats().errors, 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], in[i]) << i;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(b_out[i].bits, b_in[i].bits) << i;
}

TEST(Portability, TableElementsOfEveryDtype) {
  const float f[2] = {0.5f, -2.0f};
  const Half h[2] = {from_float<Half>(0.5f), from_float<Half>(-2.0f)};
  const BFloat16 b[2] = {from_float<BFloat16>(0.5f), from_float<BFloat16>(-2.0f)};
  EXPECT_EQ(load_table_element(f, DType::f32, 1), -2.0f);
  EXPECT_EQ(load_table_element(h, DType::f16, 1), -2.0f);
  EXPECT_EQ(load_table_element(b, DType::bf16, 0), 0.5f);
}

}  // namespace
}  // namespace mlarope::kernels

namespace mlarope::kernels {
namespace {

// The host SIMD leaves (host_simd.h) against the element code, bit for bit: every bf16 bit
// pattern through the loads, and floats around every rounding boundary through the stores.
#if defined(MLAROPE_HOST_SSE2)
TEST(HostSimd, Bf16LoadsEqualTheElementConversion) {
  for (std::uint32_t start = 0; start < 65536; start += 8) {
    BFloat16 x[8];
    for (std::uint32_t j = 0; j < 8; ++j) x[j].bits = static_cast<std::uint16_t>(start + j);
    float u[4], v[4];
    host_simd::load_interleaved(x, u, v);
    for (std::size_t j = 0; j < 4; ++j) {
      ASSERT_EQ(float_bits(u[j]), float_bits(to_float(x[2 * j])));
      ASSERT_EQ(float_bits(v[j]), float_bits(to_float(x[2 * j + 1])));
    }
    host_simd::load_half(x, x + 4, u, v);
    for (int j = 0; j < 4; ++j) {
      ASSERT_EQ(float_bits(u[j]), float_bits(to_float(x[j])));
      ASSERT_EQ(float_bits(v[j]), float_bits(to_float(x[4 + j])));
    }
  }
}

TEST(HostSimd, Bf16StoresEqualTheElementConversion) {
  const std::vector<std::uint32_t> bits = boundary_floats(16);
  for (std::size_t i = 0; i + 8 <= bits.size(); i += 8) {
    float u[4], v[4];
    for (int j = 0; j < 4; ++j) {
      u[j] = float_from_bits(bits[i + j]);
      v[j] = float_from_bits(bits[i + 4 + j]);
    }
    BFloat16 inter[8], half[8];
    host_simd::store_interleaved(inter, u, v);
    host_simd::store_half(half, half + 4, u, v);
    for (std::size_t j = 0; j < 4; ++j) {
      ASSERT_EQ(inter[2 * j].bits, float_to_bf16(u[j])) << std::hex << bits[i + j];
      ASSERT_EQ(inter[2 * j + 1].bits, float_to_bf16(v[j])) << std::hex << bits[i + 4 + j];
      ASSERT_EQ(half[j].bits, float_to_bf16(u[j]));
      ASSERT_EQ(half[4 + j].bits, float_to_bf16(v[j]));
    }
  }
}
#endif

// The host fast branch's whole-slice rotation (host_slice_rotation.h) against the pair-chunk
// element code, bit for bit: every dtype and both layouts, at half_dims with and without a
// tail past the SIMD steps (bf16 converts 4 or 8 pairs a step).
const std::int64_t kSliceHalfDims[] = {1, 3, 4, 5, 8, 12, 36, 256};

// What the slice functions must leave alone: pairs of HostSlicePairs past the slice's, and
// the elements after a slice written (a step of the SIMD forms is at most 16 elements).
const float kUntouched = float_from_bits(0x7fc0dead);
constexpr std::size_t kGuardElements = 16;

template <class T>
T element_of_bits(std::uint32_t bits) {
  if constexpr (std::is_same_v<T, float>) return float_from_bits(bits);
  else return T{static_cast<std::uint16_t>(bits)};
}

template <class T>
std::uint32_t bits_of(T x) {
  if constexpr (std::is_same_v<T, float>) return float_bits(x);
  else return x.bits;
}

template <class Runs, class T>
void expect_slice_reads_equal_the_element_code() {
  std::mt19937 rng(11);
  std::uint32_t next = 0;  // 16-bit types: every bit pattern in turn
  for (PairLayout layout : {PairLayout::half, PairLayout::interleaved})
    for (std::int64_t half_dim : kSliceHalfDims)
      for (int round = 0; round < 64; ++round) {
        std::vector<T> slice(static_cast<std::size_t>(2 * half_dim));
        for (T& e : slice) e = element_of_bits<T>(sizeof(T) == 4 ? rng() : next++ & 0xffffu);
        HostSlicePairs x;
        std::fill(std::begin(x.u), std::end(x.u), kUntouched);
        std::fill(std::begin(x.v), std::end(x.v), kUntouched);
        read_slice<Runs>(slice.data(), layout, half_dim, x);
        for (std::int64_t i = half_dim; i < kHostRopeMaxEmbDim / 2; ++i)
          ASSERT_TRUE(float_bits(x.u[i]) == float_bits(kUntouched) &&
                      float_bits(x.v[i]) == float_bits(kUntouched))
              << "half_dim " << half_dim << ": pair " << i << " written past the slice's";
        for (std::int64_t i = 0; i < half_dim; ++i) {
          ASSERT_EQ(float_bits(x.u[i]),
                    float_bits(load_element(slice.data(), u_position(layout, i, half_dim))))
              << "half_dim " << half_dim << ", pair " << i;
          ASSERT_EQ(float_bits(x.v[i]),
                    float_bits(load_element(slice.data(), v_position(layout, i, half_dim))))
              << "half_dim " << half_dim << ", pair " << i;
        }
      }
}

template <class Runs, class T>
void expect_slice_writes_equal_the_element_code(int dropped_bits) {
  const std::vector<std::uint32_t> floats = boundary_floats(dropped_bits);
  std::size_t next = 0;
  for (PairLayout layout : {PairLayout::half, PairLayout::interleaved})
    for (std::int64_t half_dim : kSliceHalfDims)
      for (int round = 0; round < 64; ++round) {
        HostSlicePairs x;
        for (std::int64_t i = 0; i < half_dim; ++i) {
          x.u[i] = float_from_bits(floats[next++ % floats.size()]);
          x.v[i] = float_from_bits(floats[next++ % floats.size()]);
        }
        // The slice, then elements that must stay as they are.
        std::vector<T> slice(static_cast<std::size_t>(2 * half_dim + kGuardElements),
                             element_of_bits<T>(0x7fc1u));
        write_slice<Runs>(slice.data(), layout, half_dim, x);
        for (std::size_t e = static_cast<std::size_t>(2 * half_dim); e < slice.size(); ++e)
          ASSERT_EQ(bits_of(slice[e]), bits_of(element_of_bits<T>(0x7fc1u)))
              << "half_dim " << half_dim << ": element " << e << " written past the slice";
        for (std::int64_t i = 0; i < half_dim; ++i) {
          ASSERT_EQ(bits_of(slice[u_position(layout, i, half_dim)]), bits_of(from_float<T>(x.u[i])))
              << "half_dim " << half_dim << ", pair " << i << ", u 0x" << std::hex
              << float_bits(x.u[i]);
          ASSERT_EQ(bits_of(slice[v_position(layout, i, half_dim)]), bits_of(from_float<T>(x.v[i])))
              << "half_dim " << half_dim << ", pair " << i << ", v 0x" << std::hex
              << float_bits(x.v[i]);
        }
      }
}

template <class Runs>
void expect_slice_conversions_equal_the_element_code() {
  expect_slice_reads_equal_the_element_code<Runs, BFloat16>();
  expect_slice_reads_equal_the_element_code<Runs, Half>();
  expect_slice_reads_equal_the_element_code<Runs, float>();
  expect_slice_writes_equal_the_element_code<Runs, BFloat16>(16);
  expect_slice_writes_equal_the_element_code<Runs, Half>(13);
  expect_slice_writes_equal_the_element_code<Runs, float>(16);
}

TEST(HostSlice, ConversionsEqualTheElementCode) {  // SSE2's forms on x86-64
  expect_slice_conversions_equal_the_element_code<HostRuns>();
}

#if defined(MLAROPE_HOST_AVX2)
TEST(HostSlice, Avx2ConversionsEqualTheElementCode) {
  if (__builtin_cpu_supports("avx2") == 0) GTEST_SKIP() << "this CPU has no AVX2";
  expect_slice_conversions_equal_the_element_code<host::Avx2Runs>();
}
#endif

#if defined(MLAROPE_HOST_AVX2)
// A coefficient: random bits (overflow, infinities and NaN among them) a quarter of the time,
// else a bf16 value (8-bit significands, so that products of two land on bf16 rounding ties).
float rotation_coefficient(std::mt19937& rng) {
  const std::uint32_t bits = rng();
  if (bits % 4 == 0) return float_from_bits(rng());
  return float_from_bits((bits & 0xffff0000u) & 0xbfffffffu);  // exponent at most 2^0
}

// A Runs' slice in registers (Avx2Runs, Avx512Runs) against the loops (read_slice, rotate_slice,
// write_slice in SSE2's forms): every bf16 bit pattern in turn as an element, every pair of
// layouts, out of place and in place. Where it declines (false) nothing may be stored and a loop
// result must be NaN; elsewhere every element equal, and nothing past the slice touched.
// rotate_whole_slice, which falls back to the loops, equals them on every slice.
template <class Runs>
void expect_register_slice_equals_the_loops() {
  constexpr std::int64_t kHalf = Runs::kRegisterSlicePairs;
  constexpr std::size_t kElements = 2 * kHalf;
  const BFloat16 guard = element_of_bits<BFloat16>(0x7fc1u);
  std::mt19937 rng(13);
  std::uint32_t next = 0;
  int declined = 0, taken = 0;
  for (int round = 0; round < 4096; ++round)
    for (PairLayout read : {PairLayout::half, PairLayout::interleaved})
      for (PairLayout write : {PairLayout::half, PairLayout::interleaved}) {
        HostRowCoefficients k;
        for (std::int64_t i = 0; i < kHalf; ++i) {
          k.cos_u[i] = rotation_coefficient(rng), k.cos_v[i] = rotation_coefficient(rng);
          k.p[i] = rotation_coefficient(rng), k.q[i] = rotation_coefficient(rng);
        }
        std::vector<BFloat16> in(kElements + kGuardElements, guard);
        for (std::size_t e = 0; e < kElements; ++e)
          in[e] = element_of_bits<BFloat16>(round % 2 == 0 ? next++ & 0xffffu : rng() & 0xbfffu);
        // The loops' answer.
        HostSlicePairs x;
        read_slice<HostRuns>(in.data(), read, kHalf, x);
        rotate_slice(k, kHalf, x);
        std::vector<BFloat16> expected(in.size(), guard);
        write_slice<HostRuns>(expected.data(), write, kHalf, x);
        const auto is_nan = [](float f) { return std::isnan(f); };
        const bool any_nan = std::any_of(std::begin(x.u), std::begin(x.u) + kHalf, is_nan) ||
                             std::any_of(std::begin(x.v), std::begin(x.v) + kHalf, is_nan);
        for (bool in_place : {false, true}) {
          std::vector<BFloat16> out = in_place ? in : std::vector<BFloat16>(in.size(), guard);
          const std::vector<BFloat16> before = out;
          const bool done = Runs::rotate_bf16_slice(k, in_place ? out.data() : in.data(), read,
                                                    out.data(), write);
          for (std::size_t e = 0; e < out.size(); ++e) {
            const BFloat16 want = done && e < kElements ? expected[e] : before[e];
            ASSERT_EQ(out[e].bits, want.bits)
                << "round " << round << ", element " << e << (in_place ? ", in place" : "")
                << (done ? "" : ", declined") << ", read " << static_cast<int>(read) << ", write "
                << static_cast<int>(write);
          }
          ASSERT_EQ(done, !any_nan) << "round " << round << ": declined without a NaN result";
          (done ? taken : declined) += 1;
          // rope_on_host's call: the registers, or the loops where they decline.
          PairRotation r;
          r.read_layout = read, r.write_layout = write;
          std::vector<BFloat16> whole = in_place ? in : std::vector<BFloat16>(in.size(), guard);
          HostSlicePairs scratch;
          rotate_whole_slice<Runs, kHalf>(k, in_place ? whole.data() : in.data(), r, kHalf, scratch,
                                          whole.data());
          // A NaN's payload is the compiler's choice where two NaNs meet (it may commute a
          // product or a sum): NaN for NaN, else the same bits.
          const auto is_nan_bf16 = [](BFloat16 b) { return (b.bits & 0x7fffu) > 0x7f80u; };
          for (std::size_t e = 0; e < kElements; ++e) {
            if (is_nan_bf16(expected[e])) {
              ASSERT_TRUE(is_nan_bf16(whole[e]))
                  << "rotate_whole_slice, round " << round << ", element " << e;
              continue;
            }
            ASSERT_EQ(whole[e].bits, expected[e].bits)
                << "rotate_whole_slice, round " << round << ", element " << e;
          }
        }
      }
  // Both outcomes were reached.
  EXPECT_GT(taken, 1000);
  EXPECT_GT(declined, 100);
}

// `bytes` bytes that end where an unreadable page begins: a read past them faults.
class BytesBeforeAGuardPage {
 public:
  explicit BytesBeforeAGuardPage(std::size_t bytes)
      : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))),
        base_(
            mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)) {
    if (base_ == MAP_FAILED || mprotect(static_cast<char*>(base_) + page_, page_, PROT_NONE) != 0)
      throw std::runtime_error("BytesBeforeAGuardPage: mmap or mprotect failed");
    data_ = static_cast<char*>(base_) + page_ - bytes;
  }
  ~BytesBeforeAGuardPage() { munmap(base_, 2 * page_); }
  BytesBeforeAGuardPage(const BytesBeforeAGuardPage&) = delete;
  BytesBeforeAGuardPage& operator=(const BytesBeforeAGuardPage&) = delete;
  void* data() const { return data_; }

 private:
  std::size_t page_;
  void* base_;
  void* data_;
};

// The slice in registers reads and writes no byte past the slice: each ends at a guard page.
template <class Runs>
void expect_register_slice_stays_inside_the_slice() {
  constexpr std::int64_t kHalf = Runs::kRegisterSlicePairs;
  constexpr std::size_t kBytes = 2 * kHalf * sizeof(BFloat16);
  HostRowCoefficients k;
  std::fill(std::begin(k.cos_u), std::end(k.cos_u), 0.5f);
  std::fill(std::begin(k.cos_v), std::end(k.cos_v), 0.5f);
  std::fill(std::begin(k.p), std::end(k.p), 0.25f);
  std::fill(std::begin(k.q), std::end(k.q), -0.25f);
  for (PairLayout read : {PairLayout::half, PairLayout::interleaved})
    for (PairLayout write : {PairLayout::half, PairLayout::interleaved}) {
      const BytesBeforeAGuardPage in(kBytes), out(kBytes);
      std::memset(in.data(), 0x3f, kBytes);  // 0x3f3f: about 0.75 in every element
      ASSERT_TRUE(Runs::rotate_bf16_slice(k, in.data(), read, out.data(), write));
      ASSERT_TRUE(Runs::rotate_bf16_slice(k, in.data(), read, in.data(), write));
    }
}

TEST(HostSlice, Avx2RegisterSliceEqualsTheLoops) {
  if (__builtin_cpu_supports("avx2") == 0) GTEST_SKIP() << "this CPU has no AVX2";
  expect_register_slice_equals_the_loops<host::Avx2Runs>();
}

TEST(HostSlice, Avx2RegisterSliceStaysInsideTheSlice) {
  if (__builtin_cpu_supports("avx2") == 0) GTEST_SKIP() << "this CPU has no AVX2";
  expect_register_slice_stays_inside_the_slice<host::Avx2Runs>();
}

bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0;
}

TEST(HostSlice, Avx512RegisterSliceEqualsTheLoops) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 F and BW";
  expect_register_slice_equals_the_loops<host::Avx512Runs>();
}

TEST(HostSlice, Avx512RegisterSliceStaysInsideTheSlice) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "this CPU has no AVX-512 F and BW";
  expect_register_slice_stays_inside_the_slice<host::Avx512Runs>();
}
#endif

TEST(HostSlice, RotationEqualsThePairChunkRotation) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  for (std::int64_t half_dim : kSliceHalfDims) {
    HostRowCoefficients k;
    HostSlicePairs x;
    for (std::int64_t i = 0; i < half_dim; ++i) {
      k.cos_u[i] = value(rng), k.cos_v[i] = value(rng), k.p[i] = value(rng), k.q[i] = value(rng);
      x.u[i] = value(rng), x.v[i] = value(rng);
    }
    const HostSlicePairs before = x;
    rotate_slice(k, half_dim, x);
    for (std::int64_t i = 0; i < half_dim; ++i) {
      const PairChunk<1> y =
          rotate(PairChunk<1>{{before.u[i]}, {before.v[i]}},
                 PairCoefficients<1>{{k.cos_u[i]}, {k.cos_v[i]}, {k.p[i]}, {k.q[i]}});
      ASSERT_EQ(float_bits(x.u[i]), float_bits(y.u[0]))
          << "half_dim " << half_dim << ", pair " << i;
      ASSERT_EQ(float_bits(x.v[i]), float_bits(y.v[0]))
          << "half_dim " << half_dim << ", pair " << i;
    }
  }
}

}  // namespace
}  // namespace mlarope::kernels
