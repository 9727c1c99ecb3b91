// SPDX-License-Identifier: Apache-2.0
// AddressSanitizer's manual poisoning of the checks' guarded buffers (strided_call.h): while a
// backend runs, the guards and the gaps between a view's rows and heads are unaddressable, so
// that any backend (the reference, the host backend in either mode, a plugin) reading or
// writing a byte it was not given stops at once with ASan's report, and the report is followed
// by the name of the tensor whose guard or gap was touched. In other builds nothing happens
// here: the guard and gap patterns (NaNs) show a read in the outputs instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mlarope::harness::asan_guards {

/// True in AddressSanitizer builds.
bool enabled();

/// Make [begin, end) unaddressable except the byte ranges of `elements` (pairs of byte offsets
/// from `begin`, sorted), and remember it as the storage of tensor `name` whose view starts at
/// `first_element`. ASan poisons 8-byte granules: a granule that holds an element stays
/// addressable before that element within the granule (never after it).
void poison(const std::byte* begin, const std::byte* end, const std::byte* first_element,
            const std::vector<std::pair<std::int64_t, std::int64_t>>& elements,
            const std::string& name);

/// While one lives, poison() does nothing: for the tests of the checks' own findings (a write
/// into a guard is a bounds finding in every build), which ASan would stop first.
class Suspended {
 public:
  Suspended();
  ~Suspended();
  Suspended(const Suspended&) = delete;
  Suspended& operator=(const Suspended&) = delete;
};

/// Make [begin, end) addressable again and forget it.
void unpoison(const std::byte* begin, const std::byte* end);

/// Where `address` lies among the poisoned storages: "tensor 't': 2 bytes past the view's
/// last element ..." or "" (what the report callback prints).
std::string describe(const void* address);

}  // namespace mlarope::harness::asan_guards
