// SPDX-License-Identifier: Apache-2.0
// AddressSanitizer's poisoning of the guarded buffers (asan_guards.h).
#include "checks/asan_guards.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define MLAROPE_ASAN 1
#else
#define MLAROPE_ASAN 0
#endif

namespace mlarope::harness::asan_guards {
namespace {

struct Storage {
  const std::byte *begin, *end, *first_element, *last_element_end;
  std::string name;
};

std::atomic<int> g_suspended{0};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

std::vector<Storage>& registry() {
  static std::vector<Storage> storages;
  return storages;
}

#if MLAROPE_ASAN
// After ASan's report of a bad access, the tensor it touched (then ASan aborts).
void after_report(const char*) {
  const std::string where = describe(__asan_get_report_address());
  if (!where.empty())
    std::fprintf(stderr, "mlarope: the bad access is in the guarded storage of %s\n",
                 where.c_str());
}
#endif

}  // namespace

bool enabled() { return MLAROPE_ASAN != 0; }

Suspended::Suspended() { ++g_suspended; }
Suspended::~Suspended() { --g_suspended; }

void poison(const std::byte* begin, const std::byte* end, const std::byte* first_element,
            const std::vector<std::pair<std::int64_t, std::int64_t>>& elements,
            const std::string& name) {
#if MLAROPE_ASAN
  if (g_suspended.load() > 0) return;
  static std::once_flag installed;
  std::call_once(installed, [] { __asan_set_error_report_callback(after_report); });
  __asan_poison_memory_region(begin, static_cast<std::size_t>(end - begin));
  for (const auto& [from, to] : elements)
    __asan_unpoison_memory_region(begin + from, static_cast<std::size_t>(to - from));
  const std::byte* last_end = elements.empty() ? first_element : begin + elements.back().second;
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().push_back({begin, end, first_element, last_end, name});
#else
  (void)begin, (void)end, (void)first_element, (void)elements, (void)name;
#endif
}

void unpoison(const std::byte* begin, const std::byte* end) {
#if MLAROPE_ASAN
  __asan_unpoison_memory_region(begin, static_cast<std::size_t>(end - begin));
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<Storage>& r = registry();
  for (auto it = r.begin(); it != r.end(); ++it)
    if (it->begin == begin) {
      r.erase(it);
      break;
    }
#else
  (void)begin, (void)end;
#endif
}

std::string describe(const void* address) {
  const auto* a = static_cast<const std::byte*>(address);
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const Storage& s : registry()) {
    if (a < s.begin || a >= s.end) continue;
    const std::string tensor = "tensor '" + s.name + "'";
    if (a < s.first_element)
      return tensor + ": " + std::to_string(s.first_element - a) +
             " bytes before the view's first element (its guard)";
    if (a >= s.last_element_end)
      return tensor + ": " + std::to_string(a - s.last_element_end) +
             " bytes past the end of the view's last element (its guard)";
    return tensor + ": a gap between its rows or heads, " + std::to_string(a - s.first_element) +
           " bytes past the view's first element";
  }
  return "";
}

}  // namespace mlarope::harness::asan_guards
