// SPDX-License-Identifier: Apache-2.0
// A kernel plugin (include/mlarope/plugin.h) as a harness Backend: the library is opened once,
// its ABI checked, and each call translated into an mlarope_call.
#include "backends/plugin_backend.h"

#include <dlfcn.h>

#include <memory>
#include <string>

#include "backends/device_mirror.h"
#include "mlarope/error.h"
#include "mlarope/plugin.h"
#include "mlarope/validate.h"

namespace mlarope::harness {
namespace {

int32_t abi_dtype(DType d) {
  switch (d) {
    case DType::f16: return MLAROPE_DTYPE_F16;
    case DType::bf16: return MLAROPE_DTYPE_BF16;
    default: return MLAROPE_DTYPE_F32;
  }
}

int32_t abi_pairs(PairLayout l) {
  return l == PairLayout::half ? MLAROPE_PAIRS_HALF : MLAROPE_PAIRS_INTERLEAVED;
}

template <class Void>
mlarope_tensor abi_tensor(const BasicTensorView<Void>& v) {
  mlarope_tensor t{};
  t.data = const_cast<void*>(static_cast<const void*>(v.data));
  t.dtype = abi_dtype(v.dtype);
  t.rank = v.rank;
  for (int i = 0; i < v.rank && i < 4; ++i) t.shape[i] = v.shape[i], t.strides[i] = v.strides[i];
  return t;
}

mlarope_index_array abi_index(const IndexView& v) {
  mlarope_index_array a{};
  a.data = v.data;
  a.type = v.type == IndexType::i64 ? MLAROPE_INDEX_I64 : MLAROPE_INDEX_I32;
  a.size = v.size;
  return a;
}

// The fields every call shares: rotation, positions, status.
void fill_shared(mlarope_call& c, const Rotation& r, const Positions& p, DeviceStatus* status) {
  c.struct_size = sizeof(mlarope_call);
  c.memory = MLAROPE_MEMORY_HOST;
  c.in_layout = abi_pairs(r.in_layout);
  c.out_layout = abi_pairs(r.out_layout);
  c.table_layout = abi_pairs(r.table_layout);
  c.inverse = r.inverse ? 1 : 0;
  c.cos = abi_tensor(r.cos);
  c.sin = abi_tensor(r.sin);
  c.tokens = p.layout == TokenLayout::thd ? MLAROPE_TOKENS_THD : MLAROPE_TOKENS_SBHD;
  c.freq_mode = p.freq_mode == FreqMode::packed ? MLAROPE_FREQ_PACKED : MLAROPE_FREQ_PER_SEQUENCE;
  c.cp_size = p.cp_size;
  c.cp_rank = p.cp_rank;
  c.max_seqlen = p.max_seqlen;
  c.cu_seqlens = abi_index(p.cu_seqlens);
  c.position_ids = abi_index(p.position_ids);
  c.seq_offsets = abi_index(p.seq_offsets);
  c.status = status;
}

mlarope_call rope_family_call(int32_t op, bool in_place, const ConstTensorView& in,
                              const TensorView& out, const RopeArgs& a) {
  mlarope_call c{};
  fill_shared(c, a.rotation, a.positions, a.status);
  c.op = op;
  c.in_place = in_place ? 1 : 0;
  c.inputs[0] = abi_tensor(in);
  c.outputs[0] = abi_tensor(out);
  c.nope_dim = a.nope_dim;
  c.emb_dim = a.emb_dim;
  return c;
}

mlarope_call kv_call(int32_t op, const ConstTensorView& in0, const ConstTensorView& in1,
                     const TensorView& out0, const TensorView& out1, const KvSplitArgs& a) {
  mlarope_call c{};
  fill_shared(c, a.rotation, a.positions, a.status);
  c.op = op;
  c.inputs[0] = abi_tensor(in0);
  c.inputs[1] = abi_tensor(in1);
  c.outputs[0] = abi_tensor(out0);
  c.outputs[1] = abi_tensor(out1);
  c.emb_dim = a.emb_dim;
  c.k_dim = a.k_dim;
  c.v_dim = a.v_dim;
  return c;
}

// The ABI's op codes are the library's Op values, so an op is spelled in one place.
static_assert(MLAROPE_OP_ROPE == static_cast<int>(Op::rope) &&
              MLAROPE_OP_ROPE_BACKWARD == static_cast<int>(Op::rope_backward) &&
              MLAROPE_OP_KV_SPLIT == static_cast<int>(Op::kv_split) &&
              MLAROPE_OP_KV_SPLIT_BACKWARD == static_cast<int>(Op::kv_split_backward));

// The opened library and its table; the library stays open while a Backend refers to it.
struct Library {
  std::string path;
  void* handle = nullptr;
  const mlarope_plugin* table = nullptr;
  ~Library() {
    if (handle) dlclose(handle);
  }
};

// Run `call` through `entry`: Unsupported when the plugin declines it or lacks the op, Error
// (with the plugin's own message) when the call fails. A probe stops after `supports`.
void run(const Library& lib, int (*entry)(const mlarope_call*), const mlarope_call& call,
         bool probe) {
  const std::string what =
      std::string(to_string(static_cast<Op>(call.op))) + (call.in_place ? " in place" : "");
  if (entry == nullptr) throw Unsupported(what + " is not provided by plugin " + lib.table->name);
  const char* reason = nullptr;
  if (lib.table->supports && lib.table->supports(&call, &reason) == 0)
    throw Unsupported(what + ": " + (reason ? reason : "declined by the plugin"));
  if (probe) return;
  if (entry(&call) != 0) {
    const char* message = lib.table->last_error ? lib.table->last_error() : nullptr;
    throw Error("plugin " + std::string(lib.table->name) + ", " + what +
                " failed: " + (message ? message : "(no message: last_error is NULL)"));
  }
}

std::shared_ptr<Library> open_library(const std::string& path) {
  auto lib = std::make_shared<Library>();
  lib->path = path;
  lib->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle == nullptr) {
    const char* why = dlerror();
    throw Error("--backend plugin:" + path + ": cannot load the library (" +
                (why ? why : "dlopen failed") + ")");
  }
  void* symbol = dlsym(lib->handle, MLAROPE_PLUGIN_ENTRY);
  if (symbol == nullptr)
    throw Error("--backend plugin:" + path +
                ": the library has no symbol " MLAROPE_PLUGIN_ENTRY
                " (see include/mlarope/plugin.h)");
  const auto entry = reinterpret_cast<mlarope_plugin_entry_fn>(symbol);
  lib->table = entry();
  const mlarope_plugin* t = lib->table;
  if (t == nullptr)
    throw Error("--backend plugin:" + path + ": " MLAROPE_PLUGIN_ENTRY " returned NULL");
  if (t->abi_version != MLAROPE_PLUGIN_ABI_VERSION)
    throw Error("--backend plugin:" + path + ": ABI version " + std::to_string(t->abi_version) +
                ", this harness speaks version " + std::to_string(MLAROPE_PLUGIN_ABI_VERSION));
  if (t->struct_size < sizeof(mlarope_plugin))
    throw Error("--backend plugin:" + path + ": mlarope_plugin of " +
                std::to_string(t->struct_size) + " bytes, version 1 has " +
                std::to_string(sizeof(mlarope_plugin)));
  if (t->name == nullptr) throw Error("--backend plugin:" + path + ": mlarope_plugin.name is NULL");
  if (t->memory != MLAROPE_MEMORY_HOST && t->memory != MLAROPE_MEMORY_CUDA)
    throw Error("--backend plugin:" + path + ": mlarope_plugin.memory is " +
                std::to_string(t->memory) +
                ", neither MLAROPE_MEMORY_HOST nor MLAROPE_MEMORY_CUDA");
  if (t->memory == MLAROPE_MEMORY_CUDA && !cuda_device_available())
    throw Error("--backend plugin:" + path + ": plugin " + t->name +
                " takes CUDA memory, and no CUDA device is available here");
  return lib;
}

// A loaded plugin, and for a CUDA-memory plugin the stream its calls are given. A probe asks
// `supports` only (on the host views, whose arrays it must not read: a CUDA plugin's never
// could) and computes nothing.
struct Plugin {
  std::shared_ptr<Library> lib;
  std::shared_ptr<Stream> stream;  ///< null for a host-memory plugin
  bool probe = false;
};

// The views of a call as the plugin takes them: the host views, or device copies (DeviceMirror).
struct Placer {
  DeviceMirror* mirror = nullptr;
  template <class Void>
  BasicTensorView<Void> operator()(const BasicTensorView<Void>& v, bool output) const {
    return mirror ? mirror->mirror(v, output) : v;
  }
  template <class Args>
  Args args(const Args& a) const {
    return mirror ? mirror->mirror_args(a) : a;
  }
};

// Run the call that `build(placer)` makes through `entry`: on the host views, or (a CUDA-memory
// plugin) on device copies, on the plugin's stream, with the outputs copied back after it.
template <class Build>
void run_placed(const Plugin& p, int (*entry)(const mlarope_call*), Build build) {
  if (!p.stream || p.probe) return run(*p.lib, entry, build(Placer{}), p.probe);
  DeviceMirror mirror;
  mlarope_call call = build(Placer{&mirror});
  call.memory = MLAROPE_MEMORY_CUDA;
  call.stream = p.stream->native_handle();
  run(*p.lib, entry, call, false);
  p.stream->synchronize();
  mirror.copy_back();
}

// The plugin's calls as a Backend (a probe: its `supports` only).
Backend calls_of(const Plugin& p) {
  const mlarope_plugin* t = p.lib->table;
  Backend b;
  b.name = std::string("plugin:") + t->name;
  b.rope = [p, t](const RopeCall& c) {
    validate(c);  // on the host views, as the caller gave them
    run_placed(p, t->rope, [&](const Placer& at) {
      return rope_family_call(MLAROPE_OP_ROPE, false, at(c.t, false), at(c.out, true),
                              at.args(c.args));
    });
  };
  b.rope_inplace = [p, t](const RopeInplaceCall& c) {
    validate(c);
    run_placed(p, t->rope, [&](const Placer& at) {
      const TensorView v = at(c.t, true);
      return rope_family_call(MLAROPE_OP_ROPE, true, v, v, at.args(c.args));
    });
  };
  b.rope_backward = [p, t](const RopeBackwardCall& c) {
    validate(c);
    run_placed(p, t->rope, [&](const Placer& at) {
      return rope_family_call(MLAROPE_OP_ROPE_BACKWARD, false, at(c.grad_out, false),
                              at(c.grad_t, true), at.args(c.args));
    });
  };
  b.rope_backward_inplace = [p, t](const RopeBackwardInplaceCall& c) {
    validate(c);
    run_placed(p, t->rope, [&](const Placer& at) {
      const TensorView v = at(c.grad, true);
      return rope_family_call(MLAROPE_OP_ROPE_BACKWARD, true, v, v, at.args(c.args));
    });
  };
  b.kv_split = [p, t](const KvSplitCall& c) {
    validate(c);
    run_placed(p, t->kv_split, [&](const Placer& at) {
      return kv_call(MLAROPE_OP_KV_SPLIT, at(c.kv, false), at(c.k_pe, false), at(c.key, true),
                     at(c.value, true), at.args(c.args));
    });
  };
  b.kv_split_backward = [p, t](const KvSplitBackwardCall& c) {
    validate(c);
    run_placed(p, t->kv_split_backward, [&](const Placer& at) {
      return kv_call(MLAROPE_OP_KV_SPLIT_BACKWARD, at(c.grad_key, false), at(c.grad_value, false),
                     at(c.grad_kv, true), at(c.grad_k_pe, true), at.args(c.args));
    });
  };
  return b;
}

}  // namespace

Backend plugin_backend(const std::string& path) {
  Plugin p{open_library(path), nullptr};
  if (p.lib->table->memory == MLAROPE_MEMORY_CUDA)
    p.stream = std::make_shared<Stream>(Stream::cuda());
  Backend b = calls_of(p);
  Plugin probe = p;
  probe.probe = true;
  b.supports = [probes = calls_of(probe)](const Case& c) {
    try {
      run_case(c, probes);
    } catch (const Unsupported& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  return b;
}

}  // namespace mlarope::harness
