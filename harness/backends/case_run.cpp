// SPDX-License-Identifier: Apache-2.0
#include "backends/case_run.h"

#include <algorithm>

#include "backends/device_backend.h"
#include "backends/plugin_backend.h"
#include "mlarope/error.h"
#include "mlarope/op_schema.h"
#include "reference.h"

namespace mlarope::harness {
namespace {

IndexView index_view(const Case& c, const char* name) {
  const auto it = c.arrays.find(name);
  if (it == c.arrays.end()) return {};
  const npy::Array& a = it->second;
  return {a.bytes.data(), a.dtype == npy::Dtype::i64 ? IndexType::i64 : IndexType::i32, a.size()};
}

const npy::Array& input(const Case& c, const char* name) { return c.arrays.at(name); }

ConstTensorView activation(const Case& c, const char* name) {
  return view_of(input(c, name), c.config.dtype);
}

// A zero-filled output array of `shape` in the activation dtype.
npy::Array make_output(const Case& c, std::vector<std::int64_t> shape) {
  return npy::make(storage_dtype(c.config.dtype), std::move(shape));
}

// Same leading dims as `like`, last two replaced by (heads, last).
std::vector<std::int64_t> with_head_dims(const npy::Array& like, std::int64_t heads,
                                         std::int64_t last) {
  std::vector<std::int64_t> shape = like.shape;
  shape[shape.size() - 2] = heads;
  shape.back() = last;
  return shape;
}

RopeArgs rope_args(const Case& c, DeviceStatus* status) {
  return {c.config.nope_dim, c.config.emb_dim, rotation_of(c), positions_of(c), status};
}

KvSplitArgs kv_args(const Case& c, DeviceStatus* status) {
  return {c.config.k_dim, c.config.v_dim,  c.config.emb_dim,
          rotation_of(c), positions_of(c), status};
}

void run_rope(const Case& c, const Backend& b, CaseOutputs& o) {
  const bool forward = c.config.op == Op::rope;
  const char* in_name = forward ? "t" : "grad_out";
  const char* out_name = forward ? "out" : "grad_t";
  const RopeArgs args = rope_args(c, &o.status);
  if (c.config.in_place) {
    npy::Array a = input(c, in_name);  // the in-place tensor starts as a copy of the input
    TensorView t = view_of(a, c.config.dtype);
    if (forward) b.rope_inplace({t, args});
    else b.rope_backward_inplace({t, args});
    o.arrays[out_name] = std::move(a);
    return;
  }
  npy::Array out = make_output(c, input(c, in_name).shape);
  if (forward) b.rope({activation(c, in_name), view_of(out, c.config.dtype), args});
  else b.rope_backward({activation(c, in_name), view_of(out, c.config.dtype), args});
  o.arrays[out_name] = std::move(out);
}

void run_kv_split(const Case& c, const Backend& b, CaseOutputs& o) {
  const npy::Array& kv = input(c, "kv");
  const std::int64_t heads = kv.shape[kv.shape.size() - 2];
  npy::Array key = make_output(c, with_head_dims(kv, heads, c.config.k_dim + c.config.emb_dim));
  npy::Array value = make_output(c, with_head_dims(kv, heads, c.config.v_dim));
  b.kv_split({activation(c, "kv"), activation(c, "k_pe"), view_of(key, c.config.dtype),
              view_of(value, c.config.dtype), kv_args(c, &o.status)});
  o.arrays["key"] = std::move(key);
  o.arrays["value"] = std::move(value);
}

void run_kv_split_backward(const Case& c, const Backend& b, CaseOutputs& o) {
  const npy::Array& grad_key = input(c, "grad_key");
  const std::int64_t heads = grad_key.shape[grad_key.shape.size() - 2];
  npy::Array grad_kv =
      make_output(c, with_head_dims(grad_key, heads, c.config.k_dim + c.config.v_dim));
  npy::Array grad_k_pe = make_output(c, with_head_dims(grad_key, 1, c.config.emb_dim));
  b.kv_split_backward({activation(c, "grad_key"), activation(c, "grad_value"),
                       view_of(grad_kv, c.config.dtype), view_of(grad_k_pe, c.config.dtype),
                       kv_args(c, &o.status)});
  o.arrays["grad_kv"] = std::move(grad_kv);
  o.arrays["grad_k_pe"] = std::move(grad_k_pe);
}

}  // namespace

reference::RowMap row_map(const Case& c) {
  const npy::Array& a = c.arrays.at(std::string(schema_of(c.config.op).activation()));
  const RowShape rows =
      a.shape.size() == 4 ? RowShape{a.shape[0], a.shape[1]} : RowShape{a.shape[0], 1};
  return reference::map_rows(positions_of(c), rows, c.arrays.at("cos").shape[0]);
}

Positions positions_of(const Case& c) {
  Positions p;
  p.layout = c.config.layout;
  p.cp_size = c.config.cp_size;
  p.cp_rank = c.config.cp_rank;
  p.freq_mode = c.config.freq_mode;
  p.max_seqlen = c.config.max_seqlen;
  p.cu_seqlens = index_view(c, "cu_seqlens");
  p.position_ids = index_view(c, "position_ids");
  p.seq_offsets = index_view(c, "seq_offsets");
  return p;
}

Rotation rotation_of(const Case& c) {
  Rotation r;
  r.in_layout = c.config.in_layout;
  r.out_layout = c.config.out_layout;
  r.table_layout = c.config.table_layout;
  r.inverse = c.config.inverse;
  r.cos = view_of(input(c, "cos"), c.config.table_dtype);
  r.sin = view_of(input(c, "sin"), c.config.table_dtype);
  return r;
}

CaseOutputs run_case(const Case& c, const Backend& backend) {
  CaseOutputs outputs;
  switch (c.config.op) {
    case Op::rope:
    case Op::rope_backward: run_rope(c, backend, outputs); break;
    case Op::kv_split: run_kv_split(c, backend, outputs); break;
    case Op::kv_split_backward: run_kv_split_backward(c, backend, outputs); break;
  }
  return outputs;
}

Backend reference_backend() {
  Backend b;
  b.name = "reference";
  b.rope = reference::rope;
  b.rope_inplace = reference::rope_inplace;
  b.rope_backward = reference::rope_backward;
  b.rope_backward_inplace = reference::rope_backward_inplace;
  b.kv_split = reference::kv_split;
  b.kv_split_backward = reference::kv_split_backward;
  b.yarn_tables = reference::yarn_tables;
  return b;
}

std::int64_t minimum_bytes(const Case& c) {
  const CaseConfig& k = c.config;
  const auto bytes_of = [&](const char* name) -> std::int64_t {
    const auto it = c.arrays.find(name);
    return it == c.arrays.end() ? 0 : static_cast<std::int64_t>(it->second.bytes.size());
  };
  const std::string activation(schema_of(k.op).activation());
  const auto it = c.arrays.find(activation);
  if (it == c.arrays.end() || it->second.shape.empty()) return 0;
  const std::vector<std::int64_t>& shape = it->second.shape;
  const std::int64_t rows = k.layout == TokenLayout::sbhd ? shape[0] * shape[1] : shape[0];
  const std::int64_t heads = shape[shape.size() - 2];
  const auto size = static_cast<std::int64_t>(dtype_size(k.dtype));
  // A table row per row at most, and no more than the tables hold (short THD sequences share
  // their rows; YaRN cases make their tables rather than ship them).
  std::int64_t total = 2 * rows * k.emb_dim * static_cast<std::int64_t>(dtype_size(k.table_dtype));
  if (const std::int64_t tables = bytes_of("cos") + bytes_of("sin"); tables > 0)
    total = std::min(total, tables);
  total += bytes_of("cu_seqlens") + bytes_of("position_ids") + bytes_of("seq_offsets");
  const bool rope_family = k.op == Op::rope || k.op == Op::rope_backward;
  if (rope_family && k.in_place) return total + 2 * rows * heads * k.emb_dim * size;
  if (rope_family) return total + 2 * bytes_of(activation.c_str());
  if (k.op == Op::kv_split)  // read kv and k_pe; write key and value
    return total + bytes_of("kv") + bytes_of("k_pe") +
           rows * heads * (k.k_dim + k.emb_dim + k.v_dim) * size;
  // kv_split_backward: read grad_key and grad_value; write grad_kv and grad_k_pe
  return total + bytes_of("grad_key") + bytes_of("grad_value") +
         rows * (heads * (k.k_dim + k.v_dim) + k.emb_dim) * size;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names = {"reference", "host"};
  if (cuda_device_available()) names.push_back("cuda");
  return names;
}

Backend find_backend(const std::string& name) {
  if (name == "reference") return reference_backend();
  if (name == "host") return host_backend();
  if (name == "host-fast") return host_backend(0, HostMode::fast);
  if (name == "cuda") return cuda_backend();
  if (name.rfind("plugin:", 0) == 0) return plugin_backend(name.substr(7));
  std::string known;
  for (const std::string& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("--backend " + name + ": unknown backend (this build has: " + known +
              ", and plugin:PATH for a kernel plugin)");
}

}  // namespace mlarope::harness
