// SPDX-License-Identifier: Apache-2.0
// The kernel-level broken variants as broken backends (see broken_kernels.h).
#include "fuzz/broken_kernels.h"

#include <memory>
#include <string>

#include "test_support/faulty_host_stream.h"

namespace mlarope::props {

using fault_injection::FaultyHostStream;
using fault_injection::KernelFault;
using harness::CheckKind;

harness::Backend faulty_kernel_backend(KernelFault fault, std::uint64_t order_seed,
                                       bool gpu_model) {
  // Under the GPU model by default: most faults are edits of the device code paths, which the
  // host's fast mode skips where it has host-only branches (rope_on_host, kv_split_on_host, ...).
  auto stream = std::make_shared<FaultyHostStream>(fault, order_seed, 0, gpu_model);
  harness::Backend b;
  b.name = fault == KernelFault::none ? std::string("host_faulty")
                                      : "broken:kernel_" + std::string(to_string(fault));
  b.rope = [stream](const RopeCall& c) { stream->rope(c); };
  b.rope_inplace = [stream](const RopeInplaceCall& c) { stream->rope_inplace(c); };
  b.rope_backward = [stream](const RopeBackwardCall& c) { stream->rope_backward(c); };
  b.rope_backward_inplace = [stream](const RopeBackwardInplaceCall& c) {
    stream->rope_backward_inplace(c);
  };
  b.kv_split = [stream](const KvSplitCall& c) { stream->kv_split(c); };
  b.kv_split_backward = [stream](const KvSplitBackwardCall& c) { stream->kv_split_backward(c); };
  b.with_order_seed = [fault, gpu_model](std::uint64_t seed) {
    return faulty_kernel_backend(fault, seed, gpu_model);
  };
  b.capture = [stream](const std::function<void()>& launches) -> std::function<void()> {
    stream->begin_capture();
    try {
      launches();
    } catch (...) {
      stream->end_capture();
      throw;
    }
    return stream->end_capture();
  };
  return b;
}

namespace {

// The broken backend of `fault`, called "kernel_<fault>".
template <KernelFault fault>
harness::Backend make() {
  return faulty_kernel_backend(fault);
}

// The default options, copied: constructing GenOptions inline here trips a false
// -Wmaybe-uninitialized of GCC 12 (its initializer lists).
const GenOptions& all_cases() {
  static const GenOptions options;
  return options;
}

GenOptions layouts(std::vector<TokenLayout> l) {
  GenOptions g = all_cases();
  g.layouts = std::move(l);
  return g;
}

GenOptions ops(std::vector<Op> o) {
  GenOptions g = all_cases();
  g.ops = std::move(o);
  return g;
}

}  // namespace

std::vector<BrokenBackend> broken_kernel_variants() {
  return {
      {"kernel_cp_chunk", make<KernelFault::cp_chunk>, {CheckKind::value}, all_cases()},
      {"kernel_thd_search",
       make<KernelFault::thd_search>,
       {CheckKind::value},
       layouts({TokenLayout::thd})},
      {"kernel_dropped_inverse",
       make<KernelFault::dropped_inverse>,
       {CheckKind::value, CheckKind::round_trip},
       all_cases()},
      {"kernel_nope_in_place",
       make<KernelFault::nope_in_place>,
       {CheckKind::immutability},
       ops({Op::rope, Op::rope_backward})},
      {"kernel_table_stride",
       make<KernelFault::table_stride>,
       {CheckKind::value},
       ops({Op::rope, Op::rope_backward})},
  };
}

namespace {

// Registered for resolve_backend("broken:kernel_<fault>") in binaries that link this file.
const bool kRegistered = [] {
  for (BrokenBackend& b : broken_kernel_variants()) BrokenBackendRegistrar{std::move(b)};
  return true;
}();

}  // namespace

}  // namespace mlarope::props
