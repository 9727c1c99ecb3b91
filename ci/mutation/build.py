# SPDX-License-Identifier: Apache-2.0
"""Configuring and building the scratch copy (CMake + Ninja, host backend only), and running
a command with a timeout that kills its whole process group. The build is configured once and
then rebuilt incrementally, one mutant after another."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

from .common import ToolError, log, write_json

# UBSan's array-bounds checks, fatal at the first finding.
BOUNDS_FLAGS = "-fsanitize=bounds -fno-sanitize-recover=bounds"


def nice_prefix(level):
    return ["nice", "-n", str(level)] if level and shutil.which("nice") else []


def run_logged(argv, cwd=None, env=None, timeout=None):
    """(returncode or None on timeout, combined output, seconds); the process group is killed on
    timeout."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return code, out.decode(errors="replace"), time.monotonic() - t0


def first_error_lines(output, count=12):
    """The first compiler error of a build's output (with `count` lines from there), else its
    last `count` lines."""
    lines = output.splitlines()
    for k, line in enumerate(lines):
        if re.search(r"\berror\b|FAILED:", line):
            start = k
            if line.startswith("FAILED:"):
                nxt = [j for j in range(k + 1, len(lines)) if re.search(r"\berror\b", lines[j])]
                start = nxt[0] if nxt else k
            return "\n".join(lines[start : start + count])
    return "\n".join(lines[-count:])


class Build:
    """The scratch build: SCRATCH/build of the sources in SCRATCH/src."""

    def __init__(self, scratch, args):
        self.root = scratch
        self.src = os.path.join(scratch, "src")
        self.dir = os.path.join(scratch, "build")
        self.args = args
        self.paths = {}

    def flags(self, cases_dir):
        return [
            "-G",
            "Ninja",
            f"-DCMAKE_BUILD_TYPE={self.args.build_type}",
            "-DMLAROPE_CUDA=OFF",
            "-DMLAROPE_BENCH=OFF",
            "-DMLAROPE_PYTHON=OFF",
            "-DMLAROPE_TESTS=ON",
            "-DMLAROPE_SANITIZE=OFF",
            f"-DMLAROPE_CASES_DIR={cases_dir}",
            # Bounds checks of fixed-size arrays (cheap, unlike ASan): a loop one past a
            # kernel's local array is a failing check, not a survivor.
            f"-DCMAKE_CXX_FLAGS={BOUNDS_FLAGS}",
        ] + list(self.args.cmake_arg)

    def configure(self, cases_dir, sources_changed=True):
        """Configures the build, unless it was with these flags (then it is regenerated where
        the sources changed); the seconds it took."""
        flags = self.flags(cases_dir)
        stamp = os.path.join(self.root, "configure.json")
        previous = None
        if os.path.exists(stamp):
            with open(stamp) as f:
                previous = json.load(f)
        if previous == flags and os.path.exists(os.path.join(self.dir, "build.ninja")):
            if not sources_changed:
                return 0.0
            # Regenerate: a changed CMakeLists.txt may add targets that `ninja -t query` must see.
            code, out, secs = run_logged(["cmake", self.dir])
            if code != 0:
                raise ToolError(f"cmake failed to regenerate the scratch build:\n{out[-3000:]}")
            return secs
        if os.path.isdir(self.dir):
            shutil.rmtree(self.dir)
        os.makedirs(self.dir)
        log(f"configure: cmake -S {self.src} -B {self.dir} {' '.join(flags)}")
        code, out, secs = run_logged(["cmake", "-S", self.src, "-B", self.dir] + flags)
        if code != 0:
            raise ToolError(f"cmake failed to configure the scratch copy:\n{out[-3000:]}")
        write_json(stamp, flags)
        return secs

    def has_target(self, name):
        code, out, _ = run_logged(["ninja", "-C", self.dir, "-t", "query", name])
        return code == 0

    def target_file(self, name):
        """The file a phony target (an executable's name) builds, absolute."""
        if name in self.paths:
            return self.paths[name]
        code, out, _ = run_logged(["ninja", "-C", self.dir, "-t", "query", name])
        if code != 0:
            raise ToolError(f"the scratch build has no target {name!r}")
        lines = out.splitlines()
        path = name
        for k, line in enumerate(lines):
            if line.strip() == "input: phony" and k + 1 < len(lines):
                path = lines[k + 1].strip()
                break
        self.paths[name] = os.path.join(self.dir, path)
        return self.paths[name]

    def build(self, targets):
        argv = nice_prefix(self.args.nice) + ["ninja", "-C", self.dir, f"-j{self.args.jobs}"]
        return run_logged(argv + sorted(set(targets)), timeout=self.args.build_timeout)
