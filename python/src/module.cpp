// SPDX-License-Identifier: Apache-2.0
// The Python binding of mlarope (module mlarope._mlarope): the reference ops on NumPy arrays
// (and anything NumPy can view through the buffer protocol, e.g. PyTorch CPU tensors via
// .numpy()), without copying the inputs, and the fuzzer with a backend made of Python
// callables. The C++ harness is the one implementation; this file only adapts.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/case_run.h"
#include "backends/worker_process.h"
#include "fuzz/fuzz.h"
#include "mlarope/error.h"
#include "mlarope/op_schema.h"
#include "reference.h"

namespace py = pybind11;
using namespace mlarope;

namespace {

// ---- NumPy arrays <-> views --------------------------------------------------------------

// The element type of `a`: float32, float16, or uint16 holding bf16 bits (dtype "bf16").
DType element_type(const py::array& a, const std::string& dtype) {
  const py::dtype d = a.dtype();
  if (dtype == "bf16") {
    if (!d.is(py::dtype::of<std::uint16_t>()))
      throw Error("dtype='bf16' needs uint16 arrays holding bf16 bits");
    return DType::bf16;
  }
  if (d.is(py::dtype::of<float>())) return DType::f32;
  if (d.kind() == 'f' && d.itemsize() == 2) return DType::f16;
  throw Error("expected float32 or float16 arrays (or uint16 with dtype='bf16'), got " +
              std::string(py::str(static_cast<const py::object&>(d))));
}

template <class Void>
BasicTensorView<Void> view_of(const py::array& a, DType dtype, const char* name) {
  if (a.ndim() > kMaxRank)
    throw Error(std::string(name) + ": rank " + std::to_string(a.ndim()) + " > 4");
  BasicTensorView<Void> v;
  v.data = const_cast<void*>(a.data());
  v.dtype = dtype;
  v.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = a.shape(i);
    if (a.strides(i) % a.itemsize() != 0)
      throw Error(std::string(name) + ": a stride that is not a whole number of elements");
    v.strides[i] = a.strides(i) / a.itemsize();
  }
  return v;
}

// A NumPy view of a harness view (no copy; `owner` keeps the memory alive, or None).
template <class Void>
py::array array_of(const BasicTensorView<Void>& v, bool writable) {
  const py::dtype d = v.dtype == DType::f32   ? py::dtype::of<float>()
                      : v.dtype == DType::f16 ? py::dtype("float16")
                                              : py::dtype::of<std::uint16_t>();
  const std::size_t size = dtype_size(v.dtype);
  std::vector<py::ssize_t> shape, strides;
  for (int i = 0; i < v.rank; ++i) {
    shape.push_back(v.shape[i]);
    strides.push_back(static_cast<py::ssize_t>(v.strides[i] * static_cast<std::int64_t>(size)));
  }
  // An empty tensor may have no storage (a case's array before the checks lay it out); a
  // capsule needs an address all the same, and no element of it is ever read.
  static char no_storage;
  void* data = v.data != nullptr ? const_cast<void*>(static_cast<const void*>(v.data))
                                 : static_cast<void*>(&no_storage);
  const py::capsule no_owner(data, [](void*) {});
  py::array a(d, shape, strides, data, no_owner);
  if (!writable) a.attr("setflags")(py::arg("write") = false);
  return a;
}

py::object index_array(const IndexView& v) {
  if (!v.present()) return py::none();
  const py::dtype d =
      v.type == IndexType::i64 ? py::dtype::of<std::int64_t>() : py::dtype::of<std::int32_t>();
  const py::capsule no_owner(v.data, [](void*) {});
  py::array a(d, {static_cast<py::ssize_t>(v.size)}, {}, const_cast<void*>(v.data), no_owner);
  a.attr("setflags")(py::arg("write") = false);
  return std::move(a);
}

IndexView index_view(const py::object& o, const char* name) {
  if (o.is_none()) return {};
  const py::array a = py::array::ensure(o);
  if (!a || a.ndim() != 1) throw Error(std::string(name) + ": expected a 1-D int32 or int64 array");
  if (!(a.flags() & py::array::c_style))
    throw Error(std::string(name) + ": expected a contiguous array");
  if (a.dtype().is(py::dtype::of<std::int32_t>())) return {a.data(), IndexType::i32, a.shape(0)};
  if (a.dtype().is(py::dtype::of<std::int64_t>())) return {a.data(), IndexType::i64, a.shape(0)};
  throw Error(std::string(name) + ": expected int32 or int64");
}

PairLayout pair_layout(const std::string& s) {
  if (s == "half") return PairLayout::half;
  if (s == "interleaved") return PairLayout::interleaved;
  throw Error("layout '" + s + "': expected 'half' or 'interleaved'");
}
const char* name_of(PairLayout l) { return l == PairLayout::half ? "half" : "interleaved"; }

// ---- DLPack (PyTorch and other frameworks' tensors), zero-copy ---------------------------

// Keeps a consumed DLManagedTensor alive while a NumPy view of it lives; its deleter runs after.
struct DlpackOwner {
  DLManagedTensor* tensor;
  ~DlpackOwner() {
    if (tensor && tensor->deleter) tensor->deleter(tensor);
  }
};

// The NumPy dtype of a DLPack dtype, and whether it is bf16 (shown as uint16 bits).
py::dtype numpy_dtype(const DLDataType& t, bool* bf16) {
  *bf16 = false;
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return py::dtype::of<float>();
    if (t.code == kDLFloat && t.bits == 16) return py::dtype("float16");
    if (t.code == kDLBfloat && t.bits == 16) return *bf16 = true, py::dtype::of<std::uint16_t>();
    if (t.code == kDLInt && t.bits == 32) return py::dtype::of<std::int32_t>();
    if (t.code == kDLInt && t.bits == 64) return py::dtype::of<std::int64_t>();
  }
  throw Error("DLPack dtype (code " + std::to_string(t.code) + ", " + std::to_string(t.bits) +
              " bits, " + std::to_string(t.lanes) +
              " lanes): expected float32, float16, bfloat16, int32 or int64");
}

// A NumPy view (no copy) of a host tensor's DLPack capsule; (array, is_bf16). The capsule is
// consumed as the protocol says: renamed "used_dltensor", its deleter run when the view dies.
py::tuple from_dlpack(py::capsule capsule, const std::string& name) {
  if (std::strcmp(capsule.name(), "dltensor") != 0)
    throw Error(name + ": not an unconsumed DLPack capsule (" + std::string(capsule.name()) + ")");
  auto* managed = capsule.get_pointer<DLManagedTensor>();
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
    throw Error(name + ": a tensor on device type " + std::to_string(t.device.device_type) +
                " (CUDA is 2): the reference runs on the host; pass a CPU tensor (e.g. t.cpu())");
  bool bf16 = false;
  const py::dtype dtype = numpy_dtype(t.dtype, &bf16);
  const auto size = static_cast<py::ssize_t>(t.dtype.bits / 8);
  std::vector<py::ssize_t> shape(t.shape, t.shape + t.ndim), strides(t.ndim);
  for (int i = t.ndim - 1; i >= 0; --i)  // strides in bytes; compact row-major when absent
    strides[i] =
        t.strides ? t.strides[i] * size : (i + 1 < t.ndim ? strides[i + 1] * shape[i + 1] : size);
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  auto* owner = new DlpackOwner{managed};
  const py::capsule base(owner, [](void* p) { delete static_cast<DlpackOwner*>(p); });
  py::array a(dtype, shape, strides, static_cast<char*>(t.data) + t.byte_offset, base);
  return py::make_tuple(a, bf16);
}

// ---- The reference ops -------------------------------------------------------------------

// What every op takes besides its tensors (keyword arguments of the Python functions).
struct Common {
  py::array cos, sin;
  std::string in_layout = "interleaved", out_layout = "half", table_layout = "half";
  bool inverse = false;
  std::string layout = "sbhd", freq_mode = "per_sequence";
  std::int64_t cp_size = 1, cp_rank = 0, max_seqlen = 0;
  py::object cu_seqlens = py::none(), position_ids = py::none(), seq_offsets = py::none();
  std::string dtype;        ///< "bf16" for uint16 arrays of bf16 bits
  std::string table_dtype;  ///< "bf16": cos and sin are uint16 arrays of bf16 bits ("": as dtype)

  Rotation rotation() const {
    Rotation r;
    r.in_layout = pair_layout(in_layout);
    r.out_layout = pair_layout(out_layout);
    r.table_layout = pair_layout(table_layout);
    r.inverse = inverse;
    const bool bf16 = table_dtype == "bf16" ||
                      (dtype == "bf16" && cos.dtype().is(py::dtype::of<std::uint16_t>()));
    const DType td = element_type(cos, bf16 ? "bf16" : "");
    r.cos = view_of<const void>(cos, td, "cos");
    r.sin = view_of<const void>(sin, td, "sin");
    return r;
  }
  Positions positions() const {
    Positions p;
    if (layout != "sbhd" && layout != "thd")
      throw Error("layout '" + layout + "': expected 'sbhd' or 'thd'");
    p.layout = layout == "thd" ? TokenLayout::thd : TokenLayout::sbhd;
    p.freq_mode = freq_mode == "packed" ? FreqMode::packed : FreqMode::per_sequence;
    p.cp_size = cp_size;
    p.cp_rank = cp_rank;
    p.max_seqlen = max_seqlen;
    p.cu_seqlens = index_view(cu_seqlens, "cu_seqlens");
    p.position_ids = index_view(position_ids, "position_ids");
    p.seq_offsets = index_view(seq_offsets, "seq_offsets");
    return p;
  }
};

py::array empty_like(const py::array& a, const std::vector<py::ssize_t>& shape) {
  return py::array(a.dtype(), shape);
}
std::vector<py::ssize_t> shape_of(const py::array& a) {
  return std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim());
}

// rope or rope_backward on the reference: a new array; the device status word as well.
py::tuple rope_op(bool backward, const py::array& x, std::int64_t nope_dim, std::int64_t emb_dim,
                  const Common& c) {
  const DType dt = element_type(x, c.dtype);
  py::array out = empty_like(x, shape_of(x));
  DeviceStatus status = kStatusOk;
  RopeArgs a{nope_dim, emb_dim, c.rotation(), c.positions(), &status};
  const ConstTensorView in = view_of<const void>(x, dt, backward ? "grad_out" : "t");
  const TensorView o = view_of<void>(out, dt, backward ? "grad_t" : "out");
  {
    py::gil_scoped_release release;
    if (backward) reference::rope_backward({in, o, a});
    else reference::rope({in, o, a});
  }
  return py::make_tuple(out, status);
}

py::tuple kv_op(bool backward, const py::array& x0, const py::array& x1, std::int64_t k_dim,
                std::int64_t v_dim, std::int64_t emb_dim, const Common& c) {
  const DType dt = element_type(x0, c.dtype);
  std::vector<py::ssize_t> lead = shape_of(x0);
  lead.pop_back();  // [..., H]
  std::vector<py::ssize_t> s0 = lead, s1 = lead;
  DeviceStatus status = kStatusOk;
  KvSplitArgs a{k_dim, v_dim, emb_dim, c.rotation(), c.positions(), &status};
  if (!backward) {  // key [..., H, k + emb], value [..., H, v]
    s0.push_back(k_dim + emb_dim), s1.push_back(v_dim);
  } else {  // grad_kv [..., H, k + v], grad_k_pe [..., 1, emb]
    s0.push_back(k_dim + v_dim);
    s1.back() = 1, s1.push_back(emb_dim);
  }
  py::array y0 = empty_like(x0, s0), y1 = empty_like(x0, s1);
  const ConstTensorView i0 = view_of<const void>(x0, dt, backward ? "grad_key" : "kv");
  const ConstTensorView i1 = view_of<const void>(x1, dt, backward ? "grad_value" : "k_pe");
  const TensorView o0 = view_of<void>(y0, dt, backward ? "grad_kv" : "key");
  const TensorView o1 = view_of<void>(y1, dt, backward ? "grad_k_pe" : "value");
  {
    py::gil_scoped_release release;
    if (backward) reference::kv_split_backward({i0, i1, o0, o1, a});
    else reference::kv_split({i0, i1, o0, o1, a});
  }
  return py::make_tuple(y0, y1, status);
}

// YaRN cos/sin tables [rows, emb_dim] on the reference (docs/semantics.md §4 yarn_tables); `dtype`
// is "f32", "f16" or "bf16" (uint16 bits); `concentration` NaN means Megatron's factor.
py::tuple yarn_op(std::int64_t rows, std::int64_t emb_dim, const YarnParams& params,
                  std::int64_t offset, const std::string& table_layout, const std::string& dtype) {
  if (rows < 0) throw Error("rows: must be >= 0, got " + std::to_string(rows));
  const DType dt = dtype == "f32"   ? DType::f32
                   : dtype == "f16" ? DType::f16
                   : dtype == "bf16"
                       ? DType::bf16
                       : throw Error("dtype '" + dtype + "': expected 'f32', 'f16' or 'bf16'");
  const py::dtype np_type = dt == DType::f32   ? py::dtype::of<float>()
                            : dt == DType::f16 ? py::dtype("float16")
                                               : py::dtype::of<std::uint16_t>();
  py::array cos(np_type, {rows, emb_dim}), sin(np_type, {rows, emb_dim});
  YarnTablesCall call{params, offset, pair_layout(table_layout), view_of<void>(cos, dt, "cos"),
                      view_of<void>(sin, dt, "sin")};
  {
    py::gil_scoped_release release;
    reference::yarn_tables(call);
  }
  return py::make_tuple(cos, sin);
}

// ---- A backend of Python callables ---------------------------------------------------------

// A Python object held by C++ copies that may be made and dropped without the GIL.
std::shared_ptr<py::object> hold(py::object o) {
  return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

// The Python call object: a types.SimpleNamespace of the call's fields, its tensors NumPy
// views of the harness's buffers (inputs read-only).
py::object call_object(Op op, bool in_place, std::vector<py::array> inputs,
                       std::vector<py::array> outputs, std::int64_t nope_dim, std::int64_t emb_dim,
                       std::int64_t k_dim, std::int64_t v_dim, const Rotation& r,
                       const Positions& p, DeviceStatus* status, DType dtype) {
  py::dict d;
  d["op"] = std::string(to_string(op));
  d["in_place"] = in_place;
  d["inputs"] = inputs;
  d["outputs"] = outputs;
  d["dtype"] = std::string(to_string(dtype));
  d["nope_dim"] = nope_dim, d["emb_dim"] = emb_dim, d["k_dim"] = k_dim, d["v_dim"] = v_dim;
  d["in_layout"] = name_of(r.in_layout), d["out_layout"] = name_of(r.out_layout);
  d["table_layout"] = name_of(r.table_layout), d["inverse"] = r.inverse;
  d["table_dtype"] = std::string(to_string(r.cos.dtype));
  d["cos"] = array_of(r.cos, false), d["sin"] = array_of(r.sin, false);
  d["layout"] = p.layout == TokenLayout::thd ? "thd" : "sbhd";
  d["freq_mode"] = p.freq_mode == FreqMode::packed ? "packed" : "per_sequence";
  d["cp_size"] = p.cp_size, d["cp_rank"] = p.cp_rank, d["max_seqlen"] = p.max_seqlen;
  d["cu_seqlens"] = index_array(p.cu_seqlens);
  d["position_ids"] = index_array(p.position_ids);
  d["seq_offsets"] = index_array(p.seq_offsets);
  if (status) {
    const py::capsule no_owner(status, [](void*) {});
    d["status"] = py::array(py::dtype::of<std::uint32_t>(), {1}, {}, status, no_owner);
  } else {
    d["status"] = py::none();
  }
  return py::module_::import("types").attr("SimpleNamespace")(**d);
}

// Call `method` of the backend on `call`: Unsupported when it is missing or `supports` declines;
// a Python exception becomes a failure of the case, its traceback kept in the message. A probe
// stops after `supports`.
void call_python(const py::object& backend, const char* method, const py::object& call,
                 bool probe) {
  const std::string what = std::string(call.attr("op").cast<std::string>()) +
                           (call.attr("in_place").cast<bool>() ? " in place" : "");
  if (!py::hasattr(backend, method))
    throw harness::Unsupported(what + " is not provided by the Python backend");
  try {
    if (py::hasattr(backend, "supports")) {
      py::object verdict = backend.attr("supports")(call);
      std::string reason = "declined by the Python backend";
      if (py::isinstance<py::tuple>(verdict)) {
        py::tuple t = verdict;
        if (t.size() > 1) reason = py::str(t[1]);
        verdict = t[0];
      }
      if (!verdict.cast<bool>()) throw harness::Unsupported(what + ": " + reason);
    }
    if (probe) return;
    backend.attr(method)(call);
  } catch (py::error_already_set& e) {
    std::string trace = e.what();
    try {
      py::object format = py::module_::import("traceback").attr("format_exception");
      trace = py::str("").attr("join")(format(e.type(), e.value(), e.trace())).cast<std::string>();
    } catch (...) {
    }
    throw Error("the Python backend raised in " + what + ":\n" + trace);
  }
}

// The backend's methods as a harness Backend; a probe's calls ask `supports` only (the fuzz's
// steering), and the other one's `supports` is such a probe.
harness::Backend python_backend(const std::shared_ptr<py::object>& b, const std::string& name,
                                bool probe = false) {
  harness::Backend out;
  out.name = name;
  if (!probe)
    out.supports = [probes = std::make_shared<harness::Backend>(python_backend(b, name, true))](
                       const harness::Case& c) {
      try {
        harness::run_case(c, *probes);
      } catch (const harness::Unsupported& e) {
        return std::string(e.what());
      }
      return std::string();
    };
  bool has_variants = false, has_orders = false, has_races = false;
  {
    py::gil_scoped_acquire gil;  // the fuzz makes its backends with the GIL released
    has_variants = py::hasattr(*b, "select_variant");
    has_orders = py::hasattr(*b, "with_order_seed");
    has_races = py::hasattr(*b, "with_races") && !b->attr("with_races").is_none();
  }
  if (has_variants)
    out.select_variant = [b](const std::string& variant) {
      py::gil_scoped_acquire gil;
      b->attr("select_variant")(variant);
    };
  if (has_orders && !probe)  // the order_independence check's other orders
    out.with_order_seed = [b, name](std::uint64_t seed) {
      py::gil_scoped_acquire gil;
      return python_backend(hold(b->attr("with_order_seed")(seed)), name);
    };
  if (has_races && !probe)  // the races check's recording run
    out.with_race_check = [b, name] {
      py::gil_scoped_acquire gil;
      return python_backend(hold(b->attr("with_races")()), name);
    };
  out.rope = [b, probe](const RopeCall& c) {
    py::gil_scoped_acquire gil;
    call_python(*b, "rope",
                call_object(Op::rope, false, {array_of(c.t, false)}, {array_of(c.out, true)},
                            c.args.nope_dim, c.args.emb_dim, 0, 0, c.args.rotation,
                            c.args.positions, c.args.status, c.t.dtype),
                probe);
  };
  out.rope_inplace = [b, probe](const RopeInplaceCall& c) {
    py::gil_scoped_acquire gil;
    const py::array t = array_of(c.t, true);
    call_python(*b, "rope",
                call_object(Op::rope, true, {t}, {t}, c.args.nope_dim, c.args.emb_dim, 0, 0,
                            c.args.rotation, c.args.positions, c.args.status, c.t.dtype),
                probe);
  };
  out.rope_backward = [b, probe](const RopeBackwardCall& c) {
    py::gil_scoped_acquire gil;
    call_python(*b, "rope",
                call_object(Op::rope_backward, false, {array_of(c.grad_out, false)},
                            {array_of(c.grad_t, true)}, c.args.nope_dim, c.args.emb_dim, 0, 0,
                            c.args.rotation, c.args.positions, c.args.status, c.grad_out.dtype),
                probe);
  };
  out.rope_backward_inplace = [b, probe](const RopeBackwardInplaceCall& c) {
    py::gil_scoped_acquire gil;
    const py::array g = array_of(c.grad, true);
    call_python(*b, "rope",
                call_object(Op::rope_backward, true, {g}, {g}, c.args.nope_dim, c.args.emb_dim, 0,
                            0, c.args.rotation, c.args.positions, c.args.status, c.grad.dtype),
                probe);
  };
  out.kv_split = [b, probe](const KvSplitCall& c) {
    py::gil_scoped_acquire gil;
    call_python(*b, "kv_split",
                call_object(Op::kv_split, false, {array_of(c.kv, false), array_of(c.k_pe, false)},
                            {array_of(c.key, true), array_of(c.value, true)}, 0, c.args.emb_dim,
                            c.args.k_dim, c.args.v_dim, c.args.rotation, c.args.positions,
                            c.args.status, c.kv.dtype),
                probe);
  };
  out.kv_split_backward = [b, probe](const KvSplitBackwardCall& c) {
    py::gil_scoped_acquire gil;
    call_python(*b, "kv_split_backward",
                call_object(Op::kv_split_backward, false,
                            {array_of(c.grad_key, false), array_of(c.grad_value, false)},
                            {array_of(c.grad_kv, true), array_of(c.grad_k_pe, true)}, 0,
                            c.args.emb_dim, c.args.k_dim, c.args.v_dim, c.args.rotation,
                            c.args.positions, c.args.status, c.grad_key.dtype),
                probe);
  };
  return out;
}

// The interpreter's side of a worker process's fork, as os.fork does it: the GIL held across
// the fork with the interpreter's locks prepared, and in the child the other threads' states
// dropped; there faulthandler prints the Python stack of a crash into the worker's stderr.
harness::ForkHooks python_fork_hooks() {
  static thread_local PyGILState_STATE state;  // prepare and parent/child run in one thread
  harness::ForkHooks hooks;
  hooks.prepare = [] {
    state = PyGILState_Ensure();
    PyOS_BeforeFork();
  };
  hooks.parent = [] {
    PyOS_AfterFork_Parent();
    PyGILState_Release(state);
  };
  hooks.child = [] {
    PyOS_AfterFork_Child();
    try {
      // fd 2, the worker's stderr, whatever sys.stderr is (pytest's capture, say)
      py::module_::import("faulthandler").attr("enable")(py::arg("file") = 2);
    } catch (const py::error_already_set&) {
    }
    // NOTE: the GIL released with this thread's state kept: it is the child's only one, and
    // deleting it would leave the interpreter none to reuse (CPython 3.11 aborts when it makes
    // one again into the initial thread's slot).
    PyEval_SaveThread();
  };
  return hooks;
}

Op parse_op(const std::string& name) {
  for (const OpSchema& schema : op_schemas())
    if (name == schema.name) return schema.op;
  throw Error("ops: '" + name + "' is not an op (" + op_names() + ", yarn_tables)");
}

// mlarope.fuzz: the fuzzer on a backend of Python callables (one worker: the GIL).
py::dict fuzz(const py::object& backend, double seconds, std::int64_t cases, std::uint64_t seed,
              const std::vector<std::string>& ops, const std::vector<std::string>& dtypes,
              const std::vector<std::string>& table_dtypes, bool in_place,
              const std::string& layouts, bool position_ids, bool seq_offsets, bool packed,
              bool power_of_two_dims, const std::string& out, int size, bool quiet, bool isolate,
              double call_timeout, bool steer) {
  harness::FuzzOptions o;
  o.isolation = isolate ? harness::FuzzOptions::Isolation::process
                        : harness::FuzzOptions::Isolation::in_process;
  o.call_limit.seconds = call_timeout;
  o.fork_hooks = python_fork_hooks();
  o.steer = steer;
  o.seconds = seconds;
  o.cases = cases;
  o.seed = seed;
  o.out = out;
  o.size = size;
  o.jobs = 1;
  bool yarn_listed = false;
  for (const std::string& name : ops) {
    if (name == "yarn_tables") yarn_listed = true;  // declined unless the backend computes it
    else o.ops.push_back(parse_op(name));
  }
  if (!ops.empty()) {
    o.yarn = yarn_listed;
    o.yarn_only = yarn_listed && o.ops.empty();
  }
  for (const std::string& name : dtypes) o.dtypes.push_back(parse_dtype(name, "dtypes"));
  for (const std::string& name : table_dtypes)
    o.table_dtypes.push_back(parse_dtype(name, "table_dtypes"));
  o.in_place = in_place;
  o.layouts = layouts;
  o.position_ids = position_ids;
  o.seq_offsets = seq_offsets;
  o.packed = packed;
  o.power_of_two_dims = power_of_two_dims;
  o.backend = "python:" + std::string(py::str(py::type::of(backend).attr("__name__")));
  const std::shared_ptr<py::object> held = hold(backend);
  const std::string name = o.backend;
  o.make_backend = [held, name] { return python_backend(held, name); };
  // A backend with variants (mlarope.triton: a kernel's autotune configs) runs each case once
  // per variant; its environment (library versions) goes into fuzz.json.
  if (py::hasattr(backend, "variants"))
    o.variants = backend.attr("variants")().cast<std::vector<std::string>>();
  if (py::hasattr(backend, "environment"))
    o.environment = nlohmann::json::parse(py::module_::import("json")
                                              .attr("dumps")(backend.attr("environment")())
                                              .cast<std::string>());
  harness::FuzzStats stats;
  std::ostringstream progress;
  {
    py::gil_scoped_release release;
    stats = harness::run_fuzz(o, progress, false);
  }
  py::dict r;
  r["cases"] = stats.cases;
  r["failing_cases"] = stats.failing_cases;
  r["seconds"] = stats.seconds;
  r["out"] = out;
  r["summary"] = harness::summary(stats, o);
  py::list failures;
  for (const harness::FuzzFailure& f : stats.failures) {
    py::dict d;
    d["index"] = f.index;
    d["seed"] = f.seed;
    d["description"] = f.description;
    d["variant"] = f.variant.empty() ? py::object(py::none()) : py::object(py::str(f.variant));
    d["dir"] =
        f.dir.empty() ? py::object(py::none()) : py::object(py::str((o.out / f.dir).string()));
    py::list checks;
    for (const auto& [check, message] : f.checks) checks.append(py::make_tuple(check, message));
    d["checks"] = checks;
    failures.append(d);
  }
  r["failures"] = failures;
  if (!quiet) py::print(r["summary"]);
  return r;
}

// A check's report as JSON (what a worker process replies), and the dict mlarope.check returns.
nlohmann::json report_json(const harness::CheckReport& report) {
  nlohmann::json results = nlohmann::json::array();
  for (const harness::CheckResult& x : report.results)
    results.push_back({std::string(to_string(x.check)), std::string(to_string(x.outcome)),
                       harness::format_result(x)});
  return {{"ok", report.ok()},
          {"unsupported", report.unsupported},
          {"results", results},
          {"status", report.status}};
}

py::dict report_dict(const nlohmann::json& j) {
  py::dict r;
  r["ok"] = j.at("ok").get<bool>();
  const std::string unsupported = j.value("unsupported", std::string());
  r["unsupported"] =
      unsupported.empty() ? py::object(py::none()) : py::object(py::str(unsupported));
  py::list results;
  for (const nlohmann::json& x : j.at("results"))
    results.append(
        py::make_tuple(x[0].get<std::string>(), x[1].get<std::string>(), x[2].get<std::string>()));
  r["results"] = results;
  r["status"] = j.value("status", std::uint32_t{0});
  if (j.contains("stderr")) r["stderr"] = j.at("stderr").get<std::string>();
  return r;
}

// mlarope.check: every check on one case directory (a fuzz repro, with its checks.json), in
// this process or in a worker process whose crash or hang is the failed check "crash" or
// "timeout" (with the worker's stderr under "stderr").
py::dict check_case(const py::object& backend, const std::string& dir, bool isolate,
                    double call_timeout);

nlohmann::json check_here(const py::object& backend, const std::string& dir,
                          harness::CallWatch* watch = nullptr) {
  const harness::Case c = harness::read_case(dir);
  harness::CheckOptions options;
  const std::string checks_file = dir + "/checks.json";
  if (std::ifstream in{checks_file}) {
    try {
      options = harness::check_options_from_json(nlohmann::json::parse(in));
    } catch (const nlohmann::json::exception& e) {
      throw Error(checks_file + ": not valid JSON: " + e.what());
    }
  }
  const std::string name = "python:" + std::string(py::str(py::type::of(backend).attr("__name__")));
  harness::Backend b = python_backend(hold(backend), name);
  if (watch != nullptr) b = harness::watched(std::move(b), *watch);
  // A failure of one variant replays in that variant (variant.json, written by the fuzz).
  if (std::ifstream in{dir + "/variant.json"}) {
    std::string variant;
    try {
      variant = nlohmann::json::parse(in).at("variant").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(dir + "/variant.json: not a variant: " + e.what());
    }
    if (!b.select_variant)
      throw Error(dir + " was recorded in variant '" + variant + "', and backend " + name +
                  " has no select_variant");
    b.select_variant(variant);
  }
  harness::CheckReport report;
  {
    py::gil_scoped_release release;
    report = harness::run_checks(c, b, options);
  }
  return report_json(report);
}

py::dict check_case(const py::object& backend, const std::string& dir, bool isolate,
                    double call_timeout) {
  if (!isolate) return report_dict(check_here(backend, dir));
  auto start = [&](harness::CallWatch& watch) -> harness::WorkerProcess::Serve {
    return [&](const std::string&) {
      py::gil_scoped_acquire gil;
      return check_here(backend, dir, &watch).dump();
    };
  };
  std::variant<std::string, harness::WorkerDeath> reply;
  {
    py::gil_scoped_release release;
    harness::WorkerProcess worker(start, harness::CallLimit{call_timeout}, python_fork_hooks());
    reply = worker.request("check");
  }
  if (const auto* d = std::get_if<harness::WorkerDeath>(&reply)) {
    const std::string check = d->timed_out ? "timeout" : "crash";
    const std::string line = check + ": the backend's worker process " + d->describe();
    return report_dict({{"ok", false},
                        {"results", nlohmann::json::array({{check, "fail", line}})},
                        {"stderr", d->stderr_tail}});
  }
  return report_dict(nlohmann::json::parse(std::get<std::string>(reply)));
}

// mlarope.load_case: a case directory's config (case.json) and arrays (copies).
py::tuple load_case(const std::string& dir) {
  const harness::Case c = harness::read_case(dir);
  py::dict arrays;
  for (const auto& [name, a] : c.arrays) {
    py::array arr(py::dtype(std::string(npy::dtype_descr(a.dtype))),
                  std::vector<py::ssize_t>(a.shape.begin(), a.shape.end()));
    std::memcpy(arr.mutable_data(), a.bytes.data(), a.bytes.size());
    arrays[name.c_str()] = arr;
  }
  const py::object json = py::module_::import("json");
  return py::make_tuple(json.attr("loads")(harness::to_json(c.config).dump()), arrays);
}

}  // namespace

PYBIND11_MODULE(_mlarope, m) {
  m.doc() = "mlarope: the reference MLA RoPE ops and the harness that checks kernels (C++).";
  py::register_exception<Error>(m, "Error", PyExc_ValueError);
  py::class_<Common>(m, "_Common")
      .def(py::init<>())
      .def_readwrite("cos", &Common::cos)
      .def_readwrite("sin", &Common::sin)
      .def_readwrite("in_layout", &Common::in_layout)
      .def_readwrite("out_layout", &Common::out_layout)
      .def_readwrite("table_layout", &Common::table_layout)
      .def_readwrite("inverse", &Common::inverse)
      .def_readwrite("layout", &Common::layout)
      .def_readwrite("freq_mode", &Common::freq_mode)
      .def_readwrite("cp_size", &Common::cp_size)
      .def_readwrite("cp_rank", &Common::cp_rank)
      .def_readwrite("max_seqlen", &Common::max_seqlen)
      .def_readwrite("cu_seqlens", &Common::cu_seqlens)
      .def_readwrite("position_ids", &Common::position_ids)
      .def_readwrite("seq_offsets", &Common::seq_offsets)
      .def_readwrite("dtype", &Common::dtype)
      .def_readwrite("table_dtype", &Common::table_dtype);
  py::class_<YarnParams>(m, "_YarnParams")
      .def(py::init<>())
      .def_readwrite("rotary_base", &YarnParams::rotary_base)
      .def_readwrite("scaling_factor", &YarnParams::scaling_factor)
      .def_readwrite("original_max_position_embeddings",
                     &YarnParams::original_max_position_embeddings)
      .def_readwrite("beta_fast", &YarnParams::beta_fast)
      .def_readwrite("beta_slow", &YarnParams::beta_slow)
      .def_readwrite("mscale", &YarnParams::mscale)
      .def_readwrite("mscale_all_dim", &YarnParams::mscale_all_dim)
      .def_readwrite("concentration_override", &YarnParams::concentration_override);
  m.def("_rope", &rope_op);
  m.def("_yarn", &yarn_op);
  m.def("_kv", &kv_op);
  m.def("_fuzz", &fuzz);
  m.def("_load_case", &load_case);
  m.def("_from_dlpack", &from_dlpack);
  m.def("_check", &check_case);
}
