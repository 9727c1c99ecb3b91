# SPDX-License-Identifier: Apache-2.0
"""Megatron-Core's fused MLA RoPE kernels read the table row before the table for THD padding.

In THD layout each program of rotary_fwd_q_kernel finds its row's position within its sequence
with ``_get_thd_token_idx``, which starts from ``token_idx = -1`` and sets it only for a row
inside a sequence. A row past ``cu_seqlens[-1]`` (padding after the last sequence) keeps -1, so
the kernel loads ``COS + (-1) * emb_dim`` and ``SIN + (-1) * emb_dim``, the emb_dim values
before each table, and rotates the row with them; rows outside every sequence should pass
through unchanged. The other three kernels find positions the same way. A later fix upstream
clamps position -1 to row 0: the row is then rotated with the table's first row, still not
passed through.

Input: q THD f32 [4, 2, 12] (2 heads, qk_head_dim 4, emb_dim 8), cu_seqlens [0, 2, 3]: rows 0
to 2 in two sequences, row 3 padding. 2 heads: no BLOCK_H leaves a block covering heads past
the last (that is another finding); the autotuner is given BLOCK_H=2, on the host and a GPU
alike. cos/sin [2, 1, 1, 8] (plain RoPE angles, halves [f, f]) are views into buffers whose
row before the table is NaN, so a read of it shows in the result. On the host Triton's
interpreter runs the kernel (through mlarope.triton); on a GPU the same script runs it
compiled, and the same NaN row is expected.

Exit status 1 and "reproduced" when the padding row reads the row before the table (NaN), 0
and "not reproduced" when it passes through or is rotated with the table's first row (the
clamp: still rotated, said so), 3 and "not reached" when the release lacks the fused file,
fused_apply_mla_rope_for_q, cu_seqlens_q or the kernel's BLOCK_H=2 config. Rows inside the
sequences computed wrong, or a padding row of other values, are another cause: an
AssertionError.

    python repro.py [ROOT]

ROOT: a folder holding one release's files as adapters/releases.py unpacks them
(ROOT/megatron/core/..., ROOT/VERSION); without it, the installed megatron-core.
0.13.0 to 0.15.x mark the fused functions @experimental_fn, which refuses a call unless
Megatron's experimental flag is set; megatron_sources' stand-in for it returns the function
itself, as with the flag set.
"""

import inspect
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))  # adapters/megatron: megatron_sources

H, QK, EMB = 2, 4, 8
D = QK + EMB
CU_SEQLENS = [0, 2, 3]
POSITIONS = [0, 1, 0]  # of rows 0 to 2; row 3 (past cu_seqlens[-1]) is padding
T = len(POSITIONS) + 1
ROWS = 2  # table rows: the longest sequence
GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
FUSED = "megatron.core.fusions.fused_mla_yarn_rope_apply"


class NotReached(Exception):
    """The release lacks what the repro calls."""


def load_fused():
    """(version, Megatron's fused module), through megatron_sources."""
    import megatron_sources

    version = megatron_sources.load().version
    try:
        return version, megatron_sources.load_fused()
    except ModuleNotFoundError as e:
        if e.name != FUSED:
            raise
        raise NotReached(f"megatron-core {version} has no {FUSED}") from None


def pin(kernel, block_h: int) -> None:
    """Give the kernel's autotuner the one config BLOCK_H=block_h: with one config it runs it
    without timing (the interpreter cannot time; a GPU would keep whichever ran fastest)."""
    from triton.runtime.autotuner import Autotuner

    tuner = kernel
    while not isinstance(tuner, Autotuner):
        tuner = getattr(tuner, "fn", None)
        if tuner is None:
            raise NotReached(f"{kernel} is not autotuned")
    chosen = [c for c in tuner.configs if c.kwargs.get("BLOCK_H") == block_h]
    if not chosen:
        raise NotReached(f"no config BLOCK_H={block_h} among the kernel's configs")
    tuner.configs, tuner.cache = chosen, {}


def rotated(row: torch.Tensor, cos_row: torch.Tensor, sin_row: torch.Tensor) -> torch.Tensor:
    """One THD row [H, D] as the kernel rotates it, in float64: each head's last EMB elements
    read as interleaved pairs (x1, x2) and written as halves [x1 c - x2 s, x2 c + x1 s]."""
    row = row.double()
    c, s = cos_row[: EMB // 2].double(), sin_row[: EMB // 2].double()  # halves are equal
    x1, x2 = row[:, QK::2], row[:, QK + 1 :: 2]
    return torch.cat([row[:, :QK], x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    # f32 arithmetic on values of order 1: 1e-5 is many ulps, far below a wrong rotation.
    return bool(((got.double() - want).abs() <= 1e-5 * (1 + want.abs())).all())


def main() -> int:
    if len(sys.argv) > 1:
        os.environ["MLAROPE_MEGATRON_ROOT"] = os.path.abspath(sys.argv[1])
    if not GPU:  # before Triton is imported: its kernels then run on the host
        from mlarope import triton as mt

        mt.interpreter()
    try:
        version, fused = load_fused()
        fn = fused.fused_apply_mla_rope_for_q
        pin(fused.rotary_fwd_q_kernel, 2)
        inspect.signature(fn).bind(None, None, None, QK, EMB, cu_seqlens_q=None)
    except (NotReached, AttributeError, TypeError) as e:
        print(f"not reached: {e}")
        return 3
    print(f"megatron-core {version}, {'GPU' if GPU else 'Triton interpreter'}")

    gen = torch.Generator().manual_seed(0)
    q0 = torch.randn(T, H, D, generator=gen)
    angles = torch.arange(ROWS, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, EMB, 2, dtype=torch.float64) / EMB
    )
    halves = torch.cat([angles, angles], dim=-1)  # [ROWS, EMB]: [f, f]
    tables = []
    for f in (torch.cos, torch.sin):
        # The row before the table is NaN: a read of it makes the row it rotates NaN.
        buffer = torch.cat([torch.full((EMB,), float("nan")), f(halves).float().flatten()])
        tables.append(buffer.to(DEVICE)[EMB:].view(ROWS, 1, 1, EMB))
    cos, sin = tables
    cu_seqlens = torch.tensor(CU_SEQLENS, dtype=torch.int32, device=DEVICE)

    q = q0.clone().to(DEVICE)  # rotated in place: q0 stays the input
    fn(q, cos, sin, QK, EMB, cu_seqlens_q=cu_seqlens)
    got = q.cpu()
    c, s = cos.cpu()[:, 0, 0], sin.cpu()[:, 0, 0]
    for r, p in enumerate(POSITIONS):
        assert close(got[r], rotated(q0[r], c[p], s[p])), f"row {r} (inside a sequence) wrong"
    pad = got[T - 1]
    print(f"rows 0 to {T - 2} (inside the sequences) rotated right; padding row {T - 1}:")
    if pad.isnan().any():
        print(
            f"reproduced: padding row {T - 1} (past cu_seqlens[-1] = {CU_SEQLENS[-1]}) is NaN "
            f"in {int(pad.isnan().sum())} of {pad.numel()} elements: it read the table row "
            "before the table (position -1), where it should pass through unchanged"
        )
        return 1
    if close(pad, rotated(q0[T - 1], c[0], s[0])):
        print(
            "not reproduced: row clamped to the table's first row (the padding row is still "
            "rotated, with position 0, where rows outside every sequence pass through)"
        )
        return 0
    assert torch.equal(pad, q0[T - 1]), "the padding row: neither NaN, row 0's, nor unchanged"
    print(f"not reproduced: padding row {T - 1} passed through unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
