// Host instantiations of the kernel bodies (see host_kernels.h). Everything but kernel_table()
// has internal linkage.
#include "host/host_kernels.h"

#include "kernels/kv_split_kernels.h"
#include "kernels/rope_kernels.h"
#include "kernels/yarn_kernels.h"

namespace mlarope::host {
namespace {

using namespace mlarope::kernels;
using detail::KvVariant;
using detail::RopeVariant;

template <class T>
void (*rope_body(RopeVariant v))(const RopeKernelArgs&, const GridCoord&) {
  switch (v) {
    case RopeVariant::chunked_vector: return &rope_chunked_body<T, kVectorPairs<T>>;
    case RopeVariant::chunked_scalar: return &rope_chunked_body<T, 1>;
    case RopeVariant::staged_vector: return &rope_on_host<T, kVectorPairs<T>>;  // the fast mode
    case RopeVariant::whole_slice_scalar: return &rope_whole_slice_scalar_body<T>;
  }
  return nullptr;
}

template <class T>
void (*kv_split_body_for(KvVariant v))(const KvSplitKernelArgs&, const GridCoord&) {
  return v == KvVariant::vector ? &kv_split_body<T, kVectorPairs<T>> : &kv_split_body<T, 1>;
}

// kv_split_backward of dtype T, variant v: the host's fast branch in fast mode (emb_dim <=
// kHostKvMaxEmbDim), else the phased body (its barriers as phases).
template <class T, int kPairs>
void run_kv_split_backward_typed(const HostExecutor& e, const detail::KvSplitBackwardLaunch& l) {
  if (!MLAROPE_DEVICE_PATHS() && l.args.emb_dim <= kHostKvMaxEmbDim)
    return launch(e, l.grid, &kv_split_backward_on_host<T, kPairs>, l.args);
  launch_phased<KvSplitBackwardBody<T, kPairs>>(e, l.grid, l.args);
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
  static auto get(RopeVariant v) { return rope_body<T>(v); }
};
template <class T>
struct PickKv {
  static auto get(KvVariant v) { return kv_split_body_for<T>(v); }
};
template <class T>
struct PickKvBackward {
  static auto get(KvVariant v) {
    return v == KvVariant::vector ? &run_kv_split_backward_typed<T, kVectorPairs<T>>
                                  : &run_kv_split_backward_typed<T, 1>;
  }
};

template <class T>
void run_staged(const HostExecutor& e, const detail::RopeLaunch& l) {
  launch_phased<RopeStagedBody<T>>(e, l.grid, l.args);
}

template <class T>
struct PickStaged {
  static auto get() { return &run_staged<T>; }
};

void run_rope(const HostExecutor& e, const detail::RopeLaunch& l) {
  // The staged body's barriers run as phases under the GPU model; the fast mode runs the
  // host's own branch, which needs none.
  if (l.variant == RopeVariant::staged_vector && MLAROPE_DEVICE_PATHS())
    return by_dtype<PickStaged>(l.dtype)(e, l);
  launch(e, l.grid, by_dtype<PickRope>(l.dtype, l.variant), l.args);
}

void run_kv_split(const HostExecutor& e, const detail::KvSplitLaunch& l) {
  launch(e, l.grid, by_dtype<PickKv>(l.dtype, l.variant), l.args);
}

void run_kv_split_backward(const HostExecutor& e, const detail::KvSplitBackwardLaunch& l) {
  by_dtype<PickKvBackward>(l.dtype, l.variant)(e, l);
}

void run_yarn(const HostExecutor& e, const detail::YarnLaunch& l) {
  launch(e, l.grid, &yarn_tables_body, l.args);
}

void run_cu_seqlens_check(const HostExecutor& e, const detail::CuSeqlensCheckLaunch& l) {
  launch(e, l.grid, &cu_seqlens_check_body, l.args);
}

}  // namespace

const KernelTable& kernel_table() {
  static const KernelTable table{&run_rope, &run_kv_split, &run_kv_split_backward, &run_yarn,
                                 &run_cu_seqlens_check};
  return table;
}

}  // namespace mlarope::host
