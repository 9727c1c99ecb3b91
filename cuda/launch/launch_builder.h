// SPDX-License-Identifier: Apache-2.0
// From a validated call descriptor (ops.h) to a launch descriptor (launches.h): kernel
// arguments, the variant the dispatcher picks, and the grid for the backend's profile.
#pragma once

#include "launch/launches.h"
#include "launch/stream_impl.h"
#include "mlarope/ops.h"

namespace mlarope::detail {

/// Which member of the rope family a launch is.
struct RopeMode {
  bool in_place = false;
  bool adjoint = false;  ///< rope_backward
};

/// rope / rope_backward from `in` to `out` (the same view in place).
RopeLaunch make_rope_launch(const ConstTensorView& in, const TensorView& out, const RopeArgs& args,
                            RopeMode mode, const LaunchProfile& profile);
/// kv_split.
KvSplitLaunch make_kv_split_launch(const KvSplitCall& call, const LaunchProfile& profile);
/// kv_split_backward.
KvSplitBackwardLaunch make_kv_split_backward_launch(const KvSplitBackwardCall& call,
                                                    const LaunchProfile& profile);
/// yarn_tables.
YarnLaunch make_yarn_launch(const YarnTablesCall& call, const LaunchProfile& profile);

}  // namespace mlarope::detail
