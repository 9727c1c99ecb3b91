// SPDX-License-Identifier: Apache-2.0
// Kernel-level broken variants: the host backend built from copies of the
// real kernel sources with the edits of cuda/test_support/kernel_faults.txt (mlarope_host_faulty,
// test builds only), each wrong in one way (kernel_faults.h), registered as broken backends
// "broken:kernel_<fault>" by a static BrokenBackendRegistrar in broken_kernels.cpp: a binary that
// links that file (the test broken_kernels_test) can resolve them by name like the reference
// wrappers.
#pragma once

#include <cstdint>
#include <vector>

#include "fuzz/broken_backends.h"
#include "test_support/kernel_faults.h"

namespace mlarope::props {

/// The faulty-library host backend applying `fault` as a harness Backend, with order seeds
/// and graph capture like harness::host_backend. Named "broken:kernel_<fault>", or
/// "host_faulty" for KernelFault::none (the unbroken build of the same library).
/// With `gpu_model` false it runs the host's fast mode, whose host-only branches the faults of
/// those branches (fast_slice_overread, local_array_overflow) edit.
harness::Backend faulty_kernel_backend(fault_injection::KernelFault fault,
                                       std::uint64_t order_seed = 0, bool gpu_model = true);

/// The broken kernel variants (every fault that changes results: all but none and slow), with
/// the checks that must catch each and the cases to draw; the same list that is registered.
std::vector<BrokenBackend> broken_kernel_variants();

}  // namespace mlarope::props
