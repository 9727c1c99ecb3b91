// SPDX-License-Identifier: Apache-2.0
// Helpers of the backend tests (see backend_test_util.h).
#include "test_support/backend_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "host_convert.h"

namespace mlarope::test {

void BackendTest::SetUp() {
  if (GetParam() == BackendKind::cuda && !cuda_device_available())
    GTEST_SKIP() << "CUDA backend: no CUDA device available here (or a build without CUDA); "
                    "the host instance of this test ran the same kernel bodies";
}

Stream BackendTest::make_stream(std::uint64_t seed) const {
  if (GetParam() == BackendKind::host) return Stream::host({seed, 2});
  return Stream::cuda();
}

std::string backend_name(const ::testing::TestParamInfo<BackendKind>& info) {
  return std::string(to_string(info.param));
}

// --- Tensor ----------------------------------------------------------------------------------

Tensor::Tensor(DType dtype, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides)
    : dtype_(dtype), shape_(std::move(shape)), strides_(std::move(strides)) {
  if (strides_.empty()) {
    strides_.assign(shape_.size(), 0);
    std::int64_t stride = 1;
    for (int d = rank() - 1; d >= 0; --d) {
      strides_[d] = stride;
      stride *= shape_[d];
    }
  }
  std::int64_t span = numel() > 0 ? 1 : 0;
  for (int d = 0; d < rank() && numel() > 0; ++d) span += (shape_[d] - 1) * strides_[d];
  bytes_.assign(2 * kGuardBytes + static_cast<std::size_t>(span) * dtype_size(dtype_), 0xA5);
}

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t s : shape_) n *= s;
  return n;
}

namespace {
template <class View, class Void>
View make_view(Void* data, DType dtype, const std::vector<std::int64_t>& shape,
               const std::vector<std::int64_t>& strides) {
  View v;
  v.data = data;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  for (int d = 0; d < v.rank; ++d) {
    v.shape[d] = shape[d];
    v.strides[d] = strides[d];
  }
  return v;
}
}  // namespace

TensorView Tensor::host_view() {
  return make_view<TensorView>(bytes_.data() + kGuardBytes, dtype_, shape_, strides_);
}
ConstTensorView Tensor::host_view() const {
  return make_view<ConstTensorView>(bytes_.data() + kGuardBytes, dtype_, shape_, strides_);
}
TensorView Tensor::device_view() {
  return make_view<TensorView>(device_.as<unsigned char>() + device_offset_ + kGuardBytes, dtype_,
                               shape_, strides_);
}
ConstTensorView Tensor::device_view() const { return const_cast<Tensor*>(this)->device_view(); }

void Tensor::upload(BackendKind kind) {
  const CopyPlacement at = place_copy(bytes_.data(), bytes_.size());
  device_ = DeviceBuffer(kind, at.buffer_bytes);
  device_offset_ = at.offset;
  sync_to_device();
}

void Tensor::download() { device_.copy_to_host(bytes_.data(), bytes_.size(), device_offset_); }

void Tensor::sync_to_device() {
  device_.copy_from_host(bytes_.data(), bytes_.size(), device_offset_);
}

std::int64_t Tensor::offset(const std::vector<std::int64_t>& index) const {
  std::int64_t off = 0;
  for (std::size_t d = 0; d < index.size(); ++d) off += index[d] * strides_[d];
  return off;
}

double Tensor::get(const std::vector<std::int64_t>& index) const {
  return load_as_double(bytes_.data() + kGuardBytes, dtype_, offset(index));
}

void Tensor::set(const std::vector<std::int64_t>& index, double x) {
  store_rounded(bytes_.data() + kGuardBytes, dtype_, offset(index), x);
}

void Tensor::fill(const std::function<double(const std::vector<std::int64_t>&)>& f) {
  for_each_index([&](const std::vector<std::int64_t>& i) { set(i, f(i)); });
}

void Tensor::fill_uniform(Rng& rng, double lo, double hi) {
  fill([&](const std::vector<std::int64_t>&) { return rng.uniform(lo, hi); });
}

void Tensor::for_each_index(const std::function<void(const std::vector<std::int64_t>&)>& f) const {
  if (numel() == 0) return;
  std::vector<std::int64_t> index(shape_.size(), 0);
  for (;;) {
    f(index);
    int d = rank() - 1;
    for (; d >= 0; --d) {
      if (++index[d] < shape_[d]) break;
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

std::uint32_t Tensor::storage_bits(std::int64_t element) const {
  const unsigned char* p = bytes_.data() + element * static_cast<std::int64_t>(dtype_size(dtype_));
  if (dtype_ == DType::f32) {
    std::uint32_t b;
    std::memcpy(&b, p, 4);
    return b;
  }
  std::uint16_t b;
  std::memcpy(&b, p, 2);
  return b;
}

Tensor Tensor::host_copy() const {
  Tensor t(dtype_, shape_, strides_);
  t.bytes_ = bytes_;
  return t;
}

Tensor Tensor::absolute() const {
  Tensor t = host_copy();
  t.for_each_index([&](const std::vector<std::int64_t>& i) { t.set(i, std::fabs(get(i))); });
  return t;
}

// --- IndexArray ------------------------------------------------------------------------------

IndexArray::IndexArray(std::vector<std::int64_t> values, IndexType type)
    : values_(std::move(values)), type_(type) {
  encode();
}

void IndexArray::encode() {
  bytes_.assign(std::max<std::size_t>(1, values_.size()) * index_size(type_), 0);
  for (std::size_t i = 0; i < values_.size(); ++i) {
    if (type_ == IndexType::i32) {
      const auto v = static_cast<std::int32_t>(values_[i]);
      std::memcpy(bytes_.data() + 4 * i, &v, 4);
    } else {
      std::memcpy(bytes_.data() + 8 * i, &values_[i], 8);
    }
  }
}

IndexView IndexArray::host_view() const {
  return {bytes_.data(), type_, static_cast<std::int64_t>(values_.size())};
}

IndexView IndexArray::device_view() const {
  return {static_cast<const unsigned char*>(device_.data()) + device_offset_, type_,
          static_cast<std::int64_t>(values_.size())};
}

void IndexArray::upload(BackendKind kind) {
  const CopyPlacement at = place_copy(bytes_.data(), bytes_.size());
  device_ = DeviceBuffer(kind, at.buffer_bytes);
  device_offset_ = at.offset;
  device_.copy_from_host(bytes_.data(), bytes_.size(), device_offset_);
}

void IndexArray::assign(const std::vector<std::int64_t>& values) {
  values_ = values;
  encode();
  if (device_.data() != nullptr)
    device_.copy_from_host(bytes_.data(), bytes_.size(), device_offset_);
}

// --- Comparison ------------------------------------------------------------------------------

namespace {

double ulp_out(DType dtype, double x) {
  const int mantissa = dtype == DType::f32 ? 23 : dtype == DType::f16 ? 10 : 7;
  const int min_exponent = dtype == DType::f16 ? -14 : -126;
  const int e = x == 0 ? min_exponent : std::max(std::ilogb(x), min_exponent);
  return std::ldexp(1.0, e - mantissa);
}

std::string index_string(const std::vector<std::int64_t>& i) {
  std::ostringstream s;
  s << "[";
  for (std::size_t d = 0; d < i.size(); ++d) s << (d ? "," : "") << i[d];
  s << "]";
  return s.str();
}

void note(Comparison& c, const std::string& what) {
  if (++c.mismatches <= 6) c.report += "\n    " + what;
}

}  // namespace

Comparison compare(const OutputCheck& k) {
  Comparison c;
  const Tensor& y = *k.backend;
  const Tensor& ref = *k.reference;
  constexpr double kEps = 0x1.0p-23;
  std::vector<bool> judged(y.storage().size() / dtype_size(y.dtype()), false);
  ref.for_each_index([&](const std::vector<std::int64_t>& i) {
    if (i.back() < k.rotated_begin) return;
    const std::int64_t element = ref.first_element() + ref.offset(i);
    judged[static_cast<std::size_t>(element)] = true;
    const double r = ref.get(i), got = y.get(i);
    const double m = k.magnitude ? k.magnitude->get(i) * 1.01 : 0.0;
    const double ulp = ulp_out(ref.dtype(), r);
    const double bound = ulp + (4.0 + k.extra_eps) * kEps * m;
    const double error = std::fabs(got - r);
    if (std::isnan(r) != std::isnan(got) || error > bound) {
      std::ostringstream s;
      s << k.name << index_string(i) << ": got " << got << ", reference " << r << " ("
        << error / ulp << " ulp, bound " << bound / ulp << " ulp)";
      note(c, s.str());
    }
    if (!std::isnan(error)) {
      c.errors.max_ulp = std::max(c.errors.max_ulp, error / ulp);
      c.errors.max_bound_fraction = std::max(c.errors.max_bound_fraction, error / bound);
    }
  });
  for (std::size_t e = 0; e < judged.size(); ++e) {
    if (judged[e]) continue;
    const auto element = static_cast<std::int64_t>(e);
    if (y.storage_bits(element) == ref.storage_bits(element)) continue;
    std::ostringstream s;
    s << k.name << " storage element " << element - ref.first_element()
      << " (offset from element 0) differs bitwise: 0x" << std::hex << y.storage_bits(element)
      << " vs 0x" << ref.storage_bits(element);
    note(c, s.str());
  }
  return c;
}

void ErrorStats::merge(const ErrorStats& o) {
  max_ulp = std::max(max_ulp, o.max_ulp);
  max_bound_fraction = std::max(max_bound_fraction, o.max_bound_fraction);
}

std::string ErrorStats::describe() const {
  std::ostringstream s;
  s << "max error " << max_ulp << " ulp (" << 100.0 * max_bound_fraction << "% of the bound)";
  return s.str();
}

::testing::AssertionResult outputs_match(const std::vector<OutputCheck>& checks,
                                         ErrorStats* errors) {
  std::int64_t mismatches = 0;
  std::string report;
  ErrorStats worst;
  for (const OutputCheck& k : checks) {
    const Comparison c = compare(k);
    mismatches += c.mismatches;
    report += c.report;
    worst.merge(c.errors);
  }
  if (errors) errors->merge(worst);
  if (mismatches == 0) return ::testing::AssertionSuccess() << worst.describe();
  return ::testing::AssertionFailure()
         << mismatches << " mismatching elements (" << worst.describe() << "):" << report;
}

Tensor random_table(DType dtype, std::int64_t rows, std::int64_t emb_dim, Rng& rng) {
  Tensor t(dtype, {rows, emb_dim});
  t.fill_uniform(rng);
  return t;
}

std::vector<std::int64_t> cumulative(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> cu{0};
  for (std::int64_t l : lengths) cu.push_back(cu.back() + l);
  return cu;
}

}  // namespace mlarope::test
