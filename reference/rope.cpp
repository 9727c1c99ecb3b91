// SPDX-License-Identifier: Apache-2.0
// rope and rope_backward, out of place and in place (docs/semantics.md §4).
#include <vector>

#include "elements.h"
#include "mlarope/validate.h"
#include "positions.h"
#include "reference.h"
#include "rotation.h"
#include "table.h"

namespace mlarope::reference {
namespace {

enum class Direction { forward, adjoint };

// One rope-family call, reduced to what the loop over rows needs.
struct RopeJob {
  ConstTensorView in;  // t or grad_out
  TensorView out;      // out, grad_t, or the in-place tensor
  bool in_place = false;
  Direction direction = Direction::forward;
  const RopeArgs* args = nullptr;
};

template <DType D>
void run_rows(const RopeJob& job, const RowMap& map, std::int64_t begin, std::int64_t end) {
  using E = Element<D>;
  using Storage = typename E::Storage;
  const RopeArgs& a = *job.args;
  const std::int64_t d = a.emb_dim, heads = job.in.size(-2);
  const HeadIndexer in_index = head_indexer(job.in), out_index = head_indexer(job.out);
  std::vector<double> c(d), s(d), x(d), y(d);
  for (std::int64_t row = begin; row < end; ++row) {
    const std::int64_t freq_row = map.freq_row[row];
    const bool pass = freq_row == RowMap::kPassThrough;
    if (!pass) load_table_row(a.rotation, freq_row, c.data(), s.data());
    for (std::int64_t h = 0; h < heads; ++h) {
      const char* src = element_ptr(job.in, in_index.offset(row, h));
      char* dst = element_ptr(job.out, out_index.offset(row, h));
      if (!job.in_place) copy_elements(dst, src, pass ? a.nope_dim + d : a.nope_dim, D);
      if (pass) continue;
      const Storage* slice = reinterpret_cast<const Storage*>(src) + a.nope_dim;
      for (std::int64_t k = 0; k < d; ++k) x[k] = E::load(slice[k]);
      if (job.direction == Direction::forward)
        rotate(x.data(), y.data(), c.data(), s.data(), a.rotation, d);
      else rotate_adjoint(x.data(), y.data(), c.data(), s.data(), a.rotation, d);
      Storage* out_slice = reinterpret_cast<Storage*>(dst) + a.nope_dim;
      for (std::int64_t k = 0; k < d; ++k) out_slice[k] = E::store(y[k]);
    }
  }
}

void run(const RopeJob& job) {
  const RopeArgs& a = *job.args;
  const ConstTensorView& in = job.in;
  const RowShape rows =
      in.rank == 4 ? RowShape{in.shape[0], in.shape[1]} : RowShape{in.shape[0], 1};
  const RowMap map = map_rows(a.positions, rows, table_rows(a.rotation));
  with_dtype(in.dtype, [&](auto dtype) {
    parallel_for(rows.seq * rows.batch, [&](std::int64_t begin, std::int64_t end) {
      run_rows<decltype(dtype)::value>(job, map, begin, end);
    });
  });
  if (a.status) *a.status |= map.status;
}

}  // namespace

void rope(const RopeCall& call) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: a no-op, whatever the other sizes
  run({call.t, call.out, false, Direction::forward, &call.args});
}

void rope_inplace(const RopeInplaceCall& call) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: a no-op, whatever the other sizes
  run({call.t, call.t, true, Direction::forward, &call.args});
}

void rope_backward(const RopeBackwardCall& call) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: a no-op, whatever the other sizes
  run({call.grad_out, call.grad_t, false, Direction::adjoint, &call.args});
}

void rope_backward_inplace(const RopeBackwardInplaceCall& call) {
  validate(call);
  if (writes_nothing(call)) return;  // zero elements: a no-op, whatever the other sizes
  run({call.grad, call.grad, true, Direction::adjoint, &call.args});
}

}  // namespace mlarope::reference
