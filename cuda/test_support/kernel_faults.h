// SPDX-License-Identifier: Apache-2.0
// The deliberately wrong behaviours of the fault-variant build of the kernels (test builds
// only): a plain enum, shared by that build (kernel_faults.txt: the edits, one per fault;
// fault_selector.h: the run-time selector) and the tests that select a fault. The production
// build never includes this header.
#pragma once

#include <string_view>
#include <vector>

namespace mlarope::fault_injection {

/// One way for the kernels to be wrong. Every fault but `slow` changes results.
enum class KernelFault : int {
  none = 0,         ///< the kernels as in production
  cp_chunk,         ///< CP: second half read from chunk 2*cp_size - r, not 2*cp_size - 1 - r
  thd_search,       ///< THD: a row at a sequence start assigned to the sequence before
  dropped_inverse,  ///< the fast (vector) path ignores `inverse` (Megatron's historical bug)
  nope_in_place,    ///< in place: the nope part of head 0 of each rotated row is negated
  table_stride,     ///< rope: head h reads table row freq_row + h (mod table rows)
  slow,             ///< rope out of place does kSlowShare more work (same result)
  // Faults that leave the values right: the GPU model's detectors (and ASan) must see them.
  vector_either_aligned,   ///< rope: 16-byte copies when either of t and out is aligned
  store_past_end,          ///< kv_split: a store one element past the end of value
  shared_element,          ///< segment copies: two threads write one element (a race)
  contiguous_copy_ranges,  ///< segment copies: a contiguous range per thread (coalescing)
  local_array_overflow,    ///< rope (the host's fast branch): a store past a local array (ASan)
  fast_slice_overread,  ///< rope (the host's fast branch): a read of the byte past each rope slice
                        ///< (ASan)
  staged_missing_barrier,  ///< rope (staged, in place): chunks written in the phase that reads
                           ///< slices
  staged_unwaited_copies,  ///< rope (staged, in place): no wait for the copies into shared memory
};

/// Every fault but `none`.
inline std::vector<KernelFault> all_kernel_faults() {
  return {KernelFault::cp_chunk,
          KernelFault::thd_search,
          KernelFault::dropped_inverse,
          KernelFault::nope_in_place,
          KernelFault::table_stride,
          KernelFault::slow,
          KernelFault::vector_either_aligned,
          KernelFault::store_past_end,
          KernelFault::shared_element,
          KernelFault::contiguous_copy_ranges,
          KernelFault::local_array_overflow,
          KernelFault::fast_slice_overread,
          KernelFault::staged_missing_barrier,
          KernelFault::staged_unwaited_copies};
}

/// "none", "cp_chunk", ...
inline std::string_view to_string(KernelFault fault) {
  switch (fault) {
    case KernelFault::none: return "none";
    case KernelFault::cp_chunk: return "cp_chunk";
    case KernelFault::thd_search: return "thd_search";
    case KernelFault::dropped_inverse: return "dropped_inverse";
    case KernelFault::nope_in_place: return "nope_in_place";
    case KernelFault::table_stride: return "table_stride";
    case KernelFault::slow: return "slow";
    case KernelFault::vector_either_aligned: return "vector_either_aligned";
    case KernelFault::store_past_end: return "store_past_end";
    case KernelFault::shared_element: return "shared_element";
    case KernelFault::contiguous_copy_ranges: return "contiguous_copy_ranges";
    case KernelFault::local_array_overflow: return "local_array_overflow";
    case KernelFault::fast_slice_overread: return "fast_slice_overread";
    case KernelFault::staged_missing_barrier: return "staged_missing_barrier";
    case KernelFault::staged_unwaited_copies: return "staged_unwaited_copies";
  }
  return "?";
}

/// How much longer the `slow` fault makes rope out of place take: 15%, the smallest slowdown
/// the benchmark gate is held to catch.
inline constexpr double kSlowShare = 0.15;

}  // namespace mlarope::fault_injection
