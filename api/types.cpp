// SPDX-License-Identifier: Apache-2.0
// Spellings of the enums of docs/semantics.md, the status word, and Megatron's flag mapping.
#include "mlarope/types.h"

#include <string>

#include "mlarope/error.h"
#include "mlarope/megatron.h"
#include "mlarope/op_schema.h"
#include "mlarope/status.h"

namespace mlarope {

std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

std::string_view to_string(IndexType t) {
  switch (t) {
    case IndexType::i32: return "i32";
    case IndexType::i64: return "i64";
  }
  return "unknown";
}
std::string_view to_string(PairLayout l) { return l == PairLayout::half ? "half" : "interleaved"; }
std::string_view to_string(TokenLayout l) { return l == TokenLayout::sbhd ? "sbhd" : "thd"; }
std::string_view to_string(FreqMode m) {
  return m == FreqMode::per_sequence ? "per_sequence" : "packed";
}
std::string_view to_string(Op op) { return schema_of(op).name; }

std::string shape_string(const std::int64_t* shape, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
[[noreturn]] void bad_value(std::string_view what, std::string_view value,
                            std::string_view expected) {
  throw Error(std::string(what) + " = '" + std::string(value) + "': expected " +
              std::string(expected));
}
}  // namespace

DType parse_dtype(std::string_view s, std::string_view what) {
  if (s == "f32") return DType::f32;
  if (s == "f16") return DType::f16;
  if (s == "bf16") return DType::bf16;
  bad_value(what, s, "f32, f16 or bf16");
}

PairLayout parse_pair_layout(std::string_view s, std::string_view what) {
  if (s == "half") return PairLayout::half;
  if (s == "interleaved") return PairLayout::interleaved;
  bad_value(what, s, "half or interleaved");
}

TokenLayout parse_token_layout(std::string_view s, std::string_view what) {
  if (s == "sbhd") return TokenLayout::sbhd;
  if (s == "thd") return TokenLayout::thd;
  bad_value(what, s, "sbhd or thd");
}

FreqMode parse_freq_mode(std::string_view s, std::string_view what) {
  if (s == "per_sequence") return FreqMode::per_sequence;
  if (s == "packed") return FreqMode::packed;
  bad_value(what, s, "per_sequence or packed");
}

Op parse_op(std::string_view s, std::string_view what) {
  for (const OpSchema& schema : op_schemas())
    if (schema.name == s) return schema.op;
  bad_value(what, s, op_names());
}

std::string describe_status(DeviceStatus status) {
  if (status == kStatusOk) return "ok";
  std::string text;
  auto add = [&](DeviceStatus bit, const char* name) {
    if (!(status & bit)) return;
    if (!text.empty()) text += ", ";
    text += name;
    status &= ~bit;
  };
  add(kStatusBadCuSeqlens, "bad cu_seqlens (decreasing, or past the rows)");
  add(kStatusBadSeqLength, "sequence length not divisible by 2 * cp_size");
  add(kStatusRowOutsideTable, "freq_row outside the table");
  if (status)
    text += (text.empty() ? "" : ", ") + std::string("unknown bits ") + std::to_string(status);
  return text;
}

LayoutTriple layouts_from_megatron(const MegatronFlags& f) {
  if (f.multi_latent_attention && f.mla_rotary_interleaved) {
    if (f.rotary_interleaved)
      throw Error("rotary_interleaved = true with mla_rotary_interleaved = true: Megatron "
                  "defines no such mode (use one of them)");
    const PairLayout out =
        f.mla_output_remove_interleaving ? PairLayout::interleaved : PairLayout::half;
    return {PairLayout::interleaved, out, PairLayout::half};
  }
  if (f.mla_output_remove_interleaving)
    throw Error("mla_output_remove_interleaving = true needs multi_latent_attention and "
                "mla_rotary_interleaved = true");
  if (f.rotary_interleaved)  // GPT-J
    return {PairLayout::interleaved, PairLayout::interleaved, PairLayout::interleaved};
  return {PairLayout::half, PairLayout::half, PairLayout::half};  // NeoX
}

FreqMode infer_freq_mode(std::int64_t table_rows, std::int64_t max_seqlen) {
  return table_rows > max_seqlen ? FreqMode::packed : FreqMode::per_sequence;
}

FreqMode infer_freq_mode_legacy(std::int64_t table_rows, std::int64_t total_tokens) {
  return table_rows == total_tokens ? FreqMode::packed : FreqMode::per_sequence;
}

}  // namespace mlarope
