// SPDX-License-Identifier: Apache-2.0
// The reference, wrapped to be wrong in one way each.
#include "fuzz/broken_backends.h"

#include <cstring>
#include <memory>
#include <ostream>
#include <type_traits>

#include "host_convert.h"
#include "mlarope/error.h"
#include "reference.h"

namespace mlarope::props {
namespace {

using harness::Backend;
using harness::CheckKind;

template <class V>
std::int64_t last_offset(const BasicTensorView<V>& v) {
  std::int64_t off = 0;
  for (int d = 0; d < v.rank; ++d) off += (v.shape[d] - 1) * v.strides[d];
  return off;
}

template <class V>
char* byte_at(const BasicTensorView<V>& v, std::int64_t offset) {
  return static_cast<char*>(const_cast<void*>(static_cast<const void*>(v.data))) +
         offset * static_cast<std::int64_t>(dtype_size(v.dtype));
}

// The outputs and inputs of an out-of-place call; empty for in-place calls.
std::vector<TensorView> outputs(const RopeCall& c) { return {c.out}; }
std::vector<TensorView> outputs(const RopeBackwardCall& c) { return {c.grad_t}; }
std::vector<TensorView> outputs(const KvSplitCall& c) { return {c.key, c.value}; }
std::vector<TensorView> outputs(const KvSplitBackwardCall& c) { return {c.grad_kv, c.grad_k_pe}; }
std::vector<TensorView> outputs(const RopeInplaceCall&) { return {}; }
std::vector<TensorView> outputs(const RopeBackwardInplaceCall&) { return {}; }
std::vector<ConstTensorView> inputs(const RopeCall& c) { return {c.t}; }
std::vector<ConstTensorView> inputs(const RopeBackwardCall& c) { return {c.grad_out}; }
std::vector<ConstTensorView> inputs(const KvSplitCall& c) { return {c.kv, c.k_pe}; }
std::vector<ConstTensorView> inputs(const KvSplitBackwardCall& c) {
  return {c.grad_key, c.grad_value};
}
std::vector<ConstTensorView> inputs(const RopeInplaceCall&) { return {}; }
std::vector<ConstTensorView> inputs(const RopeBackwardInplaceCall&) { return {}; }
// f(view) for every activation view of a call (inputs and outputs).
template <class F>
void for_each_view(RopeCall& c, F f) {
  f(c.t), f(c.out);
}
template <class F>
void for_each_view(RopeBackwardCall& c, F f) {
  f(c.grad_out), f(c.grad_t);
}
template <class F>
void for_each_view(KvSplitCall& c, F f) {
  f(c.kv), f(c.k_pe), f(c.key), f(c.value);
}
template <class F>
void for_each_view(KvSplitBackwardCall& c, F f) {
  f(c.grad_key), f(c.grad_value), f(c.grad_kv), f(c.grad_k_pe);
}
template <class F>
void for_each_view(RopeInplaceCall& c, F f) {
  f(c.t);
}
template <class F>
void for_each_view(RopeBackwardInplaceCall& c, F f) {
  f(c.grad);
}

// The reference, with f(call, run) around every call: f may change the call, then run it.
template <class F>
Backend around_each(const std::string& name, F f) {
  const Backend base = harness::reference_backend();
  Backend b = base;
  b.name = "broken:" + name;
  b.rope = [base, f](RopeCall c) { f(c, [&] { base.rope(c); }); };
  b.rope_inplace = [base, f](RopeInplaceCall c) { f(c, [&] { base.rope_inplace(c); }); };
  b.rope_backward = [base, f](RopeBackwardCall c) { f(c, [&] { base.rope_backward(c); }); };
  b.rope_backward_inplace = [base, f](RopeBackwardInplaceCall c) {
    f(c, [&] { base.rope_backward_inplace(c); });
  };
  b.kv_split = [base, f](KvSplitCall c) { f(c, [&] { base.kv_split(c); }); };
  b.kv_split_backward = [base, f](KvSplitBackwardCall c) {
    f(c, [&] { base.kv_split_backward(c); });
  };
  return b;
}

template <class Call>
constexpr bool kInPlace =
    std::is_same_v<Call, RopeInplaceCall> || std::is_same_v<Call, RopeBackwardInplaceCall>;

TensorView in_place_tensor(const RopeInplaceCall& c) { return c.t; }
TensorView in_place_tensor(const RopeBackwardInplaceCall& c) { return c.grad; }

template <class V>
void make_contiguous(BasicTensorView<V>& v) {
  std::int64_t stride = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
}

Backend dropped_inverse() {
  return around_each("dropped_inverse", [](auto& c, auto&& run) {
    c.args.rotation.inverse = false;
    run();
  });
}

Backend cp_rank_plus_one() {
  return around_each("cp_rank_plus_one", [](auto& c, auto&& run) {
    Positions& p = c.args.positions;
    p.cp_rank = (p.cp_rank + 1) % p.cp_size;
    run();
  });
}

Backend nope_written_in_place() {
  return around_each("nope_written_in_place", [](auto& c, auto&& run) {
    run();
    using Call = std::decay_t<decltype(c)>;
    if constexpr (kInPlace<Call>) {
      const TensorView t = in_place_tensor(c);
      if (c.args.nope_dim > 0 && t.numel() > 0)
        *byte_at(t, 0) ^= 1;  // element (0, .., 0): nope part
    }
  });
}

Backend skipped_element() {
  return around_each("skipped_element", [](auto& c, auto&& run) {
    char saved[4];
    TensorView skip{};
    for (const TensorView& v : outputs(c))
      if (v.numel() > 0) {
        skip = v;
        break;
      }
    if (skip.data) std::memcpy(saved, byte_at(skip, last_offset(skip)), dtype_size(skip.dtype));
    run();
    if (skip.data) std::memcpy(byte_at(skip, last_offset(skip)), saved, dtype_size(skip.dtype));
  });
}

Backend input_mutated() {
  return around_each("input_mutated", [](auto& c, auto&& run) {
    run();
    for (const ConstTensorView& v : inputs(c))
      if (v.numel() > 0) {
        *byte_at(v, 0) ^= 1;
        return;
      }
  });
}

Backend writes_past_the_end() {
  return around_each("writes_past_the_end", [](auto& c, auto&& run) {
    run();
    for (const TensorView& v : outputs(c))
      if (v.numel() > 0) {
        std::memset(byte_at(v, last_offset(v) + 1), 0, dtype_size(v.dtype));
        return;
      }
  });
}

Backend ignores_status() {
  return around_each("ignores_status", [](auto& c, auto&& run) {
    c.args.status = nullptr;
    run();
  });
}

Backend contiguous_strides_assumed() {
  return around_each("contiguous_strides_assumed", [](auto& c, auto&& run) {
    for_each_view(c, [](auto& v) { make_contiguous(v); });
    run();
  });
}

// rope_backward as the inverse rotation with the same layouts: the transpose only when in_layout
// equals out_layout.
Backend backward_not_transposed() {
  Backend b = harness::reference_backend();
  b.name = "broken:backward_not_transposed";
  b.rope_backward = [](const RopeBackwardCall& c) {
    RopeCall forward{c.grad_out, c.grad_t, c.args};
    forward.args.rotation.inverse = !forward.args.rotation.inverse;
    reference::rope(forward);
  };
  b.rope_backward_inplace = [](const RopeBackwardInplaceCall& c) {
    RopeInplaceCall forward{c.grad, c.args};
    forward.args.rotation.inverse = !forward.args.rotation.inverse;
    reference::rope_inplace(forward);
  };
  return b;
}

// The classic graph bug: device metadata copied when the graph is captured and the copy used at
// replay, instead of what the buffers hold at replay.
Backend stale_graph_metadata() {
  struct State {
    bool capturing = false, replaying = false;
    std::vector<std::vector<char>> frozen;
  };
  auto state = std::make_shared<State>();
  Backend b = around_each("stale_graph_metadata", [state](auto& c, auto&& run) {
    Positions& p = c.args.positions;
    IndexView* arrays[] = {&p.cu_seqlens, &p.position_ids, &p.seq_offsets};
    if (state->capturing) state->frozen.clear();
    for (std::size_t i = 0; i < 3; ++i) {
      IndexView& a = *arrays[i];
      const std::size_t bytes =
          a.present() ? static_cast<std::size_t>(a.size) * index_size(a.type) : 0;
      if (state->capturing) {
        const char* data = static_cast<const char*>(a.data);
        state->frozen.emplace_back(data, data + bytes);
      } else if (state->replaying && i < state->frozen.size() && a.present()) {
        a.data = state->frozen[i].data();
      }
    }
    run();
  });
  b.capture = [state](const std::function<void()>& launches) -> std::function<void()> {
    state->capturing = true;
    launches();
    state->capturing = false;
    return [state, launches] {
      state->replaying = true;
      launches();
      state->replaying = false;
    };
  };
  return b;
}

// Correct in every order but odd order seeds, where the last element of the first output moves.
Backend order_dependent() {
  Backend b = harness::reference_backend();
  b.name = "broken:order_dependent";
  b.with_order_seed = [](std::uint64_t seed) {
    return around_each("order_dependent", [seed](auto& c, auto&& run) {
      run();
      if (seed % 2 == 0) return;
      for (const TensorView& v : outputs(c))
        if (v.numel() > 0) {
          *byte_at(v, last_offset(v)) ^= 1;
          return;
        }
    });
  };
  return b;
}

std::vector<BrokenBackend>& registered() {
  static std::vector<BrokenBackend> list;
  return list;
}

GenOptions ops(std::vector<Op> o) {
  GenOptions g;
  g.ops = std::move(o);
  return g;
}

}  // namespace

std::vector<BrokenBackend> reference_wrappers() {
  GenOptions thd;
  thd.layouts = {TokenLayout::thd};
  return {
      {"dropped_inverse", dropped_inverse, {CheckKind::value, CheckKind::round_trip}, {}},
      {"cp_rank_plus_one", cp_rank_plus_one, {CheckKind::value}, {}},
      {"nope_written_in_place",
       nope_written_in_place,
       {CheckKind::immutability},
       ops({Op::rope, Op::rope_backward})},
      {"skipped_element", skipped_element, {CheckKind::coverage}, {}},
      {"input_mutated", input_mutated, {CheckKind::immutability}, {}},
      {"writes_past_the_end", writes_past_the_end, {CheckKind::bounds}, {}},
      {"ignores_status", ignores_status, {CheckKind::value}, {}},
      {"contiguous_strides_assumed",
       contiguous_strides_assumed,
       {CheckKind::value, CheckKind::bounds, CheckKind::coverage, CheckKind::immutability},
       {}},
      {"backward_not_transposed",
       backward_not_transposed,
       {CheckKind::adjoint, CheckKind::value},
       ops({Op::rope, Op::rope_backward})},
      {"stale_graph_metadata", stale_graph_metadata, {CheckKind::graph_replay}, thd},
      {"order_dependent", order_dependent, {CheckKind::order_independence}, {}},
  };
}

std::vector<BrokenBackend> broken_backends() {
  std::vector<BrokenBackend> all = reference_wrappers();
  all.insert(all.end(), registered().begin(), registered().end());
  return all;
}

BrokenBackendRegistrar::BrokenBackendRegistrar(BrokenBackend broken) {
  registered().push_back(std::move(broken));
}

harness::Backend resolve_backend(const std::string& name) {
  const std::string prefix = "broken:";
  if (name.compare(0, prefix.size(), prefix) != 0) return harness::find_backend(name);
  std::string known;
  for (const BrokenBackend& b : broken_backends()) {
    if (prefix + b.name == name) return b.make();
    known += (known.empty() ? "" : ", ") + b.name;
  }
  throw Error("--backend " + name + ": no such broken backend (known: " + known + ")");
}

void PrintTo(const BrokenBackend& broken, std::ostream* os) { *os << broken.name; }

}  // namespace mlarope::props
