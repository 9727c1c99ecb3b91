// SPDX-License-Identifier: Apache-2.0
// The worker process: fork, two pipes (requests in, replies out, each message a 64-bit length
// and its bytes), the child's stderr into an in-memory file the parent reads back, and the call
// watch in a shared anonymous mapping that the parent polls while it waits.
#include "backends/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <new>
#include <shared_mutex>

#include "mlarope/error.h"

namespace mlarope::harness {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// The bytes of stderr a death keeps.
constexpr std::size_t kStderrTail = 16384;

bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

// Reads exactly n bytes; false at end of file or on an error.
bool read_all(int fd, void* data, std::size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool send_message(int fd, const std::string& m) {
  const std::uint64_t n = m.size();
  return write_all(fd, &n, sizeof n) && write_all(fd, m.data(), m.size());
}

bool receive_message(int fd, std::string& m) {
  std::uint64_t n = 0;
  if (!read_all(fd, &n, sizeof n)) return false;
  m.resize(n);
  return read_all(fd, m.data(), n);
}

// A reply's first byte: what follows is the reply, or an error the child's code threw.
constexpr char kReply = 'R', kFailed = 'E';

// The nesting of watched calls in this (child) thread: a capture's launches are calls inside it.
thread_local int watched_depth = 0;

// Announces one backend call in the watch for its duration.
class CallScope {
 public:
  CallScope(CallWatch& w, const char* name) : w_(w) {
    if (watched_depth++ > 0) return;
    std::snprintf(w_.call, sizeof w_.call, "%s", name);
    w_.calls.fetch_add(1);
    const double limit = w_.limit_seconds.load();
    w_.deadline_ns.store(now_ns() + static_cast<std::int64_t>(limit * 1e9));
  }
  ~CallScope() {
    if (--watched_depth == 0) w_.deadline_ns.store(0);
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  CallWatch& w_;
};

template <class Call>
std::function<void(const Call&)> watch_call(std::function<void(const Call&)> f, CallWatch& w,
                                            const char* name) {
  if (!f) return f;
  return [f = std::move(f), &w, name](const Call& c) {
    CallScope scope(w, name);
    f(c);
  };
}

int pipe_pair(int fds[2]) { return ::pipe2(fds, O_CLOEXEC); }

// Shared by the threads that hold a ForkGuard, exclusive during a fork.
std::shared_mutex fork_lock;
thread_local bool holds_fork_guard = false;

// Lets go of this thread's ForkGuard for its lifetime (a wait, or a fork that takes the lock
// exclusively).
class GuardReleased {
 public:
  GuardReleased() : held_(holds_fork_guard) {
    if (held_) fork_lock.unlock_shared();
  }
  ~GuardReleased() {
    if (held_) fork_lock.lock_shared();
  }
  GuardReleased(const GuardReleased&) = delete;
  GuardReleased& operator=(const GuardReleased&) = delete;

 private:
  bool held_;
};

}  // namespace

ForkGuard::ForkGuard() {
  fork_lock.lock_shared();
  holds_fork_guard = true;
}

ForkGuard::~ForkGuard() {
  holds_fork_guard = false;
  fork_lock.unlock_shared();
}

double CallLimit::for_reference(double reference_seconds) const {
  if (seconds > 0) return seconds;
  return kFloorSeconds + (reference_seconds > 0 ? kReferenceMultiple * reference_seconds : 0.0);
}

Backend watched(Backend b, CallWatch& w) {
  b.rope = watch_call(std::move(b.rope), w, "rope");
  b.rope_inplace = watch_call(std::move(b.rope_inplace), w, "rope in place");
  b.rope_backward = watch_call(std::move(b.rope_backward), w, "rope_backward");
  b.rope_backward_inplace =
      watch_call(std::move(b.rope_backward_inplace), w, "rope_backward in place");
  b.kv_split = watch_call(std::move(b.kv_split), w, "kv_split");
  b.kv_split_backward = watch_call(std::move(b.kv_split_backward), w, "kv_split_backward");
  b.yarn_tables = watch_call(std::move(b.yarn_tables), w, "yarn_tables");
  if (b.supports)
    b.supports = [f = std::move(b.supports), &w](const Case& c) {
      CallScope scope(w, "supports");
      return f(c);
    };
  if (b.select_variant)
    b.select_variant = [f = std::move(b.select_variant), &w](const std::string& v) {
      CallScope scope(w, "select_variant");
      f(v);
    };
  if (b.capture)
    b.capture = [f = std::move(b.capture), &w](const std::function<void()>& launches) {
      std::function<void()> replay;
      {
        CallScope scope(w, "capture");
        replay = f(launches);
      }
      return std::function<void()>([replay, &w] {
        CallScope scope(w, "graph replay");
        replay();
      });
    };
  if (b.with_order_seed)
    b.with_order_seed = [f = std::move(b.with_order_seed), &w](std::uint64_t seed) {
      return watched(f(seed), w);
    };
  if (b.with_race_check)
    b.with_race_check = [f = std::move(b.with_race_check), &w] { return watched(f(), w); };
  b.expect_time = [&w](double reference_seconds) {
    w.limit_seconds.store(w.limit.for_reference(reference_seconds));
  };
  return b;
}

std::string WorkerDeath::describe() const { return reason + (call.empty() ? "" : " in " + call); }

std::string signal_name(int signal) {
  switch (signal) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGPIPE: return "SIGPIPE";
    case SIGTRAP: return "SIGTRAP";
    default: return "signal " + std::to_string(signal);
  }
}

WorkerProcess::WorkerProcess(const std::function<Serve(CallWatch&)>& start, const CallLimit& limit,
                             const ForkHooks& hooks) {
  void* shared =
      ::mmap(nullptr, sizeof(CallWatch), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED)
    throw Error("worker process: mmap failed: " + std::string(strerror(errno)));
  watch_ = new (shared) CallWatch;
  watch_->limit = limit;
  watch_->limit_seconds.store(limit.for_reference(-1));
  int requests[2], replies[2];
  if (pipe_pair(requests) != 0 || pipe_pair(replies) != 0)
    throw Error("worker process: pipe failed: " + std::string(strerror(errno)));
  stderr_fd_ = ::memfd_create("mlarope-worker-stderr", MFD_CLOEXEC);
  if (stderr_fd_ >= 0) ::fcntl(stderr_fd_, F_SETFL, O_APPEND);  // the child writes at the end
  std::cout.flush();  // nothing buffered here is written twice
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  GuardReleased released;
  std::unique_lock<std::shared_mutex> quiet(fork_lock);  // every other holder is waiting
  if (hooks.prepare) hooks.prepare();
  const pid_t pid = ::fork();
  if (pid == 0) {  // the child: never returns
    if (hooks.child) hooks.child();
    // SLURM and a terminal signal the whole group: the parent decides when its workers end.
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGHUP, SIG_IGN);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // and a parent killed outright takes them along
    if (::getppid() != parent) ::_exit(0);
    if (stderr_fd_ >= 0) ::dup2(stderr_fd_, STDERR_FILENO);
    ::close(requests[1]);
    ::close(replies[0]);
    const int in = requests[0], out = replies[1];
    Serve serve;
    try {
      serve = start(*watch_);
    } catch (const std::exception& e) {
      send_message(out, kFailed + std::string(e.what()));
      ::_exit(0);
    }
    send_message(out, std::string(1, kReply));
    std::string request;
    while (receive_message(in, request)) {
      watch_->calls.store(0);
      watch_->limit_seconds.store(watch_->limit.for_reference(-1));
      std::string reply;
      try {
        reply = kReply + serve(request);
      } catch (const std::exception& e) {
        reply = kFailed + std::string(e.what());
      }
      std::cout.flush();
      std::fflush(nullptr);
      if (!send_message(out, reply)) break;
    }
    ::_exit(0);
  }
  const int fork_errno = errno;
  if (hooks.parent) hooks.parent();
  quiet.unlock();
  ::close(requests[0]);
  ::close(replies[1]);
  request_fd_ = requests[1];
  reply_fd_ = replies[0];
  if (pid < 0) throw Error("worker process: fork failed: " + std::string(strerror(fork_errno)));
  pid_ = pid;
  std::string hello;
  if (!receive_message(reply_fd_, hello)) {
    const WorkerDeath d = reap(false);
    throw Error("the worker process died while making the backend: " + d.reason +
                (d.stderr_tail.empty() ? "" : "; its stderr:\n" + d.stderr_tail));
  }
  if (!hello.empty() && hello[0] == kFailed) throw Error(hello.substr(1));
}

WorkerProcess::~WorkerProcess() {
  if (request_fd_ >= 0) ::close(request_fd_);  // the child's read ends: it exits
  if (pid_ > 0) {
    int status = 0;
    for (int i = 0; i < 100 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) ::usleep(2000);
    if (::waitpid(pid_, &status, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
  }
  if (reply_fd_ >= 0) ::close(reply_fd_);
  if (stderr_fd_ >= 0) ::close(stderr_fd_);
  if (watch_ != nullptr) {
    watch_->~CallWatch();
    ::munmap(watch_, sizeof(CallWatch));
  }
}

std::string WorkerProcess::stderr_tail() const {
  if (stderr_fd_ < 0) return "";
  const off_t size = ::lseek(stderr_fd_, 0, SEEK_END);
  if (size <= 0) return "";
  const off_t from = std::max<off_t>(0, size - static_cast<off_t>(kStderrTail));
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  const ssize_t n = ::pread(stderr_fd_, tail.data(), tail.size(), from);
  tail.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return tail;
}

WorkerDeath WorkerProcess::reap(bool killed) {
  WorkerDeath d;
  if (killed) ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (WIFSIGNALED(status))
    d.reason = "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
               signal_name(WTERMSIG(status)) + ")";
  else if (WIFEXITED(status))
    d.reason = "exited with status " + std::to_string(WEXITSTATUS(status));
  else d.reason = "ended";
  const std::int64_t calls = watch_->calls.load();
  if (calls > 0)
    d.call = std::string(watch_->call) + " (backend call " + std::to_string(calls) + " of the " +
             "case)";
  d.stderr_tail = stderr_tail();
  return d;
}

std::variant<std::string, WorkerDeath> WorkerProcess::request(const std::string& request,
                                                              const std::atomic<int>* stop,
                                                              double grace_seconds) {
  if (pid_ <= 0) throw Error("worker process: the worker is gone");
  if (stderr_fd_ >= 0) ::ftruncate(stderr_fd_, 0);  // the tail of a death is this request's
  if (!send_message(request_fd_, request)) return reap(false);
  std::int64_t stop_deadline = 0;
  for (;;) {
    pollfd p{reply_fd_, POLLIN, 0};
    int ready = 0;
    {
      GuardReleased waiting;  // a fork in another thread may go on meanwhile
      ready = ::poll(&p, 1, 20);
    }
    if (ready > 0) {
      std::string reply;
      if (!receive_message(reply_fd_, reply) || reply.empty()) return reap(false);
      if (reply[0] == kFailed) throw Error(reply.substr(1));
      return reply.substr(1);
    }
    const std::int64_t now = now_ns();
    const std::int64_t deadline = watch_->deadline_ns.load();
    if (deadline != 0 && now > deadline) {
      WorkerDeath d = reap(true);
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", watch_->limit_seconds.load());
      d.reason = std::string("was stopped: a call did not return within its ") + limit + " s limit";
      d.timed_out = true;
      return d;
    }
    if (stop != nullptr && stop->load() != 0) {
      if (stop_deadline == 0) stop_deadline = now + static_cast<std::int64_t>(grace_seconds * 1e9);
      if (now > stop_deadline) {
        WorkerDeath d = reap(true);
        d.reason = "stopped: the run was interrupted";
        d.interrupted = true;
        return d;
      }
    }
  }
}

}  // namespace mlarope::harness
