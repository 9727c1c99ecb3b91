// SPDX-License-Identifier: Apache-2.0
// docs/architecture.md rule 3 in action: a chunked body run in place with a layout change (which
// the dispatcher never picks: it depends on thread order) gives seed-dependent results on the host
// executor, while the bodies the dispatcher does pick (staged, whole slice) do not. The launches
// run under the GPU model: the device code paths, barriers as phases.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "host/gpu_model.h"
#include "host/host_kernels.h"
#include "launch/launch_builder.h"

namespace mlarope::host {
namespace {

struct InPlaceCase {
  std::vector<float> t = std::vector<float>(std::size_t{2} * 1 * 4 * 64);
  std::vector<float> cos = std::vector<float>(std::size_t{8} * 64),
                     sin = std::vector<float>(std::size_t{8} * 64);

  InPlaceCase() {
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(i % 97) * 0.01f - 0.4f;
    for (std::size_t i = 0; i < cos.size(); ++i) {
      cos[i] = 0.8f - 0.001f * static_cast<float>(i % 13);
      sin[i] = 0.6f + 0.001f * static_cast<float>(i % 7);
    }
  }

  detail::RopeLaunch launch() {
    RopeArgs a;
    a.emb_dim = 64;
    a.rotation.in_layout = PairLayout::interleaved;  // MLA: a layout change
    a.rotation.out_layout = PairLayout::half;
    a.rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {8, 64});
    a.rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {8, 64});
    const TensorView v = contiguous_view<void>(t.data(), DType::f32, {2, 1, 4, 64});
    detail::LaunchProfile profile;
    profile.max_threads = 64;
    profile.thread_granularity = 1;
    return detail::make_rope_launch(v, v, a, {true, false}, profile);
  }
};

std::vector<float> run_with(detail::RopeVariant variant, std::uint64_t seed) {
  InPlaceCase c;
  detail::RopeLaunch l = c.launch();
  l.variant = variant;
  detail::Footprint f;
  f.add("t", contiguous_view<void>(c.t.data(), DType::f32, {2, 1, 4, 64}),
        detail::RegionUse::read_write);
  f.add("cos", contiguous_view<void>(c.cos.data(), DType::f32, {8, 64}), detail::RegionUse::read);
  f.add("sin", contiguous_view<void>(c.sin.data(), DType::f32, {8, 64}), detail::RegionUse::read);
  kernels::gpu_model::Recorder recorder("rope", f);
  kernels::gpu_model::run_recorded(recorder, HostExecutor(seed, 1),
                                   [&](const HostExecutor& e) { kernel_table().rope(e, l); });
  return c.t;
}

TEST(OrderIndependence, ChunkedInPlaceWithALayoutChangeDependsOnThreadOrder) {
  const std::vector<float> a = run_with(detail::RopeVariant::chunked_scalar, 1);
  bool differs = false;
  for (std::uint64_t seed = 2; seed < 10 && !differs; ++seed)
    differs = run_with(detail::RopeVariant::chunked_scalar, seed) != a;
  EXPECT_TRUE(differs) << "the executor should expose the thread-order dependence";
}

TEST(OrderIndependence, WholeSliceBodiesDoNot) {
  for (detail::RopeVariant v :
       {detail::RopeVariant::staged_vector, detail::RopeVariant::whole_slice_scalar}) {
    const std::vector<float> a = run_with(v, 1);
    for (std::uint64_t seed = 2; seed < 10; ++seed) EXPECT_EQ(run_with(v, seed), a);
  }
  EXPECT_EQ(run_with(detail::RopeVariant::staged_vector, 1),
            run_with(detail::RopeVariant::whole_slice_scalar, 1));
}

}  // namespace
}  // namespace mlarope::host
