// SPDX-License-Identifier: Apache-2.0
// Test cases of the rope family and kv_split (see backend_cases.h).
#include "test_support/backend_cases.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "reference.h"

namespace mlarope::test {
namespace {

constexpr std::int64_t kAllBitwise = std::numeric_limits<std::int64_t>::max();

// Shape and strides of a [rows..., heads, last] activation with padding between heads and rows.
struct Geometry {
  std::vector<std::int64_t> shape, strides;
};

Geometry activation_geometry(const CaseRows& rows, std::int64_t heads, std::int64_t last,
                             std::int64_t head_pad, std::int64_t row_pad, bool broadcast = false) {
  const std::int64_t head_stride = broadcast ? 0 : last + head_pad;
  const std::int64_t row_stride = (broadcast ? last : heads * head_stride) + row_pad;
  if (rows.layout == TokenLayout::sbhd)
    return {{rows.seq, rows.batch, heads, last},
            {rows.batch * row_stride, row_stride, head_stride, 1}};
  return {{row_count(rows), heads, last}, {row_stride, head_stride, 1}};
}

Tensor make_tensor(DType dtype, const Geometry& g) { return Tensor(dtype, g.shape, g.strides); }

// Elementwise max over the view (the magnitude of the two sign passes).
void take_max(Tensor& a, const Tensor& b) {
  a.for_each_index(
      [&](const std::vector<std::int64_t>& i) { a.set(i, std::max(a.get(i), b.get(i))); });
}

// |cos| and -|sin| or +|sin|, for the magnitude runs.
Tensor signed_abs(const Tensor& t, double sign) {
  Tensor out = t.host_copy();
  out.fill([&](const std::vector<std::int64_t>& i) { return sign * std::fabs(t.get(i)); });
  return out;
}

Rotation rotation_of(const LayoutTriple& l, bool inverse, const ConstTensorView& cos,
                     const ConstTensorView& sin) {
  Rotation r;
  r.in_layout = l.in_layout;
  r.out_layout = l.out_layout;
  r.table_layout = l.table_layout;
  r.inverse = inverse;
  r.cos = cos;
  r.sin = sin;
  return r;
}

DeviceBuffer zeroed_status(BackendKind kind) {
  DeviceBuffer b(kind, sizeof(DeviceStatus));
  b.fill_bytes(0);
  return b;
}

DeviceStatus read_status(const DeviceBuffer& b) {
  DeviceStatus s = 0;
  b.copy_to_host(&s, sizeof s);
  return s;
}

}  // namespace

std::int64_t row_count(const CaseRows& rows) {
  if (rows.layout == TokenLayout::sbhd) return rows.seq * rows.batch;
  if (rows.thd_rows >= 0) return rows.thd_rows;
  std::int64_t local = 0;
  for (std::size_t i = 0; i + 1 < rows.cu_seqlens.size(); ++i)
    local += std::max<std::int64_t>(0, rows.cu_seqlens[i + 1] - rows.cu_seqlens[i]) / rows.cp_size;
  return local + rows.padding_rows;
}

std::int64_t needed_table_rows(const CaseRows& rows) {
  if (rows.table_rows > 0) return rows.table_rows;
  if (rows.layout == TokenLayout::sbhd) return rows.seq * rows.cp_size + 4;
  std::int64_t longest = 0;
  for (std::size_t i = 0; i + 1 < rows.cu_seqlens.size(); ++i)
    longest = std::max(longest, rows.cu_seqlens[i + 1] - rows.cu_seqlens[i]);
  const std::int64_t total = rows.cu_seqlens.empty() ? 0 : rows.cu_seqlens.back();
  return std::max(longest, total) + 4;
}

// --- CaseMetadata ------------------------------------------------------------------------------

CaseMetadata::CaseMetadata(const CaseRows& rows, std::int64_t table_rows, std::uint64_t seed)
    : rows_(rows) {
  Rng rng(seed ^ 0x5bd1e995u);
  if (rows.layout == TokenLayout::thd) cu_seqlens_ = IndexArray(rows.cu_seqlens);
  if (rows.position_ids) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(row_count(rows)));
    for (std::int64_t& id : ids) id = rng.below(table_rows);
    position_ids_ = IndexArray(ids, *rows.position_ids);
  }
  if (rows.seq_offsets) {
    const std::size_t n = rows.layout == TokenLayout::sbhd ? static_cast<std::size_t>(rows.batch)
                                                           : rows.cu_seqlens.size() - 1;
    std::vector<std::int64_t> offsets(n);
    for (std::int64_t& o : offsets) o = rng.below(4);
    seq_offsets_ = IndexArray(offsets);
  }
}

void CaseMetadata::upload(BackendKind kind) {
  if (rows_.layout == TokenLayout::thd) cu_seqlens_.upload(kind);
  if (rows_.position_ids) position_ids_.upload(kind);
  if (rows_.seq_offsets) seq_offsets_.upload(kind);
}

Positions CaseMetadata::positions(bool device) const {
  Positions p;
  p.layout = rows_.layout;
  p.cp_size = rows_.cp_size;
  p.cp_rank = rows_.cp_rank;
  p.freq_mode = rows_.freq_mode;
  auto view = [&](const IndexArray& a) { return device ? a.device_view() : a.host_view(); };
  if (rows_.layout == TokenLayout::thd) p.cu_seqlens = view(cu_seqlens_);
  if (rows_.position_ids) p.position_ids = view(position_ids_);
  if (rows_.seq_offsets) p.seq_offsets = view(seq_offsets_);
  return p;
}

// --- RopeHarness ------------------------------------------------------------------------------

namespace {
Rng seeded(std::uint64_t seed) { return Rng(seed * 0x9E3779B97F4A7C15ull + 17); }
}  // namespace

RopeHarness::RopeHarness(const RopeCase& c, std::uint64_t data_seed)
    : case_(c), metadata_(c.rows, needed_table_rows(c.rows), data_seed) {
  Rng rng = seeded(data_seed);
  const std::int64_t d = c.nope_dim + c.emb_dim;
  const bool broadcast = c.broadcast_heads && !c.in_place;
  input_ = make_tensor(c.dtype,
                       activation_geometry(c.rows, c.heads, d, c.head_pad, c.row_pad, broadcast));
  input_.fill_uniform(rng);
  input_before_ = input_.host_copy();
  if (!c.in_place)
    output_ = make_tensor(c.dtype, activation_geometry(c.rows, c.heads, d, c.head_pad, c.row_pad));
  const std::int64_t rows = needed_table_rows(c.rows);
  cos_ = random_table(c.table_dtype, rows, c.emb_dim, rng);
  sin_ = random_table(c.table_dtype, rows, c.emb_dim, rng);
}

void RopeHarness::upload(BackendKind kind) {
  input_.upload(kind);
  if (!case_.in_place) output_.upload(kind);
  cos_.upload(kind);
  sin_.upload(kind);
  metadata_.upload(kind);
  status_ = zeroed_status(kind);
}

RopeArgs RopeHarness::args(bool device, DeviceStatus* status, const Tensor& cos,
                           const Tensor& sin) const {
  RopeArgs a;
  a.nope_dim = case_.nope_dim;
  a.emb_dim = case_.emb_dim;
  a.rotation =
      rotation_of(case_.layouts, case_.inverse, device ? cos.device_view() : cos.host_view(),
                  device ? sin.device_view() : sin.host_view());
  a.positions = metadata_.positions(device);
  a.status = status;
  return a;
}

void RopeHarness::run_backend(Stream& stream) {
  const RopeArgs a =
      args(true, case_.status_word ? status_.as<DeviceStatus>() : nullptr, cos_, sin_);
  if (case_.in_place && case_.backward) rope_backward_inplace({input_.device_view(), a}, stream);
  else if (case_.in_place) rope_inplace({input_.device_view(), a}, stream);
  else if (case_.backward) rope_backward({input_.device_view(), output_.device_view(), a}, stream);
  else rope({input_.device_view(), output_.device_view(), a}, stream);
}

void RopeHarness::download() {
  input_.download();
  if (!case_.in_place) output_.download();
  backend_status_ = read_status(status_);
}

void RopeHarness::reference_into(Tensor& in, Tensor& out, const Tensor& cos, const Tensor& sin,
                                 DeviceStatus* status) const {
  const RopeArgs a = args(false, status, cos, sin);
  if (case_.in_place && case_.backward) reference::rope_backward_inplace({in.host_view(), a});
  else if (case_.in_place) reference::rope_inplace({in.host_view(), a});
  else if (case_.backward) reference::rope_backward({in.host_view(), out.host_view(), a});
  else reference::rope({in.host_view(), out.host_view(), a});
}

void RopeHarness::preset_status(DeviceStatus status) {
  initial_status_ = status;
  status_.copy_from_host(&status, sizeof status);
}

void RopeHarness::refill_input(std::uint64_t seed) {
  Rng rng = seeded(seed);
  input_.fill_uniform(rng);
  input_before_ = input_.host_copy();
  input_.sync_to_device();
}

void RopeHarness::run_reference() {
  reference_status_ = initial_status_;
  const Tensor& geometry = case_.in_place ? input_before_ : output_;
  auto fresh_output = [&] {
    return make_tensor(case_.dtype, {geometry.shape(), geometry.strides()});
  };
  Tensor in = input_before_.host_copy();
  reference_out_ = case_.in_place ? input_before_.host_copy() : fresh_output();
  reference_into(case_.in_place ? reference_out_ : in, reference_out_, cos_, sin_,
                 &reference_status_);
  // Magnitudes M = |u c| + |v s|: the reference on |inputs| with |cos| and -|sin| or +|sin|;
  // each sign gets one of the two outputs of a pair exactly, the other smaller.
  DeviceStatus ignored = 0;
  const Tensor cos_abs = signed_abs(cos_, 1.0);
  Tensor passes[2];
  for (int k = 0; k < 2; ++k) {
    Tensor abs_in = input_before_.absolute();
    passes[k] = case_.in_place ? input_before_.absolute() : fresh_output();
    reference_into(case_.in_place ? passes[k] : abs_in, passes[k], cos_abs,
                   signed_abs(sin_, k == 0 ? -1.0 : 1.0), &ignored);
  }
  take_max(passes[0], passes[1]);
  magnitude_ = std::move(passes[0]);
}

std::vector<OutputCheck> RopeHarness::checks() const {
  std::vector<OutputCheck> out;
  const Tensor& result = case_.in_place ? input_ : output_;
  out.push_back({case_.backward ? "grad_t" : "out", &result, &reference_out_, &magnitude_,
                 case_.nope_dim, 0});
  if (!case_.in_place)
    out.push_back({case_.backward ? "grad_out (input)" : "t (input)", &input_, &input_before_,
                   nullptr, kAllBitwise, 0});
  return out;
}

// --- KvHarness --------------------------------------------------------------------------------

KvHarness::KvHarness(const KvCase& c, std::uint64_t data_seed)
    : case_(c), metadata_(c.rows, needed_table_rows(c.rows), data_seed) {
  Rng rng = seeded(data_seed);
  auto geometry = [&](std::int64_t heads, std::int64_t last) {
    return activation_geometry(c.rows, heads, last, c.head_pad, c.row_pad);
  };
  if (!c.backward) {
    in_a_ = make_tensor(c.dtype, geometry(c.heads, c.k_dim + c.v_dim));
    in_b_ = make_tensor(c.dtype, geometry(1, c.emb_dim));
    out_a_ = make_tensor(c.dtype, geometry(c.heads, c.k_dim + c.emb_dim));
    out_b_ = make_tensor(c.dtype, geometry(c.heads, c.v_dim));
  } else {
    in_a_ = make_tensor(c.dtype, geometry(c.heads, c.k_dim + c.emb_dim));
    in_b_ = make_tensor(c.dtype, geometry(c.heads, c.v_dim));
    out_a_ = make_tensor(c.dtype, geometry(c.heads, c.k_dim + c.v_dim));
    out_b_ = make_tensor(c.dtype, geometry(1, c.emb_dim));
  }
  in_a_.fill_uniform(rng);
  in_b_.fill_uniform(rng);
  in_a_before_ = in_a_.host_copy();
  in_b_before_ = in_b_.host_copy();
  const std::int64_t rows = needed_table_rows(c.rows);
  cos_ = random_table(c.table_dtype, rows, c.emb_dim, rng);
  sin_ = random_table(c.table_dtype, rows, c.emb_dim, rng);
}

void KvHarness::upload(BackendKind kind) {
  for (Tensor* t : {&in_a_, &in_b_, &out_a_, &out_b_, &cos_, &sin_}) t->upload(kind);
  metadata_.upload(kind);
  status_ = zeroed_status(kind);
}

KvSplitArgs KvHarness::args(bool device, DeviceStatus* status, const Tensor& cos,
                            const Tensor& sin) const {
  KvSplitArgs a;
  a.k_dim = case_.k_dim;
  a.v_dim = case_.v_dim;
  a.emb_dim = case_.emb_dim;
  a.rotation =
      rotation_of(case_.layouts, case_.inverse, device ? cos.device_view() : cos.host_view(),
                  device ? sin.device_view() : sin.host_view());
  a.positions = metadata_.positions(device);
  a.status = status;
  return a;
}

void KvHarness::run_backend(Stream& stream) {
  const KvSplitArgs a =
      args(true, case_.status_word ? status_.as<DeviceStatus>() : nullptr, cos_, sin_);
  if (case_.backward)
    kv_split_backward({in_a_.device_view(), in_b_.device_view(), out_a_.device_view(),
                       out_b_.device_view(), a},
                      stream);
  else
    kv_split({in_a_.device_view(), in_b_.device_view(), out_a_.device_view(), out_b_.device_view(),
              a},
             stream);
}

void KvHarness::download() {
  for (Tensor* t : {&in_a_, &in_b_, &out_a_, &out_b_}) t->download();
  backend_status_ = read_status(status_);
}

void KvHarness::reference_into(const Tensor& in_a, const Tensor& in_b, Tensor& out_a, Tensor& out_b,
                               const Tensor& cos, const Tensor& sin, DeviceStatus* status) const {
  const KvSplitArgs a = args(false, status, cos, sin);
  if (case_.backward)
    reference::kv_split_backward(
        {in_a.host_view(), in_b.host_view(), out_a.host_view(), out_b.host_view(), a});
  else
    reference::kv_split(
        {in_a.host_view(), in_b.host_view(), out_a.host_view(), out_b.host_view(), a});
}

void KvHarness::run_reference() {
  reference_status_ = 0;
  ref_a_ = make_tensor(case_.dtype, {out_a_.shape(), out_a_.strides()});
  ref_b_ = make_tensor(case_.dtype, {out_b_.shape(), out_b_.strides()});
  reference_into(in_a_before_, in_b_before_, ref_a_, ref_b_, cos_, sin_, &reference_status_);
  DeviceStatus ignored = 0;
  const Tensor abs_a = in_a_before_.absolute(), abs_b = in_b_before_.absolute();
  const Tensor cos_abs = signed_abs(cos_, 1.0);
  Tensor other_a, other_b;
  for (double sign : {-1.0, 1.0}) {
    Tensor a = ref_a_.host_copy(), b = ref_b_.host_copy();
    reference_into(abs_a, abs_b, a, b, cos_abs, signed_abs(sin_, sign), &ignored);
    if (sign < 0) {
      magnitude_a_ = std::move(a);
      magnitude_b_ = std::move(b);
    } else {
      other_a = std::move(a);
      other_b = std::move(b);
    }
  }
  take_max(magnitude_a_, other_a);
  take_max(magnitude_b_, other_b);
}

std::vector<OutputCheck> KvHarness::checks() const {
  std::vector<OutputCheck> out;
  if (!case_.backward) {
    out.push_back({"key", &out_a_, &ref_a_, &magnitude_a_, case_.k_dim, 0});
    out.push_back({"value", &out_b_, &ref_b_, nullptr, kAllBitwise, 0});
    out.push_back({"kv (input)", &in_a_, &in_a_before_, nullptr, kAllBitwise, 0});
    out.push_back({"k_pe (input)", &in_b_, &in_b_before_, nullptr, kAllBitwise, 0});
  } else {
    out.push_back({"grad_kv", &out_a_, &ref_a_, nullptr, kAllBitwise, 0});
    out.push_back(
        {"grad_k_pe", &out_b_, &ref_b_, &magnitude_b_, 0, static_cast<double>(case_.heads)});
    out.push_back({"grad_key (input)", &in_a_, &in_a_before_, nullptr, kAllBitwise, 0});
    out.push_back({"grad_value (input)", &in_b_, &in_b_before_, nullptr, kAllBitwise, 0});
  }
  return out;
}

// --- Running a case ---------------------------------------------------------------------------

namespace {

template <class Harness>
::testing::AssertionResult check_case(const std::string& name, Harness& h, BackendKind backend,
                                      std::uint64_t seed, ErrorStats* errors, bool gpu_model) {
  Stream stream =
      backend == BackendKind::host ? Stream::host({seed, 2, gpu_model}) : Stream::cuda();
  h.upload(backend);
  h.run_backend(stream);
  stream.synchronize();
  h.download();
  h.run_reference();
  ::testing::AssertionResult r = outputs_match(h.checks(), errors);
  if (!r) return ::testing::AssertionFailure() << name << ": " << r.message();
  // Without a status word the call has nowhere to report: the unused word must stay as it was.
  if (!h.has_status_word() && h.backend_status() != 0)
    return ::testing::AssertionFailure() << name << ": a call without a status word wrote one";
  if (h.has_status_word() && h.backend_status() != h.reference_status())
    return ::testing::AssertionFailure()
           << name << ": status " << describe_status(h.backend_status()) << ", reference "
           << describe_status(h.reference_status());
  return ::testing::AssertionSuccess();
}

}  // namespace

::testing::AssertionResult check_rope_case(const RopeCase& c, BackendKind backend,
                                           std::uint64_t seed, ErrorStats* errors, bool gpu_model) {
  RopeHarness h(c, seed);
  return check_case(c.name, h, backend, seed, errors, gpu_model);
}

::testing::AssertionResult check_kv_case(const KvCase& c, BackendKind backend, std::uint64_t seed,
                                         ErrorStats* errors, bool gpu_model) {
  KvHarness h(c, seed);
  return check_case(c.name, h, backend, seed, errors, gpu_model);
}

std::string describe(const LayoutTriple& t) {
  return "in=" + std::string(to_string(t.in_layout)) +
         " out=" + std::string(to_string(t.out_layout)) +
         " table=" + std::string(to_string(t.table_layout));
}

std::vector<LayoutTriple> all_triples() {
  std::vector<LayoutTriple> triples;
  for (PairLayout in : {PairLayout::half, PairLayout::interleaved})
    for (PairLayout out : {PairLayout::half, PairLayout::interleaved})
      for (PairLayout table : {PairLayout::half, PairLayout::interleaved})
        triples.push_back({in, out, table});
  return triples;
}

}  // namespace mlarope::test
