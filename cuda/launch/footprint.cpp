// SPDX-License-Identifier: Apache-2.0
// Footprints of calls (see footprint.h).
#include "launch/footprint.h"

namespace mlarope::detail {

template <class Void>
void Footprint::add(const char* name, const BasicTensorView<Void>& v, RegionUse use) {
  if (v.data == nullptr || v.numel() == 0 || count == kCapacity) return;
  TensorRegion& r = regions[static_cast<std::size_t>(count++)];
  r.name = name;
  r.data = v.data;
  r.rank = v.rank;
  r.shape = v.shape;
  r.strides = v.strides;
  r.element_bytes = static_cast<int>(dtype_size(v.dtype));
  r.use = use;
}

template void Footprint::add(const char*, const BasicTensorView<void>&, RegionUse);
template void Footprint::add(const char*, const BasicTensorView<const void>&, RegionUse);

void Footprint::add(const char* name, const IndexView& v) {
  if (!v.present() || v.size <= 0 || count == kCapacity) return;
  TensorRegion& r = regions[static_cast<std::size_t>(count++)];
  r.name = name;
  r.data = v.data;
  r.rank = 1;
  r.shape[0] = v.size;
  r.strides[0] = 1;
  r.element_bytes = static_cast<int>(index_size(v.type));
  r.use = RegionUse::read;
  r.index = true;
}

void Footprint::add_status(const char* name, const DeviceStatus* word) {
  if (word == nullptr || count == kCapacity) return;
  TensorRegion& r = regions[static_cast<std::size_t>(count++)];
  r.name = name;
  r.data = word;
  r.rank = 1;
  r.shape[0] = 1;
  r.strides[0] = 1;
  r.element_bytes = static_cast<int>(sizeof(DeviceStatus));
  r.use = RegionUse::atomic;
}

namespace {

// The tables, the metadata and the status word of a call.
void add_shared(Footprint& f, const Rotation& r, const Positions& p, const DeviceStatus* status) {
  f.add("cos", r.cos, RegionUse::read);
  f.add("sin", r.sin, RegionUse::read);
  f.add("cu_seqlens", p.cu_seqlens);
  f.add("position_ids", p.position_ids);
  f.add("seq_offsets", p.seq_offsets);
  f.add_status("status", status);
}

}  // namespace

Footprint footprint_of(const RopeCall& c) {
  Footprint f;
  f.add("t", c.t, RegionUse::read);
  f.add("out", c.out, RegionUse::write);
  add_shared(f, c.args.rotation, c.args.positions, c.args.status);
  return f;
}

Footprint footprint_of(const RopeInplaceCall& c) {
  Footprint f;
  f.add("t", c.t, RegionUse::read_write);
  add_shared(f, c.args.rotation, c.args.positions, c.args.status);
  return f;
}

Footprint footprint_of(const RopeBackwardCall& c) {
  Footprint f;
  f.add("grad_out", c.grad_out, RegionUse::read);
  f.add("grad_t", c.grad_t, RegionUse::write);
  add_shared(f, c.args.rotation, c.args.positions, c.args.status);
  return f;
}

Footprint footprint_of(const RopeBackwardInplaceCall& c) {
  Footprint f;
  f.add("grad", c.grad, RegionUse::read_write);
  add_shared(f, c.args.rotation, c.args.positions, c.args.status);
  return f;
}

Footprint footprint_of(const KvSplitCall& c) {
  Footprint f;
  f.add("kv", c.kv, RegionUse::read);
  f.add("k_pe", c.k_pe, RegionUse::read);
  f.add("key", c.key, RegionUse::write);
  f.add("value", c.value, RegionUse::write);
  add_shared(f, c.args.rotation, c.args.positions, c.args.status);
  return f;
}

Footprint footprint_of(const KvSplitBackwardCall& c) {
  Footprint f;
  f.add("grad_key", c.grad_key, RegionUse::read);
  f.add("grad_value", c.grad_value, RegionUse::read);
  f.add("grad_kv", c.grad_kv, RegionUse::write);
  f.add("grad_k_pe", c.grad_k_pe, RegionUse::write);
  add_shared(f, c.args.rotation, c.args.positions, c.args.status);
  return f;
}

Footprint footprint_of(const YarnTablesCall& c) {
  Footprint f;
  f.add("cos", c.cos, RegionUse::write);
  f.add("sin", c.sin, RegionUse::write);
  return f;
}

}  // namespace mlarope::detail
