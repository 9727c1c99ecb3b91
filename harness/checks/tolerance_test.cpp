// SPDX-License-Identifier: Apache-2.0
// The tolerance model accepts the reference and rejects small, deliberate errors.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/case_run.h"
#include "checks/tolerance.h"
#include "host_convert.h"
#include "mlarope/op_schema.h"

using namespace mlarope;
using namespace mlarope::harness;

namespace {

npy::Array random_array(DType dtype, std::vector<std::int64_t> shape, std::mt19937& rng) {
  npy::Array a = npy::make(storage_dtype(dtype), std::move(shape));
  std::uniform_real_distribution<double> dist(-2.0, 2.0);
  for (std::int64_t i = 0; i < a.size(); ++i) store_rounded(a.bytes.data(), dtype, i, dist(rng));
  return a;
}

// An SBHD case of `op` with S=5, B=2, H=3, nope/k = 4, emb 8, v 3.
Case small_case(Op op, DType dtype) {
  std::mt19937 rng(11);
  Case c;
  CaseConfig& k = c.config;
  k.op = op;
  k.dtype = dtype;
  k.nope_dim = 4, k.k_dim = 4, k.v_dim = 3, k.emb_dim = 8;
  c.arrays["cos"] = random_array(DType::f32, {5, 8}, rng);
  c.arrays["sin"] = random_array(DType::f32, {5, 8}, rng);
  if (op == Op::rope) c.arrays["t"] = random_array(dtype, {5, 2, 3, 12}, rng);
  if (op == Op::rope_backward) c.arrays["grad_out"] = random_array(dtype, {5, 2, 3, 12}, rng);
  if (op == Op::kv_split) {
    c.arrays["kv"] = random_array(dtype, {5, 2, 3, 7}, rng);
    c.arrays["k_pe"] = random_array(dtype, {5, 2, 1, 8}, rng);
  }
  if (op == Op::kv_split_backward) {
    c.arrays["grad_key"] = random_array(dtype, {5, 2, 3, 12}, rng);
    c.arrays["grad_value"] = random_array(dtype, {5, 2, 3, 3}, rng);
  }
  return c;
}

// Move element i of a 16-bit (bf16) or 32-bit array by `steps` units in the last place.
void nudge(npy::Array& a, std::int64_t i, int steps) {
  if (a.dtype == npy::Dtype::f32) {
    std::uint32_t bits;
    std::memcpy(&bits, a.data<float>() + i, 4);
    bits += steps;
    std::memcpy(a.data<float>() + i, &bits, 4);
  } else {
    a.data<std::uint16_t>()[i] += steps;
  }
}

class Tolerance : public testing::TestWithParam<Op> {};

TEST_P(Tolerance, AcceptsTheReference) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const Case c = small_case(GetParam(), dtype);
    const CaseOutputs ref = run_case(c, reference_backend());
    const ToleranceResult r = check_tolerance(c, ref.arrays, ref.arrays);
    EXPECT_TRUE(r.ok()) << r.first_violation;
    EXPECT_GT(r.checked, 0);
  }
}

TEST_P(Tolerance, RejectsTwoUlpsOnARotatedElementAndOneOnACopiedOne) {
  const Case c = small_case(GetParam(), DType::bf16);
  const CaseOutputs ref = run_case(c, reference_backend());
  const std::vector<std::string> outputs = schema_of(GetParam()).output_names();
  const std::string& first = outputs.front();
  // The last element of out, grad_t, key and grad_k_pe is a rotated one.
  const std::string rotated(GetParam() == Op::kv_split ? "key" : outputs.back());
  // Element 0 of out/grad_t/key/grad_kv is a copied (nope, k or grad_key) element.
  CaseOutputs copied = ref;
  nudge(copied.arrays[first], 0, 1);
  EXPECT_FALSE(check_tolerance(c, copied.arrays, ref.arrays).ok()) << "copied element";
  CaseOutputs off = ref;
  nudge(off.arrays[rotated], off.arrays[rotated].size() - 1, 2);
  EXPECT_FALSE(check_tolerance(c, off.arrays, ref.arrays).ok()) << "rotated element";
}

INSTANTIATE_TEST_SUITE_P(Ops, Tolerance,
                         testing::Values(Op::rope, Op::rope_backward, Op::kv_split,
                                         Op::kv_split_backward),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
