// SPDX-License-Identifier: Apache-2.0
// The CPU reference of docs/semantics.md: every operation, in double precision, rounded once.
// It shares no computation with the kernels (docs/architecture.md rule 1): only the types of
// include/mlarope. All tensors and metadata are host memory.
#pragma once

#include <vector>

#include "mlarope/ops.h"

namespace mlarope::reference {

/// rope out of place. Validates first (throws mlarope::Error; nothing written on error).
void rope(const RopeCall& call);
/// rope in place: writes only the rope slices of call.t.
void rope_inplace(const RopeInplaceCall& call);
/// The adjoint of rope, out of place.
void rope_backward(const RopeBackwardCall& call);
/// The adjoint of rope, in place.
void rope_backward_inplace(const RopeBackwardInplaceCall& call);
/// key = [kv[..., :k_dim], rope(k_pe)], value = kv[..., k_dim:].
void kv_split(const KvSplitCall& call);
/// grad_kv = [grad_key[..., :k_dim], grad_value], grad_k_pe = adjoint of the head sum.
void kv_split_backward(const KvSplitBackwardCall& call);
/// YaRN cos/sin tables (Megatron's YarnRotaryEmbedding), rounded once to the table dtype.
void yarn_tables(const YarnTablesCall& call);

/// Megatron's YaRN inverse frequencies (d/2 of them) in double.
std::vector<double> yarn_inverse_frequencies(const YarnParams& params, std::int64_t emb_dim);
/// Megatron's concentration factor mscale(s, mscale) / mscale(s, mscale_all_dim), or the override.
double yarn_concentration(const YarnParams& params);

}  // namespace mlarope::reference
