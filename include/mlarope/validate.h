// SPDX-License-Identifier: Apache-2.0
// Validation of docs/semantics.md §5: host-known arguments before any launch, and a host-side
// validator of device metadata that applies the same rules as the device.
#pragma once

#include <cstdint>

#include "mlarope/ops.h"

namespace mlarope {

/// Throw mlarope::Error, naming the argument and its value, if a host-known rule is broken.
void validate(const RopeCall& call);
void validate(const RopeInplaceCall& call);
void validate(const RopeBackwardCall& call);
void validate(const RopeBackwardInplaceCall& call);
void validate(const KvSplitCall& call);
void validate(const KvSplitBackwardCall& call);
void validate(const YarnTablesCall& call);

/// Largest cp_size: L * cp_size and the other CP position arithmetic then fit in 63 bits.
inline constexpr std::int64_t kMaxCpSize = std::int64_t{1} << 20;
/// Largest element count and byte extent of a view (index arithmetic fits in 63 bits).
inline constexpr std::int64_t kMaxViewBytes = std::int64_t{1} << 62;
/// The largest size argument (nope_dim, emb_dim, k_dim, v_dim, a dimension of a view): as many
/// elements of the narrowest dtype (2 bytes) as kMaxViewBytes holds, so that the sum of two
/// stays below 2^63.
inline constexpr std::int64_t kMaxDim = kMaxViewBytes / 2;

/// Throws mlarope::Error naming `name` when `value` is negative or above kMaxDim.
void check_dim(std::int64_t value, const char* name);

/// True when the call writes no element (every output has zero elements): after validate(),
/// such a call is a no-op that launches nothing, whatever its other dimensions.
bool writes_nothing(const RopeCall& call);
bool writes_nothing(const RopeInplaceCall& call);
bool writes_nothing(const RopeBackwardCall& call);
bool writes_nothing(const RopeBackwardInplaceCall& call);
bool writes_nothing(const KvSplitCall& call);
bool writes_nothing(const KvSplitBackwardCall& call);

/// Sizes of the rows of a call: SBHD [S, B], THD [T, 1].
struct RowShape {
  std::int64_t seq = 0;    ///< S, or T for THD
  std::int64_t batch = 1;  ///< B, or 1 for THD
};

/// The status bits a backend raises for this metadata; the arrays of `positions` must be
/// host memory here (a host copy of the device arrays). kStatusOk when all is valid.
DeviceStatus check_device_metadata(const Positions& positions, RowShape rows,
                                   std::int64_t table_rows);

/// cp_pos(lp): the position, in the sequence before context-parallel splitting, of local
/// position lp of a local sequence of `length` rows on rank cp_rank of cp_size
/// (docs/semantics.md §2). Validation and the reference share it; the kernels compute their own
/// (cuda/kernels/freq_row.h), so that a mistake here cannot hide in them too.
std::int64_t cp_pos(std::int64_t lp, std::int64_t length, std::int64_t cp_size,
                    std::int64_t cp_rank);

/// The cu_seqlens part of check_device_metadata: bad bits when any sequence length is negative
/// or (cp_size > 1) not divisible by 2 * cp_size, or the local lengths add up to more than
/// `rows` (= T). When this is not kStatusOk every row of the call passes through.
DeviceStatus check_cu_seqlens(const Positions& positions, std::int64_t rows);

/// Number of rows of the table views of `rotation` ([R, d] or [R, 1, 1, d]).
std::int64_t table_rows(const Rotation& rotation);
/// Element stride between table rows.
std::int64_t table_row_stride(const ConstTensorView& table);

}  // namespace mlarope
