// SPDX-License-Identifier: Apache-2.0
// Flags of the benchmark binaries that Google Benchmark does not know: taken out of argv before
// benchmark::Initialize sees it, so that it does not refuse them.
#pragma once

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "mlarope/error.h"

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

/// The whole text of a file a flag names; an Error that names it when it cannot be read.
inline std::string read_named_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace mlarope::bench
