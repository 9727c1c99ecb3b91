// SPDX-License-Identifier: Apache-2.0
// What the host-compiled library needs from the CUDA backend: device presence, memory and
// streams. Defined by mlarope_cuda (cuda_stream.cpp) in CUDA builds, and by
// cuda_unavailable.cpp otherwise (no device; creating a CUDA stream or buffer throws).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "launch/stream_impl.h"

namespace mlarope::detail::cuda {

/// True when a CUDA device can be used.
bool device_available();
/// A new CUDA stream; throws mlarope::Error (and leaks nothing) when it cannot be had.
std::unique_ptr<StreamImpl> make_stream();
/// Bytes of device memory free now (cudaMemGetInfo).
std::size_t free_memory();
/// The calling thread's pending CUDA error, taken off (empty: none).
std::string take_last_error();
/// `bytes` bytes of device memory.
void* allocate(std::size_t bytes);
/// Free memory from allocate (null is fine).
void release(void* p) noexcept;
/// Synchronous copies and fill.
void copy_to_device(void* dst, const void* src, std::size_t bytes);
void copy_to_host(void* dst, const void* src, std::size_t bytes);
void fill_bytes(void* dst, unsigned char value, std::size_t bytes);

}  // namespace mlarope::detail::cuda
