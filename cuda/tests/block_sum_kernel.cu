// SPDX-License-Identifier: Apache-2.0
// The phased test body of test_support/block_sum.h as a CUDA kernel: block barriers and shared
// memory written once compile to __syncthreads() and __shared__. block_sum_cuda_test runs it
// where a device is present (and ci/gpu-check.sh under racecheck and synccheck, beside the
// production kernel with phases, the staged in-place rope).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/portability.h"
#include "test_support/block_sum.h"
#include "tests/block_sum_kernel.h"

namespace mlarope::test_kernels {
namespace {

constexpr int kThreads = 64;

__device__ inline kernels::GridCoord block_sum_coord() {
  return {static_cast<std::int64_t>(blockIdx.x), static_cast<std::int64_t>(gridDim.x),
          static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
}

__global__ void block_sum_kernel(const BlockSumArgs args) {
  kernels::run_phases<BlockSum<kThreads>>(args, block_sum_coord());
}

// Throws with the call's name and CUDA's message when `status` is an error.
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

}  // namespace

bool block_sum_device_present() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

int block_sum_threads() { return kThreads; }

std::vector<float> block_sums_on_device(const std::vector<float>& in) {
  const int blocks = static_cast<int>(in.size() / kThreads);
  std::vector<float> out(static_cast<std::size_t>(blocks), -1.0f);
  float *d_in = nullptr, *d_out = nullptr;
  check(cudaMalloc(&d_in, in.size() * sizeof(float)), "cudaMalloc");
  check(cudaMalloc(&d_out, out.size() * sizeof(float)), "cudaMalloc");
  check(cudaMemcpy(d_in, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  block_sum_kernel<<<blocks, kThreads>>>(BlockSumArgs{d_in, d_out});
  check(cudaGetLastError(), "block_sum_kernel launch");
  check(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  check(cudaFree(d_in), "cudaFree");
  check(cudaFree(d_out), "cudaFree");
  return out;
}

}  // namespace mlarope::test_kernels
