// SPDX-License-Identifier: Apache-2.0
// The launch each canonical call gets: the DeepSeek-V3 shapes (H = 128, nope 128, emb 64,
// k = v = 128) in every dtype, SBHD and THD, aligned and misaligned views, and the grid caps.
// For each, the expected variant, grid, block and work items per row are written out by hand
// from the rule in docs/kernels.md ("Launch geometry"), not computed by the builder's code;
// the GPU model then runs the call with that geometry and its predicted sector efficiency must
// reach the value recorded here. Exact figures, not timings: a launch builder that never picks
// a vector path, or sizes the grid from the wrong work count, fails here although its results
// are right.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "host/host_executor.h"
#include "host/host_stream.h"
#include "kernels/kv_split_kernels.h"
#include "kernels/rope_kernels.h"
#include "launch/launch_builder.h"
#include "launch/stream_impl.h"
#include "mlarope/backend.h"
#include "mlarope/error.h"
#include "mlarope/ops.h"

namespace mlarope::test {
namespace {

enum class Call {
  rope,
  rope_inplace,
  rope_backward,
  rope_backward_inplace,
  kv_split,
  kv_split_backward,
  yarn
};

// The op of a call other than yarn (whose launch is named "yarn_tables").
Op op_of(Call c) {
  switch (c) {
    case Call::rope:
    case Call::rope_inplace: return Op::rope;
    case Call::rope_backward:
    case Call::rope_backward_inplace: return Op::rope_backward;
    case Call::kv_split: return Op::kv_split;
    default: return Op::kv_split_backward;
  }
}

constexpr PairLayout kI = PairLayout::interleaved, kH = PairLayout::half;

struct Canonical {
  std::string name;
  Call call;
  DType dtype;
  TokenLayout layout = TokenLayout::sbhd;
  std::int64_t rows = 8;  ///< SBHD: S = rows / 2, B = 2 (B = 1 when odd); THD: two sequences
  std::int64_t heads = 128;
  std::int64_t nope = 128;  ///< rope ops; kv ops: k = v = nope
  std::int64_t emb = 64;
  PairLayout in = kI, out = kH;  ///< rope pair layouts (MLA by default)
  std::int64_t shift = 0;        ///< elements the activation inputs start past a 256-byte boundary
  // What the rule gives:
  std::string variant;
  std::int64_t blocks;
  int threads;
  std::int64_t work;  ///< work items per row (staged: per round), shared by the threads
  /// The GPU model's figure when recorded (rounded down to 0.01); 0: builder only (too big to run).
  double min_sector_efficiency;
};

// Every canonical call. Work items: pair chunks (4 pairs of f16/bf16 or 2 of f32 on the vector
// paths, 1 pair on the scalar ones) and 16-byte copy pieces (plus tail elements) of nope / k /
// v. Threads: the work rounded up to a warp, 32 to 128, and in the bodies that load in batches
// (all but staged and whole-slice rope) at most one per 16 items. Blocks: one per row (staged: per
// round of whole slices, 512 chunks a round), THD at most 4096, any layout at most 2^20.
const std::vector<Canonical>& canonical_calls() {
  static const std::vector<Canonical> calls = {
      // q: 128 heads x 8 chunks (bf16) = 1024 < 128 x 16 nope pieces = 2048.
      {"q rope bf16", Call::rope, DType::bf16, TokenLayout::sbhd, 8, 128, 128, 64, kI, kH, 0,
       "chunked_vector", 8, 128, 2048, 1.0},
      {"q rope f16", Call::rope, DType::f16, TokenLayout::sbhd, 8, 128, 128, 64, kI, kH, 0,
       "chunked_vector", 8, 128, 2048, 1.0},
      // f32: 128 x 16 chunks = 2048 < 128 x 32 nope pieces.
      {"q rope f32", Call::rope, DType::f32, TokenLayout::sbhd, 8, 128, 128, 64, kI, kH, 0,
       "chunked_vector", 8, 128, 4096, 1.0},
      {"q rope thd bf16", Call::rope, DType::bf16, TokenLayout::thd, 8, 128, 128, 64, kI, kH, 0,
       "chunked_vector", 8, 128, 2048, 0.99},
      {"q rope_backward bf16", Call::rope_backward, DType::bf16, TokenLayout::sbhd, 8, 128, 128, 64,
       kI, kH, 0, "chunked_vector", 8, 128, 2048, 1.0},
      {"q rope_backward f32", Call::rope_backward, DType::f32, TokenLayout::sbhd, 8, 128, 128, 64,
       kI, kH, 0, "chunked_vector", 8, 128, 4096, 1.0},
      // In place with the MLA layout change: staged rounds of 2048 chunks, two whole rows of 128 x
      // 8 (bf16); f32: one row of 128 x 16.
      {"q rope_inplace bf16", Call::rope_inplace, DType::bf16, TokenLayout::sbhd, 8, 128, 128, 64,
       kI, kH, 0, "staged_vector", 4, 128, 2048, 1.0},
      {"q rope_inplace f16", Call::rope_inplace, DType::f16, TokenLayout::sbhd, 8, 128, 128, 64, kI,
       kH, 0, "staged_vector", 4, 128, 2048, 1.0},
      {"q rope_inplace f32", Call::rope_inplace, DType::f32, TokenLayout::sbhd, 8, 128, 128, 64, kI,
       kH, 0, "staged_vector", 8, 128, 2048, 1.0},
      {"q rope_inplace thd bf16", Call::rope_inplace, DType::bf16, TokenLayout::thd, 8, 128, 128,
       64, kI, kH, 0, "staged_vector", 4, 128, 2048, 0.98},
      {"q rope_backward_inplace bf16", Call::rope_backward_inplace, DType::bf16, TokenLayout::sbhd,
       8, 128, 128, 64, kI, kH, 0, "staged_vector", 4, 128, 2048, 1.0},
      // In place without a layout change: chunks only, 128 x 8 (bf16: 64 threads of 16), 128 x 16
      // (f32).
      {"q rope_inplace half bf16", Call::rope_inplace, DType::bf16, TokenLayout::sbhd, 8, 128, 128,
       64, kH, kH, 0, "chunked_vector", 8, 64, 1024, 1.0},
      {"q rope_inplace half f32", Call::rope_inplace, DType::f32, TokenLayout::sbhd, 8, 128, 128,
       64, kH, kH, 0, "chunked_vector", 8, 128, 2048, 1.0},
      // Misaligned by one element: the scalar paths, 32 one-pair chunks a slice.
      {"q rope bf16 misaligned", Call::rope, DType::bf16, TokenLayout::sbhd, 8, 128, 128, 64, kI,
       kH, 1, "chunked_scalar", 8, 128, 4096, 0.62},
      {"q rope f32 misaligned", Call::rope, DType::f32, TokenLayout::sbhd, 8, 128, 128, 64, kI, kH,
       1, "chunked_scalar", 8, 128, 4096, 0.71},
      {"q rope_inplace bf16 misaligned", Call::rope_inplace, DType::bf16, TokenLayout::sbhd, 8, 128,
       128, 64, kI, kH, 1, "whole_slice_scalar", 8, 128, 128, 0.06},
      // kv: 128 heads x max(8 chunks, 16 + 16 pieces of k and v) (bf16); f32: max(16, 32 + 32).
      {"kv_split bf16", Call::kv_split, DType::bf16, TokenLayout::sbhd, 8, 128, 128, 64, kI, kH, 0,
       "vector", 8, 128, 4096, 1.0},
      {"kv_split f16", Call::kv_split, DType::f16, TokenLayout::sbhd, 8, 128, 128, 64, kI, kH, 0,
       "vector", 8, 128, 4096, 1.0},
      {"kv_split f32", Call::kv_split, DType::f32, TokenLayout::sbhd, 8, 128, 128, 64, kI, kH, 0,
       "vector", 8, 128, 8192, 1.0},
      {"kv_split thd bf16", Call::kv_split, DType::bf16, TokenLayout::thd, 8, 128, 128, 64, kI, kH,
       0, "vector", 8, 128, 4096, 0.99},
      {"kv_split bf16 misaligned", Call::kv_split, DType::bf16, TokenLayout::sbhd, 8, 128, 128, 64,
       kI, kH, 1, "scalar", 8, 128, 4096, 0.81},
      // Small k and v: the chunks decide (4 heads x 8 chunks > 4 x (2 + 2) pieces).
      {"kv_split bf16 small k and v", Call::kv_split, DType::bf16, TokenLayout::sbhd, 8, 4, 16, 64,
       kI, kH, 0, "vector", 8, 32, 32, 1.0},
      // kv backward: max(8 chunks x 16 head groups, 128 x 32 pieces) (bf16); f32: 16 x 8, 128 x 64.
      {"kv_split_backward bf16", Call::kv_split_backward, DType::bf16, TokenLayout::sbhd, 8, 128,
       128, 64, kI, kH, 0, "vector", 8, 128, 4096, 1.0},
      {"kv_split_backward f32", Call::kv_split_backward, DType::f32, TokenLayout::sbhd, 8, 128, 128,
       64, kI, kH, 0, "vector", 8, 128, 8192, 1.0},
      {"kv_split_backward bf16 misaligned", Call::kv_split_backward, DType::bf16, TokenLayout::sbhd,
       8, 128, 128, 64, kI, kH, 1, "scalar", 8, 128, 4096, 0.85},
      // Small k and v, backward: the partial sums decide (8 chunks x 4 head groups > 4 x (2 + 2)).
      {"kv_split_backward bf16 small k and v", Call::kv_split_backward, DType::bf16,
       TokenLayout::sbhd, 8, 4, 16, 64, kI, kH, 0, "vector", 8, 32, 32, 1.0},
      // H = 16 (a 6 KB row in bf16): 16 x 16 nope pieces = 256, at 16 a thread one warp; kv_split
      // f32: 16 x (32 + 32) = 1024, 64 threads; kv_split_backward f32 the same pieces.
      {"small rope bf16", Call::rope, DType::bf16, TokenLayout::sbhd, 8, 16, 128, 64, kI, kH, 0,
       "chunked_vector", 8, 32, 256, 1.0},
      {"small kv_split f32", Call::kv_split, DType::f32, TokenLayout::sbhd, 8, 16, 128, 64, kI, kH,
       0, "vector", 8, 64, 1024, 1.0},
      {"small kv_split_backward f32", Call::kv_split_backward, DType::f32, TokenLayout::sbhd, 8, 16,
       128, 64, kI, kH, 0, "vector", 8, 64, 1024, 1.0},
      // H = 16 in place with the MLA layout change: staged rounds of 8 whole rows (512 / emb 64
      // coefficient slots), 16 x 8 chunks a row in bf16, 16 x 16 in f32.
      {"small rope_inplace bf16", Call::rope_inplace, DType::bf16, TokenLayout::sbhd, 8, 16, 128,
       64, kI, kH, 0, "staged_vector", 1, 128, 1024, 1.0},
      {"small rope_inplace f32", Call::rope_inplace, DType::f32, TokenLayout::sbhd, 8, 16, 128, 64,
       kI, kH, 0, "staged_vector", 1, 128, 2048, 1.0},
      {"small rope_inplace thd bf16", Call::rope_inplace, DType::bf16, TokenLayout::thd, 8, 16, 128,
       64, kI, kH, 0, "staged_vector", 1, 128, 1024, 0.98},
      // One small head: 8 chunks (f32 emb 8: 2), one warp; THD of few sequences (their copy in
      // each block's shared memory) a block a row past max_thd_blocks, any layout stops at 2^20.
      {"rope thd bf16 few sequences past 4096 rows", Call::rope, DType::bf16, TokenLayout::thd,
       5000, 1, 0, 64, kI, kH, 0, "chunked_vector", 5000, 32, 8, 0.73},
      {"rope sbhd f32 past the block cap", Call::rope, DType::f32, TokenLayout::sbhd, (1 << 20) + 6,
       1, 0, 8, kH, kH, 0, "chunked_vector", 1 << 20, 32, 2, 0.0},
      // YaRN tables: one block per row, a thread per pair.
      {"yarn_tables bf16", Call::yarn, DType::bf16, TokenLayout::sbhd, 8, 1, 0, 64, kI, kH, 0, "",
       8, 32, 32, 1.0},
      {"yarn_tables f32 128 pairs", Call::yarn, DType::f32, TokenLayout::sbhd, 8, 1, 0, 256, kI, kH,
       0, "", 8, 128, 128, 1.0},
  };
  return calls;
}

// Zeroed bytes starting at a 256-byte boundary (cudaMalloc's alignment); views at element
// offsets. Unbacked when `backed` is false (builder-only calls: nothing reads the memory).
class Arena {
 public:
  Arena(std::int64_t bytes, bool backed)
      : storage_(backed ? static_cast<std::size_t>(bytes + 256) : 0, 0) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    base_ = backed ? storage_.data() + (256 - address % 256) % 256
                   : reinterpret_cast<unsigned char*>(std::uintptr_t{1} << 20);
  }
  // A view of `shape`, C order, at byte offset `offset` (kept 256-aligned by the caller) plus
  // `shift` elements.
  TensorView view(std::int64_t offset, std::int64_t shift, DType dtype,
                  const std::vector<std::int64_t>& shape) {
    TensorView v;
    v.data = base_ + offset + shift * static_cast<std::int64_t>(dtype_size(dtype));
    v.dtype = dtype;
    v.rank = static_cast<int>(shape.size());
    std::int64_t stride = 1;
    for (int d = v.rank - 1; d >= 0; --d) {
      v.shape[static_cast<std::size_t>(d)] = shape[static_cast<std::size_t>(d)];
      v.strides[static_cast<std::size_t>(d)] = stride;
      stride *= shape[static_cast<std::size_t>(d)];
    }
    return v;
  }

 private:
  std::vector<unsigned char> storage_;
  unsigned char* base_ = nullptr;
};

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// Room for a tensor of `shape` in `dtype`, rounded up to 256 bytes, plus 256 for a shift.
std::int64_t room(const std::vector<std::int64_t>& shape, DType dtype) {
  return (elements(shape) * static_cast<std::int64_t>(dtype_size(dtype)) + 255) / 256 * 256 + 256;
}

// Activation shape: SBHD [S, B, H, width] or THD [T, H, width].
std::vector<std::int64_t> activation_shape(const Canonical& c, std::int64_t heads,
                                           std::int64_t width) {
  if (c.layout == TokenLayout::thd) return {c.rows, heads, width};
  const std::int64_t b = c.rows % 2 == 0 ? 2 : 1;
  return {c.rows / b, b, heads, width};
}

// What a canonical call got: from the launch builder (CUDA profile) and the GPU model's run.
struct Observed {
  std::string variant;
  kernels::GridShape grid;
  std::int64_t work = 0;
  std::vector<ModelLaunchStats> model;
};

const char* variant_name(detail::RopeVariant v) {
  switch (v) {
    case detail::RopeVariant::chunked_vector: return "chunked_vector";
    case detail::RopeVariant::chunked_scalar: return "chunked_scalar";
    case detail::RopeVariant::staged_vector: return "staged_vector";
    case detail::RopeVariant::whole_slice_scalar: return "whole_slice_scalar";
  }
  return "?";
}
const char* variant_name(detail::KvVariant v) {
  return v == detail::KvVariant::vector ? "vector" : "scalar";
}

// The call's buffers and descriptors: tables [rows, emb] f32 (aligned), activations shifted.
class CanonicalRun {
 public:
  explicit CanonicalRun(const Canonical& c)
      : c_(c), backed_(c.min_sector_efficiency > 0), arena_(total_bytes(), backed_) {}

  Observed run() {
    const detail::LaunchProfile profile = detail::cuda_launch_profile();
    HostStreamOptions options;
    options.gpu_model = true;
    Stream stream = Stream::host(options);
    Observed o;
    switch (c_.call) {
      case Call::rope:
      case Call::rope_backward: {
        const TensorView in = next_view(c_.shift, rope_shape()),
                         out = next_view(c_.shift, rope_shape());
        const RopeArgs args = rope_args();
        const detail::RopeLaunch l =
            detail::make_rope_launch(in, out, args, {false, c_.call == Call::rope_backward},
                                     profile);
        o = {variant_name(l.variant), l.grid, l.work, {}};
        if (!backed_) break;
        if (c_.call == Call::rope) rope(RopeCall{in, out, args}, stream);
        else rope_backward(RopeBackwardCall{in, out, args}, stream);
        break;
      }
      case Call::rope_inplace:
      case Call::rope_backward_inplace: {
        const TensorView t = next_view(c_.shift, rope_shape());
        const RopeArgs args = rope_args();
        const bool adjoint = c_.call == Call::rope_backward_inplace;
        const detail::RopeLaunch l = detail::make_rope_launch(t, t, args, {true, adjoint}, profile);
        o = {variant_name(l.variant), l.grid, l.work, {}};
        if (!backed_) break;
        if (adjoint) rope_backward_inplace(RopeBackwardInplaceCall{t, args}, stream);
        else rope_inplace(RopeInplaceCall{t, args}, stream);
        break;
      }
      case Call::kv_split: {
        KvSplitCall k;
        k.kv = next_view(c_.shift, activation_shape(c_, c_.heads, 2 * c_.nope));
        k.k_pe = next_view(c_.shift, activation_shape(c_, 1, c_.emb));
        k.key = next_view(0, activation_shape(c_, c_.heads, c_.nope + c_.emb));
        k.value = next_view(0, activation_shape(c_, c_.heads, c_.nope));
        k.args = kv_args();
        const detail::KvSplitLaunch l = detail::make_kv_split_launch(k, profile);
        o = {variant_name(l.variant), l.grid, l.work, {}};
        if (backed_) kv_split(k, stream);
        break;
      }
      case Call::kv_split_backward: {
        KvSplitBackwardCall k;
        k.grad_key = next_view(c_.shift, activation_shape(c_, c_.heads, c_.nope + c_.emb));
        k.grad_value = next_view(0, activation_shape(c_, c_.heads, c_.nope));
        k.grad_kv = next_view(0, activation_shape(c_, c_.heads, 2 * c_.nope));
        k.grad_k_pe = next_view(0, activation_shape(c_, 1, c_.emb));
        k.args = kv_args();
        const detail::KvSplitBackwardLaunch l = detail::make_kv_split_backward_launch(k, profile);
        o = {variant_name(l.variant), l.grid, l.work, {}};
        if (backed_) kv_split_backward(k, stream);
        break;
      }
      case Call::yarn: {
        YarnTablesCall y;
        y.params.scaling_factor = 40;
        y.cos = next_view(0, {c_.rows, c_.emb});
        y.sin = next_view(0, {c_.rows, c_.emb});
        const detail::YarnLaunch l = detail::make_yarn_launch(y, profile);
        o = {"", l.grid, l.work, {}};
        if (backed_) yarn_tables(y, stream);
        break;
      }
    }
    stream.synchronize();
    o.model = take_model_stats(stream);
    return o;
  }

 private:
  std::vector<std::int64_t> rope_shape() const {
    return activation_shape(c_, c_.heads, c_.nope + c_.emb);
  }

  std::int64_t total_bytes() const {
    const std::int64_t width = 2 * c_.nope + c_.emb;  // the widest activation of any op
    return 6 * room(activation_shape(c_, c_.heads, width), DType::f32) +
           2 * room({c_.rows, c_.emb}, DType::f32);
  }

  TensorView next_view(std::int64_t shift, const std::vector<std::int64_t>& shape, DType dtype) {
    const TensorView v = arena_.view(used_, shift, dtype, shape);
    used_ += room(shape, dtype);
    return v;
  }
  TensorView next_view(std::int64_t shift, const std::vector<std::int64_t>& shape) {
    return next_view(shift, shape, c_.dtype);
  }

  Rotation rotation() {
    Rotation r;
    r.in_layout = c_.in;
    r.out_layout = c_.out;
    r.table_layout = PairLayout::half;
    r.cos = next_view(0, {c_.rows, c_.emb}, DType::f32);
    r.sin = next_view(0, {c_.rows, c_.emb}, DType::f32);
    return r;
  }

  Positions positions() {
    Positions p;
    p.layout = c_.layout;
    if (c_.layout == TokenLayout::thd) {
      cu_seqlens_ = {0, static_cast<std::int32_t>(c_.rows / 3), static_cast<std::int32_t>(c_.rows)};
      p.freq_mode = FreqMode::packed;
      p.cu_seqlens = {cu_seqlens_.data(), IndexType::i32, 3};
    }
    return p;
  }

  RopeArgs rope_args() {
    RopeArgs a;
    a.nope_dim = c_.nope;
    a.emb_dim = c_.emb;
    a.rotation = rotation();
    a.positions = positions();
    a.status = &status_;
    return a;
  }

  KvSplitArgs kv_args() {
    KvSplitArgs a;
    a.k_dim = a.v_dim = c_.nope;
    a.emb_dim = c_.emb;
    a.rotation = rotation();
    a.positions = positions();
    a.status = &status_;
    return a;
  }

  const Canonical& c_;
  bool backed_;
  Arena arena_;
  std::int64_t used_ = 0;
  std::vector<std::int32_t> cu_seqlens_;
  DeviceStatus status_ = kStatusOk;
};

class CanonicalLaunch : public ::testing::TestWithParam<std::size_t> {};

TEST_P(CanonicalLaunch, GetsTheDocumentedVariantGridAndWork) {
  const Canonical& c = canonical_calls()[GetParam()];
  SCOPED_TRACE(c.name);
  const Observed o = CanonicalRun(c).run();
  EXPECT_EQ(o.variant, c.variant);
  EXPECT_EQ(o.grid.blocks, c.blocks);
  EXPECT_EQ(o.grid.threads, c.threads);
  EXPECT_EQ(o.work, c.work);
  // Items per thread: the rule's figure, the work over the block's threads.
  EXPECT_EQ((o.work + o.grid.threads - 1) / o.grid.threads, (c.work + c.threads - 1) / c.threads);
  if (c.min_sector_efficiency == 0) return;  // builder only
  ASSERT_EQ(o.model.size(), 1u) << "one launch per call";
  const ModelLaunchStats& m = o.model[0];
  const std::string want = c.call == Call::yarn
                               ? std::string("yarn_tables")
                               : std::string(to_string(op_of(c.call))) + "/" + c.variant + "/" +
                                     std::string(to_string(c.dtype));
  EXPECT_EQ(m.kernel, want) << "the launch the stream ran";
  EXPECT_EQ(m.blocks, c.blocks) << "the GPU model runs the CUDA geometry";
  EXPECT_EQ(m.threads, c.threads);
  EXPECT_EQ(m.errors, 0);
  EXPECT_GE(m.sector_efficiency(), c.min_sector_efficiency) << "predicted sector efficiency fell";
  std::printf("  %-40s %-24s grid %7lld x %3d, %5lld items/thread, sector efficiency %.3f\n",
              c.name.c_str(), m.kernel.c_str(), static_cast<long long>(m.blocks), m.threads,
              static_cast<long long>((c.work + c.threads - 1) / c.threads), m.sector_efficiency());
}

std::string case_name(const ::testing::TestParamInfo<std::size_t>& info) {
  std::string name = canonical_calls()[info.param].name;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

// The GPU model refuses a grid a GPU would refuse (the host executor alone would run nothing
// for zero threads): a launch builder that sizes an empty call 1 x 0 fails here, not only on a GPU.
TEST(GpuModelLaunch, RefusesConfigurationsAGpuRefuses) {
  for (const kernels::GridShape bad :
       {kernels::GridShape{1, 0}, kernels::GridShape{0, 32}, kernels::GridShape{1, 1025},
        kernels::GridShape{std::int64_t{1} << 31, 32}})
    EXPECT_THROW(host::check_launch_configuration("rope/chunked_vector/bf16", bad), Error)
        << bad.blocks << " x " << bad.threads;
  EXPECT_NO_THROW(
      host::check_launch_configuration("rope/chunked_vector/bf16", kernels::GridShape{1, 1024}));
  // An empty yarn_tables call launches nothing under the model.
  HostStreamOptions options;
  options.gpu_model = true;
  Stream stream = Stream::host(options);
  float cos[1], sin[1];
  YarnTablesCall y;
  y.cos = contiguous_view<void>(cos, DType::f32, {0, 64});
  y.sin = contiguous_view<void>(sin, DType::f32, {0, 64});
  EXPECT_NO_THROW(yarn_tables(y, stream));
  EXPECT_TRUE(take_model_stats(stream).empty());
}

// The staged in-place body plans each round before its prepare phase, which copies the round's
// slices into shared memory (asynchronous copies: up to 16 chunks of 16 bytes a thread) and
// loads its rows' coefficients in one batch a thread (for the first threads a pair chunk's 4
// runs of kPairs floats of the half-layout f32 table): a round, of one or two rows
// (DeepSeek-V3) or of 8 (16 heads), waits for one round trip, in one phase with loads, and its
// work phase loads nothing. Loading the coefficients in the work phase makes two phases with
// loads a round; staging by loads and shared stores in small groups makes as many round trips
// as stores end batches (a store to shared memory ends a batch as a global one does), and a
// wait for the copies inside the loop one a step. sass_batches holds the compiled code to the
// 16.
TEST(StagedRounds, ARoundWaitsForOneBatchInOnePhase) {
  for (const char* name :
       {"q rope_inplace bf16", "q rope_inplace f32", "q rope_inplace thd bf16",
        "small rope_inplace bf16", "small rope_inplace f32", "small rope_inplace thd bf16"}) {
    SCOPED_TRACE(name);
    const auto& calls = canonical_calls();
    const auto c = std::find_if(calls.begin(), calls.end(),
                                [&](const Canonical& k) { return k.name == name; });
    ASSERT_NE(c, calls.end());
    const Observed o = CanonicalRun(*c).run();
    ASSERT_EQ(o.model.size(), 1u);
    const ModelLaunchStats& m = o.model[0];
    ASSERT_EQ(m.blocks_run, c->blocks);  // a round a block
    EXPECT_EQ(m.round_trips, m.blocks_run);
    EXPECT_EQ(m.load_phases, m.blocks_run);
    const std::int64_t pairs = c->dtype == DType::f32 ? 2 : 4;
    EXPECT_EQ(m.largest_batch_bytes, c->work / c->threads * 16 + 4 * pairs * 4);
    if (c->layout == TokenLayout::sbhd) {
      EXPECT_EQ(m.index_round_trips, 0);
    }
  }
}

// The staged body's rounds as docs/kernels.md gives them (launch geometry): R = min(2048 /
// (H x chunks), 512 / emb_dim) whole rows where R > 1, else min(H, 2048 / chunks) slices of
// one row, each at least 1. 2,048 chunks (32 KiB) is the occupancy trade the timing model
// priced (4 blocks an SM by shared memory); a change to it is one to re-measure. Head counts
// and slice widths on both sides of every quotient's steps (683 x 3 = 2049).
TEST(StagedRounds, RoundsHoldTheDocumentedChunks) {
  for (std::int64_t chunks : {1, 2, 3, 4, 8, 16, 32, 64}) {
    const std::int64_t emb = chunks * 8;  // bf16: 4 pairs a chunk
    std::vector<std::int64_t> head_counts = {683, 2049 / chunks, 2048 / chunks + 1};
    for (std::int64_t h = 1; h <= 2100; h += h < 70 ? 1 : 29) head_counts.push_back(h);
    for (std::int64_t h : head_counts) {
      SCOPED_TRACE("heads " + std::to_string(h) + ", chunks " + std::to_string(chunks));
      const std::int64_t rows =
          std::max<std::int64_t>(1, std::min<std::int64_t>(2048 / (h * chunks), 512 / emb));
      EXPECT_EQ(kernels::staged_rows_per_round(h, chunks, emb), rows);
      const std::int64_t slices =
          std::max<std::int64_t>(1, std::min<std::int64_t>(h, 2048 / chunks));
      EXPECT_EQ(kernels::staged_slices_per_round(h, chunks), slices);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dsv3, CanonicalLaunch,
                         ::testing::Range<std::size_t>(0, canonical_calls().size()), case_name);

}  // namespace
}  // namespace mlarope::test

namespace mlarope::test {
namespace {

// n elements from a fixed seed. T: float, or std::uint16_t holding f16 or bf16 bits (about
// +-1 in either).
template <class T>
std::vector<T> random_elements(std::size_t n, std::uint32_t seed) {
  std::vector<T> v(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  for (T& e : v) {
    if constexpr (std::is_same_v<T, float>) e = value(rng);
    else e = static_cast<std::uint16_t>((value(rng) < 0 ? 0x8000u : 0u) + 0x3C00u + rng() % 0x300u);
  }
  return v;
}

std::uint32_t element_bits(float x) {
  std::uint32_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
std::uint32_t element_bits(std::uint16_t x) { return x; }

// The host's fast mode has bodies of its own (thread 0 takes a row, one memcpy per part), and
// beyond them (kv_split with emb_dim > 512) runs the device bodies with its own share of work:
// one contiguous (head, item) range per thread, which with many heads and long k and v parts
// starts and ends inside heads. Both must give the GPU model's bits (the device code paths,
// kv_split_backward's head sums among them), for kv_split and kv_split_backward, in every
// dtype and pair of layouts.
template <class T>
void expect_fast_kv_gives_the_models_bits(DType dtype, std::int64_t H, std::int64_t E,
                                          PairLayout in, PairLayout out) {
  constexpr std::int64_t S = 4, B = 2, K = 128, V = 128;
  SCOPED_TRACE(std::string(to_string(dtype)) + ", H = " + std::to_string(H) + ", emb " +
               std::to_string(E) + ", layouts " + std::string(to_string(in)) + " -> " +
               std::string(to_string(out)));
  const std::vector<T> kv = random_elements<T>(S * B * H * (K + V), 1),
                       k_pe = random_elements<T>(S * B * E, 2),
                       grad_key = random_elements<T>(S * B * H * (K + E), 3),
                       grad_value = random_elements<T>(S * B * H * V, 4);
  std::vector<float> cos(S * E), sin(S * E);
  for (std::size_t i = 0; i < cos.size(); ++i)
    cos[i] = 0.6f + 0.001f * static_cast<float>(i % 97), sin[i] = 0.8f;
  auto run = [&](bool gpu_model) {
    std::vector<std::vector<T>> o{std::vector<T>(S * B * H * (K + E)),
                                  std::vector<T>(S * B * H * V),
                                  std::vector<T>(S * B * H * (K + V)), std::vector<T>(S * B * E)};
    HostStreamOptions options;
    options.gpu_model = gpu_model;
    Stream stream = Stream::host(options);
    KvSplitArgs a;
    a.k_dim = K, a.v_dim = V, a.emb_dim = E;
    a.rotation.in_layout = in, a.rotation.out_layout = out;
    a.rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {S, E});
    a.rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {S, E});
    kv_split(KvSplitCall{contiguous_view<const void>(kv.data(), dtype, {S, B, H, K + V}),
                         contiguous_view<const void>(k_pe.data(), dtype, {S, B, 1, E}),
                         contiguous_view<void>(o[0].data(), dtype, {S, B, H, K + E}),
                         contiguous_view<void>(o[1].data(), dtype, {S, B, H, V}), a},
             stream);
    kv_split_backward(
        KvSplitBackwardCall{contiguous_view<const void>(grad_key.data(), dtype, {S, B, H, K + E}),
                            contiguous_view<const void>(grad_value.data(), dtype, {S, B, H, V}),
                            contiguous_view<void>(o[2].data(), dtype, {S, B, H, K + V}),
                            contiguous_view<void>(o[3].data(), dtype, {S, B, 1, E}), a},
        stream);
    stream.synchronize();
    return o;
  };
  const auto model = run(true), fast = run(false);
  const char* names[] = {"key", "value", "grad_kv", "grad_k_pe"};
  for (std::size_t i = 0; i < model.size(); ++i)
    for (std::size_t e = 0; e < model[i].size(); ++e)
      ASSERT_EQ(element_bits(fast[i][e]), element_bits(model[i][e]))
          << names[i] << ", element " << e;
}

// rope's fast body (rope_on_host: whole slices, SIMD conversions for bf16) against the GPU
// model's device bodies: in place and out of place, forward and backward, every pair of
// layouts, every dtype, at emb_dims whose half has a tail past the SIMD steps (72: 36 pairs,
// 10: 5) and none (64).
template <class T>
void expect_fast_rope_gives_the_models_bits(DType dtype, std::int64_t E, PairLayout in,
                                            PairLayout out) {
  constexpr std::int64_t S = 3, B = 2, H = 5, N = 6;
  const std::vector<T> t = random_elements<T>(S * B * H * (N + E), 1);
  std::vector<float> cos(S * E), sin(S * E);
  for (std::size_t i = 0; i < cos.size(); ++i)
    cos[i] = 0.6f + 0.001f * static_cast<float>(i % 97),
    sin[i] = 0.8f - 0.002f * static_cast<float>(i % 31);
  auto run = [&](bool gpu_model) {
    std::vector<std::vector<T>> results;
    HostStreamOptions options;
    options.gpu_model = gpu_model;
    Stream stream = Stream::host(options);
    RopeArgs a;
    a.nope_dim = N, a.emb_dim = E;
    a.rotation.in_layout = in, a.rotation.out_layout = out;
    a.rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {S, E});
    a.rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {S, E});
    std::vector<T> o(t.size()), g(t.size()), inplace = t, grad_inplace = t;
    rope(RopeCall{contiguous_view<const void>(t.data(), dtype, {S, B, H, N + E}),
                  contiguous_view<void>(o.data(), dtype, {S, B, H, N + E}), a},
         stream);
    rope_backward(RopeBackwardCall{contiguous_view<const void>(t.data(), dtype, {S, B, H, N + E}),
                                   contiguous_view<void>(g.data(), dtype, {S, B, H, N + E}), a},
                  stream);
    rope_inplace(RopeInplaceCall{contiguous_view<void>(inplace.data(), dtype, {S, B, H, N + E}), a},
                 stream);
    rope_backward_inplace(RopeBackwardInplaceCall{contiguous_view<void>(grad_inplace.data(), dtype,
                                                                        {S, B, H, N + E}),
                                                  a},
                          stream);
    stream.synchronize();
    return std::vector<std::vector<T>>{o, g, inplace, grad_inplace};
  };
  const auto model = run(true), fast = run(false);
  const char* names[] = {"rope", "rope_backward", "rope_inplace", "rope_backward_inplace"};
  for (std::size_t i = 0; i < model.size(); ++i)
    for (std::size_t e = 0; e < model[i].size(); ++e)
      ASSERT_EQ(element_bits(fast[i][e]), element_bits(model[i][e]))
          << names[i] << ", " << to_string(dtype) << ", emb " << E << ", layouts " << to_string(in)
          << " -> " << to_string(out) << ", element " << e;
}

TEST(FastMode, RopeGivesTheModelsBits) {
  for (std::int64_t E : {64, 72, 10})
    for (PairLayout in : {PairLayout::interleaved, PairLayout::half})
      for (PairLayout out : {PairLayout::interleaved, PairLayout::half}) {
        expect_fast_rope_gives_the_models_bits<std::uint16_t>(DType::bf16, E, in, out);
        expect_fast_rope_gives_the_models_bits<std::uint16_t>(DType::f16, E, in, out);
        expect_fast_rope_gives_the_models_bits<float>(DType::f32, E, in, out);
      }
}

// DeepSeek-V3 (the fast bodies; the model's staged head sums), 16 heads (the model's head sums
// a chunk a thread), and past the fast bodies (emb 520: device bodies, host ranges).
TEST(FastMode, KvShapesGiveTheModelsBits) {
  for (const auto& [heads, emb] :
       {std::pair<std::int64_t, std::int64_t>{128, 64}, {16, 64}, {16, 520}})
    for (PairLayout in : {PairLayout::interleaved, PairLayout::half})
      for (PairLayout out : {PairLayout::interleaved, PairLayout::half}) {
        expect_fast_kv_gives_the_models_bits<std::uint16_t>(DType::bf16, heads, emb, in, out);
        expect_fast_kv_gives_the_models_bits<std::uint16_t>(DType::f16, heads, emb, in, out);
        expect_fast_kv_gives_the_models_bits<float>(DType::f32, heads, emb, in, out);
      }
}

// The fast bodies work in thread 0 of each block, and the host runs that thread alone
// (launch_thread_zero): launched over every thread of their grid instead, the other threads
// must do nothing. In place, another thread's work would rotate each slice a second time.
TEST(FastMode, BodiesWorkInThreadZeroAlone) {
  constexpr std::int64_t S = 3, B = 2, H = 5, N = 6, E = 64, K = 16, V = 8;
  const host::HostExecutor executor(11, 2);
  const detail::LaunchProfile profile = detail::cuda_launch_profile();
  std::vector<float> cos(S * E), sin(S * E);
  for (std::size_t i = 0; i < cos.size(); ++i)
    cos[i] = 0.6f + 0.001f * static_cast<float>(i % 97), sin[i] = 0.8f;
  Rotation rotation;
  rotation.in_layout = PairLayout::interleaved, rotation.out_layout = PairLayout::half;
  rotation.cos = contiguous_view<const void>(cos.data(), DType::f32, {S, E});
  rotation.sin = contiguous_view<const void>(sin.data(), DType::f32, {S, E});
  // Each body's outputs, launched over every thread, then over thread 0 alone.
  auto expect_same = [](const std::vector<float>& every, const std::vector<float>& first,
                        const char* name) {
    for (std::size_t e = 0; e < every.size(); ++e)
      ASSERT_EQ(element_bits(every[e]), element_bits(first[e])) << name << ", element " << e;
  };
  {
    RopeArgs a;
    a.nope_dim = N, a.emb_dim = E, a.rotation = rotation;
    std::vector<float> every = random_elements<float>(S * B * H * (N + E), 1), first = every;
    const auto launch_on = [&](std::vector<float>& t) {
      const TensorView v = contiguous_view<void>(t.data(), DType::f32, {S, B, H, N + E});
      return detail::make_rope_launch(v, v, a, {true, false}, profile);
    };
    const detail::RopeLaunch l = launch_on(every);
    ASSERT_GT(l.grid.threads, 1);
    host::launch(executor, l.grid, &kernels::rope_on_host<float>, l.args);
    host::launch_thread_zero(executor, l.grid, &kernels::rope_on_host<float>,
                             launch_on(first).args);
    expect_same(every, first, "rope_inplace");
  }
  KvSplitArgs a;
  a.k_dim = K, a.v_dim = V, a.emb_dim = E, a.rotation = rotation;
  const std::vector<float> kv = random_elements<float>(S * B * H * (K + V), 2),
                           k_pe = random_elements<float>(S * B * E, 3);
  std::vector<std::vector<float>> every(4), first(4);
  for (auto* outputs : {&every, &first}) {
    auto& o = *outputs;
    o = {std::vector<float>(S * B * H * (K + E)), std::vector<float>(S * B * H * V),
         std::vector<float>(S * B * H * (K + V)), std::vector<float>(S * B * E)};
    const detail::KvSplitLaunch l = detail::make_kv_split_launch(
        KvSplitCall{contiguous_view<const void>(kv.data(), DType::f32, {S, B, H, K + V}),
                    contiguous_view<const void>(k_pe.data(), DType::f32, {S, B, 1, E}),
                    contiguous_view<void>(o[0].data(), DType::f32, {S, B, H, K + E}),
                    contiguous_view<void>(o[1].data(), DType::f32, {S, B, H, V}), a},
        profile);
    // The backward takes the forward's outputs as its gradients.
    const detail::KvSplitBackwardLaunch b = detail::make_kv_split_backward_launch(
        KvSplitBackwardCall{contiguous_view<const void>(o[0].data(), DType::f32, {S, B, H, K + E}),
                            contiguous_view<const void>(o[1].data(), DType::f32, {S, B, H, V}),
                            contiguous_view<void>(o[2].data(), DType::f32, {S, B, H, K + V}),
                            contiguous_view<void>(o[3].data(), DType::f32, {S, B, 1, E}), a},
        profile);
    ASSERT_GT(l.grid.threads, 1);
    ASSERT_GT(b.grid.threads, 1);
    constexpr int kPairs = kernels::kVectorPairs<float>;
    if (outputs == &every) {
      host::launch(executor, l.grid, &kernels::kv_split_on_host<float>, l.args);
      host::launch(executor, b.grid, &kernels::kv_split_backward_on_host<float, kPairs>, b.args);
    } else {
      host::launch_thread_zero(executor, l.grid, &kernels::kv_split_on_host<float>, l.args);
      host::launch_thread_zero(executor, b.grid, &kernels::kv_split_backward_on_host<float, kPairs>,
                               b.args);
    }
  }
  const char* names[] = {"key", "value", "grad_kv", "grad_k_pe"};
  for (std::size_t i = 0; i < every.size(); ++i) expect_same(every[i], first[i], names[i]);
}

}  // namespace
}  // namespace mlarope::test
