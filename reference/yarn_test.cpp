// SPDX-License-Identifier: Apache-2.0
// yarn_tables (docs/semantics.md §4): plain RoPE at scaling factor 1, Megatron's YaRN formulas
// recomputed here for a DeepSeek-V3 setting, the concentration factor, the override, the offset,
// the layouts and the table dtypes rounded once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "reference.h"
#include "test_util.h"

namespace mlarope {
namespace {

using test::HostTensor;
using test::kPi;

// Megatron's formulas, written out again from the paper/Megatron source (not from yarn.cpp).
double correction_dim(double rotations, double d, double base, double original_max) {
  return d * std::log(original_max / (rotations * 2 * kPi)) / (2 * std::log(base));
}

struct CorrectionRange {
  double low, high;
};

CorrectionRange correction_range(const YarnParams& p, double d) {
  const double low = std::max(std::floor(correction_dim(p.beta_fast, d, p.rotary_base,
                                                        p.original_max_position_embeddings)),
                              0.0);
  const double high = std::min(std::ceil(correction_dim(p.beta_slow, d, p.rotary_base,
                                                        p.original_max_position_embeddings)),
                               d - 1);
  return {low, high};
}

std::vector<double> expected_inverse_frequencies(const YarnParams& p, std::int64_t emb_dim) {
  const double d = static_cast<double>(emb_dim);
  CorrectionRange range = correction_range(p, d);
  if (range.low == range.high) range.high += 0.001;
  std::vector<double> inv(static_cast<std::size_t>(emb_dim / 2));
  for (std::int64_t j = 0; j < emb_dim / 2; ++j) {
    const double extra = std::pow(p.rotary_base, -2.0 * j / d);
    const double inter = extra / p.scaling_factor;
    const double ramp = std::clamp((j - range.low) / (range.high - range.low), 0.0, 1.0);
    inv[j] = inter * ramp + extra * (1 - ramp);
  }
  return inv;
}

double megatron_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

YarnParams deepseek_v3() {
  YarnParams p;
  p.rotary_base = 10000;
  p.scaling_factor = 40;
  p.original_max_position_embeddings = 4096;
  p.beta_fast = 32;
  p.beta_slow = 1;
  p.mscale = 1;
  p.mscale_all_dim = 1;
  return p;
}

struct Tables {
  HostTensor cos, sin;
};

Tables yarn(const YarnParams& p, DType dtype, std::int64_t rows, std::int64_t d, PairLayout layout,
            std::int64_t offset = 0) {
  Tables t{HostTensor(dtype, {rows, d}), HostTensor(dtype, {rows, d})};
  YarnTablesCall call;
  call.params = p;
  call.offset = offset;
  call.table_layout = layout;
  call.cos = t.cos.view();
  call.sin = t.sin.view();
  reference::yarn_tables(call);
  return t;
}

// Which angle j entry k of a row holds.
std::int64_t angle_of_entry(PairLayout layout, std::int64_t k, std::int64_t d) {
  return layout == PairLayout::half ? k % (d / 2) : k / 2;
}

// Within one ulp of the exact value `m * f(angle)`, allowing for the double rounding of an angle
// `position * inverse frequency` (a few ulps of the angle, which matters at long positions).
::testing::AssertionResult near_exact(DType dtype, double got, double exact, double angle,
                                      double m) {
  const double tolerance = test::ulp_of(dtype, exact) + 8e-16 * std::fabs(angle * m);
  if (std::fabs(got - exact) <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << got << " vs exact " << exact << " (tolerance " << tolerance << ")";
}

// Each entry is near the exact value (m cos / m sin of the expected angle), and is bitwise the
// once-rounded double value of the reference's own inverse frequency.
void expect_tables_match(const Tables& t, const YarnParams& p, DType dtype, std::int64_t d,
                         PairLayout layout, std::int64_t offset, double m) {
  const std::vector<double> inv = expected_inverse_frequencies(p, d);
  const std::vector<double> ref_inv = reference::yarn_inverse_frequencies(p, d);
  const std::int64_t rows = t.cos.shape()[0];
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t k = 0; k < d; ++k) {
      const std::int64_t j = angle_of_entry(layout, k, d);
      const double position = static_cast<double>(offset + r);
      const double angle = position * inv[j];
      EXPECT_TRUE(near_exact(dtype, t.cos.get({r, k}), m * std::cos(angle), angle, m))
          << "cos row " << r << " entry " << k;
      EXPECT_TRUE(near_exact(dtype, t.sin.get({r, k}), m * std::sin(angle), angle, m))
          << "sin row " << r << " entry " << k;
      const double ref_angle = position * ref_inv[j];
      EXPECT_EQ(t.cos.get({r, k}), round_to(dtype, std::cos(ref_angle) * m))
          << "row " << r << " entry " << k;
      EXPECT_EQ(t.sin.get({r, k}), round_to(dtype, std::sin(ref_angle) * m))
          << "row " << r << " entry " << k;
    }
}

TEST(YarnTables, ScalingFactorOneGivesPlainRopeTables) {
  YarnParams p;  // scaling_factor 1
  p.rotary_base = 10000;
  const std::int64_t d = 8, rows = 6;
  EXPECT_EQ(reference::yarn_concentration(p), 1.0);
  const std::vector<double> inv = reference::yarn_inverse_frequencies(p, d);
  ASSERT_EQ(inv.size(), 4u);
  for (std::int64_t j = 0; j < d / 2; ++j)
    EXPECT_NEAR(inv[j], std::pow(10000.0, -2.0 * j / d), 1e-15 * inv[j]) << "j " << j;
  EXPECT_EQ(inv[0], 1.0);
  EXPECT_NEAR(inv[1], 0.1, 1e-16);
  EXPECT_NEAR(inv[2], 0.01, 1e-17);
  const Tables half = yarn(p, DType::f32, rows, d, PairLayout::half);
  const Tables inter = yarn(p, DType::f32, rows, d, PairLayout::interleaved);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < d / 2; ++j) {
      const double angle = r * std::pow(10000.0, -2.0 * j / d);
      EXPECT_TRUE(near_exact(DType::f32, half.cos.get({r, j}), std::cos(angle), angle, 1.0));
      EXPECT_TRUE(near_exact(DType::f32, half.sin.get({r, j}), std::sin(angle), angle, 1.0));
      // half: [f, f]; interleaved: each angle twice, the same values.
      EXPECT_EQ(half.cos.bits({r, j}), half.cos.bits({r, j + d / 2}));
      EXPECT_EQ(half.sin.bits({r, j}), half.sin.bits({r, j + d / 2}));
      for (std::int64_t k : {2 * j, 2 * j + 1}) {
        EXPECT_EQ(inter.cos.bits({r, k}), half.cos.bits({r, j}));
        EXPECT_EQ(inter.sin.bits({r, k}), half.sin.bits({r, j}));
      }
    }
  // Row 0 is position 0: cos 1, sin 0; row 1, angle 0 is exactly 1 radian.
  EXPECT_EQ(half.cos.get({0, 3}), 1.0);
  EXPECT_EQ(half.sin.get({0, 3}), 0.0);
  EXPECT_EQ(half.cos.get({1, 0}), static_cast<float>(std::cos(1.0)));
  expect_tables_match(half, p, DType::f32, d, PairLayout::half, 0, 1.0);
  expect_tables_match(inter, p, DType::f32, d, PairLayout::interleaved, 0, 1.0);
}

TEST(YarnTables, DeepSeekV3CorrectionRangeAndInverseFrequencies) {
  const YarnParams p = deepseek_v3();
  const std::int64_t d = 64;
  const CorrectionRange range = correction_range(p, d);
  // correction_dim(32) = 64 ln(4096 / 64 pi) / 2 ln 10000 = 10.47; correction_dim(1) = 22.5.
  EXPECT_EQ(range.low, 10);
  EXPECT_EQ(range.high, 23);
  const std::vector<double> inv = reference::yarn_inverse_frequencies(p, d);
  const std::vector<double> expected = expected_inverse_frequencies(p, d);
  ASSERT_EQ(inv.size(), 32u);
  for (std::int64_t j = 0; j < d / 2; ++j) {
    EXPECT_NEAR(inv[j], expected[j], 1e-14 * expected[j]) << "j " << j;
    const double extra = std::pow(10000.0, -2.0 * j / d);
    if (j <= 10) {
      EXPECT_NEAR(inv[j], extra, 1e-14 * extra) << "high frequencies are kept, j " << j;
    }
    if (j >= 23) {
      EXPECT_NEAR(inv[j], extra / 40, 1e-14 * extra) << "low frequencies are interpolated, j " << j;
    }
  }
  // Inside the ramp: j = 15 is 5/13 of the way from extrapolation to interpolation.
  const double extra15 = std::pow(10000.0, -30.0 / 64);
  EXPECT_NEAR(inv[15], extra15 * (5.0 / 13 / 40 + 8.0 / 13), 1e-14 * extra15);
}

TEST(YarnTables, DeepSeekV3TablesAtLongPositions) {
  const YarnParams p = deepseek_v3();
  EXPECT_EQ(reference::yarn_concentration(p), 1.0);  // mscale == mscale_all_dim
  for (PairLayout layout : {PairLayout::half, PairLayout::interleaved}) {
    SCOPED_TRACE(to_string(layout));
    const Tables t = yarn(p, DType::f32, 4, 64, layout, 163836);
    expect_tables_match(t, p, DType::f32, 64, layout, 163836, 1.0);
  }
}

TEST(YarnTables, ConcentrationFactorIsTheRatioOfMscales) {
  YarnParams p = deepseek_v3();
  p.mscale_all_dim = 0;  // Megatron's default: the tables carry 0.1 ln(s) + 1
  const double m = megatron_mscale(40, 1) / megatron_mscale(40, 0);
  EXPECT_NEAR(m, 0.1 * std::log(40.0) + 1, 1e-15);
  EXPECT_NEAR(reference::yarn_concentration(p), m, 1e-15);
  p.mscale = 0.707;
  p.mscale_all_dim = 0.707;
  EXPECT_EQ(reference::yarn_concentration(p), 1.0);
  p.mscale = 1.0;
  p.mscale_all_dim = 0.5;
  EXPECT_NEAR(reference::yarn_concentration(p),
              (0.1 * std::log(40.0) + 1) / (0.05 * std::log(40.0) + 1), 1e-15);
  p.scaling_factor = 1.0;  // no scaling: no concentration
  EXPECT_EQ(reference::yarn_concentration(p), 1.0);

  YarnParams q = deepseek_v3();
  q.mscale_all_dim = 0;
  const double mq = reference::yarn_concentration(q);
  const Tables t = yarn(q, DType::f32, 5, 16, PairLayout::half);
  EXPECT_EQ(t.cos.get({0, 0}), static_cast<float>(mq));  // position 0: cos 1 times m
  EXPECT_EQ(t.sin.get({0, 0}), 0.0);
  expect_tables_match(t, q, DType::f32, 16, PairLayout::half, 0, mq);
  // Unit table scaled by m: c^2 + s^2 = m^2.
  for (std::int64_t r = 0; r < 5; ++r)
    for (std::int64_t k = 0; k < 16; ++k) {
      const double c = t.cos.get({r, k}), s = t.sin.get({r, k});
      EXPECT_NEAR(c * c + s * s, mq * mq, 1e-6);
    }
}

TEST(YarnTables, ConcentrationOverrideReplacesTheFactor) {
  YarnParams p = deepseek_v3();
  p.mscale_all_dim = 0;
  p.concentration_override = 0.5;
  EXPECT_EQ(reference::yarn_concentration(p), 0.5);
  const Tables t = yarn(p, DType::f32, 3, 8, PairLayout::interleaved);
  EXPECT_EQ(t.cos.get({0, 0}), 0.5);
  expect_tables_match(t, p, DType::f32, 8, PairLayout::interleaved, 0, 0.5);
}

TEST(YarnTables, OffsetShiftsThePositions) {
  const YarnParams p = deepseek_v3();
  const Tables from_zero = yarn(p, DType::f32, 10, 16, PairLayout::half);
  const Tables from_seven = yarn(p, DType::f32, 3, 16, PairLayout::half, 7);
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::int64_t k = 0; k < 16; ++k) {
      EXPECT_EQ(from_seven.cos.bits({r, k}), from_zero.cos.bits({r + 7, k}));
      EXPECT_EQ(from_seven.sin.bits({r, k}), from_zero.sin.bits({r + 7, k}));
    }
  // Negative offsets are positions too.
  const Tables negative = yarn(p, DType::f32, 2, 16, PairLayout::half, -1);
  expect_tables_match(negative, p, DType::f32, 16, PairLayout::half, -1, 1.0);
  EXPECT_EQ(negative.cos.bits({1, 0}), from_zero.cos.bits({0, 0}));
}

TEST(YarnTables, HalfPrecisionTablesAreRoundedOnce) {
  YarnParams p = deepseek_v3();
  p.mscale_all_dim = 0;
  const double m = reference::yarn_concentration(p);
  for (DType dtype : {DType::f16, DType::bf16})
    for (PairLayout layout : {PairLayout::half, PairLayout::interleaved}) {
      SCOPED_TRACE(std::string(test::dtype_name(dtype)) + " " + std::string(to_string(layout)));
      const Tables t = yarn(p, dtype, 40, 64, layout, 1000);
      expect_tables_match(t, p, dtype, 64, layout, 1000, m);
    }
}

TEST(YarnTables, StridedTableViewsAreWrittenInPlaceOnly) {
  const YarnParams p = deepseek_v3();
  const Tables contiguous = yarn(p, DType::bf16, 5, 8, PairLayout::half);
  HostTensor cos(DType::bf16, {5, 1, 1, 8}, {11, 8, 8, 1}, 3),
      sin(DType::bf16, {5, 1, 1, 8}, {8, 8, 8, 1}, 2);
  cos.fill_bits(0xABCD);
  sin.fill_bits(0x1234);
  HostTensor expected_cos = cos, expected_sin = sin;
  YarnTablesCall call;
  call.params = p;
  call.cos = cos.view();
  call.sin = sin.view();
  reference::yarn_tables(call);
  for (std::int64_t r = 0; r < 5; ++r)
    for (std::int64_t k = 0; k < 8; ++k) {
      EXPECT_EQ(cos.bits({r, 0, 0, k}), contiguous.cos.bits({r, k}));
      EXPECT_EQ(sin.bits({r, 0, 0, k}), contiguous.sin.bits({r, k}));
      expected_cos.set_bits({r, 0, 0, k}, cos.bits({r, 0, 0, k}));
      expected_sin.set_bits({r, 0, 0, k}, sin.bits({r, 0, 0, k}));
    }
  EXPECT_TRUE(test::same_storage(cos, expected_cos));
  EXPECT_TRUE(test::same_storage(sin, expected_sin));
}

TEST(YarnTables, CollapsedCorrectionRangeIsWidenedAsInMegatron) {
  // d = 4 and a huge original context: low = floor(3.x) = 3 = high = min(ceil(4.x), 3).
  YarnParams p = deepseek_v3();
  p.original_max_position_embeddings = 2.01e9;
  const CorrectionRange range = correction_range(p, 4);
  ASSERT_EQ(range.low, 3);
  ASSERT_EQ(range.high, 3);
  const std::vector<double> inv = reference::yarn_inverse_frequencies(p, 4);
  const std::vector<double> expected = expected_inverse_frequencies(p, 4);
  for (std::size_t j = 0; j < inv.size(); ++j) {
    EXPECT_FALSE(std::isnan(inv[j]));
    EXPECT_NEAR(inv[j], expected[j], 1e-15);
    EXPECT_NEAR(inv[j], std::pow(10000.0, -2.0 * j / 4), 1e-15);  // below the range: extrapolated
  }
}

}  // namespace
}  // namespace mlarope
