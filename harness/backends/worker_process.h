// SPDX-License-Identifier: Apache-2.0
// A backend that may crash or hang runs in a worker process (docs/architecture.md rule 8): the
// harness forks a child that makes the backend and serves requests (a fuzz case, a check), and
// watches each backend call it makes against a time limit. A child killed by a signal, one that
// exits, and one whose call overruns its limit end the request with a WorkerDeath that names the
// call in flight and keeps the child's stderr; the caller records the case and starts another.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <variant>

#include "backends/case_run.h"

namespace mlarope::harness {

/// Hooks around fork() for what the process embeds (the Python package: the interpreter's
/// locks), each optional.
struct ForkHooks {
  std::function<void()> prepare;  ///< in the forking thread, just before fork()
  std::function<void()> parent;   ///< in the parent, just after
  std::function<void()> child;    ///< in the child, just after
};

/// How a worker limits its backend's calls.
struct CallLimit {
  /// Seconds each backend call may take; 0 derives it from the reference's time on the case:
  /// kFloorSeconds + kReferenceMultiple x that time (kFloorSeconds where the time is unknown).
  double seconds = 0;
  static constexpr double kFloorSeconds = 30;
  static constexpr double kReferenceMultiple = 1000;
  /// The limit for a case whose reference took `reference_seconds` (< 0: unknown).
  double for_reference(double reference_seconds) const;
};

/// What the parent sees of the worker's backend calls, in memory the two processes share.
struct CallWatch {
  std::atomic<std::int64_t> deadline_ns{0};  ///< steady clock; 0 when no call is in flight
  std::atomic<std::int64_t> calls{0};        ///< backend calls of the current request so far
  std::atomic<double> limit_seconds{CallLimit::kFloorSeconds};  ///< the current request's limit
  CallLimit limit;                                              ///< set by the parent
  char call[64] = {};  ///< the call in flight or last made ("rope in place")
};

/// `backend` with every call announced in `watch` (its name, its deadline) and the limit derived
/// from the reference's time (Backend::expect_time). Runs in the worker.
Backend watched(Backend backend, CallWatch& watch);

/// Why a request got no reply.
struct WorkerDeath {
  /// "was killed by signal 11 (SIGSEGV)", "exited with status 1", "was stopped: a call did not
  /// return within its 2 s limit"
  std::string reason;
  std::string call;         ///< "rope in place (backend call 3 of the case)", "" when none was made
  std::string stderr_tail;  ///< the last bytes the worker wrote to stderr during the request
  bool timed_out = false;
  bool interrupted =
      false;  ///< killed because the parent was asked to stop, not the backend's fault
  /// One line: the reason and the call.
  std::string describe() const;
};

/// Held by each thread that uses worker processes while other threads of the process make new
/// ones (the fuzz's worker threads). A fork waits until every holder is waiting on its worker,
/// so that no lock (the allocator's among them) is held by a thread the child does not have:
/// WorkerProcess::request lets go of it while it waits, and the fork takes it exclusively.
class ForkGuard {
 public:
  ForkGuard();
  ~ForkGuard();
  ForkGuard(const ForkGuard&) = delete;
  ForkGuard& operator=(const ForkGuard&) = delete;
};

/// A forked child serving requests. Not copyable; one request at a time.
class WorkerProcess {
 public:
  /// In the child: serves one request, returning the reply.
  using Serve = std::function<std::string(const std::string& request)>;
  /// Fork the worker. `start` runs in the child and returns its Serve (it makes the backend,
  /// watched through the CallWatch it is given); an exception there is thrown here as
  /// mlarope::Error with its message, and so is a child that dies while starting.
  WorkerProcess(const std::function<Serve(CallWatch&)>& start, const CallLimit& limit,
                const ForkHooks& hooks = {});
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;
  /// Ends the child: its request pipe closed, then SIGKILL if it is still there after a moment.
  ~WorkerProcess();

  /// Send `request` and wait for the reply, or for the child's death or overrun (the child is
  /// then gone: make another). An exception the child's Serve threw is thrown here as
  /// mlarope::Error. When `stop` turns non-zero (a signal's number), the request gets
  /// `grace_seconds` more, then the child is killed and the death says interrupted.
  std::variant<std::string, WorkerDeath> request(const std::string& request,
                                                 const std::atomic<int>* stop = nullptr,
                                                 double grace_seconds = 5);
  /// False once the child is gone.
  bool alive() const { return pid_ > 0; }

 private:
  WorkerDeath reap(bool killed);  // wait for the dead (or killed) child and say why it ended
  std::string stderr_tail() const;

  int pid_ = -1;
  int request_fd_ = -1, reply_fd_ = -1, stderr_fd_ = -1;
  CallWatch* watch_ = nullptr;  // shared with the child (mmap)
};

/// The name of signal `signal` ("SIGSEGV"), or its number.
std::string signal_name(int signal);

}  // namespace mlarope::harness
