// SPDX-License-Identifier: Apache-2.0
// A phased kernel body for the tests of block barriers and shared memory (kernels/portability.h):
// each block sums kThreads floats with a tree in shared memory, one barrier per tree level.
// Written like a kernel (kernels/ headers only), so nvcc compiles it too (block_sum_kernel.cu).
// kFault breaks it in one way for the GPU model's tests.
#pragma once

#include <cstdint>

#include "kernels/grid.h"
#include "kernels/portability.h"

namespace mlarope::test_kernels {

using namespace ::mlarope::kernels;

/// in: blocks x kThreads floats; out: one sum per block.
struct BlockSumArgs {
  const float* in = nullptr;
  float* out = nullptr;
};

enum class BlockSumFault {
  none,
  missing_barrier,  ///< the first tree level runs in the loading phase (no barrier between)
  past_shared_end,  ///< the last phase reads one element past the shared array
};

template <int kThreads, BlockSumFault kFault = BlockSumFault::none>
struct BlockSum {
  static constexpr int levels() {
    int n = 0;
    for (int width = kThreads; width > 1; width /= 2) ++n;
    return n;
  }
  /// Load, then one phase per tree level (the first level joins the load when it is missing).
  static constexpr int kPhases = 1 + levels() - (kFault == BlockSumFault::missing_barrier ? 1 : 0);
  struct Shared {
    float partial[kThreads];
  };

  /// Tree level `level` (1: halves of kThreads / 2, ...): thread t < width adds t + width.
  MLAROPE_HD static void add_level(int level, int t, Shared& s) {
    const int width = kThreads >> level;
    if (t < width)
      shared_store(&s.partial[t], shared_load(&s.partial[t]) + shared_load(&s.partial[t + width]));
  }

  MLAROPE_HD static void phase(const BlockSumArgs& a, const GridCoord& g, int phase, Shared& s) {
    const int t = g.thread;
    const int level = kFault == BlockSumFault::missing_barrier ? phase + 1 : phase;
    if (phase == 0) {
      shared_store(&s.partial[t], global_load(a.in + g.block * kThreads + t));
      if (kFault != BlockSumFault::missing_barrier) return;
    }
    add_level(level, t, s);
    if (phase == kPhases - 1 && t == 0) {
      float sum = shared_load(&s.partial[0]);
      if (kFault == BlockSumFault::past_shared_end)
        sum += 0.0f * shared_load(s.partial + kThreads);  // one past the end
      global_store(a.out + g.block, sum);
    }
  }
};

}  // namespace mlarope::test_kernels
