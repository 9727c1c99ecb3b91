// The scratch status words of a capture: each captured THD call takes a word of its own, and
// the graph made of the capture owns them all, so its launches refer only to memory the graph
// keeps alive (not to the scratch word of the stream that captured it).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "mlarope/status.h"

namespace mlarope::detail {

/// Words handed out one at a time from blocks that never move (recorded launches hold their
/// addresses); the backend's functions allocate and free a block. Not thread-safe: one
/// capture, one thread.
class ScratchArena {
 public:
  using Allocate = DeviceStatus* (*)(std::size_t words);
  using Release = void (*)(DeviceStatus* block) noexcept;

  /// An arena whose first block is allocated now (before the capture starts).
  ScratchArena(Allocate allocate, Release release) : allocate_(allocate), release_(release) {
    add_block();
  }

  /// A word no other call of this arena uses (uninitialised: the call zeroes it first).
  DeviceStatus* take() {
    if (used_ == kBlockWords) add_block();
    return blocks_.back().get() + used_++;
  }

 private:
  static constexpr std::size_t kBlockWords = 64;
  struct Free {
    Release release;
    void operator()(DeviceStatus* block) const noexcept { release(block); }
  };

  void add_block() {
    blocks_.reserve(blocks_.size() + 1);  // no throw between allocating and owning the block
    blocks_.emplace_back(allocate_(kBlockWords), Free{release_});
    used_ = 0;
  }

  Allocate allocate_;
  Release release_;
  std::vector<std::unique_ptr<DeviceStatus, Free>> blocks_;
  std::size_t used_ = 0;
};

}  // namespace mlarope::detail
