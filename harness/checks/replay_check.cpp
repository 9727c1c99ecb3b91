// SPDX-License-Identifier: Apache-2.0
// Graph replay: capture a call with one set of metadata and inputs, write another set into the
// same buffers, replay, and compare with the reference for the second set (docs/semantics.md §6).
#include <algorithm>
#include <cstring>

#include "checks/check_context.h"
#include "mlarope/op_schema.h"

namespace mlarope::harness::detail {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Copy head 0 of every row of a [.., H, W] array into its other heads.
void broadcast_head0(npy::Array& a) {
  const std::int64_t heads = a.shape[a.shape.size() - 2];
  const std::size_t head_bytes =
      static_cast<std::size_t>(a.shape.back()) * npy::dtype_size(a.dtype);
  const std::size_t row_bytes = head_bytes * static_cast<std::size_t>(heads);
  if (row_bytes == 0) return;
  for (std::size_t row = 0; row + row_bytes <= a.bytes.size(); row += row_bytes)
    for (std::int64_t h = 1; h < heads; ++h)
      std::memcpy(&a.bytes[row + h * head_bytes], &a.bytes[row], head_bytes);
}

// Move one length unit (2 * cp_size, or 1) from one sequence to the next, keeping the total and
// (when known) max_seqlen.
void move_length(npy::Array& cu, const CaseConfig& k) {
  const std::int64_t n = cu.size() - 1;
  std::int32_t* v = cu.data<std::int32_t>();
  const std::int64_t unit = k.cp_size > 1 ? 2 * k.cp_size : 1;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t j = (i + 1) % n;
    const std::int64_t li = v[i + 1] - v[i], lj = v[j + 1] - v[j];
    if (i == j || li < unit || (k.max_seqlen > 0 && lj + unit > k.max_seqlen)) continue;
    std::vector<std::int64_t> lengths(n);
    for (std::int64_t s = 0; s < n; ++s) lengths[s] = v[s + 1] - v[s];
    lengths[i] -= unit;
    lengths[j] += unit;
    for (std::int64_t s = 0; s < n; ++s) v[s + 1] = static_cast<std::int32_t>(v[s] + lengths[s]);
    return;
  }
}

void new_position_ids(npy::Array& ids, std::int64_t table_rows, std::uint64_t seed) {
  if (table_rows <= 0) return;
  for (std::int64_t r = 0; r < ids.size(); ++r) {
    const auto row =
        static_cast<std::int64_t>(mix(seed + r) % static_cast<std::uint64_t>(table_rows));
    if (ids.dtype == npy::Dtype::i64) ids.data<std::int64_t>()[r] = row;
    else ids.data<std::int32_t>()[r] = static_cast<std::int32_t>(row);
  }
}

void rotate_offsets(npy::Array& offsets) {
  std::int32_t* v = offsets.data<std::int32_t>();
  if (offsets.size() > 1) std::rotate(v, v + 1, v + offsets.size());
}

}  // namespace

/// The case of `c` with new inputs and metadata of the same shapes.
Case replay_variant(const Case& c, std::uint64_t seed) {
  Case v = c;
  std::uint64_t salt = 0;
  for (const std::string& name : all_input_names()) {
    const auto it = c.arrays.find(name);
    if (it == c.arrays.end()) continue;
    npy::Array a = random_like(it->second, c.config.dtype, mix(seed + ++salt));
    if (heads_identical(it->second)) broadcast_head0(a);
    v.arrays[name] = std::move(a);
  }
  if (v.arrays.count("cu_seqlens") && v.arrays["cu_seqlens"].dtype == npy::Dtype::i32)
    move_length(v.arrays["cu_seqlens"], c.config);
  if (v.arrays.count("position_ids"))
    new_position_ids(v.arrays["position_ids"], c.arrays.at("cos").shape[0], mix(seed + 99));
  if (v.arrays.count("seq_offsets") && v.arrays["seq_offsets"].dtype == npy::Dtype::i32)
    rotate_offsets(v.arrays["seq_offsets"]);
  return v;
}

CheckResult check_graph_replay(CheckContext& ctx) {
  const Backend& backend = ctx.backend();
  if (!backend.capture)
    return skipped(CheckKind::graph_replay, "backend " + backend.name + " has no capture");
  const Case& c = ctx.kase();
  const Case variant = replay_variant(c, ctx.options().seed);
  CaseOutputs expected;
  try {
    expected = run_case(variant, reference_backend());
  } catch (const std::exception& e) {
    return skipped(CheckKind::graph_replay,
                   std::string("the replay variant is invalid: ") + e.what());
  }
  StridedCall call(c, ctx.options().layout, c.config.in_place);
  call.load(c, Fill::poison_a);
  std::function<void()> replay;
  try {
    replay = backend.capture(call.launcher(backend));
    call.load(variant, Fill::poison_b);
    call.run_guarded(replay);
  } catch (const std::exception& e) {
    return failed(CheckKind::graph_replay, std::string("capture or replay threw: ") + e.what());
  }
  ctx.record(call.audit(), "the graph replay");
  return compare_outputs(variant, value_context(variant), call.outputs(), expected,
                         CheckKind::graph_replay, 1.0, nullptr,
                         "replay on new metadata and inputs: ");
}

}  // namespace mlarope::harness::detail
