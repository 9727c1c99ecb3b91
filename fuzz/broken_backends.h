// SPDX-License-Identifier: Apache-2.0
// Deliberately broken backends, for proving that the checks can fail. Each
// names the checks that must catch it and the cases to try. To add one (a kernel-level variant
// built from edited copies of the kernel sources, say), append to broken_backends() or register it
// from a source file linked into broken_backends_test with a static BrokenBackendRegistrar. The
// kernel-level variants ("broken:kernel_<fault>", broken_kernels.h: copies of the real kernel
// sources with the edits of cuda/test_support/kernel_faults.txt) register that way in
// broken_kernels_test.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "backends/case_run.h"
#include "checks/checks.h"
#include "fuzz/generators.h"

namespace mlarope::props {

/// A backend that is wrong on purpose, and what must catch it.
struct BrokenBackend {
  std::string name;                           ///< what is wrong ("dropped_inverse", ...)
  std::function<harness::Backend()> make;     ///< builds it
  std::vector<harness::CheckKind> caught_by;  ///< a case must fail one of these checks
  GenOptions cases;                           ///< the cases to draw (default: all)
};

/// The wrappers around the reference: dropped inverse, CP rank off by one, nope part written in
/// place, an output element skipped, an input written out of place, a write past the end, the
/// status word dropped, strides assumed contiguous, a backward that is not the transpose, graph
/// metadata frozen at capture, a result that depends on the order seed.
std::vector<BrokenBackend> reference_wrappers();

/// Every broken backend: reference_wrappers() and the registered ones.
std::vector<BrokenBackend> broken_backends();

/// Registers a broken backend when constructed (a static object in a test source file).
struct BrokenBackendRegistrar {
  explicit BrokenBackendRegistrar(BrokenBackend broken);
};

/// The backend called `name`: "broken:NAME" for a broken backend, else harness::find_backend.
/// Throws mlarope::Error for unknown names.
harness::Backend resolve_backend(const std::string& name);

/// GoogleTest's printer: the name.
void PrintTo(const BrokenBackend& broken, std::ostream* os);

}  // namespace mlarope::props
