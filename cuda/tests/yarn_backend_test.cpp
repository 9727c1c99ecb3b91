// SPDX-License-Identifier: Apache-2.0
// yarn_tables on each backend against the reference: within one ulp of the table dtype
// (both compute in double; the libraries' cos/sin may differ in the last double bit).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "host_convert.h"
#include "reference.h"
#include "test_support/backend_cases.h"

namespace mlarope::test {
namespace {

class YarnBackendTest : public BackendTest {};

struct YarnCase {
  const char* name;
  YarnParams params;
  std::int64_t offset = 0;
};

std::vector<YarnCase> yarn_cases() {
  YarnParams plain;
  YarnParams deepseek;
  deepseek.scaling_factor = 40;
  deepseek.original_max_position_embeddings = 4096;
  deepseek.mscale = 1.0;
  deepseek.mscale_all_dim = 0.0;
  YarnParams overridden = deepseek;
  overridden.concentration_override = 0.5;
  overridden.rotary_base = 50000;
  return {{"plain rope", plain, 0},
          {"deepseek yarn", deepseek, 0},
          {"offset", deepseek, 1000},
          {"override", overridden, 7}};
}

// Elements of the two tables more than one table-dtype ulp apart.
std::int64_t mismatches(const Tensor& a, const Tensor& b) {
  std::int64_t count = 0;
  a.for_each_index([&](const std::vector<std::int64_t>& i) {
    const double x = a.get(i), y = b.get(i);
    const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(y), 1e-30)) -
                                           (a.dtype() == DType::f32   ? 23
                                            : a.dtype() == DType::f16 ? 10
                                                                      : 7));
    if (!(std::fabs(x - y) <= ulp)) ++count;
  });
  return count;
}

TEST_P(YarnBackendTest, TablesMatchTheReference) {
  for (const YarnCase& yc : yarn_cases())
    for (DType dtype : {DType::f32, DType::f16, DType::bf16})
      for (PairLayout layout : {PairLayout::half, PairLayout::interleaved})
        for (bool strided : {false, true}) {
          const std::int64_t rows = 300, d = 64;
          const std::vector<std::int64_t> shape = strided ? std::vector<std::int64_t>{rows, 1, 1, d}
                                                          : std::vector<std::int64_t>{rows, d};
          const std::vector<std::int64_t> strides =
              strided ? std::vector<std::int64_t>{d + 5, d + 5, d + 5, 1}
                      : std::vector<std::int64_t>{};
          Tensor cos(dtype, shape, strides), sin(dtype, shape, strides);
          Tensor ref_cos(dtype, shape, strides), ref_sin(dtype, shape, strides);
          cos.upload(backend());
          sin.upload(backend());
          YarnTablesCall call{yc.params, yc.offset, layout, cos.device_view(), sin.device_view()};
          Stream stream = make_stream();
          yarn_tables(call, stream);
          stream.synchronize();
          cos.download();
          sin.download();
          reference::yarn_tables(
              {yc.params, yc.offset, layout, ref_cos.host_view(), ref_sin.host_view()});
          EXPECT_EQ(mismatches(cos, ref_cos) + mismatches(sin, ref_sin), 0)
              << yc.name << " " << to_string(dtype) << " " << to_string(layout);
          // Gaps between strided rows are not written.
          EXPECT_EQ(cos.storage().front(), 0xA5);
          EXPECT_EQ(cos.storage().back(), 0xA5);
        }
}

TEST_P(YarnBackendTest, TablesDriveRopeLikeTheReferenceTables) {
  Tensor cos(DType::f32, {64, 16}), sin(DType::f32, {64, 16});
  cos.upload(backend());
  sin.upload(backend());
  Stream stream = make_stream();
  yarn_tables({YarnParams{}, 0, PairLayout::half, cos.device_view(), sin.device_view()}, stream);
  stream.synchronize();
  cos.download();
  sin.download();
  // A unit table: cos^2 + sin^2 == 1 within f32 rounding.
  cos.for_each_index([&](const std::vector<std::int64_t>& i) {
    EXPECT_NEAR(cos.get(i) * cos.get(i) + sin.get(i) * sin.get(i), 1.0, 1e-6);
  });
}

MLAROPE_INSTANTIATE_BACKENDS(YarnBackendTest);

}  // namespace
}  // namespace mlarope::test
