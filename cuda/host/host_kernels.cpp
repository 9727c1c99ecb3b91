// SPDX-License-Identifier: Apache-2.0
// Host instantiations of the kernel bodies (see host_kernels.h). Everything but kernel_table()
// has internal linkage.
#include "host/host_kernels.h"

#include "host/host_avx2.h"
#include "kernels/kv_split_kernels.h"
#include "kernels/rope_kernels.h"
#include "kernels/yarn_kernels.h"

namespace mlarope::host {
namespace {

using namespace mlarope::kernels;
using detail::KvVariant;
using detail::RopeVariant;

// Each family runs the host's fast branch in fast mode where it covers the call (slices it can
// hold), else its RowRounds body, with the barriers as phases (always under the GPU model). A
// fast branch works in thread 0 of each block: only that thread is run.

#if defined(MLAROPE_HOST_AVX2)
// rope's fast branch compiled for AVX2: its loops take 8 lanes a step, its bf16 conversions
// the AVX2 forms, every call inlined (flatten: the compiler would leave the longer conversions
// out of line, a call per run).
template <class T>
MLAROPE_AVX2_FUNCTION __attribute__((flatten)) void rope_on_host_avx2(const RopeKernelArgs& a,
                                                                      const GridCoord& g) {
  rope_on_host<T, Avx2Runs>(a, g);
}

// The same with AVX-512's slice in registers.
template <class T>
MLAROPE_AVX512_FUNCTION __attribute__((flatten)) void rope_on_host_avx512(const RopeKernelArgs& a,
                                                                          const GridCoord& g) {
  rope_on_host<T, Avx512Runs>(a, g);
}
#endif

// rope's fast branch for this CPU.
template <class T>
void (*fast_rope())(const RopeKernelArgs&, const GridCoord&) {
#if defined(MLAROPE_HOST_AVX2)
  if (host_has_avx512()) return &rope_on_host_avx512<T>;
  if (host_has_avx2()) return &rope_on_host_avx2<T>;
#endif
  return &rope_on_host<T>;
}

template <class T>
void run_rope_typed(const HostExecutor& e, const detail::RopeLaunch& l) {
  constexpr int kVector = kVectorPairs<T>;
  if (rope_runs_on_host(l.args)) return launch_thread_zero(e, l.grid, fast_rope<T>(), l.args);
  switch (l.variant) {
    case RopeVariant::chunked_vector:
      return launch_phased<RowRounds<RopeChunkedRows<T, kVector>>>(e, l.grid, l.args);
    case RopeVariant::chunked_scalar:
      return launch_phased<RowRounds<RopeChunkedRows<T, 1>>>(e, l.grid, l.args);
    case RopeVariant::staged_vector:
      return launch_phased<PlannedRounds<RopeStagedRounds<T>>>(e, l.grid, l.args);
    case RopeVariant::whole_slice_scalar:
      return launch_phased<RowRounds<RopeWholeSliceRows<T>>>(e, l.grid, l.args);
  }
}

template <class T, int kPairs>
void run_kv_split_typed(const HostExecutor& e, const detail::KvSplitLaunch& l) {
  if (!MLAROPE_DEVICE_PATHS() && l.args.emb_dim <= kHostKvMaxEmbDim)
    return launch_thread_zero(e, l.grid, &kv_split_on_host<T>, l.args);
  launch_phased<RowRounds<KvSplitRows<T, kPairs>>>(e, l.grid, l.args);
}

template <class T, int kPairs>
void run_kv_split_backward_typed(const HostExecutor& e, const detail::KvSplitBackwardLaunch& l) {
  if (!MLAROPE_DEVICE_PATHS() && l.args.emb_dim <= kHostKvMaxEmbDim)
    return launch_thread_zero(e, l.grid, &kv_split_backward_on_host<T, kPairs>, l.args);
  launch_phased<RowRounds<KvSplitBackwardRows<T, kPairs>>>(e, l.grid, l.args);
}

// Pick<T>::get(a...) with T the storage type of `dtype`.
template <template <class> class Pick, class... A>
auto by_dtype(DType dtype, A... a) {
  switch (dtype) {
    case DType::f16: return Pick<Half>::get(a...);
    case DType::bf16: return Pick<BFloat16>::get(a...);
    default: return Pick<float>::get(a...);
  }
}

template <class T>
struct PickRope {
  static auto get() { return &run_rope_typed<T>; }
};
template <class T>
struct PickKv {
  static auto get(KvVariant v) {
    return v == KvVariant::vector ? &run_kv_split_typed<T, kVectorPairs<T>>
                                  : &run_kv_split_typed<T, 1>;
  }
};
template <class T>
struct PickKvBackward {
  static auto get(KvVariant v) {
    return v == KvVariant::vector ? &run_kv_split_backward_typed<T, kVectorPairs<T>>
                                  : &run_kv_split_backward_typed<T, 1>;
  }
};

void run_rope(const HostExecutor& e, const detail::RopeLaunch& l) {
  by_dtype<PickRope>(l.dtype)(e, l);
}

void run_kv_split(const HostExecutor& e, const detail::KvSplitLaunch& l) {
  by_dtype<PickKv>(l.dtype, l.variant)(e, l);
}

void run_kv_split_backward(const HostExecutor& e, const detail::KvSplitBackwardLaunch& l) {
  by_dtype<PickKvBackward>(l.dtype, l.variant)(e, l);
}

void run_yarn(const HostExecutor& e, const detail::YarnLaunch& l) {
  launch(e, l.grid, &yarn_tables_body, l.args);
}

}  // namespace

const KernelTable& kernel_table() {
  static const KernelTable table{&run_rope, &run_kv_split, &run_kv_split_backward, &run_yarn};
  return table;
}

}  // namespace mlarope::host
