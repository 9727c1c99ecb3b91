// SPDX-License-Identifier: Apache-2.0
// A program that uses the installed library, as a downstream project would: one rope call on
// the host backend, checked against values worked out by hand.
#include <mlarope/backend.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  // t: SBHD [S=1, B=1, H=1, nope 1 + emb 2], pairs in the half layout; table row 0 rotates by
  // 90 degrees (cos 0, sin 1): (u, v) -> (-v, u).
  std::vector<float> t = {7.0f, 3.0f, 5.0f}, out(3, 0.0f);
  std::vector<float> cos = {0.0f, 0.0f}, sin = {1.0f, 1.0f};
  mlarope::RopeCall call;
  call.t = mlarope::contiguous_view<const void>(t.data(), mlarope::DType::f32, {1, 1, 1, 3});
  call.out = mlarope::contiguous_view<void>(out.data(), mlarope::DType::f32, {1, 1, 1, 3});
  call.args.nope_dim = 1;
  call.args.emb_dim = 2;
  call.args.rotation.in_layout = call.args.rotation.out_layout = mlarope::PairLayout::half;
  call.args.rotation.cos =
      mlarope::contiguous_view<const void>(cos.data(), mlarope::DType::f32, {1, 2});
  call.args.rotation.sin =
      mlarope::contiguous_view<const void>(sin.data(), mlarope::DType::f32, {1, 2});
  mlarope::Stream stream = mlarope::Stream::host();
  mlarope::rope(call, stream);
  stream.synchronize();
  const bool ok = out[0] == 7.0f && out[1] == -5.0f && out[2] == 3.0f;
  std::printf("consumer: rope gave [%g, %g, %g], expected [7, -5, 3]: %s\n", out[0], out[1], out[2],
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
