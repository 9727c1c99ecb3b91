// SPDX-License-Identifier: Apache-2.0
// A small description of a case (shape, flags, metadata, distributions, a data seed) that
// RapidCheck generates and shrinks, and `materialize`, which fills the arrays of a case file
// (docs/semantics.md §7) deterministically from it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "checks/checks.h"
#include "io/case_file.h"

namespace mlarope::props {

/// Where the cos/sin tables come from.
enum class TableKind : std::uint8_t {
  unit,    ///< YaRN tables (reference::yarn_tables), concentration 1: c^2 + s^2 = 1
  mscale,  ///< YaRN tables with concentration `mscale`: c^2 + s^2 = mscale^2
  random,  ///< arbitrary values in [-2, 2]: not a rotation
};

/// How activation values are drawn.
enum class Values : std::uint8_t {
  normal,        ///< roughly N(0, 1)
  large,         ///< magnitudes near the top of the dtype's range (no overflow in any op)
  tiny,          ///< magnitudes around the smallest normal, subnormals included
  signed_zeros,  ///< half of the elements +0 or -0
  cancelling,    ///< pairs chosen so that u * c and v * s nearly cancel
  /// Tables cos 1, sin +-2^-p (p: the output's significand bits) and activations of one binade
  /// 2^e, half of them exactly +-2^e: u + v * 2^-p is an exact f32 number on a rounding tie of
  /// the output (ties to even decide it); e near the top of the output's range gives results
  /// near and past its largest finite value (65520 and up round to inf in f16; there one
  /// activation in sixteen is +-inf), e at or below its smallest normal gives subnormal
  /// results. Round trip and adjoint skip where there are infinities (not applicable).
  ties,
  /// Normal values, with NaNs of random payloads (quiet and signalling, either sign) in the
  /// parts that are copied (nope, kv's k and v, grad_value, grad_key's k part): copies keep
  /// them bit for bit (docs/semantics.md §5). Round trip and adjoint skip (not applicable).
  nan_payloads,
};

/// Device metadata made invalid on purpose (docs/semantics.md §5: those rows pass through).
enum class MetadataFault : std::uint8_t {
  none,
  bad_length,         ///< THD, cp_size > 1: a length not divisible by 2 * cp_size
  decreasing,         ///< THD: cu_seqlens decreases once
  too_long,           ///< THD: the local lengths add up to more than T
  row_outside_table,  ///< a position id or an offset points past the table
};

/// The description of one case.
struct CaseSpec {
  Op op = Op::rope;
  TokenLayout layout = TokenLayout::sbhd;
  DType dtype = DType::f32;
  DType table_dtype = DType::f32;
  std::int64_t heads = 1;
  std::int64_t nope_dim = 0, emb_dim = 2;  ///< rope ops
  std::int64_t k_dim = 0, v_dim = 0;       ///< kv ops
  std::int64_t seq = 1, batch = 1;         ///< SBHD: local S, and B
  std::vector<std::int64_t> seq_lengths;   ///< THD: global (pre-CP) length of each sequence
  std::int64_t padding_rows = 0;           ///< THD: rows after the last sequence
  std::int64_t cp_size = 1, cp_rank = 0;
  FreqMode freq_mode = FreqMode::per_sequence;  ///< THD
  bool position_ids = false;                    ///< THD: explicit table row per row
  IndexType position_ids_type = IndexType::i32;
  bool seq_offsets = false;
  bool max_seqlen_known = true;  ///< THD: pass max_seqlen (the longest global sequence)
  MetadataFault fault = MetadataFault::none;
  std::int64_t extra_table_rows = 0;  ///< table rows beyond the ones the case uses
  bool table_rank4 = false;           ///< tables as [R, 1, 1, emb_dim]
  PairLayout in_layout = PairLayout::interleaved;
  PairLayout out_layout = PairLayout::half;
  PairLayout table_layout = PairLayout::half;
  bool inverse = false;
  bool in_place = false;  ///< rope ops
  TableKind table_kind = TableKind::unit;
  double mscale = 1.0;            ///< TableKind::mscale
  double yarn_scaling = 1.0;      ///< YaRN scaling factor (1: plain RoPE)
  std::int64_t table_offset = 0;  ///< position of table row 0
  Values values = Values::normal;
  harness::LayoutPlan plan;  ///< gaps, guards, broadcast heads of the check runner
  std::uint64_t data_seed = 0;
};

/// Spellings of the enums ("unit", "cancelling", "row_outside_table", ...).
std::string_view to_string(TableKind kind);
std::string_view to_string(Values values);
std::string_view to_string(MetadataFault fault);

/// Local rows of the case: S * B (SBHD) or T, padding included (THD).
std::int64_t row_count(const CaseSpec& spec);
/// Rows of the cos/sin tables the case materializes.
std::int64_t table_rows(const CaseSpec& spec);
/// The global longest sequence: S * cp_size (SBHD) or max(seq_lengths) (THD).
std::int64_t longest_sequence(const CaseSpec& spec);

/// The case a spec describes: config and input arrays, filled from the data seed.
harness::Case materialize(const CaseSpec& spec);
/// How the checks should run this case: its layout plan, a seed from the data seed.
harness::CheckOptions check_options(const CaseSpec& spec);

/// One line: "rope thd bf16 H=3 nope=4 emb=6 seqs=[4,0,8]+2 cp=1/2 ...".
std::string describe(const CaseSpec& spec);
/// RapidCheck's printer: the spec, one field group per line.
void showValue(const CaseSpec& spec, std::ostream& os);

/// A spec as JSON (spec.json of a failure directory), and back; throws mlarope::Error.
nlohmann::json to_json(const CaseSpec& spec);
CaseSpec spec_from_json(const nlohmann::json& json);

}  // namespace mlarope::props
