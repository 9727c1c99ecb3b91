# SPDX-License-Identifier: Apache-2.0
"""A Python kernel that crashes the interpreter or never returns (run by ci/python-test.sh): the
fuzz runs it in a worker process, so each such call is a failing case ("crash", "timeout") with
the worker's stderr beside it, the campaign runs to its budget, and mlarope.check replays it."""

import ctypes
import os
import re
import time

import pytest

import mlarope
from docs_example import MyRope

# What reaches MyRope: SBHD f32 rope out of place, half layouts (the rest is declined).
NARROW = dict(
    ops=["rope"],
    dtypes=["f32"],
    table_dtypes=["f32"],
    in_place=False,
    layouts="half/half/half",
    seq_offsets=False,
)


class CrashesOnThirdCall(MyRope):
    """Reads address 0 through ctypes on the third call in a process: SIGSEGV."""

    calls = 0

    def rope(self, c):
        type(self).calls += 1
        if type(self).calls == 3:
            ctypes.string_at(0)
        super().rope(c)


class HangsOnThirdCall(MyRope):
    """Never returns from the third call in a process."""

    calls = 0

    def rope(self, c):
        type(self).calls += 1
        if type(self).calls == 3:
            time.sleep(3600)
        super().rope(c)


def events(result, check):
    return [f for f in result["failures"] if any(name == check for name, _ in f["checks"])]


def deepest(failures):
    """The failure whose fatal call came latest in its case ("backend call N of the case"): a
    worker's third call there was a call of that case alone, so a fresh worker's replay of the
    case reaches it too. (Where earlier cases in the same worker made the first calls, the case
    alone makes fewer than three.)"""

    def call(f):
        match = re.search(r"backend call (\d+) of the case", f["checks"][0][1])
        return int(match.group(1)) if match else 0

    return max(failures, key=call)


def run_to_budget(backend, tmp_path, cases, **options):
    with pytest.raises(mlarope.FuzzFailure) as failure:
        mlarope.fuzz(
            backend, cases=cases, seed=11, out=str(tmp_path), quiet=True, **NARROW, **options
        )
    result = failure.value.result
    assert result["cases"] == cases, "the campaign did not run to its budget"
    assert result["failing_cases"] == len(result["failures"])
    return result


def test_a_segfault_is_a_failing_case_and_the_fuzz_goes_on(tmp_path):
    result = run_to_budget(CrashesOnThirdCall(), tmp_path, 300)
    crashes = events(result, "crash")
    assert len(crashes) >= 2, "the campaign stopped at the first crash?"
    for f in crashes:
        assert "killed by signal 11 (SIGSEGV) in rope" in f["checks"][0][1]
    first = deepest(crashes)["dir"]
    # faulthandler's report of the Python stack, from the worker's stderr
    with open(os.path.join(first, "worker_stderr.txt")) as f:
        assert "Segmentation fault" in f.read()
    replay = mlarope.check(CrashesOnThirdCall(), first)
    assert not replay["ok"]
    assert replay["results"][0][:2] == ("crash", "fail"), replay["results"]
    assert "Segmentation fault" in replay["stderr"]


def test_a_call_that_never_returns_is_a_failing_case_and_the_fuzz_goes_on(tmp_path):
    result = run_to_budget(HangsOnThirdCall(), tmp_path, 24, call_timeout=0.5)
    hangs = events(result, "timeout")
    assert len(hangs) >= 2, "the campaign stopped at the first hang?"
    assert "a call did not return within its 0.5 s limit in rope" in hangs[0]["checks"][0][1]
    replay = mlarope.check(HangsOnThirdCall(), deepest(hangs)["dir"], call_timeout=0.5)
    assert replay["results"][0][:2] == ("timeout", "fail"), replay["results"]


def test_in_process_the_same_kernel_runs_with_no_worker(tmp_path):
    # isolate=False: MyRope itself, fuzzed in this process, passes (the worker adds nothing).
    result = mlarope.fuzz(
        MyRope(), cases=200, seed=11, out=str(tmp_path), quiet=True, isolate=False, **NARROW
    )
    assert result["failing_cases"] == 0 and result["cases"] == 200
