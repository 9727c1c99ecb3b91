// SPDX-License-Identifier: Apache-2.0
// RapidCheck generators of CaseSpec (shrinking on the description, not on tensor data), and a
// plain seeded generator for the fuzzer.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "checks/yarn_check.h"
#include "fuzz/case_spec.h"
#include "mlarope/megatron.h"
#include "mlarope/op_schema.h"

namespace mlarope::props {

/// The size at which the generators give their intended distributions (RapidCheck's sizes
/// run 0..100); larger sizes allow more rows per case, not larger dims.
inline constexpr int kDefaultSize = 100;

/// What the generated cases may contain.
struct GenOptions {
  std::vector<Op> ops = all_ops();
  std::vector<TokenLayout> layouts = {TokenLayout::sbhd, TokenLayout::thd};
  std::vector<std::int64_t> cp_sizes = {1, 2, 3, 4, 8};  ///< 1 is drawn half of the time
  std::vector<TableKind> table_kinds = {TableKind::unit, TableKind::mscale, TableKind::random};
  std::vector<DType> dtypes = {DType::f32, DType::bf16, DType::f16};  ///< activations
  std::vector<DType> table_dtypes = {DType::f32, DType::bf16,
                                     DType::f16};                 ///< f32 60% when all three
  std::optional<LayoutTriple> triple;                             ///< fixed layouts; any when empty
  std::optional<PairLayout> in_layout, out_layout, table_layout;  ///< each fixed on its own
  bool in_place = true;                                           ///< rope ops may be in place
  bool position_ids = true;                                       ///< THD may have position ids
  bool seq_offsets = true;                                        ///< may have seq_offsets
  bool packed = true;  ///< THD may use the packed frequency mode
  /// emb_dim / 2, k_dim and v_dim rounded down to powers of two (0 stays 0): the extents a
  /// Triton kernel's tl.arange can take.
  bool power_of_two_dims = false;
  bool faults = true;          ///< may have invalid device metadata
  bool batch_one = false;      ///< SBHD with B = 1 only
  bool broadcast = true;       ///< the layout plan may broadcast heads
  std::int64_t min_heads = 0;  ///< at least this many heads (the element budget still holds)
  /// Percent of the draws shaped for the kernels' vector paths: dims rounded down to multiples
  /// of 8 (half of them to powers of two), gaps too, no misaligned start, one of Megatron's
  /// four layout modes, rope ops in place two times in three with MLA's layout change.
  /// Elsewhere those conditions meet rarely: with none shaped, 3,000 cases gave the vector
  /// paths 1 to 37 launches each against the general path's 619.
  int vector_path_share = 33;
};

/// Cases of `options`: heads 1..128 (1, 3, 5, 7, 12, 20 and 0 often), nope 0..256, emb even
/// 2..256 (64, 2, 6, 10, 50 often), k/v 0..256, SBHD or THD with zero-length, single and many
/// short sequences and padding rows, CP sizes and ranks, layouts, tables, value distributions,
/// gaps; rows limited by an element budget that grows with the size; a share of the draws
/// shaped for the vector paths (GenOptions::vector_path_share).
rc::Gen<CaseSpec> case_spec(const GenOptions& options = {});

/// One spec drawn from `seed` at `size`, outside RapidCheck (the fuzzer's generator).
CaseSpec random_spec(std::uint64_t seed, int size);
/// The same, restricted by `options`.
CaseSpec random_spec(std::uint64_t seed, int size, const GenOptions& options);

/// yarn_tables cases: YaRN parameters (Megatron's defaults and DeepSeek-V3's often, else
/// log-uniform over wide ranges; an explicit concentration 1 in 10), emb_dim even 2..512,
/// 0..64 rows (more at larger sizes), positions from 0 to past 2^24, both table layouts,
/// every dtype, [R, 1, 1, emb] tables, row gaps and misaligned starts.
rc::Gen<harness::YarnCase> yarn_case();
/// One drawn from `seed` at `size`, outside RapidCheck (the fuzzer's generator).
harness::YarnCase random_yarn_case(std::uint64_t seed, int size);

}  // namespace mlarope::props

namespace mlarope::harness {
/// RapidCheck's printer of a YarnCase: its description.
void showValue(const YarnCase& c, std::ostream& os);
}  // namespace mlarope::harness
