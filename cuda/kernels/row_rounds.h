// SPDX-License-Identifier: Apache-2.0
// The one shape of every rope and kv_split kernel: a phased body (kernels/portability.h) that
// works its block's share of a call one round at a time, a round being one row (or, for the
// staged body, some heads of one row), behind the call-level cu_seqlens gate of a THD call.
// One launch per call: the gate is checked by every block (freq_row.h), and each round's row
// is planned once, by one thread (one cu_seqlens search per row, not one per thread).
#pragma once

#include <cstdint>

#include "kernels/freq_row.h"
#include "kernels/kernel_args.h"
#include "kernels/portability.h"

namespace mlarope::kernels {

/// A block's phases: phase 0 checks the sequences (THD); then each round r has two:
///   prepare (phase 2r + 1): Work::prepare, which must not depend on the row's plan (loads
///     into shared memory, copies), while thread 0 plans the row (in round 0 it first
///     combines the gate's verdict);
///   work (phase 2r + 2): Work::work with the plan.
/// Work provides Args, Shared, rounds(a, g) (this block's), row_of(a, g, round),
/// reports(a, g, round) (the round that raises its row's status bits), prepare and work.
template <class Work>
struct RowRounds {
  using Args = typename Work::Args;
  struct Shared {
    typename Work::Shared work;
    DeviceStatus gate[kGateSlots];  ///< check_sequences' bits, one slot per checking thread
    std::int64_t freq_row;          ///< the round's row plan, made by thread 0
    std::int32_t rotate;
    std::int32_t closed;  ///< the gate's verdict, by thread 0 in round 0
  };

  MLAROPE_HD static std::int64_t phases(const Args& a, const GridCoord& g) {
    const std::int64_t rounds = Work::rounds(a, g);
    return rounds > 0 ? 1 + 2 * rounds : 0;
  }

  MLAROPE_HD static void phase(const Args& a, const GridCoord& g, std::int64_t index, Shared& s) {
    if (index == 0) {
      if (a.positions.layout == TokenLayout::thd) check_sequences(a.positions, g, s.gate);
      return;
    }
    const std::int64_t round = (index - 1) / 2;
    if ((index - 1) % 2 == 0) {
      Work::prepare(a, g, round, s.work);
      if (g.thread == 0) plan_round(a, g, round, s);
      return;
    }
    Work::work(a, g, round, RowPlan{shared_load(&s.freq_row), shared_load(&s.rotate) != 0}, s.work);
  }

  /// Thread 0: the plan of the round's row (pass through everywhere when the gate is closed).
  MLAROPE_HD static void plan_round(const Args& a, const GridCoord& g, std::int64_t round,
                                    Shared& s) {
    const PositionArgs& p = a.positions;
    if (round == 0)
      shared_store(&s.closed, p.layout == TokenLayout::thd && gate_closed(p, g, s.gate) ? 1 : 0);
    const RowPlan plan = shared_load(&s.closed) != 0
                             ? RowPlan{}
                             : plan_row(p, Work::row_of(a, g, round), Work::reports(a, g, round));
    shared_store(&s.freq_row, plan.freq_row);
    shared_store(&s.rotate, plan.rotate ? 1 : 0);
  }
};

/// What a Work whose rounds are whole rows shares: block b takes rows b, b + blocks, ...
template <class A>
struct RowsOfBlock {
  using Args = A;
  struct Shared {};

  MLAROPE_HD static std::int64_t rounds(const Args& a, const GridCoord& g) {
    const std::int64_t rows = row_count(a.positions);
    return g.block < rows ? (rows - 1 - g.block) / g.num_blocks + 1 : 0;
  }
  MLAROPE_HD static std::int64_t row_of(const Args&, const GridCoord& g, std::int64_t round) {
    return g.block + round * g.num_blocks;
  }
  MLAROPE_HD static bool reports(const Args&, const GridCoord&, std::int64_t) { return true; }
  MLAROPE_HD static void prepare(const Args&, const GridCoord&, std::int64_t, Shared&) {}
};

}  // namespace mlarope::kernels
