// SPDX-License-Identifier: Apache-2.0
// The two shapes of the rope and kv_split kernels: phased bodies (kernels/portability.h) that
// work their block's share of a call one round at a time, behind the call-level cu_seqlens
// gate of a THD call. RowRounds: a round is one row, planned during the round's first phase.
// PlannedRounds (the staged in-place body): a round is some heads of one row or several whole
// rows, planned a phase ahead. One launch per call: the gate is checked by every block
// (freq_row.h), and each row is planned once, by one thread (one cu_seqlens search per row,
// not one per thread).
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
    GateSlots gate;         ///< check_sequences' bits, the ends of cu_seqlens, its copy
    std::int64_t freq_row;  ///< the round's row plan, made by thread 0
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
    const RowPlan plan =
        shared_load(&s.closed) != 0
            ? RowPlan{}
            : plan_row(p, Work::row_of(a, g, round), Work::reports(a, g, round), &s.gate.cu);
    shared_store(&s.freq_row, plan.freq_row);
    shared_store(&s.rotate, plan.rotate ? 1 : 0);
  }
};

/// The rows of one round of a PlannedRounds work: `count` consecutive rows from `first`.
/// `reports`: the round raises its rows' status bits (a row split over several rounds is
/// reported by its first).
struct RoundRows {
  std::int64_t first = 0;
  std::int64_t count = 0;
  bool reports = true;
};

/// The plans of the rows of one round, in a block's shared memory: row k by thread k.
template <int kRows>
struct RoundPlanSlots {
  std::int64_t freq_row[kRows];
  std::int32_t rotate[kRows];
};

/// What a PlannedRounds work reads its round's plans through: plans[k], the plan of row k.
template <int kRows>
struct RoundPlans {
  RoundPlanSlots<kRows>* slots;
  MLAROPE_HD RowPlan operator[](std::int64_t k) const {
    return RowPlan{shared_load(&slots->freq_row[k]), shared_load(&slots->rotate[k]) != 0};
  }
};

/// RowRounds' other shape, for a Work whose prepare loads what the plans name (the table's
/// coefficients) with the round's data, so that the work phase has no load to wait for; a
/// round may hold several rows. Phases: 0 checks the sequences (THD); 1: thread 0 combines
/// the gate's verdict; 2: threads 0 .. count - 1 plan round 0's rows; then round r has
///   prepare (phase 2r + 3): Work::prepare with the round's plans;
///   work (phase 2r + 4): Work::work with them, while threads 0 .. plan round r + 1's rows.
/// The plans of two consecutive rounds are kept (slots by the round's parity).
/// Work provides Args, Shared, kMaxRoundRows, rounds(a, g) (this block's), round_rows(a, g,
/// round) (at most kMaxRoundRows rows), prepare and work.
template <class Work>
struct PlannedRounds {
  using Args = typename Work::Args;
  using Plans = RoundPlans<Work::kMaxRoundRows>;
  struct Shared {
    typename Work::Shared work;
    GateSlots gate;  ///< check_sequences' bits, the ends of cu_seqlens, its copy
    RoundPlanSlots<Work::kMaxRoundRows> plans[2];  ///< of rounds r and r + 1, by parity
    std::int32_t closed;                           ///< the gate's verdict, by thread 0
  };

  MLAROPE_HD static std::int64_t phases(const Args& a, const GridCoord& g) {
    const std::int64_t rounds = Work::rounds(a, g);
    return rounds > 0 ? 3 + 2 * rounds : 0;
  }

  MLAROPE_HD static void phase(const Args& a, const GridCoord& g, std::int64_t index, Shared& s) {
    const PositionArgs& p = a.positions;
    if (index == 0) {
      if (p.layout == TokenLayout::thd) check_sequences(p, g, s.gate);
    } else if (index == 1) {
      if (g.thread == 0)
        shared_store(&s.closed, p.layout == TokenLayout::thd && gate_closed(p, g, s.gate) ? 1 : 0);
    } else if (index == 2) {
      plan_rows(a, g, 0, s);
    } else {
      const std::int64_t round = (index - 3) / 2;
      const Plans plans{&s.plans[round % 2]};
      if ((index - 3) % 2 == 0) {
        Work::prepare(a, g, round, plans, s.work);
        return;
      }
      Work::work(a, g, round, plans, s.work);
      if (round + 1 < Work::rounds(a, g)) plan_rows(a, g, round + 1, s);
    }
  }

  /// Thread k: the plan of the round's row k (pass through everywhere when the gate is closed).
  MLAROPE_HD static void plan_rows(const Args& a, const GridCoord& g, std::int64_t round,
                                   Shared& s) {
    const RoundRows rows = Work::round_rows(a, g, round);
    RoundPlanSlots<Work::kMaxRoundRows>& slots = s.plans[round % 2];
    for (std::int64_t k = g.thread; k < rows.count; k += g.num_threads) {
      const RowPlan plan = shared_load(&s.closed) != 0
                               ? RowPlan{}
                               : plan_row(a.positions, rows.first + k, rows.reports, &s.gate.cu);
      shared_store(&slots.freq_row[k], plan.freq_row);
      shared_store(&slots.rotate[k], plan.rotate ? 1 : 0);
    }
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
