// SPDX-License-Identifier: Apache-2.0
// The kernel bodies compiled by the host compiler and run by the host grid executor: one
// function per launch descriptor, mapping (dtype, variant) to a body instantiation.
#pragma once

#include "host/host_executor.h"
#include "launch/launches.h"

namespace mlarope::host {

/// The host instantiations of the kernel bodies: how a host stream runs each launch (returns
/// when every block ran). A table, so that a test can hand a stream another build of the
/// same bodies (cuda/test_support/: the fault variants).
struct KernelTable {
  void (*rope)(const HostExecutor& executor, const detail::RopeLaunch& l);
  void (*kv_split)(const HostExecutor& executor, const detail::KvSplitLaunch& l);
  void (*kv_split_backward)(const HostExecutor& executor, const detail::KvSplitBackwardLaunch& l);
  void (*yarn)(const HostExecutor& executor, const detail::YarnLaunch& l);
};

/// The production kernel bodies (cuda/kernels/).
const KernelTable& kernel_table();

}  // namespace mlarope::host
