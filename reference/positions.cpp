// SPDX-License-Identifier: Apache-2.0
#include "positions.h"

namespace mlarope::reference {
namespace {

std::int64_t index_at(const IndexView& v, std::int64_t i) {
  if (v.type == IndexType::i32) return static_cast<const std::int32_t*>(v.data)[i];
  return static_cast<const std::int64_t*>(v.data)[i];
}

// Record freq_row for one row, or pass it through when it lies outside the table.
void assign(RowMap& map, std::int64_t row, std::int64_t freq_row, std::int64_t table_rows) {
  if (freq_row < 0 || freq_row >= table_rows) {
    map.status |= kStatusRowOutsideTable;
    return;
  }
  map.freq_row[row] = freq_row;
}

RowMap map_sbhd(const Positions& p, RowShape rows, std::int64_t table_rows) {
  RowMap map;
  map.freq_row.assign(rows.seq * rows.batch, RowMap::kPassThrough);
  for (std::int64_t s = 0; s < rows.seq; ++s)
    for (std::int64_t b = 0; b < rows.batch; ++b) {
      std::int64_t freq_row = cp_pos(s, rows.seq, p.cp_size, p.cp_rank);
      if (p.seq_offsets.present()) freq_row += index_at(p.seq_offsets, b);
      assign(map, s * rows.batch + b, freq_row, table_rows);
    }
  return map;
}

RowMap map_thd(const Positions& p, std::int64_t total_rows, std::int64_t table_rows) {
  RowMap map;
  map.freq_row.assign(total_rows, RowMap::kPassThrough);
  map.status = check_cu_seqlens(p, total_rows);  // when set, no row can be trusted
  if (map.status != kStatusOk) return map;
  const IndexView& cu = p.cu_seqlens;
  std::int64_t row = 0;  // first row of the current sequence: lcu_i
  for (std::int64_t i = 0; i + 1 < cu.size; ++i) {
    const std::int64_t start = index_at(cu, i);
    const std::int64_t length = (index_at(cu, i + 1) - start) / p.cp_size;  // L_i
    for (std::int64_t lp = 0; lp < length; ++lp, ++row) {
      std::int64_t freq_row = cp_pos(lp, length, p.cp_size, p.cp_rank);
      if (p.freq_mode == FreqMode::packed) freq_row += start;
      if (p.seq_offsets.present()) freq_row += index_at(p.seq_offsets, i);
      if (p.position_ids.present()) freq_row = index_at(p.position_ids, row);
      assign(map, row, freq_row, table_rows);
    }
  }
  return map;  // rows from `row` on are padding and stay kPassThrough
}

}  // namespace

RowMap map_rows(const Positions& p, RowShape rows, std::int64_t table_rows) {
  if (p.layout == TokenLayout::sbhd) return map_sbhd(p, rows, table_rows);
  return map_thd(p, rows.seq, table_rows);
}

}  // namespace mlarope::reference
