// The kernel bodies compiled by the host compiler and run by the host grid executor: one
// function per launch descriptor, mapping (dtype, variant) to a body instantiation.
#pragma once

#include "testing/fault_injection.h"
#include "host/host_executor.h"
#include "launches.h"

namespace mlarope::host {
MLAROPE_FAULT_NAMESPACE_BEGIN

/// Run one launch on `executor` (returns when every block ran).
void run(const HostExecutor& executor, const detail::RopeLaunch& l);
void run(const HostExecutor& executor, const detail::KvSplitLaunch& l);
void run(const HostExecutor& executor, const detail::KvSplitBackwardLaunch& l);
void run(const HostExecutor& executor, const detail::YarnLaunch& l);
void run(const HostExecutor& executor, const detail::CuSeqlensCheckLaunch& l);

MLAROPE_FAULT_NAMESPACE_END
}  // namespace mlarope::host
