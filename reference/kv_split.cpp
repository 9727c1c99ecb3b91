// SPDX-License-Identifier: Apache-2.0
// kv_split and kv_split_backward (docs/semantics.md §4).
#include <algorithm>
#include <vector>

#include "elements.h"
#include "mlarope/validate.h"
#include "positions.h"
#include "reference.h"
#include "rotation.h"
#include "table.h"

namespace mlarope::reference {
namespace {

RowShape rows_of(const ConstTensorView& v) {
  return v.rank == 4 ? RowShape{v.shape[0], v.shape[1]} : RowShape{v.shape[0], 1};
}

template <DType D>
void split_rows(const KvSplitCall& call, const RowMap& map, std::int64_t begin, std::int64_t end) {
  using E = Element<D>;
  using Storage = typename E::Storage;
  const KvSplitArgs& a = call.args;
  const std::int64_t d = a.emb_dim, heads = call.kv.size(-2);
  const HeadIndexer kv_index = head_indexer(call.kv), k_pe_index = head_indexer(call.k_pe);
  const HeadIndexer key_index = head_indexer(call.key), value_index = head_indexer(call.value);
  std::vector<double> c(d), s(d), x(d), y(d);
  std::vector<Storage> rotated(d);
  for (std::int64_t row = begin; row < end; ++row) {
    const Storage* k_pe =
        reinterpret_cast<const Storage*>(element_ptr(call.k_pe, k_pe_index.offset(row, 0)));
    const std::int64_t freq_row = map.freq_row[row];
    if (freq_row == RowMap::kPassThrough) {
      std::copy(k_pe, k_pe + d, rotated.begin());  // bit for bit: NaN payloads, signed zeros
    } else {
      for (std::int64_t k = 0; k < d; ++k) x[k] = E::load(k_pe[k]);
      load_table_row(a.rotation, freq_row, c.data(), s.data());
      rotate(x.data(), y.data(), c.data(), s.data(), a.rotation, d);
      for (std::int64_t k = 0; k < d; ++k) rotated[k] = E::store(y[k]);
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      const char* kv = element_ptr(call.kv, kv_index.offset(row, h));
      char* key = element_ptr(call.key, key_index.offset(row, h));
      copy_elements(key, kv, a.k_dim, D);
      copy_elements(key + a.k_dim * sizeof(Storage), reinterpret_cast<const char*>(rotated.data()),
                    d, D);
      copy_elements(element_ptr(call.value, value_index.offset(row, h)),
                    kv + a.k_dim * sizeof(Storage), a.v_dim, D);
    }
  }
}

template <DType D>
void split_backward_rows(const KvSplitBackwardCall& call, const RowMap& map, std::int64_t begin,
                         std::int64_t end) {
  using E = Element<D>;
  using Storage = typename E::Storage;
  const KvSplitArgs& a = call.args;
  const std::int64_t d = a.emb_dim, heads = call.grad_key.size(-2);
  const HeadIndexer key_index = head_indexer(call.grad_key),
                    value_index = head_indexer(call.grad_value);
  const HeadIndexer kv_index = head_indexer(call.grad_kv),
                    k_pe_index = head_indexer(call.grad_k_pe);
  std::vector<double> c(d), s(d), sum(d), grad(d);
  for (std::int64_t row = begin; row < end; ++row) {
    std::fill(sum.begin(), sum.end(), 0.0);
    for (std::int64_t h = 0; h < heads; ++h) {
      const char* key = element_ptr(call.grad_key, key_index.offset(row, h));
      char* kv = element_ptr(call.grad_kv, kv_index.offset(row, h));
      copy_elements(kv, key, a.k_dim, D);
      copy_elements(kv + a.k_dim * sizeof(Storage),
                    element_ptr(call.grad_value, value_index.offset(row, h)), a.v_dim, D);
      const Storage* slice = reinterpret_cast<const Storage*>(key) + a.k_dim;
      for (std::int64_t k = 0; k < d; ++k) sum[k] += E::load(slice[k]);
    }
    const std::int64_t freq_row = map.freq_row[row];
    if (freq_row == RowMap::kPassThrough) {
      grad = sum;
    } else {
      load_table_row(a.rotation, freq_row, c.data(), s.data());
      rotate_adjoint(sum.data(), grad.data(), c.data(), s.data(), a.rotation, d);
    }
    Storage* out =
        reinterpret_cast<Storage*>(element_ptr(call.grad_k_pe, k_pe_index.offset(row, 0)));
    for (std::int64_t k = 0; k < d; ++k) out[k] = E::store(grad[k]);
  }
}

}  // namespace

void kv_split(const KvSplitCall& call) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: a no-op, whatever the other sizes
  const RowShape rows = rows_of(call.kv);
  const RowMap map = map_rows(call.args.positions, rows, table_rows(call.args.rotation));
  with_dtype(call.kv.dtype, [&](auto dtype) {
    parallel_for(rows.seq * rows.batch, [&](std::int64_t begin, std::int64_t end) {
      split_rows<decltype(dtype)::value>(call, map, begin, end);
    });
  });
  if (call.args.status) *call.args.status |= map.status;
}

void kv_split_backward(const KvSplitBackwardCall& call) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: a no-op, whatever the other sizes
  const RowShape rows = rows_of(call.grad_key);
  const RowMap map = map_rows(call.args.positions, rows, table_rows(call.args.rotation));
  with_dtype(call.grad_key.dtype, [&](auto dtype) {
    parallel_for(rows.seq * rows.batch, [&](std::int64_t begin, std::int64_t end) {
      split_backward_rows<decltype(dtype)::value>(call, map, begin, end);
    });
  });
  if (call.args.status) *call.args.status |= map.status;
}

}  // namespace mlarope::reference
