// SPDX-License-Identifier: Apache-2.0
// The yarn_tables op as a fuzz and property case: random YaRN parameters, table shape, dtype,
// layout and memory layout, and the checks of one call against the reference's exact values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "backends/case_run.h"
#include "checks/checks.h"
#include "mlarope/ops.h"

namespace mlarope::harness {

/// One yarn_tables call: what it asks for and how its tables lie in memory.
struct YarnCase {
  YarnParams params;
  std::int64_t rows = 1, emb_dim = 2, offset = 0;
  PairLayout table_layout = PairLayout::half;
  DType dtype = DType::f32;
  bool rank4 = false;        ///< tables as [R, 1, 1, emb_dim]
  std::int64_t row_gap = 0;  ///< elements after each row (row stride = emb_dim + gap)
  bool misalign = false;     ///< tables start one element past a 64-byte boundary
};

/// One line: "yarn_tables bf16 R=17 emb=64 half offset=4095 s=40 base=10000 ...".
std::string describe(const YarnCase& c);
/// A YarnCase as JSON (yarn_case.json of a failure directory), and back; throws mlarope::Error.
nlohmann::json to_json(const YarnCase& c);
YarnCase yarn_case_from_json(const nlohmann::json& json);

/// The tolerance of one table element: the reference's double value x = cos or sin of
/// (offset + row) * inv_freq times the concentration m may be off, in any double computation
/// of the same formula, by at most
///   delta = 16 * eps_f64 * |m| * (|angle| + 1)
/// (inv_freq from pow and a division: a few ulp of the angle; cos/sin: their own ulps and the
/// angle's error, which is absolute; the factor m: a few ulp), and the backend rounds its double
/// once to the table dtype. So the element must lie between round(x - delta) and
/// round(x + delta): exact but for ties within delta of a rounding boundary.
double yarn_element_delta(double angle, double concentration);

/// Checks of one call on `backend`: value (every element within the bracket above; the worst
/// |got - x| / (delta + half an ulp) is the tolerance fraction), coverage (every element
/// written: the buffers start as 0xFF bytes, NaN in every dtype), bounds (guard bytes and row
/// gaps unchanged) and determinism (a second call over other poison, bitwise equal).
/// A backend without yarn_tables declines (CheckReport::unsupported). Throws mlarope::Error
/// when the reference rejects the call (an invalid case).
CheckReport check_yarn(const YarnCase& c, const Backend& backend);

}  // namespace mlarope::harness
