// SPDX-License-Identifier: Apache-2.0
// The optimized backends (include/mlarope/backend.h) as harness Backends on host memory.
#pragma once

#include <cstdint>

#include "backends/case_run.h"
#include "mlarope/backend.h"

namespace mlarope::harness {

/// How the host backend runs the kernel bodies.
enum class HostMode : std::uint8_t {
  gpu_model,  ///< "host": a model of the GPU (HostStreamOptions::gpu_model), for the checks
  fast,       ///< "host-fast": host work sharing and SIMD on all cores, for speed
};

/// The host backend: the kernel bodies on the CPU grid executor, with block and thread order
/// drawn from `order_seed`. Host memory is its device memory, so calls run on the buffers
/// given; it offers `with_order_seed` and `capture` (graph capture and replay). Under the GPU
/// model, `model_block_stride` > 1 runs every n-th block only (HostStreamOptions): for the
/// timing model's figures of full-size calls, not for checking.
Backend host_backend(std::uint64_t order_seed = 0, HostMode mode = HostMode::gpu_model,
                     std::int64_t model_block_stride = 1);

/// The CUDA backend: every call copies the memory its views span to the device, runs there,
/// and copies the outputs back (so it checks the kernels, not the transfer). Throws
/// mlarope::Error when no device is available.
Backend cuda_backend();

}  // namespace mlarope::harness
