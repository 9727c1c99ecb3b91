// SPDX-License-Identifier: Apache-2.0
// The GPU model's detectors catch what they are for: each is shown a kernel
// that is wrong in the one way it must see (cuda/test_support/kernel_faults.txt), and the same
// build without the fault passes the same call, so every test here can fail both ways.
//   - alignment: 16-byte copies chosen when only one of two tensors is aligned;
//   - bounds: a store one element past the end of an output;
//   - races: two threads writing one element;
//   - asynchronous copies: the staged body without its wait for them;
//   - coalescing: a contiguous range of copies per thread lowers the sector efficiency;
//   - ASan + UBSan (build-asan only): a store one past the end of a per-thread local array.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "host/gpu_model.h"
#include "host/host_stream.h"
#include "launch/footprint.h"
#include "mlarope/error.h"
#include "test_support/faulty_host_stream.h"
#include "test_support/model_calls.h"

namespace mlarope::test {
namespace {

using fault_injection::FaultyHostStream;
using fault_injection::KernelFault;

// The message of the mlarope::Error that `f` throws, or "" when it throws nothing.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

FaultyHostStream model_stream(KernelFault fault) { return FaultyHostStream(fault, 7, 1, true); }

TEST(GpuModelDetectors, AlignmentCatchesAVectorCopyWhenOnlyOneTensorIsAligned) {
  RopeBuffers b(/*misalign_t=*/true);
  const std::string faulty =
      error_of([&] { model_stream(KernelFault::vector_either_aligned).rope(b.call()); });
  EXPECT_NE(faulty.find("misaligned 16-byte"), std::string::npos) << faulty;
  EXPECT_EQ(error_of([&] { model_stream(KernelFault::none).rope(b.call()); }), "");
}

TEST(GpuModelDetectors, BoundsCatchAStorePastTheEndOfAnOutput) {
  KvSplitBuffers b;
  const std::string faulty =
      error_of([&] { model_stream(KernelFault::store_past_end).kv_split(b.call()); });
  EXPECT_NE(faulty.find("out-of-bounds store"), std::string::npos) << faulty;
  EXPECT_TRUE(b.guard_intact()) << "the model must not make a store it refuses";
  EXPECT_EQ(error_of([&] { model_stream(KernelFault::none).kv_split(b.call()); }), "");
}

TEST(GpuModelDetectors, RacesCatchTwoThreadsWritingOneElement) {
  RopeBuffers b(/*misalign_t=*/true);  // element copies of the nope parts (no vector path)
  const std::string faulty =
      error_of([&] { model_stream(KernelFault::shared_element).rope(b.call()); });
  EXPECT_NE(faulty.find("race: store of a byte that thread"), std::string::npos) << faulty;
  EXPECT_EQ(error_of([&] { model_stream(KernelFault::none).rope(b.call()); }), "");
}

TEST(GpuModelDetectors, RacesCatchTheStagedBodyWithoutItsBarrier) {
  RopeBuffers b(/*misalign_t=*/false);  // in place, MLA layouts, emb 64: the staged body
  const std::string faulty = error_of(
      [&] { model_stream(KernelFault::staged_missing_barrier).rope_inplace(b.inplace_call()); });
  EXPECT_NE(faulty.find("rope/staged_vector/bf16"), std::string::npos) << faulty;
  EXPECT_NE(faulty.find("race: store of a byte that"), std::string::npos) << faulty;
  EXPECT_EQ(error_of([&] { model_stream(KernelFault::none).rope_inplace(b.inplace_call()); }), "");
}

TEST(GpuModelDetectors, AsyncCopiesCatchTheStagedBodyWithoutItsWait) {
  RopeBuffers b(/*misalign_t=*/false);  // in place, MLA layouts, emb 64: the staged body
  const std::string faulty = error_of(
      [&] { model_stream(KernelFault::staged_unwaited_copies).rope_inplace(b.inplace_call()); });
  EXPECT_NE(faulty.find("rope/staged_vector/bf16"), std::string::npos) << faulty;
  EXPECT_NE(faulty.find("asynchronous copies not waited for"), std::string::npos) << faulty;
  EXPECT_EQ(error_of([&] { model_stream(KernelFault::none).rope_inplace(b.inplace_call()); }), "");
}

TEST(GpuModelDetectors, CoalescingSeesAContiguousRangeOfCopiesPerThread) {
  // 16 heads of nope 120: 240 16-byte pieces of nope parts for 128 threads.
  RopeBuffers clean_buffers(false, 16, 120), ranged_buffers(false, 16, 120);
  FaultyHostStream clean = model_stream(KernelFault::none);
  FaultyHostStream ranged = model_stream(KernelFault::contiguous_copy_ranges);
  clean.rope(clean_buffers.call());
  ranged.rope(ranged_buffers.call());
  EXPECT_EQ(clean_buffers.out_bits(), ranged_buffers.out_bits()) << "the same values";
  const auto a = clean.model_stats().back(), b = ranged.model_stats().back();
  ASSERT_EQ(a.kernel, "rope/chunked_vector/bf16");
  EXPECT_EQ(a.requested_bytes, b.requested_bytes);
  std::cout << "  sector efficiency of " << a.kernel << ": clean " << a.sector_efficiency()
            << ", contiguous copy ranges " << b.sector_efficiency() << "\n";
  EXPECT_LT(b.sector_efficiency(), 0.9 * a.sector_efficiency());
}

// The model's state grows with the bytes a launch may write, not with its accesses: rope of
// 6 MB (f32 SBHD, DeepSeek-V3's q heads) out of place and in place, the state at most 7 times
// the call's footprint plus 1 MiB (a shadow of 12 bytes per 2 written bytes, a page record per
// 4 KiB, the largest phase's access records). A state per access (one record per warp access,
// a set of sectors) would exceed it.
TEST(GpuModelState, BoundedByTheFootprint) {
  constexpr std::int64_t S = 64, H = 128, kNope = 128, kEmb = 64, D = kNope + kEmb;
  std::vector<float> t(static_cast<std::size_t>(S * H * D)), out(t.size());
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(i % 97) * 0.01f;
  std::vector<float> cos(static_cast<std::size_t>(S * kEmb), 0.6f), sin(cos.size(), 0.8f);
  RopeArgs args;
  args.nope_dim = kNope;
  args.emb_dim = kEmb;
  args.rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {S, kEmb});
  args.rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {S, kEmb});
  const std::int64_t tables = 2 * S * kEmb * 4, activation = S * H * D * 4;
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    Stream stream = Stream::host({1, 1, true});
    if (in_place) {
      rope_inplace({contiguous_view<void>(t.data(), DType::f32, {S, 1, H, D}), args}, stream);
    } else {
      rope({contiguous_view<const void>(t.data(), DType::f32, {S, 1, H, D}),
            contiguous_view<void>(out.data(), DType::f32, {S, 1, H, D}), args},
           stream);
    }
    stream.synchronize();
    const std::vector<ModelLaunchStats> stats = take_model_stats(stream);
    ASSERT_EQ(stats.size(), 1u);
    const std::int64_t footprint = tables + (in_place ? 1 : 2) * activation;
    std::cout << "  model state of " << stats[0].kernel << (in_place ? " in place: " : ": ")
              << stats[0].model_bytes << " bytes for a footprint of " << footprint << " and "
              << stats[0].accesses << " accesses\n";
    EXPECT_GT(stats[0].model_bytes, 0);
    EXPECT_LE(stats[0].model_bytes, 7 * footprint + (std::int64_t{1} << 20));
  }
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

// Every access helper of kernels/portability.h makes no access the model refuses: shown an
// address outside every tensor of the call (and outside the block's shared memory), each
// reports it and leaves memory as it was; a load returns zeros. The kernels' own accesses reach
// these refusals only when a kernel is wrong (the faults above), and not every helper has one.
TEST(GpuModelRefusals, NoHelperMakesAnAccessTheModelRefuses) {
  alignas(16) float tensor[8] = {};
  alignas(16) float outside[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  alignas(16) float shared[4] = {};
  detail::Footprint footprint;
  footprint.add("t", contiguous_view<void>(tensor, DType::f32, {8}), detail::RegionUse::read_write);
  kernels::gpu_model::Recorder recorder("refusals", footprint);
  recorder.begin_thread(kernels::GridCoord{});
  recorder.begin_phase(0, 0, shared, sizeof shared / 2);  // half of `shared` is the block's
  kernels::gpu_model::t_recorder = &recorder;
  std::uint32_t* word = reinterpret_cast<std::uint32_t*>(outside);
  const float loaded = kernels::global_load(outside + 1);
  kernels::global_store(outside + 1, -1.0f);
  const kernels::RawVector<16> v16 = kernels::load_raw<16>(outside);
  const kernels::RawVector<8> v8 = kernels::load_raw<8>(outside + 4);
  const kernels::RawVector<4> v4 = kernels::load_raw<4>(outside + 6);
  kernels::store_raw<16>(outside, kernels::RawVector<16>{});
  kernels::store_raw<8>(outside + 4, kernels::RawVector<8>{});
  kernels::store_raw<4>(outside + 6, kernels::RawVector<4>{});
  kernels::atomic_or(word + 7, 0xffu);
  const float shared_loaded = kernels::shared_load(shared + 3);  // past the block's half
  kernels::shared_store(shared + 3, -1.0f);
  kernels::gpu_model::t_recorder = nullptr;
  EXPECT_EQ(loaded, 0.0f);
  EXPECT_EQ(shared_loaded, 0.0f);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(v16.words[i], 0u) << i;
  EXPECT_EQ(v8.words[0] | v8.words[1] | v4.words[0], 0u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(outside[i], static_cast<float>(i + 1)) << "element " << i;
  EXPECT_EQ(shared[3], 0.0f);
  EXPECT_EQ(recorder.stats().errors, 11);
  ASSERT_FALSE(recorder.findings().empty());
  EXPECT_NE(recorder.findings()[0].find("out-of-bounds load"), std::string::npos)
      << recorder.findings()[0];
}

// What the model records of `body` run as one thread of a one-block launch over `footprint`,
// with `shared` as the block's shared memory (none where null).
// Its findings go to `findings` where given.
template <class Body>
kernels::gpu_model::LaunchStats one_thread(const detail::Footprint& footprint, float* shared,
                                           std::size_t shared_bytes, Body body,
                                           std::vector<std::string>* findings = nullptr) {
  kernels::gpu_model::Recorder recorder("one thread", footprint);
  recorder.begin_thread(kernels::GridCoord{});
  if (shared != nullptr) recorder.begin_phase(0, 0, shared, shared_bytes);
  kernels::gpu_model::t_recorder = &recorder;
  body();
  kernels::gpu_model::t_recorder = nullptr;
  recorder.finish();
  if (findings != nullptr) *findings = recorder.findings();
  kernels::gpu_model::LaunchStats stats = recorder.stats();
  EXPECT_EQ(stats.blocks, 1);  // a default GridCoord: thread 0 of a grid of one block of one
  EXPECT_EQ(stats.threads, 1);
  return stats;
}

// The findings of `body` run as one_thread, one a line ("" for none); the launch's error
// count must be their number.
template <class Body>
std::string one_thread_findings(const detail::Footprint& footprint, float* shared,
                                std::size_t shared_bytes, Body body) {
  std::vector<std::string> findings;
  const kernels::gpu_model::LaunchStats stats =
      one_thread(footprint, shared, shared_bytes, body, &findings);
  EXPECT_EQ(stats.errors, static_cast<std::int64_t>(findings.size()));
  std::string all;
  for (const std::string& f : findings) all += f + "\n";
  return all;
}

// An asynchronous copy to shared memory holds no register, so a thread's copies and its loads
// are one batch until its wait for the copies (which ends the batch, as a store would); the
// copied bytes land at that wait, not before (the model delays them, as a GPU may).
TEST(GpuModelBatches, AsyncCopiesAreLoadsOfTheOpenBatchUntilTheirWait) {
  alignas(16) float input[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  alignas(16) float output[4] = {};
  alignas(16) float shared[12] = {};
  detail::Footprint footprint;
  footprint.add("in", contiguous_view<const void>(input, DType::f32, {12}),
                detail::RegionUse::read);
  footprint.add("out", contiguous_view<void>(output, DType::f32, {4}), detail::RegionUse::write);
  float before_wait = -1;
  const kernels::gpu_model::LaunchStats stats = one_thread(footprint, shared, sizeof shared, [&] {
    kernels::async_copy_to_shared<16>(shared, input);  // batch 1: 16 + 8 + 4 + 16 bytes
    kernels::async_copy_to_shared<8>(shared + 4, input + 4);
    const float a = kernels::global_load(input + 6);
    kernels::async_copy_to_shared<16>(shared + 8, input + 8);
    before_wait = shared[0];  // not through the model: the bytes as they lie
    kernels::wait_async_copies();
    const float b = kernels::global_load(input + 7);  // batch 2: after the wait
    kernels::global_store(output, a + b + kernels::shared_load(shared) +
                                      kernels::shared_load(shared + 5) +
                                      kernels::shared_load(shared + 11));
    kernels::async_copy_to_shared<16>(shared, input + 4);  // batch 3
    kernels::wait_async_copies();
    kernels::global_store(output + 1, kernels::shared_load(shared + 3));
  });
  EXPECT_EQ(stats.errors, 0);
  EXPECT_EQ(before_wait, 0.0f);
  EXPECT_EQ(stats.load_batches, 3);
  EXPECT_EQ(stats.round_trips, 3);
  EXPECT_EQ(stats.largest_batch_bytes, 44);
  EXPECT_EQ(output[0], 7.0f + 8.0f + 1.0f + 6.0f + 12.0f);
  EXPECT_EQ(output[1], 8.0f);
}

// What a GPU would punish of asynchronous copies, each a finding: touching the bytes before
// the wait (the copy may not have landed), a second copy to them before it (the order in
// which two copies land is not defined), a phase that ends without the wait (the barrier
// does not wait for copies: they are dropped), a destination outside the block's shared
// memory and a source inside it.
TEST(GpuModelDetectors, AsyncCopiesAreWaitedForBeforeTheirBytesAreTouched) {
  alignas(16) float input[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  alignas(16) float output[4] = {};
  alignas(16) float shared[8] = {};
  detail::Footprint footprint;
  footprint.add("in", contiguous_view<const void>(input, DType::f32, {8}), detail::RegionUse::read);
  footprint.add("out", contiguous_view<void>(output, DType::f32, {4}), detail::RegionUse::write);
  const auto findings_of = [&](auto body) {
    std::memset(shared, 0, sizeof shared);
    return one_thread_findings(footprint, shared, sizeof shared, body);
  };
  const std::string early = findings_of([&] {
    kernels::async_copy_to_shared<16>(shared, input);
    kernels::global_store(output, kernels::shared_load(shared + 2));
    kernels::wait_async_copies();
  });
  EXPECT_NE(early.find("shared load of bytes an asynchronous copy of this thread has not landed"),
            std::string::npos)
      << early;
  const std::string twice = findings_of([&] {
    kernels::async_copy_to_shared<16>(shared, input);
    kernels::async_copy_to_shared<8>(shared + 2, input + 4);
    kernels::wait_async_copies();
  });
  EXPECT_NE(twice.find("asynchronous copy to bytes an earlier one of this thread has not landed"),
            std::string::npos)
      << twice;
  const std::string unwaited =
      findings_of([&] { kernels::async_copy_to_shared<8>(shared, input); });
  EXPECT_NE(unwaited.find("1 asynchronous copies not waited for"), std::string::npos) << unwaited;
  EXPECT_EQ(shared[0], 0.0f);  // dropped
  const std::string outside = findings_of([&] {
    kernels::async_copy_to_shared<16>(output, input);
    kernels::async_copy_to_shared<16>(shared, shared + 4);
    kernels::wait_async_copies();
  });
  EXPECT_NE(outside.find("asynchronous copy to bytes outside the block's shared memory"),
            std::string::npos)
      << outside;
  EXPECT_NE(outside.find("asynchronous copy from shared memory"), std::string::npos) << outside;
  const std::string right = findings_of([&] {
    kernels::async_copy_to_shared<16>(shared, input);
    kernels::wait_async_copies();
    kernels::global_store(output, kernels::shared_load(shared + 2));
  });
  EXPECT_EQ(right, "");
  EXPECT_EQ(output[0], 3.0f);
}

// A block's shared memory starts undefined on a GPU (it holds what an earlier block left
// there): a load of bytes no thread of the block has written, in part or at all, is a finding,
// also where the block before wrote them; after a store or an issued copy of the block, the
// same loads are clean.
TEST(GpuModelDetectors, SharedLoadsOfBytesTheBlockHasNotWrittenAreFound) {
  alignas(16) float input[4] = {1, 2, 3, 4};
  alignas(16) float output[2] = {};
  alignas(16) float shared[4] = {};
  detail::Footprint footprint;
  footprint.add("in", contiguous_view<const void>(input, DType::f32, {4}), detail::RegionUse::read);
  footprint.add("out", contiguous_view<void>(output, DType::f32, {2}), detail::RegionUse::write);
  const std::string unwritten = "shared load of bytes no thread of this block has written";
  const auto findings_of = [&](auto body) {
    return one_thread_findings(footprint, shared, sizeof shared, body);
  };
  const std::string never =
      findings_of([&] { kernels::global_store(output, kernels::shared_load(shared + 1)); });
  EXPECT_NE(never.find(unwritten), std::string::npos) << never;
  const std::string half = findings_of([&] {
    kernels::shared_store(shared + 2, 1.0f);
    const auto* pair = reinterpret_cast<const double*>(shared + 2);
    kernels::global_store(output, static_cast<float>(kernels::shared_load(pair)));
  });
  EXPECT_NE(half.find(unwritten), std::string::npos) << half;
  const std::string stored = findings_of([&] {
    kernels::shared_store(shared + 1, 5.0f);
    kernels::global_store(output, kernels::shared_load(shared + 1));
  });
  EXPECT_EQ(stored, "");
  EXPECT_EQ(output[0], 5.0f);
  const std::string copied = findings_of([&] {
    kernels::async_copy_to_shared<16>(shared, input);
    kernels::wait_async_copies();
    kernels::global_store(output + 1, kernels::shared_load(shared + 3));
  });
  EXPECT_EQ(copied, "");
  EXPECT_EQ(output[1], 4.0f);
  // Block 1 reads what block 0 wrote into the same shared memory.
  kernels::gpu_model::Recorder recorder("two blocks", footprint);
  kernels::gpu_model::t_recorder = &recorder;
  recorder.begin_phase(0, 0, shared, sizeof shared);
  recorder.begin_thread(kernels::GridCoord{0, 2, 0, 1});
  kernels::shared_store(shared, 7.0f);
  recorder.begin_phase(1, 0, shared, sizeof shared);
  recorder.begin_thread(kernels::GridCoord{1, 2, 0, 1});
  kernels::global_store(output, kernels::shared_load(shared));
  kernels::gpu_model::t_recorder = nullptr;
  recorder.finish();
  EXPECT_EQ(recorder.stats().errors, 1);
  ASSERT_EQ(recorder.findings().size(), 1u);
  EXPECT_NE(recorder.findings()[0].find("two blocks block 1 thread 0: " + unwritten),
            std::string::npos)
      << recorder.findings()[0];
}

// A thread's loads are one batch (one round trip) until it stores, to global or to shared
// memory (the store waits for what it stores), or until MLAROPE_END_LOAD_BATCH.
TEST(GpuModelBatches, AStoreGlobalOrSharedOrAnEndMarkClosesABatch) {
  alignas(16) float input[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  alignas(16) float output[8] = {};
  alignas(16) float shared[4] = {};
  detail::Footprint footprint;
  footprint.add("in", contiguous_view<const void>(input, DType::f32, {8}), detail::RegionUse::read);
  footprint.add("out", contiguous_view<void>(output, DType::f32, {8}), detail::RegionUse::write);
  const kernels::gpu_model::LaunchStats stats = one_thread(footprint, shared, sizeof shared, [&] {
    const float a = kernels::global_load(input) + kernels::global_load(input + 1);  // batch 1
    kernels::shared_store(shared, a);
    const float b = kernels::global_load(input + 2) + kernels::global_load(input + 3);  // batch 2
    kernels::global_store(output, b);
    const float c = kernels::global_load(input + 4);  // batch 3
    MLAROPE_END_LOAD_BATCH();
    const float d = kernels::global_load(input + 5) + kernels::shared_load(shared);  // batch 4
    kernels::global_store(output + 1, c + d);
  });
  EXPECT_EQ(stats.errors, 0);
  EXPECT_EQ(stats.load_batches, 4);
  EXPECT_EQ(stats.round_trips, 4);
  EXPECT_EQ(stats.largest_batch_bytes, 8);
  EXPECT_EQ(output[0], 7.0f);
  EXPECT_EQ(output[1], 14.0f);
}

// A load of an index array (cu_seqlens, position ids) is a round trip of its own, to the L2:
// its value is an address to come, so the data loads before it and after it are two batches.
TEST(GpuModelBatches, AnIndexLoadIsARoundTripOfItsOwn) {
  alignas(16) float input[4] = {1, 2, 3, 4};
  alignas(16) float output[4] = {};
  alignas(16) std::int32_t index[4] = {0, 2, 0, 0};
  detail::Footprint footprint;
  footprint.add("in", contiguous_view<const void>(input, DType::f32, {4}), detail::RegionUse::read);
  footprint.add("out", contiguous_view<void>(output, DType::f32, {4}), detail::RegionUse::write);
  footprint.add("index", IndexView{index, IndexType::i32, 4});
  const kernels::gpu_model::LaunchStats stats = one_thread(footprint, nullptr, 0, [&] {
    const float a = kernels::global_load(input);              // batch 1
    const std::int32_t at = kernels::global_load(index + 1);  // an index round trip
    const float b = kernels::global_load(input + at);         // batch 2
    kernels::global_store(output, a + b);
  });
  EXPECT_EQ(stats.errors, 0);
  EXPECT_EQ(stats.index_loads, 1);
  EXPECT_EQ(stats.index_round_trips, 1);
  EXPECT_EQ(stats.load_batches, 2);
  EXPECT_EQ(stats.round_trips, 2);
  EXPECT_EQ(output[0], 4.0f);
}

// Index loads whose addresses are all known before the first (load_index_batch) are in flight
// together: one round trip for the batch, where each index load alone is one; the batch ends
// with the call, so the lone load after it is a round trip again.
TEST(GpuModelBatches, AnIndexBatchIsOneRoundTrip) {
  alignas(16) float output[4] = {};
  alignas(16) std::int32_t index[8] = {0, 3, 5, 9, 12, 0, 0, 0};
  detail::Footprint footprint;
  footprint.add("out", contiguous_view<void>(output, DType::f32, {4}), detail::RegionUse::write);
  footprint.add("index", IndexView{index, IndexType::i32, 8});
  const kernels::gpu_model::LaunchStats stats = one_thread(footprint, nullptr, 0, [&] {
    const std::int64_t at[4] = {0, 1, 3, 4};
    std::int32_t entry[4] = {};
    kernels::load_index_batch(index, at, entry);                // one round trip
    const std::int32_t lone = kernels::global_load(index + 2);  // a round trip of its own
    kernels::global_store(output, static_cast<float>(entry[0] + entry[1] + entry[2] + entry[3]));
    kernels::global_store(output + 1, static_cast<float>(lone));
  });
  EXPECT_EQ(stats.errors, 0);
  EXPECT_EQ(stats.index_loads, 5);
  EXPECT_EQ(stats.index_round_trips, 2);
  EXPECT_EQ(output[0], 24.0f);
  EXPECT_EQ(output[1], 5.0f);
}

// A footprint holds kCapacity tensors (more than any call has); past that, adding is a no-op,
// never a write past its array.
TEST(GpuModelRefusals, AFootprintStopsAtItsCapacity) {
  float data[4] = {};
  std::int32_t index[2] = {};
  DeviceStatus status = 0;
  detail::Footprint footprint;
  for (int i = 0; i < detail::Footprint::kCapacity; ++i)
    footprint.add("t", contiguous_view<const void>(data, DType::f32, {4}), detail::RegionUse::read);
  ASSERT_EQ(footprint.count, detail::Footprint::kCapacity);
  footprint.add("more", contiguous_view<void>(data, DType::f32, {4}), detail::RegionUse::write);
  footprint.add("index", IndexView{index, IndexType::i32, 2});
  footprint.add_status("status", &status);
  EXPECT_EQ(footprint.count, detail::Footprint::kCapacity);
  for (const detail::TensorRegion& r : footprint.regions) EXPECT_STREQ(r.name, "t");
}

TEST(GpuModelDetectors, AsanCatchesAStorePastALocalArray) {
  if (!kAsan) GTEST_SKIP() << "needs the AddressSanitizer build (ci/test.sh builds build-asan)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  RopeBuffers b(false);
  EXPECT_DEATH(
      {
        FaultyHostStream s(KernelFault::local_array_overflow, 0, 1);
        s.rope_inplace(b.inplace_call());
      },
      // ASan's report, or UBSan's object-size check, whichever sees the store first
      "stack-buffer-overflow|insufficient space for an object");
  FaultyHostStream clean(KernelFault::none, 0, 1);
  clean.rope_inplace(b.inplace_call());  // the unbroken build: no report, no abort
}

}  // namespace
}  // namespace mlarope::test
