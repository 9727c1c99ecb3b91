// SPDX-License-Identifier: Apache-2.0
// Host side of block_sum_kernel.cu: the phased block sum of test_support/block_sum.h on a CUDA
// device.
#pragma once

#include <vector>

namespace mlarope::test_kernels {

/// Whether the CUDA runtime sees a device.
bool block_sum_device_present();
/// Threads per block (floats summed per block).
int block_sum_threads();
/// One sum per block of block_sum_threads() floats of `in`, by the phased kernel on the device.
std::vector<float> block_sums_on_device(const std::vector<float>& in);

}  // namespace mlarope::test_kernels
