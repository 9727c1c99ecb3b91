// SPDX-License-Identifier: Apache-2.0
// The one place where kernel code meets CUDA-only features (docs/architecture.md rule 2).
// What a kernel body needs from it (the __host__ __device__ marker, global and shared memory
// accesses through the GPU model's hooks, block barriers, the status atomic, bit casts, raw
// vector loads) works the same when compiled by nvcc for the device and by the host compiler for
// the host grid executor. The element conversions (float_convert.h) and the division of work
// among threads (work_division.h) are built on it.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/grid.h"

#if defined(__CUDACC__)
#define MLAROPE_HD __host__ __device__
#define MLAROPE_INLINE __forceinline__
#elif defined(MLAROPE_COVERAGE_BUILD)
// The coverage build (-DMLAROPE_COVERAGE=ON, -O0): no forced inlining, so that gcov counts each
// branch at its own line, once per instantiation, not once per call site.
#define MLAROPE_HD
#define MLAROPE_INLINE inline
#else
#define MLAROPE_HD
#define MLAROPE_INLINE inline __attribute__((always_inline))
#endif

// MLAROPE_UNROLL: unroll a short constant-trip loop. MLAROPE_SIMD: the same for a loop whose
// iterations are independent element operations; the host compiler vectorizes it
// (needs -fopenmp-simd, set by cuda/CMakeLists.txt; without it the pragma is ignored).
#if defined(__CUDA_ARCH__)
#define MLAROPE_UNROLL _Pragma("unroll")
#define MLAROPE_SIMD _Pragma("unroll")
#elif defined(__CUDACC__)
#define MLAROPE_UNROLL  // nvcc's host pass: the host side of CUDA code is not hot
#define MLAROPE_SIMD
#else
#define MLAROPE_UNROLL _Pragma("GCC unroll 16")
#define MLAROPE_SIMD _Pragma("omp simd")
#endif

namespace mlarope::kernels {

// ---- Global memory ---------------------------------------------------------------------
// Every load and store of a kernel body to a tensor, table, metadata array or status word goes
// through global_load / global_store / the raw vector accesses / atomic_or below.
// On the device they are plain accesses. On the host, while the GPU model checks a launch
// (host/gpu_model.h: the model mode of the host backend), each access is first shown to the
// model, which checks alignment, bounds and races and counts sectors; an access it refuses
// (out of bounds) is not made. In the host's fast mode the model pointer is null.

/// How a kernel body touches memory.
enum class Access : std::uint8_t { load, store, atomic };

#if !defined(__CUDACC__)
namespace gpu_model {
class Recorder;
/// The model of the launch that this host thread runs, or nullptr (fast mode).
extern __thread Recorder* t_recorder;
/// Show one access to the model; false: the model refused it (it is not made).
bool observe(Recorder& recorder, const void* address, int bytes, Access access);
/// The thread's loads so far are waited for before any that follow.
void end_load_batch(Recorder& recorder);
/// The thread's index loads from here to end_index_batch are in flight together.
void begin_index_batch(Recorder& recorder);
void end_index_batch(Recorder& recorder);
/// An asynchronous copy of `bytes` from global `from` to shared `to` (async_copy_to_shared):
/// the model checks both ends, counts the load in the thread's open batch and writes `to` at
/// the thread's wait_async_copies, not before (a GPU may write it any time until then).
void async_copy(Recorder& recorder, void* to, const void* from, int bytes);
/// The thread's asynchronous copies land; its loads so far are waited for.
void wait_async_copies(Recorder& recorder);
}  // namespace gpu_model
#define MLAROPE_OBSERVE(address, bytes, access)                                                  \
  (::mlarope::kernels::gpu_model::t_recorder == nullptr ||                                       \
   ::mlarope::kernels::gpu_model::observe(*::mlarope::kernels::gpu_model::t_recorder, (address), \
                                          (bytes), (access)))
/// Where a body's loads stop being in flight together though no store follows them: a loop
/// that uses each batch it loaded before it loads the next (the compiled code waits there).
/// The GPU model closes the thread's batch; on the device it is nothing.
#define MLAROPE_END_LOAD_BATCH()                        \
  (::mlarope::kernels::gpu_model::t_recorder == nullptr \
       ? void()                                         \
       : ::mlarope::kernels::gpu_model::end_load_batch( \
             *::mlarope::kernels::gpu_model::t_recorder))
/// Around index loads (cu_seqlens) whose addresses are all known before the first of them:
/// they are in flight together, one round trip, where an index load alone is a round trip of
/// its own (its value usually names the next address). NOTE: no load between the two may take
/// its address from another's value; the GPU model cannot see that, so it is kept to
/// load_index_batch and the gate's group of entries (kernels/freq_row.h).
#define MLAROPE_BEGIN_INDEX_BATCH()                        \
  (::mlarope::kernels::gpu_model::t_recorder == nullptr    \
       ? void()                                            \
       : ::mlarope::kernels::gpu_model::begin_index_batch( \
             *::mlarope::kernels::gpu_model::t_recorder))
#define MLAROPE_END_INDEX_BATCH()                        \
  (::mlarope::kernels::gpu_model::t_recorder == nullptr  \
       ? void()                                          \
       : ::mlarope::kernels::gpu_model::end_index_batch( \
             *::mlarope::kernels::gpu_model::t_recorder))
/// True where the kernel bodies take their device code paths: on the device, and on the
/// host under the GPU model (strided work sharing, vector accesses in pieces).
#define MLAROPE_DEVICE_PATHS() (::mlarope::kernels::gpu_model::t_recorder != nullptr)
#else
#define MLAROPE_OBSERVE(address, bytes, access) true
#define MLAROPE_END_LOAD_BATCH() ((void)0)
#define MLAROPE_BEGIN_INDEX_BATCH() ((void)0)
#define MLAROPE_END_INDEX_BATCH() ((void)0)
#define MLAROPE_DEVICE_PATHS() true
#endif

/// *p, a load of global memory.
template <class T>
MLAROPE_HD MLAROPE_INLINE T global_load(const T* p) {
  if (!MLAROPE_OBSERVE(p, static_cast<int>(sizeof(T)), Access::load)) return T{};
  return *p;
}

/// out[k] = array[at[k]] for k < count (at most K; out[count ..] are left as they are):
/// entries of an index array whose addresses are all known before the first load, so that the
/// loads are in flight together (one round trip).
template <int K>
MLAROPE_HD MLAROPE_INLINE void load_index_batch(const std::int32_t* array,
                                                const std::int64_t (&at)[K], std::int32_t (&out)[K],
                                                int count = K) {
  MLAROPE_BEGIN_INDEX_BATCH();
  MLAROPE_UNROLL
  for (int k = 0; k < K; ++k)
    if (k < count) out[k] = global_load(array + at[k]);
  MLAROPE_END_INDEX_BATCH();
}

/// *p = value, a store to global memory.
template <class T>
MLAROPE_HD MLAROPE_INLINE void global_store(T* p, T value) {
  if (MLAROPE_OBSERVE(p, static_cast<int>(sizeof(T)), Access::store)) *p = value;
}

/// OR `bits` into a status word shared by every thread of a launch (order independent).
MLAROPE_HD MLAROPE_INLINE void atomic_or(std::uint32_t* word, std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  atomicOr(word, bits);
#else
  if (MLAROPE_OBSERVE(word, 4, Access::atomic)) __atomic_fetch_or(word, bits, __ATOMIC_RELAXED);
#endif
}

// ---- Block barriers and shared memory ------------------------------------------------------
// A body that needs a block-wide barrier is written as phases, a struct with
//   static constexpr int kPhases;          // phases, separated by barriers
//   struct Shared { ... };                 // the block's shared memory
//   MLAROPE_HD static void phase(const Args&, const GridCoord&, std::int64_t phase, Shared&);
// or, for a body whose block runs a number of phases known only at run time (a grid-stride
// loop whose every round has barriers: kernels/row_rounds.h), instead of kPhases
//   MLAROPE_HD static std::int64_t phases(const Args&, const GridCoord&);  // of this block
// Phases are numbered on across rounds, so that a later round is ordered after every earlier
// one.
// On the GPU, run_phases (inside the __global__ kernel) runs phase 0, __syncthreads(),
// phase 1, ... with Shared a __shared__ object. On the host the executor runs every thread of
// a block through phase k before any thread enters phase k + 1 (HostExecutor::run_phased),
// with a per-block Shared filled with a poison pattern. Values that live across a barrier are
// kept in Shared; its elements are read and written with shared_load and shared_store, which
// the GPU model checks (bounds, alignment, races within the block's phase).

/// *p, a load of shared memory.
template <class T>
MLAROPE_HD MLAROPE_INLINE T shared_load(const T* p) {
  if (!MLAROPE_OBSERVE(p, static_cast<int>(sizeof(T)), Access::load)) return T{};
  return *p;
}

/// *p = value, a store to shared memory.
template <class T>
MLAROPE_HD MLAROPE_INLINE void shared_store(T* p, T value) {
  if (MLAROPE_OBSERVE(p, static_cast<int>(sizeof(T)), Access::store)) *p = value;
}

/// Copy kBytes (8 or 16, `to` and `from` aligned to kBytes) from global memory to shared memory
/// without passing them through registers (cp.async on sm_80 and later): the thread goes on at
/// once, so a loop of these keeps every one in flight at the cost of its addresses alone. The
/// bytes land by the thread's wait_async_copies; until then the thread must not touch `to`
/// (the GPU model delays the write to the wait and reports an access before it), and a phase
/// must end with that wait before its barrier (the barrier does not wait for them).
template <int kBytes>
MLAROPE_HD MLAROPE_INLINE void async_copy_to_shared(void* to, const void* from) {
  static_assert(kBytes == 8 || kBytes == 16, "cp.async copies 8 or 16 bytes here");
#if defined(__CUDA_ARCH__)
  const auto shared = static_cast<unsigned>(__cvta_generic_to_shared(to));
  if constexpr (kBytes == 16)  // .cg: through the L2 only, as the data is used once
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(from) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(shared), "l"(from) : "memory");
#else
#if !defined(__CUDACC__)
  if (gpu_model::t_recorder != nullptr) {
    gpu_model::async_copy(*gpu_model::t_recorder, to, from, kBytes);
    return;
  }
#endif
  std::memcpy(to, from, kBytes);
#endif
}

/// Wait until the calling thread's async_copy_to_shared copies have landed in shared memory.
MLAROPE_HD MLAROPE_INLINE void wait_async_copies() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#elif !defined(__CUDACC__)
  if (gpu_model::t_recorder != nullptr) gpu_model::wait_async_copies(*gpu_model::t_recorder);
#endif
}

/// Phases of block g of a phased Body: Body::phases(args, g) where it has one, else kPhases.
template <class Body, class = void>
struct PhasesOf {
  template <class Args>
  MLAROPE_HD static std::int64_t count(const Args&, const GridCoord&) {
    return Body::kPhases;
  }
};
template <class Body>
struct PhasesOf<Body, std::void_t<decltype(&Body::phases)>> {
  template <class Args>
  MLAROPE_HD static std::int64_t count(const Args& args, const GridCoord& g) {
    return Body::phases(args, g);
  }
};

#if defined(__CUDACC__)
/// The phases of Body, separated by __syncthreads(), with a __shared__ Body::Shared.
template <class Body, class Args>
__device__ inline void run_phases(const Args& args, const GridCoord& g) {
  __shared__ typename Body::Shared shared;
  const std::int64_t phases = PhasesOf<Body>::count(args, g);
  for (std::int64_t p = 0; p < phases; ++p) {
    if (p > 0) __syncthreads();
    Body::phase(args, g, p, shared);
  }
}
#endif

/// The bits of a float.
MLAROPE_HD MLAROPE_INLINE std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
#endif
}

/// The float with these bits.
MLAROPE_HD MLAROPE_INLINE float float_from_bits(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
#endif
}

/// kBytes (4, 8 or 16) raw bytes, aligned to their size: one vector memory access.
template <int kBytes>
struct alignas(kBytes) RawVector {
  std::uint32_t words[kBytes / 4];
};

/// One aligned vector load. NOTE: `p` must be aligned to kBytes (checked at dispatch).
template <int kBytes>
MLAROPE_HD MLAROPE_INLINE RawVector<kBytes> load_raw(const void* p) {
#if defined(__CUDA_ARCH__)
  RawVector<kBytes> r;
  if constexpr (kBytes == 16) {
    const uint4 v = *static_cast<const uint4*>(p);
    r.words[0] = v.x, r.words[1] = v.y, r.words[2] = v.z, r.words[3] = v.w;
  } else if constexpr (kBytes == 8) {
    const uint2 v = *static_cast<const uint2*>(p);
    r.words[0] = v.x, r.words[1] = v.y;
  } else {
    r.words[0] = *static_cast<const std::uint32_t*>(p);
  }
  return r;
#else
  RawVector<kBytes> r{};
  if (MLAROPE_OBSERVE(p, kBytes, Access::load)) std::memcpy(&r, p, kBytes);
  return r;
#endif
}

/// One aligned vector store. NOTE: `p` must be aligned to kBytes (checked at dispatch).
template <int kBytes>
MLAROPE_HD MLAROPE_INLINE void store_raw(void* p, const RawVector<kBytes>& r) {
#if defined(__CUDA_ARCH__)
  // NOTE: __stwb (st.global.wb.v4 / .v2): a plain uint4 store is sometimes split into four
  // 32-bit stores by the compiler in the larger kernels.
  if constexpr (kBytes == 16)
    __stwb(static_cast<uint4*>(p), make_uint4(r.words[0], r.words[1], r.words[2], r.words[3]));
  else if constexpr (kBytes == 8)
    __stwb(static_cast<uint2*>(p), make_uint2(r.words[0], r.words[1]));
  else __stwb(static_cast<unsigned int*>(p), r.words[0]);
#else
  if (MLAROPE_OBSERVE(p, kBytes, Access::store)) std::memcpy(p, &r, kBytes);
#endif
}

}  // namespace mlarope::kernels
