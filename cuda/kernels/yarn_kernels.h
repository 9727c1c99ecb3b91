// SPDX-License-Identifier: Apache-2.0
// Kernel body of yarn_tables (docs/semantics.md §4): Megatron's YarnRotaryEmbedding frequencies,
// computed in double and rounded once to the table dtype. Blocks over rows, threads over pairs.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/float_convert.h"
#include "kernels/kernel_args.h"
#include "kernels/pair_rotation.h"
#include "kernels/portability.h"

namespace mlarope::kernels {

/// YaRN inverse frequency of pair i: the interpolated (1 / (s * base^(2i/d))) and the
/// extrapolated (1 / base^(2i/d)) frequencies blended by the linear ramp over [low, high].
MLAROPE_HD MLAROPE_INLINE double yarn_inverse_frequency(const YarnKernelArgs& a, std::int64_t i) {
  const double exponent = static_cast<double>(2 * i) / static_cast<double>(a.emb_dim);
  const double extrapolated = 1.0 / ::pow(a.rotary_base, exponent);
  const double interpolated = 1.0 / (a.scaling_factor * ::pow(a.rotary_base, exponent));
  double ramp = (static_cast<double>(i) - a.ramp_low) / (a.ramp_high - a.ramp_low);
  ramp = ramp < 0.0 ? 0.0 : (ramp > 1.0 ? 1.0 : ramp);
  const double extrapolation_mask = 1.0 - ramp;
  return interpolated * (1.0 - extrapolation_mask) + extrapolated * extrapolation_mask;
}

/// Store `x` rounded once to `dtype` into element `index` of a table.
MLAROPE_HD MLAROPE_INLINE void store_table_element(void* base, DType dtype, std::int64_t index,
                                                   double x) {
  switch (dtype) {
    case DType::f16:
      global_store(static_cast<Half*>(base) + index,
                   Half{float_to_half(double_to_float_round_odd(x))});
      break;
    case DType::bf16:
      global_store(static_cast<BFloat16*>(base) + index,
                   BFloat16{float_to_bf16(double_to_float_round_odd(x))});
      break;
    default: global_store(static_cast<float*>(base) + index, static_cast<float>(x)); break;
  }
}

/// yarn_tables: entry pair i of row `row` holds cos (sin) of (offset + row) * inv_freq(i),
/// times the concentration factor, at the table layout's positions of pair i.
MLAROPE_HD inline void yarn_tables_body(const YarnKernelArgs& a, const GridCoord& g) {
  const std::int64_t half_dim = a.emb_dim / 2;
  for (std::int64_t row = g.block; row < a.rows; row += g.num_blocks) {
    const double position = static_cast<double>(a.offset + row);
    for (std::int64_t i = g.thread; i < half_dim; i += g.num_threads) {
      const double angle = position * yarn_inverse_frequency(a, i);
      const double c = ::cos(angle) * a.concentration;
      const double s = ::sin(angle) * a.concentration;
      const std::int64_t tu = u_position(a.table_layout, i, half_dim);
      const std::int64_t tv = v_position(a.table_layout, i, half_dim);
      store_table_element(a.cos, a.dtype, row * a.cos_row_stride + tu, c);
      store_table_element(a.cos, a.dtype, row * a.cos_row_stride + tv, c);
      store_table_element(a.sin, a.dtype, row * a.sin_row_stride + tu, s);
      store_table_element(a.sin, a.dtype, row * a.sin_row_stride + tv, s);
    }
  }
}

}  // namespace mlarope::kernels
