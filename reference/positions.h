// SPDX-License-Identifier: Apache-2.0
// Which table row each row of a call uses (docs/semantics.md §2), found by walking the sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "mlarope/ops.h"
#include "mlarope/validate.h"

namespace mlarope::reference {

/// The table row of every row of a call, or kPassThrough. Rows are ordered (s, b) -> s * B + b
/// for SBHD and r for THD.
struct RowMap {
  static constexpr std::int64_t kPassThrough = -1;
  std::vector<std::int64_t> freq_row;
  DeviceStatus status = kStatusOk;  ///< bits the device would raise for this metadata
};

/// Map every row to its table row; metadata arrays are host memory. Rows whose metadata is
/// invalid, padding rows, and rows whose freq_row falls outside [0, table_rows) pass through.
RowMap map_rows(const Positions& positions, RowShape rows, std::int64_t table_rows);

}  // namespace mlarope::reference
