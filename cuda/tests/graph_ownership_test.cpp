// SPDX-License-Identifier: Apache-2.0
// What a graph owns: its launches only, nothing of the stream that captured it (a THD call
// checks its cu_seqlens inside its kernel, with no scratch word), so a graph replays after that
// stream is gone, on any stream, while other streams (the capturing one included) run their
// own calls.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "mlarope/error.h"
#include "test_support/backend_cases.h"

namespace mlarope::test {
namespace {

class GraphOwnershipTest : public BackendTest {};

RopeCase thd_case() {
  RopeCase c;
  c.rows.layout = TokenLayout::thd;
  c.rows.cu_seqlens = cumulative({6, 10, 4});  // 20 rows
  c.rows.thd_rows = 24;
  c.rows.freq_mode = FreqMode::packed;
  c.name = "graph ownership";
  return c;
}

// A graph of one THD call of `h`, captured on a stream that is destroyed before it returns.
Graph capture_on_a_dying_stream(RopeHarness& h, Stream dying) {
  dying.begin_capture();
  h.run_backend(dying);
  return dying.end_capture();
}

// Replay `graph` on `stream` and compare with the reference: 1 when the result is wrong.
int replay_is_wrong(Graph& graph, Stream& stream, RopeHarness& h) {
  graph.replay(stream);
  stream.synchronize();
  h.download();
  return outputs_match(h.checks()) && h.backend_status() == kStatusOk ? 0 : 1;
}

// NOTE: when THD calls used their stream's scratch word, this replay wrote the freed word of
// the capturing stream (ASan: heap-use-after-free on the host backend).
TEST_P(GraphOwnershipTest, AGraphReplaysAfterItsCapturingStreamIsDestroyed) {
  RopeHarness h(thd_case(), 1);
  h.upload(backend());
  Graph graph = capture_on_a_dying_stream(h, make_stream(1));
  Stream other = make_stream(2);
  h.run_reference();
  EXPECT_EQ(replay_is_wrong(graph, other, h), 0);
}

// Stream A runs eager THD calls with decreasing cu_seqlens (once, they shared a scratch word
// with the graph's calls) while a graph captured on A replays, with valid metadata, on B.
TEST_P(GraphOwnershipTest, ReplayIsRightWhileTheCapturingStreamRunsBadMetadata) {
  RopeHarness good(thd_case(), 2), bad(thd_case(), 3);
  bad.metadata().cu_seqlens().assign({0, 8, 4, 12});
  good.upload(backend());
  bad.upload(backend());
  Stream a = make_stream(1), b = make_stream(2);
  a.begin_capture();
  good.run_backend(a);
  Graph graph = a.end_capture();
  good.run_reference();
  std::atomic<bool> done{false};
  std::thread eager([&] {
    while (!done) {
      bad.run_backend(a);
      a.synchronize();
    }
  });
  int wrong = 0;
  for (int i = 0; i < 300; ++i) wrong += replay_is_wrong(graph, b, good);
  done = true;
  eager.join();
  EXPECT_EQ(wrong, 0) << "replays on stream B that saw stream A's cu_seqlens errors";
}

// Two threads replay one graph on two streams at once (CUDA runs launches of one graph one
// after the other; the host graph does the same).
TEST_P(GraphOwnershipTest, TwoThreadsReplayOneGraphOnTwoStreams) {
  RopeHarness h(thd_case(), 4);
  h.upload(backend());
  Graph graph = capture_on_a_dying_stream(h, make_stream(1));
  h.run_reference();
  auto replays = [&](std::uint64_t seed) {
    Stream s = make_stream(seed);
    for (int i = 0; i < 100; ++i) graph.replay(s);
    s.synchronize();
  };
  std::thread first(replays, 2);
  replays(3);
  first.join();
  h.download();
  EXPECT_TRUE(outputs_match(h.checks()));
  EXPECT_EQ(h.backend_status(), kStatusOk);
}

// CUDA cannot launch a graph into a capture, and the host graph keeps the same rule: replaying
// into a capture is an error.
TEST_P(GraphOwnershipTest, ReplayingIntoACaptureIsAnError) {
  RopeHarness h(thd_case(), 5);
  h.upload(backend());
  Graph inner = capture_on_a_dying_stream(h, make_stream(1));
  Stream s = make_stream(2);
  s.begin_capture();
  EXPECT_THROW(inner.replay(s), Error);
  Graph outer = s.end_capture();
  h.run_reference();
  EXPECT_EQ(replay_is_wrong(inner, s, h), 0);
}

MLAROPE_INSTANTIATE_BACKENDS(GraphOwnershipTest);

}  // namespace
}  // namespace mlarope::test
