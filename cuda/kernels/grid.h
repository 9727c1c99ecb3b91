// SPDX-License-Identifier: Apache-2.0
// Launch geometry shared by the kernel bodies, the host grid executor and the CUDA launch:
// one-dimensional grids of blocks of threads. Nothing here knows about RoPE.
#pragma once

#include <cstdint>

namespace mlarope::kernels {

/// Where a launch's block and thread are, and how many there are.
struct GridCoord {
  std::int64_t block = 0;
  std::int64_t num_blocks = 1;
  int thread = 0;
  int num_threads = 1;
};

/// Blocks and threads per block of one launch.
struct GridShape {
  std::int64_t blocks = 0;
  int threads = 0;
};

}  // namespace mlarope::kernels
