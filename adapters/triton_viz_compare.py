# SPDX-License-Identifier: Apache-2.0
"""What triton-viz's sanitizer (the Triton-Sanitizer paper's tool, PyPI triton-viz 3.0) reports
on the bugs mlarope.triton catches, each case in a subprocess with a time limit. The mlarope
column of docs/triton.md's table comes from the tests named there; this script gives the other.

triton-viz 3.0 imports only under Triton 3.6.0 (under 3.9.0 it asks the interpreter's builder
for create_make_block_ptr, which 3.9 removed), and needs packages CI does not install, so this
is a documented command, not a test (docs/triton.md, "A peer: triton-viz").

    python triton_viz_compare.py            # every case: one line each
    python triton_viz_compare.py CASE       # one case (what the subprocess runs)
"""

import json
import mmap
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# This folder holds adapters/megatron, which would shadow the megatron package.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

LIMIT = 120  # seconds per case


@triton.jit
def store_past(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n + 2)


@triton.jit
def deinterleave_in_place(x_ptr, D: tl.constexpr):
    row = x_ptr + tl.program_id(0) * D
    half = tl.arange(0, D // 2)
    even = tl.load(row + 2 * half)
    odd = tl.load(row + 2 * half + 1)
    tl.store(row + half, even)
    tl.store(row + D // 2 + half, odd)


@triton.jit
def stamp_rows(x_ptr, row_stride):
    row = x_ptr + tl.program_id(0) * row_stride
    tl.store(row + tl.arange(0, 4), tl.full([4], 1.0, tl.float32))


def _setup():
    if not hasattr(torch.Tensor, "untyped_storage"):  # torch < 2.0
        torch.Tensor.untyped_storage = lambda self: self.storage().untyped()
    import triton_viz
    from triton_viz.clients import Sanitizer

    return torch, triton_viz, Sanitizer(abort_on_error=False)


def _megatron(sanitizer, triton_viz, block_h=1):
    sys.path.insert(0, os.path.join(HERE, "megatron"))
    import megatron_sources

    fused = megatron_sources.load_fused()
    tuner = fused.rotary_fwd_q_kernel
    tuner.configs = [c for c in tuner.configs if c.kwargs["BLOCK_H"] == block_h]
    tuner.fn = triton_viz.trace(sanitizer)(tuner.fn)  # tracing the autotuner fails in 3.0
    return fused


def _planted(torch, triton_viz, sanitizer, kind):
    if kind == "store_past":  # two elements past a 16-element tensor
        triton_viz.trace(sanitizer)(store_past)[(2,)](torch.zeros(16), 16, BLOCK=16)
    elif kind == "race":  # test_races.py's in-place de-interleave, no barrier
        triton_viz.trace(sanitizer)(deinterleave_in_place)[(4,)](torch.arange(32.0), D=8)
    else:  # test_offsets.py's i32 row offset past 2^31 elements, over a lazily mapped 9 GiB
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0x4000)
        memory = mmap.mmap(-1, 9 << 30, flags=flags)
        x = torch.from_numpy(np.frombuffer(memory, dtype=np.float32))
        triton_viz.trace(sanitizer)(stamp_rows)[(9,)](x, 1 << 28)


def run_case(name: str) -> dict:
    torch, triton_viz, sanitizer = _setup()
    if name in ("store_past", "race", "i32_wrap"):
        _planted(torch, triton_viz, sanitizer, name)
    elif name == "megatron_head_mask":  # finding 3: 5 heads, BLOCK_H 4
        fused = _megatron(sanitizer, triton_viz, block_h=4)
        q = torch.randn(3, 1, 5, 96)
        cos, sin = torch.randn(3, 1, 1, 64), torch.randn(3, 1, 1, 64)
        fused.fused_apply_mla_rope_for_q(q, cos, sin, 32, 64)
    elif name == "megatron_padding_row":  # finding 4: THD row 2 lies past cu_seqlens[-1]
        fused = _megatron(sanitizer, triton_viz)
        q = torch.randn(3, 2, 96)
        cos, sin = torch.randn(2, 1, 1, 64), torch.randn(2, 1, 1, 64)
        cu = torch.tensor([0, 2], dtype=torch.int32)
        fused.fused_apply_mla_rope_for_q(q, cos, sin, 32, 64, cu_seqlens_q=cu)
    elif name == "megatron_q_race":  # finding 5: any in-place call
        fused = _megatron(sanitizer, triton_viz)
        q = torch.randn(2, 1, 2, 8 + 64)
        cos, sin = torch.randn(2, 1, 1, 64), torch.randn(2, 1, 1, 64)
        fused.fused_apply_mla_rope_for_q(q, cos, sin, 8, 64)
    else:
        raise SystemExit(f"unknown case {name}")
    records = [
        f"{getattr(r.op_type, '__name__', r.op_type)} {r.tensor_name}" for r in sanitizer.records
    ]
    return {"case": name, "records": len(records), "first": records[:2]}


CASES = [
    "store_past",
    "race",
    "i32_wrap",
    "megatron_head_mask",
    "megatron_padding_row",
    "megatron_q_race",
]


def main() -> int:
    if len(sys.argv) == 2:
        print(json.dumps(run_case(sys.argv[1])))
        return 0
    for name in CASES:
        try:
            done = subprocess.run(
                [sys.executable, __file__, name], capture_output=True, text=True, timeout=LIMIT
            )
            lines = done.stdout.strip().splitlines()
            if done.returncode == 0 and lines:
                print(lines[-1])
            else:
                tail = (done.stdout + done.stderr).strip().splitlines()[-1:]
                print(json.dumps({"case": name, "error": tail}))
        except subprocess.TimeoutExpired:
            print(json.dumps({"case": name, "error": f"no result within {LIMIT} s"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
