// SPDX-License-Identifier: Apache-2.0
// An example kernel plugin (include/mlarope/plugin.h): this repository's own host kernels
// behind the C ABI, so that `mlarope fuzz --backend
// plugin:build/examples/libmlarope_example_plugin.so` checks them through the ABI alone. Other
// builds of this file show the harness's other answers (examples/CMakeLists.txt):
//   MLAROPE_EXAMPLE_DECLINE_THD_INVERSE  declines THD calls with inverse: not supported, counted;
//   MLAROPE_EXAMPLE_DROP_INVERSE         claims every call and ignores inverse: a failure;
//   MLAROPE_EXAMPLE_ABI_VERSION=N        speaks another ABI version: refused when loaded;
//   MLAROPE_EXAMPLE_CUDA                 takes CUDA memory and runs the CUDA kernels (each call
//                                        on a stream of its own, finished before it returns);
//   MLAROPE_EXAMPLE_OVERREAD             also reads the byte just past the last element of a
//                                        rope call's activation: the checks' guards stop it in
//                                        sanitizer builds (harness/checks/asan_guards.h);
//   MLAROPE_EXAMPLE_THD_ONLY             declines every SBHD call: a kernel of packed sequences;
//   MLAROPE_EXAMPLE_FAULT_ON_CALL=N      fails its Nth call in a process, as a kernel under
//   with MLAROPE_EXAMPLE_CRASH, _HANG    development does: a null-pointer store (SIGSEGV), a
//   or _ABORT                            call that never returns, or abort() (SIGABRT); the
//                                        worker process the harness runs it in takes the blow.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "mlarope/backend.h"
#include "mlarope/plugin.h"

#ifndef MLAROPE_EXAMPLE_ABI_VERSION
#define MLAROPE_EXAMPLE_ABI_VERSION MLAROPE_PLUGIN_ABI_VERSION
#endif

namespace {

using namespace mlarope;

thread_local std::string g_last_error;

DType dtype_of(int32_t d) {
  return d == MLAROPE_DTYPE_F16 ? DType::f16 : d == MLAROPE_DTYPE_BF16 ? DType::bf16 : DType::f32;
}

template <class Void>
BasicTensorView<Void> view_of(const mlarope_tensor& t) {
  BasicTensorView<Void> v;
  v.data = static_cast<Void*>(t.data);
  v.dtype = dtype_of(t.dtype);
  v.rank = t.rank;
  for (int i = 0; i < t.rank && i < kMaxRank; ++i)
    v.shape[i] = t.shape[i], v.strides[i] = t.strides[i];
  return v;
}

IndexView index_of(const mlarope_index_array& a) {
  return {a.data, a.type == MLAROPE_INDEX_I64 ? IndexType::i64 : IndexType::i32, a.size};
}

PairLayout pairs_of(int32_t l) {
  return l == MLAROPE_PAIRS_HALF ? PairLayout::half : PairLayout::interleaved;
}

Rotation rotation_of(const mlarope_call& c) {
  Rotation r;
  r.in_layout = pairs_of(c.in_layout);
  r.out_layout = pairs_of(c.out_layout);
  r.table_layout = pairs_of(c.table_layout);
#if defined(MLAROPE_EXAMPLE_DROP_INVERSE)
  r.inverse = false;  // a planted bug: a fast path that quietly drops `inverse`
#else
  r.inverse = c.inverse != 0;
#endif
  r.cos = view_of<const void>(c.cos);
  r.sin = view_of<const void>(c.sin);
  return r;
}

Positions positions_of(const mlarope_call& c) {
  Positions p;
  p.layout = c.tokens == MLAROPE_TOKENS_THD ? TokenLayout::thd : TokenLayout::sbhd;
  p.freq_mode = c.freq_mode == MLAROPE_FREQ_PACKED ? FreqMode::packed : FreqMode::per_sequence;
  p.cp_size = c.cp_size;
  p.cp_rank = c.cp_rank;
  p.max_seqlen = c.max_seqlen;
  p.cu_seqlens = index_of(c.cu_seqlens);
  p.position_ids = index_of(c.position_ids);
  p.seq_offsets = index_of(c.seq_offsets);
  return p;
}

// Run `body` on a host stream; 0, or 1 with the message kept for last_error.
template <class Body>
int guarded(Body body) {
  try {
#if defined(MLAROPE_EXAMPLE_CUDA)
    Stream stream = Stream::cuda();
#else
    Stream stream = Stream::host();
#endif
    body(stream);
    stream.synchronize();
    return 0;
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return 1;
  }
}

#if defined(MLAROPE_EXAMPLE_OVERREAD)
// The bug this build plants: one byte read past the last element of `t` (the value dropped).
void read_past_the_end(const mlarope_tensor& t) {
  std::int64_t last = 0;
  for (int i = 0; i < t.rank; ++i) {
    if (t.shape[i] == 0) return;
    last += (t.shape[i] - 1) * t.strides[i];
  }
  const std::int64_t element = t.dtype == MLAROPE_DTYPE_F32 ? 4 : 2;
  (void)*(static_cast<const volatile unsigned char*>(t.data) + (last + 1) * element);
}
#endif

#if defined(MLAROPE_EXAMPLE_FAULT_ON_CALL)
// The fault this build plants, on the process's Nth call of any op.
void fault_on_nth_call() {
  static int calls = 0;
  if (++calls != MLAROPE_EXAMPLE_FAULT_ON_CALL) return;
  // What a kernel says before it dies: the harness keeps it with the failing case.
  std::fprintf(stderr, "%s: call %d, the planted fault\n", MLAROPE_EXAMPLE_NAME, calls);
  std::fflush(stderr);
#if defined(MLAROPE_EXAMPLE_CRASH)
  volatile std::uintptr_t address = 0;  // unknown to the optimiser, which would trap instead
  *reinterpret_cast<volatile int*>(address) = 1;
#elif defined(MLAROPE_EXAMPLE_HANG)
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
#elif defined(MLAROPE_EXAMPLE_ABORT)
  std::abort();
#endif
}
#else
void fault_on_nth_call() {}
#endif

int rope_entry(const mlarope_call* c) {
  fault_on_nth_call();
#if defined(MLAROPE_EXAMPLE_OVERREAD)
  read_past_the_end(c->in_place ? c->outputs[0] : c->inputs[0]);
#endif
  RopeArgs a;
  a.nope_dim = c->nope_dim;
  a.emb_dim = c->emb_dim;
  a.rotation = rotation_of(*c);
  a.positions = positions_of(*c);
  a.status = c->status;
  const bool backward = c->op == MLAROPE_OP_ROPE_BACKWARD;
  return guarded([&](Stream& s) {
    const TensorView out = view_of<void>(c->outputs[0]);
    if (c->in_place && backward) return rope_backward_inplace({out, a}, s);
    if (c->in_place) return rope_inplace({out, a}, s);
    const ConstTensorView in = view_of<const void>(c->inputs[0]);
    if (backward) return rope_backward({in, out, a}, s);
    rope({in, out, a}, s);
  });
}

KvSplitArgs kv_args(const mlarope_call& c) {
  KvSplitArgs a;
  a.k_dim = c.k_dim;
  a.v_dim = c.v_dim;
  a.emb_dim = c.emb_dim;
  a.rotation = rotation_of(c);
  a.positions = positions_of(c);
  a.status = c.status;
  return a;
}

int kv_split_entry(const mlarope_call* c) {
  fault_on_nth_call();
  return guarded([&](Stream& s) {
    kv_split({view_of<const void>(c->inputs[0]), view_of<const void>(c->inputs[1]),
              view_of<void>(c->outputs[0]), view_of<void>(c->outputs[1]), kv_args(*c)},
             s);
  });
}

int kv_split_backward_entry(const mlarope_call* c) {
  fault_on_nth_call();
  return guarded([&](Stream& s) {
    kv_split_backward({view_of<const void>(c->inputs[0]), view_of<const void>(c->inputs[1]),
                       view_of<void>(c->outputs[0]), view_of<void>(c->outputs[1]), kv_args(*c)},
                      s);
  });
}

int supports(const mlarope_call* c, const char** reason) {
#if defined(MLAROPE_EXAMPLE_THD_ONLY)
  if (c->tokens != MLAROPE_TOKENS_THD) {
    *reason = "THD only";
    return 0;
  }
#endif
#if defined(MLAROPE_EXAMPLE_DECLINE_THD_INVERSE)
  if (c->tokens == MLAROPE_TOKENS_THD && c->inverse) {
    *reason = "THD with inverse";
    return 0;
  }
#endif
  (void)c;
  (void)reason;
  return 1;
}

const char* last_error() { return g_last_error.c_str(); }

#if defined(MLAROPE_EXAMPLE_CUDA)
constexpr int32_t kMemory = MLAROPE_MEMORY_CUDA;
#else
constexpr int32_t kMemory = MLAROPE_MEMORY_HOST;
#endif

const mlarope_plugin kPlugin = {sizeof(mlarope_plugin),
                                MLAROPE_EXAMPLE_ABI_VERSION,
                                MLAROPE_EXAMPLE_NAME,
                                kMemory,
                                0,
                                &supports,
                                &rope_entry,
                                &kv_split_entry,
                                &kv_split_backward_entry,
                                &last_error};

}  // namespace

extern "C" __attribute__((visibility("default"))) const mlarope_plugin* mlarope_plugin_entry(void) {
  return &kPlugin;
}
