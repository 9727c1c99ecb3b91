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
/// Where Work::kPlansAhead, each round's plan is made a phase before its prepare, which then
/// takes the plan and loads what it names (the table's coefficients) with the round's data,
/// leaving the work phase no load to wait for: thread 0 plans round 0 in phase 1 alone, then
/// round r has prepare (phase 2r + 2) and work (phase 2r + 3), in which thread 0 plans round
/// r + 1. The plans of two consecutive rounds are kept (slots by the round's parity).
/// Work provides Args, Shared, kPlansAhead, rounds(a, g) (this block's), row_of(a, g, round),
/// reports(a, g, round) (the round that raises its row's status bits), prepare and work.
template <class Work>
struct RowRounds {
  using Args = typename Work::Args;
  /// Plans kept: the round's, and where Work plans ahead the next round's.
  static constexpr int kPlanSlots = Work::kPlansAhead ? 2 : 1;
  struct Shared {
    typename Work::Shared work;
    DeviceStatus gate[kGateSlots];      ///< check_sequences' bits, one slot per checking thread
    std::int64_t freq_row[kPlanSlots];  ///< the round's row plan (by parity), by thread 0
    std::int32_t rotate[kPlanSlots];
    std::int32_t closed;  ///< the gate's verdict, by thread 0 in round 0
  };

  MLAROPE_HD static std::int64_t phases(const Args& a, const GridCoord& g) {
    const std::int64_t rounds = Work::rounds(a, g);
    if (rounds == 0) return 0;
    return (Work::kPlansAhead ? 2 : 1) + 2 * rounds;
  }

  MLAROPE_HD static void phase(const Args& a, const GridCoord& g, std::int64_t index, Shared& s) {
    if (index == 0) {
      if (a.positions.layout == TokenLayout::thd) check_sequences(a.positions, g, s.gate);
      return;
    }
    if constexpr (Work::kPlansAhead) {
      if (index == 1) {
        if (g.thread == 0) plan_round(a, g, 0, s);
        return;
      }
      const std::int64_t round = (index - 2) / 2;
      if ((index - 2) % 2 == 0) {
        Work::prepare(a, g, round, plan_of(round, s), s.work);
        return;
      }
      Work::work(a, g, round, plan_of(round, s), s.work);
      if (g.thread == 0 && round + 1 < Work::rounds(a, g)) plan_round(a, g, round + 1, s);
    } else {
      const std::int64_t round = (index - 1) / 2;
      if ((index - 1) % 2 == 0) {
        Work::prepare(a, g, round, s.work);
        if (g.thread == 0) plan_round(a, g, round, s);
        return;
      }
      Work::work(a, g, round, plan_of(round, s), s.work);
    }
  }

  /// The plan thread 0 made of the round's row.
  MLAROPE_HD static RowPlan plan_of(std::int64_t round, Shared& s) {
    const std::int64_t slot = round % kPlanSlots;
    return RowPlan{shared_load(&s.freq_row[slot]), shared_load(&s.rotate[slot]) != 0};
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
    shared_store(&s.freq_row[round % kPlanSlots], plan.freq_row);
    shared_store(&s.rotate[round % kPlanSlots], plan.rotate ? 1 : 0);
  }
};

/// What a Work whose rounds are whole rows shares: block b takes rows b, b + blocks, ...
template <class A>
struct RowsOfBlock {
  using Args = A;
  struct Shared {};
  static constexpr bool kPlansAhead = false;

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
