// The kernel bodies compiled by the host compiler and run by the host grid executor: one
// function per launch descriptor, mapping (dtype, variant) to a body instantiation.
#pragma once

#include "host_executor.h"
#include "launches.h"

namespace mlarope::host {

/// Run one launch on `executor` (returns when every block ran).
void run(const HostExecutor& executor, const detail::RopeLaunch& l);
void run(const HostExecutor& executor, const detail::KvSplitLaunch& l);
void run(const HostExecutor& executor, const detail::KvSplitBackwardLaunch& l);
void run(const HostExecutor& executor, const detail::YarnLaunch& l);
void run(const HostExecutor& executor, const detail::CuSeqlensCheckLaunch& l);

}  // namespace mlarope::host
