// SPDX-License-Identifier: Apache-2.0
#include "checks/strided_call.h"

#include <algorithm>
#include <cstring>

#include "checks/asan_guards.h"
#include "mlarope/error.h"

namespace mlarope::harness {
namespace {

constexpr std::uint64_t kIndexGuard = 0xA5A5A5A5A5A5A5A5ull;

// Bits of each Fill (poison_a, poison_b, guard) for an element type: all NaNs, all distinct.
std::array<std::uint64_t, 3> patterns_of(DType dtype) {
  switch (dtype) {
    case DType::f32: return {0x7FA1B2C3u, 0xFFD4E5F6u, 0x7F8BADF0u};
    case DType::f16: return {0x7E5Au, 0xFD6Bu, 0x7D0Du};
    case DType::bf16: return {0x7FA5u, 0xFFC7u, 0x7F8Du};
  }
  return {};
}

}  // namespace

bool is_fill_pattern(DType dtype, std::uint64_t bits) {
  for (std::uint64_t p : patterns_of(dtype))
    if (p == bits) return true;
  return false;
}

namespace {

std::array<std::uint64_t, 3> index_patterns() { return {kIndexGuard, kIndexGuard, kIndexGuard}; }

bool is_metadata(const std::string& name) {
  return name == "cu_seqlens" || name == "position_ids" || name == "seq_offsets";
}

// Same leading dims as `like`, the last two replaced by (heads, last).
std::vector<std::int64_t> with_head_dims(std::vector<std::int64_t> shape, std::int64_t heads,
                                         std::int64_t last) {
  shape[shape.size() - 2] = heads;
  shape.back() = last;
  return shape;
}

std::string region_name(GuardedTensor::Region r) {
  switch (r) {
    case GuardedTensor::Region::guard_before: return "the guard before";
    case GuardedTensor::Region::guard_after: return "the guard after";
    case GuardedTensor::Region::gap: return "a gap (between heads or rows) of";
    case GuardedTensor::Region::element: return "an element of";
  }
  return "?";
}

// A finding about element `flat` of `t`, with its (token, head, dim) for activations.
RunFinding element_finding(CheckKind check, const std::string& tensor, const GuardedTensor& t,
                           std::int64_t flat, std::int64_t offset, std::string message) {
  RunFinding f{check, tensor, t.index_of(flat), offset, std::move(message)};
  const auto& shape = t.shape();
  if (shape.size() >= 3 && shape.back() > 0 && shape[shape.size() - 2] > 0) {
    f.dim = flat % shape.back();
    f.head = (flat / shape.back()) % shape[shape.size() - 2];
    f.token = flat / (shape.back() * shape[shape.size() - 2]);
  }
  return f;
}

}  // namespace

bool heads_identical(const npy::Array& a) {
  if (a.shape.size() < 2) return false;
  const std::int64_t heads = a.shape[a.shape.size() - 2];
  const std::size_t head_bytes =
      static_cast<std::size_t>(a.shape.back()) * npy::dtype_size(a.dtype);
  if (heads <= 1 || head_bytes == 0) return heads == 1;
  const std::size_t row_bytes = head_bytes * static_cast<std::size_t>(heads);
  for (std::size_t row = 0; row + row_bytes <= a.bytes.size(); row += row_bytes)
    for (std::int64_t h = 1; h < heads; ++h)
      if (std::memcmp(&a.bytes[row], &a.bytes[row + h * head_bytes], head_bytes) != 0) return false;
  return true;
}

// --- Layout ------------------------------------------------------------------------------------

std::vector<std::int64_t> planned_strides(const std::vector<std::int64_t>& shape,
                                          const LayoutPlan& plan, bool table, bool broadcast) {
  const std::size_t rank = shape.size();
  if (rank == 1) return {1};
  const std::int64_t width = shape.back();
  if (table) {
    const std::int64_t row = width + plan.table_gap;
    if (rank == 2) return {row, 1};
    return {row, width, width, 1};
  }
  const std::int64_t heads = shape[rank - 2];
  const std::int64_t head_stride = broadcast ? 0 : width + plan.head_gap;
  const std::int64_t row = (broadcast ? width : heads * head_stride) + plan.row_gap;
  if (rank == 3) return {row, head_stride, 1};
  return {shape[1] * row + plan.row_gap, row, head_stride, 1};
}

// --- StridedCall -------------------------------------------------------------------------------

StridedCall::Slot& StridedCall::add(const std::string& name, const npy::Array& like,
                                    std::vector<std::int64_t> strides, bool output, DType dtype) {
  Slot& slot = slots_[name];
  const bool index = is_metadata(name);
  slot.dtype = index ? like.dtype : storage_dtype(dtype);
  slot.case_shape = like.shape;
  slot.output = output;
  slot.tensor =
      GuardedTensor(npy::dtype_size(slot.dtype), like.shape, std::move(strides), plan_.guard,
                    plan_.misalign && !index, index ? index_patterns() : patterns_of(dtype));
  return slot;
}

void StridedCall::build_activations(const Case& c) {
  const CaseConfig& k = c.config;
  auto input = [&](const char* name) {
    const npy::Array& a = c.arrays.at(name);
    const bool broadcast = plan_.broadcast_heads && !in_place_ && heads_identical(a);
    add(name, a, planned_strides(a.shape, plan_, false, broadcast), false, k.dtype);
  };
  auto output = [&](const char* name, std::vector<std::int64_t> shape) {
    npy::Array like;
    like.shape = std::move(shape);
    add(name, like, planned_strides(like.shape, plan_, false, false), true, k.dtype);
  };
  const bool forward = k.op == Op::rope;
  switch (k.op) {
    case Op::rope:
    case Op::rope_backward: {
      const char* in = forward ? "t" : "grad_out";
      if (in_place_) {
        const npy::Array& a = c.arrays.at(in);
        Slot& slot = add(in, a, planned_strides(a.shape, plan_, false, false), true, k.dtype);
        slot.in_place = true;
      } else {
        input(in);
        output(forward ? "out" : "grad_t", c.arrays.at(in).shape);
      }
      break;
    }
    case Op::kv_split: {
      input("kv");
      input("k_pe");
      const auto& shape = c.arrays.at("kv").shape;
      const std::int64_t heads = shape[shape.size() - 2];
      output("key", with_head_dims(shape, heads, k.k_dim + k.emb_dim));
      output("value", with_head_dims(shape, heads, k.v_dim));
      break;
    }
    case Op::kv_split_backward: {
      input("grad_key");
      input("grad_value");
      const auto& shape = c.arrays.at("grad_key").shape;
      const std::int64_t heads = shape[shape.size() - 2];
      output("grad_kv", with_head_dims(shape, heads, k.k_dim + k.v_dim));
      output("grad_k_pe", with_head_dims(shape, 1, k.emb_dim));
      break;
    }
  }
  for (const char* table : {"cos", "sin"}) {
    const npy::Array& a = c.arrays.at(table);
    add(table, a, planned_strides(a.shape, plan_, true, false), false, k.table_dtype);
  }
}

void StridedCall::build_metadata(const Case& c) {
  for (const char* name : {"cu_seqlens", "position_ids", "seq_offsets"}) {
    const auto it = c.arrays.find(name);
    if (it != c.arrays.end()) add(name, it->second, {1}, false, DType::f32);
  }
}

StridedCall::StridedCall(const Case& c, const LayoutPlan& plan, bool in_place)
    : config_(c.config), plan_(plan), in_place_(in_place), status_(5, 0) {
  const bool rope = c.config.op == Op::rope || c.config.op == Op::rope_backward;
  if (in_place && !rope) throw Error(std::string(to_string(c.config.op)) + " has no in-place form");
  build_activations(c);
  build_metadata(c);
}

void StridedCall::load(const Case& c, Fill poison) {
  poison_ = poison;
  for (auto& [name, slot] : slots_) {
    slot.tensor.fill_outside(Fill::guard);
    const auto it = c.arrays.find(name);
    if (it != c.arrays.end()) slot.tensor.store(it->second);
    else slot.tensor.fill_elements(poison);
    before_[name] = slot.tensor.snapshot();
  }
  std::fill(status_.begin(), status_.end(), static_cast<DeviceStatus>(kIndexGuard));
  status_[2] = kStatusOk;
}

ConstTensorView StridedCall::input_view(const std::string& name) const {
  const Slot& slot = slots_.at(name);
  ConstTensorView v;
  v.data = slot.tensor.data();
  v.dtype = (name == "cos" || name == "sin") ? config_.table_dtype : config_.dtype;
  v.rank = static_cast<int>(slot.case_shape.size());
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = slot.case_shape[d];
    v.strides[d] = slot.tensor.strides()[d];
  }
  return v;
}

TensorView StridedCall::output_view(const std::string& name) const {
  const ConstTensorView v = input_view(name);
  return TensorView{const_cast<void*>(v.data), v.dtype, v.rank, v.shape, v.strides};
}

RopeArgs StridedCall::rope_args() const {
  Rotation r;
  r.in_layout = config_.in_layout;
  r.out_layout = config_.out_layout;
  r.table_layout = config_.table_layout;
  r.inverse = config_.inverse;
  r.cos = input_view("cos");
  r.sin = input_view("sin");
  Positions p;
  p.layout = config_.layout;
  p.cp_size = config_.cp_size;
  p.cp_rank = config_.cp_rank;
  p.freq_mode = config_.freq_mode;
  p.max_seqlen = config_.max_seqlen;
  auto index = [&](const char* name) -> IndexView {
    const auto it = slots_.find(name);
    if (it == slots_.end()) return {};
    const Slot& s = it->second;
    return {s.tensor.data(), s.dtype == npy::Dtype::i64 ? IndexType::i64 : IndexType::i32,
            s.tensor.numel()};
  };
  p.cu_seqlens = index("cu_seqlens");
  p.position_ids = index("position_ids");
  p.seq_offsets = index("seq_offsets");
  return {config_.nope_dim, config_.emb_dim, r, p, &status_[2]};
}

KvSplitArgs StridedCall::kv_args() const {
  const RopeArgs a = rope_args();
  return {config_.k_dim, config_.v_dim, config_.emb_dim, a.rotation, a.positions, a.status};
}

namespace {
template <class F>
const F& require(const F& f, const Backend& b, const char* what) {
  if (!f) throw Error("backend " + b.name + " has no " + what);
  return f;
}
}  // namespace

void StridedCall::run_guarded(const std::function<void()>& f) const {
  struct Poisoned {  // the guards and gaps unaddressable while f runs, whatever it throws
    const StridedCall& call;
    explicit Poisoned(const StridedCall& c) : call(c) {
      for (const auto& [name, slot] : call.slots_) slot.tensor.poison_outside(name);
      const auto* words = reinterpret_cast<const std::byte*>(call.status_.data());
      asan_guards::poison(words, words + call.status_.size() * sizeof(DeviceStatus),
                          words + 2 * sizeof(DeviceStatus),
                          {{2 * sizeof(DeviceStatus), 3 * sizeof(DeviceStatus)}}, "status word");
    }
    ~Poisoned() {
      for (const auto& [name, slot] : call.slots_) slot.tensor.unpoison();
      const auto* words = reinterpret_cast<const std::byte*>(call.status_.data());
      asan_guards::unpoison(words, words + call.status_.size() * sizeof(DeviceStatus));
    }
  } poisoned(*this);
  f();
}

void StridedCall::call(const Backend& b) const {
  run_guarded([&] { call_unguarded(b); });
}

void StridedCall::call_unguarded(const Backend& b) const {
  const bool forward = config_.op == Op::rope;
  switch (config_.op) {
    case Op::rope:
    case Op::rope_backward: {
      const char* in = forward ? "t" : "grad_out";
      if (in_place_) {
        if (forward) require(b.rope_inplace, b, "rope_inplace")({output_view(in), rope_args()});
        else
          require(b.rope_backward_inplace, b,
                  "rope_backward_inplace")({output_view(in), rope_args()});
      } else if (forward) {
        require(b.rope, b, "rope")({input_view(in), output_view("out"), rope_args()});
      } else {
        require(b.rope_backward, b,
                "rope_backward")({input_view(in), output_view("grad_t"), rope_args()});
      }
      break;
    }
    case Op::kv_split:
      require(b.kv_split, b, "kv_split")({input_view("kv"), input_view("k_pe"), output_view("key"),
                                          output_view("value"), kv_args()});
      break;
    case Op::kv_split_backward:
      require(b.kv_split_backward, b,
              "kv_split_backward")({input_view("grad_key"), input_view("grad_value"),
                                    output_view("grad_kv"), output_view("grad_k_pe"), kv_args()});
      break;
  }
}

std::function<void()> StridedCall::launcher(const Backend& backend) const {
  return [this, backend] { call(backend); };
}

CaseOutputs StridedCall::outputs() const {
  CaseOutputs o;
  for (const auto& [name, slot] : slots_) {
    if (!slot.output) continue;
    std::string out_name = name;
    if (slot.in_place) out_name = config_.op == Op::rope ? "out" : "grad_t";
    o.arrays[out_name] = slot.tensor.load(slot.dtype, slot.case_shape);
  }
  o.status = status_[2];
  return o;
}

void StridedCall::audit_slot(const std::string& name, const Slot& slot,
                             std::vector<RunFinding>& out) const {
  const GuardedTensor& t = slot.tensor;
  const std::int64_t width =
      slot.case_shape.empty() ? 1 : std::max<std::int64_t>(slot.case_shape.back(), 1);
  // Changed elements of outputs are what the op writes; only their nope parts (in place) count.
  auto reportable = [&](const GuardedTensor::Change& ch) {
    if (ch.region != GuardedTensor::Region::element || !slot.output) return true;
    return slot.in_place && ch.flat % width < config_.nope_dim;
  };
  for (const GuardedTensor::Change& ch : t.changes(before_.at(name), 64, reportable)) {
    if (ch.region != GuardedTensor::Region::element) {
      out.push_back({CheckKind::bounds,
                     name,
                     {},
                     ch.offset,
                     "wrote " + region_name(ch.region) + " " + name + " (element offset " +
                         std::to_string(ch.offset) + ")"});
      continue;
    }
    const bool nope = slot.in_place;
    out.push_back(
        element_finding(CheckKind::immutability, name, t, ch.flat, ch.offset,
                        nope ? "wrote the nope part of in-place " + name : "wrote input " + name));
  }
  if (!slot.output || slot.in_place) return;
  for (std::int64_t flat = 0; flat < t.numel(); ++flat)
    if (t.holds(flat, poison_))
      out.push_back(element_finding(CheckKind::coverage, name, t, flat, 0,
                                    "left " + name + " element unwritten (still the poison NaN)"));
}

std::vector<RunFinding> StridedCall::audit() const {
  std::vector<RunFinding> out;
  for (const auto& [name, slot] : slots_) audit_slot(name, slot, out);
  for (std::size_t i : {0u, 1u, 3u, 4u})
    if (status_[i] != static_cast<DeviceStatus>(kIndexGuard))
      out.push_back({CheckKind::bounds,
                     "status",
                     {},
                     static_cast<std::int64_t>(i) - 2,
                     "wrote next to the status word"});
  return out;
}

RunResult run_strided(const Case& c, const Backend& backend, const LayoutPlan& plan, bool in_place,
                      Fill poison) {
  StridedCall call(c, plan, in_place);
  call.load(c, poison);
  RunResult r;
  try {
    call.call(backend);
  } catch (const Unsupported& e) {
    r.unsupported = e.what();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  r.outputs = call.outputs();
  r.findings = call.audit();
  return r;
}

}  // namespace mlarope::harness
