// SPDX-License-Identifier: Apache-2.0
// Flags of the benchmark binaries that Google Benchmark does not know: taken out of argv before
// benchmark::Initialize sees it, so that it does not refuse them.
#pragma once

#include <algorithm>
#include <string>

namespace mlarope::bench {

/// True when argv holds `flag`, which is then removed from argv.
inline bool take_flag(int& argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i)
    if (argv[i] == flag) {
      std::copy(argv + i + 1, argv + argc, argv + i);
      --argc;
      return true;
    }
  return false;
}

}  // namespace mlarope::bench
