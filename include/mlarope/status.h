// SPDX-License-Identifier: Apache-2.0
// The device-side status word of a call (docs/semantics.md §5).
#pragma once

#include <cstdint>
#include <string>

namespace mlarope {

/// One word in device memory that a call ORs error bits into; zero means no error.
/// NOTE: the word holds the OR of every kind of error seen, not "the first error": in a parallel
/// kernel "first" depends on thread order, and the OR does not (docs/semantics.md §5).
using DeviceStatus = std::uint32_t;

/// What a bit of the status word means.
enum StatusBit : DeviceStatus {
  kStatusOk = 0,
  kStatusBadCuSeqlens = 1u << 0,     ///< decreasing, or local lengths adding up to more than T
  kStatusBadSeqLength = 1u << 1,     ///< a sequence length not divisible by 2 * cp_size
  kStatusRowOutsideTable = 1u << 2,  ///< a freq_row < 0 or >= table rows
};

/// Human-readable list of the bits set in `status` ("ok" when none).
std::string describe_status(DeviceStatus status);

}  // namespace mlarope
