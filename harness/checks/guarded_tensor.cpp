// SPDX-License-Identifier: Apache-2.0
// GuardedTensor: one tensor with gaps and guards in a buffer of its own (strided_call.h).
#include <algorithm>
#include <cstring>

#include "checks/asan_guards.h"
#include "checks/strided_call.h"
#include "mlarope/error.h"

namespace mlarope::harness {
namespace {

constexpr std::int64_t kAlignment = 64;

std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

GuardedTensor::GuardedTensor(std::size_t element_size, std::vector<std::int64_t> shape,
                             std::vector<std::int64_t> strides, std::int64_t guard, bool misalign,
                             std::array<std::uint64_t, 3> patterns)
    : element_size_(element_size), shape_(std::move(shape)), strides_(std::move(strides)),
      patterns_(patterns) {
  std::int64_t count = 1;
  for (std::int64_t s : shape_) count *= s;
  offsets_.resize(static_cast<std::size_t>(std::max<std::int64_t>(count, 0)));
  std::vector<std::int64_t> index(shape_.size(), 0);
  for (std::int64_t flat = 0; flat < count; ++flat) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < shape_.size(); ++d) off += index[d] * strides_[d];
    offsets_[flat] = off;
    span_ = std::max(span_, off + 1);
    for (std::size_t d = shape_.size(); d-- > 0;) {
      if (++index[d] < shape_[d]) break;
      index[d] = 0;
    }
  }
  const auto es = static_cast<std::int64_t>(element_size_);
  guard_elements_ = round_up(std::max<std::int64_t>(guard, 1) * es, kAlignment) / es;
  first_element_ = guard_elements_ + (misalign ? 1 : 0);
  const std::int64_t total = first_element_ + span_ + guard_elements_;
  role_.assign(static_cast<std::size_t>(total), -1);
  for (std::int64_t flat = 0; flat < count; ++flat)
    role_[first_element_ + offsets_[flat]] = static_cast<std::int32_t>(flat);
  storage_.assign(static_cast<std::size_t>(total * es + kAlignment), std::byte{0});
  const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
  const std::int64_t base =
      round_up(static_cast<std::int64_t>(address), kAlignment) - static_cast<std::int64_t>(address);
  data_byte_ = base + first_element_ * es;
}

void GuardedTensor::poison_outside(const std::string& name) const {
  if (!asan_guards::enabled()) return;  // the element runs cost a sort: sanitizer builds only
  const auto es = static_cast<std::int64_t>(element_size_);
  std::vector<std::int64_t> sorted = offsets_;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> elements;  // byte runs in storage_
  for (const std::int64_t off : sorted) {
    const std::int64_t from = data_byte_ + off * es;
    if (!elements.empty() && elements.back().second >= from)
      elements.back().second = std::max(elements.back().second, from + es);
    else elements.emplace_back(from, from + es);
  }
  const std::byte* begin = storage_.data();
  asan_guards::poison(begin, begin + storage_.size(), begin + data_byte_, elements, name);
}

void GuardedTensor::unpoison() const {
  asan_guards::unpoison(storage_.data(), storage_.data() + storage_.size());
}

std::uint64_t GuardedTensor::element_bits(std::int64_t byte) const {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &storage_[byte], element_size_);
  return bits;
}

void GuardedTensor::put_bits(std::int64_t byte, std::uint64_t bits) {
  std::memcpy(&storage_[byte], &bits, element_size_);
}

void GuardedTensor::fill_outside(Fill fill) {
  const auto es = static_cast<std::int64_t>(element_size_);
  const std::int64_t base = data_byte_ - first_element_ * es;
  for (std::size_t e = 0; e < role_.size(); ++e)
    if (role_[e] < 0) put_bits(base + static_cast<std::int64_t>(e) * es, pattern(fill));
}

void GuardedTensor::fill_elements(Fill fill) {
  const auto es = static_cast<std::int64_t>(element_size_);
  for (std::int64_t off : offsets_) put_bits(data_byte_ + off * es, pattern(fill));
}

void GuardedTensor::store(const npy::Array& a) {
  if (a.size() != numel() || npy::dtype_size(a.dtype) != element_size_)
    throw Error("StridedCall: array does not fit its buffer (" + std::to_string(a.size()) +
                " elements for " + std::to_string(numel()) + ")");
  for (std::int64_t flat = 0; flat < numel(); ++flat)
    std::memcpy(&storage_[data_byte_ + offsets_[flat] * static_cast<std::int64_t>(element_size_)],
                &a.bytes[flat * element_size_], element_size_);
}

npy::Array GuardedTensor::load(npy::Dtype dtype, const std::vector<std::int64_t>& shape) const {
  npy::Array a = npy::make(dtype, shape);
  for (std::int64_t flat = 0; flat < numel(); ++flat)
    std::memcpy(&a.bytes[flat * element_size_],
                &storage_[data_byte_ + offsets_[flat] * static_cast<std::int64_t>(element_size_)],
                element_size_);
  return a;
}

bool GuardedTensor::holds(std::int64_t flat, Fill fill) const {
  return element_bits(data_byte_ + offsets_[flat] * static_cast<std::int64_t>(element_size_)) ==
         pattern(fill);
}

std::vector<GuardedTensor::Change> GuardedTensor::changes(
    const std::vector<std::byte>& before, std::size_t limit,
    const std::function<bool(const Change&)>& keep) const {
  std::vector<Change> out;
  const auto es = static_cast<std::int64_t>(element_size_);
  const std::int64_t base = data_byte_ - first_element_ * es;
  for (std::size_t e = 0; e < role_.size() && out.size() < limit; ++e) {
    const std::int64_t byte = base + static_cast<std::int64_t>(e) * es;
    if (std::memcmp(&storage_[byte], &before[byte], element_size_) == 0) continue;
    const auto element = static_cast<std::int64_t>(e);
    Region region = Region::gap;
    if (element < first_element_) region = Region::guard_before;
    else if (element >= first_element_ + span_) region = Region::guard_after;
    else if (role_[e] >= 0) region = Region::element;
    const Change change{region, element - first_element_, role_[e]};
    if (!keep || keep(change)) out.push_back(change);
  }
  return out;
}

std::vector<std::int64_t> GuardedTensor::index_of(std::int64_t flat) const {
  std::vector<std::int64_t> index(shape_.size(), 0);
  for (std::size_t d = shape_.size(); d-- > 0 && flat >= 0;) {
    index[d] = shape_[d] ? flat % shape_[d] : 0;
    flat = shape_[d] ? flat / shape_[d] : 0;
  }
  return index;
}

}  // namespace mlarope::harness
