# SPDX-License-Identifier: Apache-2.0
"""What the adapters' tests share. A fuzz or a replay of a kernel under Triton's interpreter runs
in a subprocess (the test file itself, with arguments): a kernel that stores past a guard
corrupts the memory of the process it runs in, and then only that test fails, with the
subprocess's output. Case budgets rather than seconds, so that what runs is the same on a
loaded machine; an environment variable per adapter multiplies them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys


def budget(cases: int, scale_variable: str) -> int:
    """``cases`` times the float in ``$scale_variable`` (1 when unset), at least 1."""
    return max(1, int(cases * float(os.environ.get(scale_variable, "1"))))


def missing(modules) -> str | None:
    """Why the tests cannot run here (the first of ``modules`` not installed), or None. Found,
    not imported: triton must be imported after the interpreter is chosen."""
    for name in modules:
        try:
            if importlib.util.find_spec(name) is None:
                return f"{name} is not installed (ci/python-test.sh installs it)"
        except (ImportError, ValueError):
            return f"{name} is not installed"
    return None


def missing_triton_release(folder: str, version: str | None = None) -> str | None:
    """Why a Triton adapter's tests cannot run here, or None: torch, triton or mlarope.triton
    not installed (found, not imported: triton must be imported after the interpreter is
    chosen), or the release's files not at hand (not in adapters/releases.py's cache and no
    network, or an archive of another hash)."""
    why = missing(("torch", "triton", "mlarope.triton"))
    if why:
        return why
    import releases

    version = version or releases.newest(folder)
    try:
        releases.root(folder, version)
    except (OSError, ValueError) as e:
        return f"{releases.manifest(folder)['project']} {version} is not at hand: {e}"
    return None


def subprocess_json(script: str, *args: str, env: dict | None = None, timeout: int = 900):
    """Run ``python script args...`` from the script's folder and return the JSON of the last
    line it prints, or fail with everything it printed (a crash included)."""
    done = subprocess.run(
        [sys.executable, script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=os.path.dirname(os.path.abspath(script)),
        env=None if env is None else {**os.environ, **env},
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise AssertionError(
            f"the subprocess ended with status {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return json.loads(lines[-1])


def fuzz_main(adapter, adapter_flags: str, fuzz_args: str) -> int:
    """The body of a fuzz subprocess: ``adapter`` (a backend object) with the JSON
    ``adapter_flags`` set on it, fuzzed through mlarope.triton.TritonBackend with the JSON
    ``fuzz_args``; prints the result (fuzz_result) as the JSON line subprocess_json reads."""
    import mlarope
    from mlarope import triton as mt

    for name, value in json.loads(adapter_flags).items():
        setattr(adapter, name, value)
    try:
        result = mlarope.fuzz(mt.TritonBackend(adapter), quiet=True, **json.loads(fuzz_args))
    except mlarope.FuzzFailure as failure:
        result = failure.result
    print(json.dumps(fuzz_result(result)))
    return 0


def fuzz_result(result: dict) -> dict:
    """What a fuzz subprocess prints (as JSON) of mlarope.fuzz's result for its test."""
    return {k: result[k] for k in ("cases", "failing_cases", "seconds", "summary")}


def ran(summary: str) -> int:
    """Cases that reached the kernel (the rest were declined), from a fuzz summary."""
    found = re.search(r"\((\d+) of \d+ cases ran\)", summary)
    assert found, summary
    return int(found.group(1))


def show(capsys, title: str, result: dict) -> None:
    """Print a fuzz's summary in the test log, past pytest's capture."""
    with capsys.disabled():
        print(f"\n--- {title} ({result['seconds']:.1f} s)\n{result['summary']}")


def apply_patch(text: str, patch: str, hunks: int | None = None) -> str:
    """``text`` with the hunks of ``patch`` (a unified diff of one file) applied, its first
    ``hunks`` only when given; each hunk's old lines must be found exactly once."""
    with open(patch, encoding="utf-8") as f:
        parts = f.read().split("\n@@")[1:]
    for hunk in parts[:hunks]:
        body = hunk.split("\n")[1:]
        old = "\n".join(line[1:] for line in body if line[:1] in (" ", "-")) + "\n"
        new = "\n".join(line[1:] for line in body if line[:1] in (" ", "+")) + "\n"
        if text.count(old) != 1:
            raise ValueError(f"{patch}: a hunk's context is found {text.count(old)} times")
        text = text.replace(old, new)
    return text
