// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <thread>
#include <vector>

#include "elements.h"

namespace mlarope::reference {

void parallel_for(std::int64_t count, const std::function<void(std::int64_t, std::int64_t)>& body) {
  constexpr std::int64_t kMinRowsPerThread = 64;
  const std::int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const std::int64_t threads =
      std::min(cores, std::max<std::int64_t>(1, count / kMinRowsPerThread));
  if (threads <= 1) {
    body(0, count);
    return;
  }
  std::vector<std::thread> pool;
  const std::int64_t chunk = (count + threads - 1) / threads;
  for (std::int64_t t = 0; t < threads; ++t) {
    const std::int64_t begin = t * chunk, end = std::min(count, begin + chunk);
    if (begin < end) pool.emplace_back(body, begin, end);
  }
  for (std::thread& thread : pool) thread.join();
}

}  // namespace mlarope::reference
