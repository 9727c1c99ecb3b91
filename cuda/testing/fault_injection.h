// Test-only fault injection into the kernel bodies (issue 4 point 6, issue 5).
//
// Without MLAROPE_FAULT_INJECTION (every production build, CUDA included) this header only
// defines MLAROPE_FAULT_NAMESPACE_BEGIN / _END as nothing, and the kernel headers compile to
// exactly the code they had before fault injection existed.
//
// With MLAROPE_FAULT_INJECTION (only the host-only test library mlarope_host_faulty), the
// kernel bodies (and, for KernelFault::slow, the host launch of rope) read a host global
// selector and misbehave in the one way it names (kernel_faults.h), and every function of the
// kernel headers, host_kernels.h and host_stream.h moves into the inline namespace `faulty`
// (mlarope::kernels::faulty, mlarope::host::faulty): other mangled names, so the faulty
// instantiations coexist with mlarope_host's in one test binary without an ODR clash, while
// the source keeps naming them mlarope::kernels::X.
#pragma once

#if defined(MLAROPE_FAULT_INJECTION)

#if defined(__CUDACC__)
#error "MLAROPE_FAULT_INJECTION is for host-only test builds (the selector is a host global)"
#endif

#include "testing/kernel_faults.h"

#define MLAROPE_FAULT_NAMESPACE_BEGIN inline namespace faulty {
#define MLAROPE_FAULT_NAMESPACE_END }

namespace mlarope::fault_injection {
/// The fault the kernel bodies apply now (a KernelFault); set around each call by the faulty
/// stream (faulty_host_stream.h), read by the bodies on the executor's threads.
extern int g_kernel_fault;
}  // namespace mlarope::fault_injection

/// True when the kernel bodies are to apply KernelFault::name.
#define MLAROPE_FAULT(name)                   \
  (::mlarope::fault_injection::g_kernel_fault == \
   static_cast<int>(::mlarope::fault_injection::KernelFault::name))

#else

#define MLAROPE_FAULT_NAMESPACE_BEGIN
#define MLAROPE_FAULT_NAMESPACE_END

#endif
