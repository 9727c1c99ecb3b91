// SPDX-License-Identifier: Apache-2.0
// The one exception type of the library.
#pragma once

#include <stdexcept>
#include <string>

namespace mlarope {

/// A rejected call or malformed input; the message names the argument, its value and what was
/// expected.
class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace mlarope
