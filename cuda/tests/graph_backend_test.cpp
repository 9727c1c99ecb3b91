// SPDX-License-Identifier: Apache-2.0
// Streams and graphs on each backend: a captured graph reads what the buffers hold at replay
// (new cu_seqlens, new inputs), exactly like a CUDA graph (docs/architecture.md rule 6).
#include <gtest/gtest.h>

#include <vector>

#include "mlarope/error.h"
#include "test_support/backend_cases.h"

namespace mlarope::test {
namespace {

class GraphBackendTest : public BackendTest {};

RopeCase thd_case(bool in_place, bool backward) {
  RopeCase c;
  c.rows.layout = TokenLayout::thd;
  c.rows.cu_seqlens = cumulative({6, 10, 4});  // 20 rows
  c.rows.thd_rows = 24;
  c.rows.table_rows = 40;
  c.rows.freq_mode = FreqMode::packed;
  c.heads = 3;
  c.emb_dim = 16;
  c.in_place = in_place;
  c.backward = backward;
  c.name =
      std::string("graph ") + (backward ? "backward" : "forward") + (in_place ? " in place" : "");
  return c;
}

TEST_P(GraphBackendTest, ReplayReadsNewMetadataAndInputs) {
  for (bool in_place : {false, true})
    for (bool backward : {false, true}) {
      RopeHarness h(thd_case(in_place, backward), 1);
      h.upload(backend());
      Stream stream = make_stream();
      stream.begin_capture();
      EXPECT_TRUE(stream.capturing());
      h.run_backend(stream);
      Graph graph = stream.end_capture();
      EXPECT_FALSE(stream.capturing());
      // New values in the same buffers: other sequence lengths, other inputs.
      h.metadata().cu_seqlens().assign(cumulative({2, 14, 8}));
      h.refill_input(99);
      graph.replay(stream);
      stream.synchronize();
      h.download();
      h.run_reference();
      EXPECT_TRUE(outputs_match(h.checks())) << h.description().name;
      EXPECT_EQ(h.backend_status(), kStatusOk);
    }
}

TEST_P(GraphBackendTest, ReplayAfterBadMetadataBecomesGoodRotatesAgain) {
  RopeHarness h(thd_case(false, false), 2);
  h.metadata().cu_seqlens().assign({0, 8, 4, 12});  // decreasing: every row passes through
  h.upload(backend());
  Stream stream = make_stream();
  stream.begin_capture();
  h.run_backend(stream);
  Graph graph = stream.end_capture();
  graph.replay(stream);
  stream.synchronize();
  h.download();
  h.run_reference();
  EXPECT_TRUE(outputs_match(h.checks()));
  EXPECT_EQ(h.backend_status(), kStatusBadCuSeqlens);

  h.metadata().cu_seqlens().assign(cumulative({8, 4, 8}));
  h.preset_status(kStatusOk);
  graph.replay(stream);
  stream.synchronize();
  h.download();
  h.run_reference();
  EXPECT_TRUE(outputs_match(h.checks()));
  EXPECT_EQ(h.backend_status(), kStatusOk);
}

TEST_P(GraphBackendTest, NothingRunsWhileCapturing) {
  RopeHarness h(thd_case(false, false), 3);
  h.upload(backend());
  const std::vector<unsigned char> before = h.output().storage();
  Stream stream = make_stream();
  stream.begin_capture();
  h.run_backend(stream);
  Graph graph = stream.end_capture();
  stream.synchronize();
  h.download();
  EXPECT_EQ(h.output().storage(), before);
}

TEST_P(GraphBackendTest, ReplayingTwiceGivesTheSameResult) {
  RopeHarness h(thd_case(false, false), 4);
  h.upload(backend());
  Stream stream = make_stream();
  stream.begin_capture();
  h.run_backend(stream);
  Graph graph = stream.end_capture();
  graph.replay(stream);
  stream.synchronize();
  h.download();
  const std::vector<unsigned char> first = h.output().storage();
  graph.replay(stream);
  stream.synchronize();
  h.download();
  EXPECT_EQ(h.output().storage(), first);
}

TEST_P(GraphBackendTest, KvSplitCapturesToo) {
  for (bool backward : {false, true}) {
    KvCase c;
    c.rows.layout = TokenLayout::thd;
    c.rows.cu_seqlens = cumulative({4, 4});
    c.backward = backward;
    KvHarness h(c, 5);
    h.upload(backend());
    Stream stream = make_stream();
    stream.begin_capture();
    h.run_backend(stream);
    Graph graph = stream.end_capture();
    graph.replay(stream);
    stream.synchronize();
    h.download();
    h.run_reference();
    EXPECT_TRUE(outputs_match(h.checks()));
  }
}

TEST_P(GraphBackendTest, CaptureMisuseIsAnError) {
  Stream stream = make_stream();
  if (backend() == BackendKind::host) {
    EXPECT_THROW(stream.end_capture(), Error);
    stream.begin_capture();
    EXPECT_THROW(stream.begin_capture(), Error);
    stream.end_capture();
  }
  stream.begin_capture();
  Graph graph = stream.end_capture();
  graph.replay(stream);  // an empty graph
  stream.synchronize();
}

TEST(GraphHostTest, AHostGraphNeedsAHostStream) {
  Stream stream = Stream::host();
  stream.begin_capture();
  Graph graph = stream.end_capture();
  if (!cuda_device_available()) {
    EXPECT_THROW(Stream::cuda(), Error);
    return;
  }
  Stream cuda = Stream::cuda();
  EXPECT_THROW(graph.replay(cuda), Error);
}

TEST(StreamTest, ValidationErrorsLaunchNothing) {
  Stream stream = Stream::host();
  RopeCall call;  // emb_dim 0: invalid
  EXPECT_THROW(rope(call, stream), Error);
}

TEST_P(GraphBackendTest, DeviceBuffersCopyFillAndCheckTheirRange) {
  DeviceBuffer b(backend(), 100);
  EXPECT_EQ(b.bytes(), 100u);
  EXPECT_EQ(b.kind(), backend());
  if (backend() == BackendKind::host) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u);
  }
  b.fill_bytes(7);
  std::vector<unsigned char> host(100, 0);
  b.copy_to_host(host.data(), 100);
  EXPECT_EQ(host, std::vector<unsigned char>(100, 7));
  const unsigned char three[3] = {1, 2, 3};
  b.copy_from_host(three, 3, 97);
  b.copy_to_host(host.data(), 3, 97);
  EXPECT_EQ(host[2], 3);
  EXPECT_THROW(b.copy_from_host(three, 3, 98), Error);
  EXPECT_THROW(b.copy_to_host(host.data(), 101), Error);
  DeviceBuffer moved = std::move(b);
  EXPECT_EQ(moved.bytes(), 100u);
  // NOLINTNEXTLINE(bugprone-use-after-move): the moved-from buffer's state is what is tested
  EXPECT_EQ(b.data(), nullptr);
}

MLAROPE_INSTANTIATE_BACKENDS(GraphBackendTest);

}  // namespace
}  // namespace mlarope::test
