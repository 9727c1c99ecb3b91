// SPDX-License-Identifier: Apache-2.0
// Reading one row of the cos/sin tables.
#pragma once

#include <cstdint>

#include "host_convert.h"
#include "mlarope/ops.h"

namespace mlarope::reference {

/// c[k] = cos[row, k] and s[k] = sin[row, k] for k < emb_dim, as doubles (exact).
inline void load_table_row(const Rotation& r, std::int64_t row, double* c, double* s) {
  const std::int64_t d = r.cos.size(-1);
  const std::int64_t cos_base = row * r.cos.strides[0], sin_base = row * r.sin.strides[0];
  for (std::int64_t k = 0; k < d; ++k) {
    c[k] = load_as_double(r.cos.data, r.cos.dtype, cos_base + k);
    s[k] = load_as_double(r.sin.data, r.sin.dtype, sin_base + k);
  }
}

}  // namespace mlarope::reference
