// SPDX-License-Identifier: Apache-2.0
// The benchmark gate (reports/compare.h) catches a kernel slowed by 15% and passes an unchanged
// one. Host rope out of place, bf16, SBHD S=1024 B=1 H=32 nope=128 emb=64 (MLA layouts, f32
// tables), timed in this process through the faulty library (mlarope_host_faulty) with no
// fault and with KernelFault::slow (the same result, 15% longer: the stream waits 15% of each
// launch's time after it).
//
// Three series, the same call through the same code: "base", "again" (base once more: the
// unchanged tree) and "slowed". Each round measures one sample of each, in a random order,
// each sample kCalls calls after the caches were flushed; 9 rounds give 9 repetitions a side,
// as ci/bench-compare.sh measures a change against its base. A sample is a floor fraction: the
// calls' bandwidth (bytes / seconds) over that of a copy of t timed just before each call, as
// each benchmark process divides by the copy bandwidth it measured itself. On a shared machine
// the three series slow down and speed up together (other tenants; here by up to 30% over a
// few rounds); a copy beside each call cancels part of that drift, where one bandwidth for the
// run left it all in the samples (docs/benchmarks.md has the figures). The gate compares again
// with base (must pass) and slowed with base (must be SLOWER); a key found SLOWER is measured
// again and must repeat, as in the gate.
//
// One trial here, with up to kAttempts measurements (a burst of load on a shared machine gets
// another; a broken gate cannot hide behind them: one that never says SLOWER never fails the
// slowed kernel, one that always does never passes the unchanged one). With
// MLAROPE_GATE_TRIALS=N it runs N trials of one attempt each and prints the detection and
// false-alarm rates: the unchanged kernel must pass in at least 9 in 10 of all trials, the
// slowed kernel be caught in 9 in 10 of those that could test the gate. A measurement cannot
// where a series' samples spread over more than the gate's minimum effect (something else
// loading the cores) or the slowed kernel measured less than x1.12 slower. Where no
// attempt could, the test skips, saying so; where one could and none succeeded, it fails; on a
// steady machine a broken gate still fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <random>
#include <vector>

#include "compare.h"
#include "host_convert.h"
#include "test_support/faulty_host_stream.h"

using namespace mlarope;
using fault_injection::FaultyHostStream;
using fault_injection::KernelFault;

namespace {

constexpr std::int64_t kS = 1024, kB = 1, kH = 32, kNope = 128, kEmb = 64;
constexpr std::int64_t kElements = kS * kB * kH * (kNope + kEmb);
constexpr int kRounds = 9;
constexpr int kCalls = 16;
constexpr int kAttempts = 5;
// The spread of a series' 9 samples (largest over smallest, less 1) in the first measurement
// past which it cannot test the gate: the same kernel moved further than the gate's minimum
// effect within one measurement. This machine's host sometimes slows the kernel against the
// copy for seconds at a time, all three series together (one trial: five rounds near 0.48 of
// the floor, then four near 0.61), which the copy beside each call does not cancel and a rank
// test of 9 against 9 cannot see past; the spread is then 15-100%, on a steady machine 3-8%.
constexpr double kSteadySpread = 0.10;
// The slowdown an attempt must measure to test the gate's claim: the fault waits 15% of each
// launch (a call here is its launch but for 8 us of 1.5 ms), yet in one CI run on this machine
// three attempts in a row measured x1.07-x1.10, below the gate's 10% minimum effect (which it
// then rightly passes; the same binary alone right after: x1.15-x1.17). Under
// kBrokenFaultSlowdown in every attempt, the fault itself is broken: a failure.
constexpr double kLeastDeliveredSlowdown = 1.12;
constexpr double kBrokenFaultSlowdown = 1.03;
const std::string kKey = "rope/host/gate/sbhd/T1024/bf16";

// Minimum traffic of rope out of place (bench/shapes.cpp's model): read t, write out, read the
// cos and sin rows (f32).
constexpr double kBytes = 2.0 * kElements * 2 + kS * kEmb * 2 * 4;
constexpr double kCopyBytes = 2.0 * kElements * 2;  // a copy of t: read and written

struct Buffers {
  std::vector<std::uint16_t> t, out_base, out_again, out_slow;
  std::vector<float> cos, sin;
  std::vector<std::uint16_t> copy;  ///< the copies' destination
  std::vector<char> flush;          ///< written before each sample: 96 MiB, more than most LLCs
};

Buffers make_buffers() {
  Buffers b;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> dist(-1, 1);
  b.t.resize(kElements);
  for (auto& x : b.t) x = bf16_bits_from_double(dist(rng));
  b.out_base.assign(kElements, 0);
  b.out_again.assign(kElements, 2);
  b.out_slow.assign(kElements, 1);
  b.cos.resize(kS * kEmb);
  b.sin.resize(kS * kEmb);
  for (std::int64_t s = 0; s < kS; ++s)
    for (std::int64_t i = 0; i < kEmb; ++i) {
      const double angle =
          static_cast<double>(s) * std::pow(10000.0, -2.0 * (i % (kEmb / 2)) / kEmb);
      b.cos[s * kEmb + i] = static_cast<float>(std::cos(angle));
      b.sin[s * kEmb + i] = static_cast<float>(std::sin(angle));
    }
  b.flush.assign(std::size_t{96} << 20, 3);
  b.copy.assign(kElements, 0);
  return b;
}

RopeCall rope_call(Buffers& b, std::vector<std::uint16_t>& out) {
  RopeCall c;
  c.t = contiguous_view<const void>(b.t.data(), DType::bf16, {kS, kB, kH, kNope + kEmb});
  c.out = contiguous_view<void>(out.data(), DType::bf16, {kS, kB, kH, kNope + kEmb});
  c.args.nope_dim = kNope;
  c.args.emb_dim = kEmb;
  c.args.rotation.cos = contiguous_view<const void>(b.cos.data(), DType::f32, {kS, kEmb});
  c.args.rotation.sin = contiguous_view<const void>(b.sin.data(), DType::f32, {kS, kEmb});
  return c;  // MLA layouts (interleaved in, half out and table), SBHD, no CP
}

// Seconds `f` takes.
template <class F>
double seconds_of(const F& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The three series of one measurement: the floor fraction of each sample.
struct Series {
  std::vector<double> base, again, slowed;
};

class Bench {
 public:
  Bench()
      : b_(make_buffers()),
        // One executor worker: a launch spread over both cores of a small machine is at the
        // mercy of whatever else runs on either (ctest -j2).
        normal_(KernelFault::none, 0, 1), slow_(KernelFault::slow, 0, 1),
        base_call_(rope_call(b_, b_.out_base)), again_call_(rope_call(b_, b_.out_again)),
        slow_call_(rope_call(b_, b_.out_slow)) {
    for (int i = 0; i < 2; ++i) run_all();  // warm up: first touch of the outputs
  }

  bool same_results() const { return b_.out_base == b_.out_slow && b_.out_base == b_.out_again; }

  // kRounds rounds, the series in a random order in each.
  Series measure() {
    Series s;
    std::vector<double>* target[3] = {&s.base, &s.again, &s.slowed};
    const std::function<void()> call[3] = {[&] { normal_.rope(base_call_); },
                                           [&] { normal_.rope(again_call_); },
                                           [&] { slow_.rope(slow_call_); }};
    int order[3] = {0, 1, 2};
    for (int round = 0; round < kRounds; ++round) {
      std::shuffle(order, order + 3, rng_);
      for (const int k : order) {
        std::fill(b_.flush.begin(), b_.flush.end(), static_cast<char>(round + k));
        double copy = 0, calls = 0;
        for (int c = 0; c < kCalls; ++c) {
          copy += seconds_of([&] { std::memcpy(b_.copy.data(), b_.t.data(), kElements * 2); });
          calls += seconds_of([&] { call[k](); });
        }
        target[k]->push_back((kBytes / calls) / (kCopyBytes / copy));
      }
    }
    return s;
  }

 private:
  void run_all() {
    normal_.rope(base_call_);
    normal_.rope(again_call_);
    slow_.rope(slow_call_);
  }

  Buffers b_;
  FaultyHostStream normal_, slow_;
  RopeCall base_call_, again_call_, slow_call_;
  std::mt19937 rng_{std::random_device{}()};
};

// The gate's verdicts on one trial: unchanged against base, slowed against base, each SLOWER
// key measured once more.
struct Trial {
  reports::Comparison unchanged, slowed;
  double slowdown = 0;  ///< median time slowed / base, as measured
  double spread = 0;    ///< spread_of the first measurement
};

// The widest spread of the three series of a measurement.
double spread_of(const Series& s) {
  double widest = 0;
  for (const std::vector<double>* series : {&s.base, &s.again, &s.slowed}) {
    const auto [low, high] = std::minmax_element(series->begin(), series->end());
    widest = std::max(widest, *high / *low - 1);
  }
  return widest;
}

Trial run_trial(Bench& bench) {
  const auto key = [](const std::vector<double>& v) { return reports::Samples{{kKey, v}}; };
  const Series first = bench.measure();
  Trial t;
  t.slowdown = reports::median(first.base) / reports::median(first.slowed);
  t.spread = spread_of(first);
  t.unchanged = reports::compare(key(first.base), key(first.again), {});
  t.slowed = reports::compare(key(first.base), key(first.slowed), {});
  if (t.unchanged.overall() == reports::Verdict::slower ||
      t.slowed.overall() == reports::Verdict::slower) {
    const Series again = bench.measure();  // the second look of the gate
    if (t.unchanged.overall() == reports::Verdict::slower)
      t.unchanged =
          reports::confirm(t.unchanged, reports::compare(key(again.base), key(again.again), {}));
    if (t.slowed.overall() == reports::Verdict::slower)
      t.slowed =
          reports::confirm(t.slowed, reports::compare(key(again.base), key(again.slowed), {}));
  }
  return t;
}

bool passes(const reports::Comparison& c) { return c.overall() == reports::Verdict::same; }

bool caught(const reports::Comparison& c) {
  return c.overall() == reports::Verdict::slower && c.keys[0].confirmed;
}

// Whether a trial's measurements could test the gate: every series steady and the fault
// delivering its slowdown.
bool testable(const Trial& t) {
  return t.spread <= kSteadySpread && t.slowdown >= kLeastDeliveredSlowdown;
}

std::string line(const reports::Comparison& c) {
  const reports::KeyComparison& k = c.keys.at(0);
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s%s (change %+.1f%% [%+.1f%%, %+.1f%%], p slower %.2g)",
                to_string(k.verdict), k.confirmed ? " repeated" : "",
                100 * k.change_estimate.estimate, 100 * k.change_estimate.lower,
                100 * k.change_estimate.upper, k.p_slower);
  return buf;
}

void print(const char* what, int i, const Trial& t) {
  std::cout << what << " " << i << ": slowdown x" << t.slowdown << ", spread " << 100 * t.spread
            << "%" << (testable(t) ? "" : " (cannot test the gate)") << "; slowed "
            << line(t.slowed) << "; unchanged " << line(t.unchanged) << "\n";
}

TEST(SlowedKernelGate, CatchesAKernelSlowedBy15PercentAndPassesTheUnchangedOne) {
  Bench bench;
  ASSERT_TRUE(bench.same_results()) << "the slowed kernel must compute the same result";
  const char* trials_env = std::getenv("MLAROPE_GATE_TRIALS");
  const int trials = trials_env ? std::max(1, std::atoi(trials_env)) : 0;
  if (trials > 0) {  // the rates over independent trials; detection over the testable ones
    int resolvable = 0, detected = 0, passed = 0, passed_all = 0;
    for (int i = 1; i <= trials; ++i) {
      const Trial t = run_trial(bench);
      print("trial", i, t);
      passed_all += passes(t.unchanged);
      if (!testable(t)) continue;
      ++resolvable;
      detected += caught(t.slowed);
      passed += passes(t.unchanged);
    }
    std::cout << resolvable << " of " << trials
              << " trials could test the gate; in those the slowed "
              << "kernel was caught in " << detected << ", the unchanged kernel passed in "
              << passed << "; the unchanged kernel passed in " << passed_all << " of all " << trials
              << "\n";
    EXPECT_GE(10 * passed_all, 9 * trials);
    if (resolvable == 0) GTEST_SKIP() << "no trial could test the gate on this machine now";
    EXPECT_GE(10 * detected, 9 * resolvable);
    EXPECT_GE(10 * passed, 9 * resolvable);
    return;
  }
  Trial t;
  bool never_testable = true;
  double largest_slowdown = 0;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    t = run_trial(bench);
    print("attempt", attempt, t);
    if (caught(t.slowed) && passes(t.unchanged)) break;
    never_testable = never_testable && !testable(t);
    largest_slowdown = std::max(largest_slowdown, t.slowdown);
  }
  if (never_testable && !(caught(t.slowed) && passes(t.unchanged))) {
    ASSERT_GT(largest_slowdown, kBrokenFaultSlowdown) << "the fault no longer slows the kernel";
    GTEST_SKIP() << "the machine cannot test the gate now: in each of " << kAttempts
                 << " attempts a series' samples spread more than " << 100 * kSteadySpread
                 << "% (another load on the cores?) or the slowed kernel was less than x"
                 << kLeastDeliveredSlowdown << " slower";
  }
  EXPECT_TRUE(caught(t.slowed)) << "the slowed kernel passed the gate " << kAttempts << " times";
  EXPECT_TRUE(passes(t.unchanged))
      << "the unchanged kernel failed the gate " << kAttempts << " times";
}

}  // namespace
