# SPDX-License-Identifier: Apache-2.0
"""The race rules of mlarope.triton (mlarope/_races.py) on planted kernels: a program that
stores the pairs of its slice over the bytes it loaded them from (Megatron's in-place q
pattern) and a grid whose programs store one element past their block are caught, with both
source lines; the same kernels with a barrier, or with disjoint blocks, pass. Programs run in a
drawn order give the same bits where they must; the races check of mlarope.check fails a
backend whose call launches a racing kernel, and only that check. Skips without Triton."""

import importlib.util
import inspect

import pytest

import mlarope
from numpy_backend import NumpyRope

if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("triton or torch is not installed", allow_module_level=True)

from mlarope import triton as mt  # noqa: E402
from mlarope._races import RaceFound  # noqa: E402

triton = mt.interpreter()
import torch  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def deinterleave_in_place(x_ptr, D: tl.constexpr, BARRIER: tl.constexpr):
    # One row of D values per program: (x0, x1, x2, x3, ...) -> (x0, x2, ..., x1, x3, ...), in
    # place: loads at stride 2, then stores of the halves over the same bytes.
    row = x_ptr + tl.program_id(0) * D
    half = tl.arange(0, D // 2)
    even = tl.load(row + 2 * half)
    odd = tl.load(row + 2 * half + 1)
    if BARRIER:
        tl.debug_barrier()
    tl.store(row + half, even)
    tl.store(row + D // 2 + half, odd)


@triton.jit
def scale_blocks(x_ptr, out_ptr, n, BLOCK: tl.constexpr, OVERLAP: tl.constexpr):
    # Each program scales its block; OVERLAP lets it store one element into the next block.
    start = tl.program_id(0) * BLOCK
    offsets = start + tl.arange(0, 2 * BLOCK)
    mask = (offsets < start + BLOCK + OVERLAP) & (offsets < n)
    tl.store(out_ptr + offsets, 3 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def line_of(kernel, text):
    """file:line of the first line of ``kernel``'s source that contains ``text``."""
    lines, first = inspect.getsourcelines(kernel.fn)
    return f"test_races.py:{first + next(i for i, s in enumerate(lines) if text in s)}"


def test_a_store_over_bytes_another_element_loaded_is_a_race():
    x = torch.arange(4 * 8, dtype=torch.float32)
    with pytest.raises(RaceFound) as found:
        with mt.race_check({"x": x}):
            deinterleave_in_place[(4,)](x, D=8, BARRIER=False)
    message = str(found.value)
    assert message.startswith("races: kernel deinterleave_in_place, within program")
    assert "tensor 'x'" in message
    assert line_of(deinterleave_in_place, "tl.store(row + half") in message
    loads = [line_of(deinterleave_in_place, f"{name} = tl.load") for name in ("even", "odd")]
    assert any(f"loads it at {line}" in message for line in loads), message


def test_the_same_kernel_with_a_barrier_passes():
    x = torch.arange(4 * 8, dtype=torch.float32)
    with mt.race_check({"x": x}):
        deinterleave_in_place[(4,)](x, D=8, BARRIER=True)
    expected = torch.arange(4 * 8, dtype=torch.float32).view(4, 4, 2).transpose(1, 2)
    assert torch.equal(x.view(4, 8), expected.reshape(4, 8))


def test_a_store_into_the_next_programs_block_is_a_race():
    x = torch.arange(16, dtype=torch.float32)
    out = torch.zeros(16)
    with pytest.raises(RaceFound) as found:
        with mt.race_check({"x": x, "out": out}):
            scale_blocks[(4,)](x, out, 16, BLOCK=4, OVERLAP=1)
    message = str(found.value)
    assert message.startswith("races: kernel scale_blocks, between programs")
    assert "tensor 'out'" in message
    assert line_of(scale_blocks, "tl.store(out_ptr") in message


@triton.jit
def scale_in_place(x_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, 3 * tl.load(x_ptr + offsets))


def test_each_element_storing_over_what_it_loaded_passes():
    x = torch.arange(16, dtype=torch.float32)
    with mt.race_check({"x": x}):
        scale_in_place[(4,)](x, BLOCK=4)
    assert torch.equal(x, 3 * torch.arange(16, dtype=torch.float32))


def test_disjoint_blocks_pass():
    x = torch.arange(16, dtype=torch.float32)
    out = torch.zeros(16)
    with mt.race_check({"x": x, "out": out}):
        scale_blocks[(4,)](x, out, 16, BLOCK=4, OVERLAP=0)
    assert torch.equal(out, 3 * x)


def test_programs_in_a_drawn_order_run_each_program_once():
    x = torch.arange(64, dtype=torch.float32)
    outs = []
    for seed in (None, 1, 2):
        out = torch.zeros(64)
        with mt.program_order(seed):
            scale_blocks[(16,)](x, out, 64, BLOCK=4, OVERLAP=0)
        outs.append(out)
    assert all(torch.equal(o, 3 * x) for o in outs)


@triton.jit
def stamp_blocks(out_ptr, n, BLOCK: tl.constexpr):
    # Each program writes its index over its block and the next block's first element.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, 2 * BLOCK)
    mask = (offsets <= tl.program_id(0) * BLOCK + BLOCK) & (offsets < n)
    tl.store(out_ptr + offsets, tl.zeros([2 * BLOCK], tl.float32) + tl.program_id(0), mask=mask)


def test_drawn_orders_change_what_an_order_dependent_kernel_leaves():
    results = set()
    for seed in (None, 1, 2, 3, 4, 5):
        out = torch.zeros(32)
        with mt.program_order(seed):
            stamp_blocks[(8,)](out, 32, BLOCK=4)
        if seed is None:  # in order, program p + 1 writes the element both store last
            assert out[4::4].tolist() == [1, 2, 3, 4, 5, 6, 7]
        results.add(tuple(out.tolist()))
    assert len(results) > 1, "the drawn orders ran the programs in the interpreter's order"


class StagesThroughADeinterleave(NumpyRope):
    """NumPy's rope values, with a Triton launch on the side that de-interleaves a scratch
    row in place, with or without its barrier: the values pass whatever the launch does, so
    only the races check can tell the two apart."""

    def __init__(self, barrier: bool):
        super().__init__()
        self.barrier = barrier

    def kernels(self):
        return []

    def rope(self, call):
        super().rope(call)
        staging = mt.scratch((2, 8), "f32", "staging")
        staging.zero_()
        deinterleave_in_place[(2,)](staging, D=8, BARRIER=self.barrier)


def outcomes(report) -> dict:
    return {check: (outcome, line) for check, outcome, line in report["results"]}


def test_the_races_check_fails_a_racing_launch_and_only_that_check(tmp_path):
    with pytest.raises(mlarope.FuzzFailure) as failure:
        mlarope.fuzz(
            mt.TritonBackend(StagesThroughADeinterleave(barrier=False)),
            cases=3,
            ops=["rope"],
            seed=7,
            out=str(tmp_path),
            quiet=True,
        )
    repro = failure.value.result["failures"][0]["dir"]
    racing = outcomes(mlarope.check(mt.TritonBackend(StagesThroughADeinterleave(False)), repro))
    outcome, line = racing.pop("races")
    assert outcome == "fail" and "races: kernel deinterleave_in_place, within program" in line
    assert "tensor 'staging #" in line, line
    assert all(o != "fail" for o, _ in racing.values()), racing
    barrier = outcomes(mlarope.check(mt.TritonBackend(StagesThroughADeinterleave(True)), repro))
    assert barrier["races"][0] == "pass" and all(o != "fail" for o, _ in barrier.values())
    unchecked = mt.TritonBackend(StagesThroughADeinterleave(False), races=False)
    skipped = outcomes(mlarope.check(unchecked, repro))
    assert skipped["races"][0] == "skip" and "records no accesses" in skipped["races"][1]
