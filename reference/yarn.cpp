// SPDX-License-Identifier: Apache-2.0
// YaRN tables, following Megatron's YarnRotaryEmbedding (docs/semantics.md §4), in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "host_convert.h"
#include "mlarope/validate.h"
#include "reference.h"

namespace mlarope::reference {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Dimension at which a frequency makes `rotations` turns over the original context.
double correction_dim(double rotations, double dim, double base, double max_positions) {
  return dim * std::log(max_positions / (rotations * 2 * kPi)) / (2 * std::log(base));
}

// Megatron's _yarn_get_mscale.
double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

std::vector<double> yarn_inverse_frequencies(const YarnParams& p, std::int64_t emb_dim) {
  const double dim = static_cast<double>(emb_dim);
  // Correction range: floor/ceil of the correction dims, clamped to [0, dim - 1].
  double low = std::floor(
      correction_dim(p.beta_fast, dim, p.rotary_base, p.original_max_position_embeddings));
  double high = std::ceil(
      correction_dim(p.beta_slow, dim, p.rotary_base, p.original_max_position_embeddings));
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // Megatron: prevent a division by zero
  std::vector<double> inverse_frequencies(emb_dim / 2);
  for (std::int64_t j = 0; j < emb_dim / 2; ++j) {
    const double extrapolation = 1.0 / std::pow(p.rotary_base, 2.0 * j / dim);
    const double interpolation = extrapolation / p.scaling_factor;
    const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;  // Megatron's inv_freq_mask
    inverse_frequencies[j] =
        interpolation * (1.0 - extrapolation_weight) + extrapolation * extrapolation_weight;
  }
  return inverse_frequencies;
}

double yarn_concentration(const YarnParams& p) {
  if (!std::isnan(p.concentration_override)) return p.concentration_override;
  return yarn_mscale(p.scaling_factor, p.mscale) / yarn_mscale(p.scaling_factor, p.mscale_all_dim);
}

void yarn_tables(const YarnTablesCall& call) {
  validate(call);
  const std::int64_t rows = call.cos.size(0), d = call.cos.size(-1);
  const std::vector<double> inverse_frequencies = yarn_inverse_frequencies(call.params, d);
  const double m = yarn_concentration(call.params);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double position = static_cast<double>(call.offset + r);
    for (std::int64_t k = 0; k < d; ++k) {
      const std::int64_t j = call.table_layout == PairLayout::half ? k % (d / 2) : k / 2;
      const double angle = position * inverse_frequencies[j];
      store_rounded(call.cos.data, call.cos.dtype, r * call.cos.strides[0] + k,
                    std::cos(angle) * m);
      store_rounded(call.sin.data, call.sin.dtype, r * call.sin.strides[0] + k,
                    std::sin(angle) * m);
    }
  }
}

}  // namespace mlarope::reference
