// SPDX-License-Identifier: Apache-2.0
// The run-time fault selector of the fault-variant build (test builds only). The production
// sources never include this header: make_faulty_sources inserts it into its copies of the
// kernel sources, whose edits test MLAROPE_FAULT(name) (kernel_faults.txt).
#pragma once

#if defined(__CUDACC__)
#error "the fault variants are host-only test builds (the selector is a host global)"
#endif

#include "test_support/kernel_faults.h"

namespace mlarope::fault_injection {
/// The fault the kernel bodies apply now (a KernelFault); set around each launch by the faulty
/// stream (faulty_host_stream.h), read by the bodies on the executor's threads.
extern int g_kernel_fault;
}  // namespace mlarope::fault_injection

/// True when the kernel bodies are to apply KernelFault::name.
#define MLAROPE_FAULT(name)                      \
  (::mlarope::fault_injection::g_kernel_fault == \
   static_cast<int>(::mlarope::fault_injection::KernelFault::name))
