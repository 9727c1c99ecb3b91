// SPDX-License-Identifier: Apache-2.0
// Megatron-LM's flags, mapped onto the layout triple, and its freq_mode inference rules.
#pragma once

#include <cstdint>

#include "mlarope/types.h"

namespace mlarope {

/// The layout triple of docs/semantics.md §3.
struct LayoutTriple {
  PairLayout in_layout = PairLayout::interleaved;
  PairLayout out_layout = PairLayout::half;
  PairLayout table_layout = PairLayout::half;
};

/// The flags a Megatron caller knows (TransformerConfig / MLATransformerConfig names).
struct MegatronFlags {
  bool multi_latent_attention = true;           ///< the MLA path (x de-interleaved before rotating)
  bool mla_rotary_interleaved = true;           ///< MLA: the rope slice is stored interleaved
  bool mla_output_remove_interleaving = false;  ///< MLA (DSv4): write the result interleaved
  bool rotary_interleaved = false;              ///< non-MLA: GPT-J (true) or NeoX (false)
};

/// The layout triple that Megatron's unfused path applies for `flags` (docs/semantics.md §3 table).
/// Throws mlarope::Error for combinations Megatron does not define, rather than dropping one.
LayoutTriple layouts_from_megatron(const MegatronFlags& flags);

/// Megatron's graph-safe rule: packed when the table has more rows than `max_seqlen`.
FreqMode infer_freq_mode(std::int64_t table_rows, std::int64_t max_seqlen);

/// Megatron's legacy rule (callers without max_seqlen): packed when the table has exactly
/// `total_tokens` = cu_seqlens[-1] rows. NOTE: needs a host copy of device data, so it is
/// not graph safe; the primitives never do this themselves.
FreqMode infer_freq_mode_legacy(std::int64_t table_rows, std::int64_t total_tokens);

}  // namespace mlarope
