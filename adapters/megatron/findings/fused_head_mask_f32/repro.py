# SPDX-License-Identifier: Apache-2.0
"""Megatron-Core's fused MLA RoPE kernels rotate heads past the last one of a token.

Each program of rotary_fwd_q_kernel rotates BLOCK_H heads of one token, from head
``pid_head * BLOCK_H``, under ``mask = x_off < head_num * stride_x_nheads``; but ``x_off``
counts from the block's first head, not from head 0, so the mask passes every head of the
block. When BLOCK_H < heads and heads % BLOCK_H != 0, the last block of a token covers heads
past the last one: the next token's first heads (rotated a second time), and for the last token
memory past the end of q (loaded, rotated and stored). The other three kernels
(rotary_bwd_q_kernel, rotary_fwd_kv_kernel, rotary_bwd_kv_kernel) build the same mask. The
autotuner picks BLOCK_H (1 to 128) by timing, so on a GPU it shows in some processes only.

Input: q SBHD f32 [3, 1, 5, 12] (5 heads, qk_head_dim 4, emb_dim 8), rotated in place by
fused_apply_mla_rope_for_q with f32 tables of plain RoPE angles. q is a view at the start of
a larger buffer whose tail (three heads' worth, random values) must stay untouched. The
autotuner is given one config, the same on the host and on a GPU: BLOCK_H=1 (divides 5: the
control) and then BLOCK_H=4 (two blocks per token, the second covering heads 4 to 7). Each is
compared with a float64 rotation of the same input. On the host Triton's interpreter runs the
kernel (through mlarope.triton); on a GPU the same script runs it compiled, with the same
result expected: wrong heads, and the buffer's tail written.

Exit status 1 and "reproduced" when BLOCK_H=4 computes wrong values or writes past q (with
BLOCK_H=1 right), 0 and "not reproduced" when both are right, 3 and "not reached" when the
release lacks the fused file, fused_apply_mla_rope_for_q, its kernel or a BLOCK_H=4 config.
A wrong result at BLOCK_H=1 is another cause: an AssertionError.

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

S, B, H, QK, EMB = 3, 1, 5, 4, 8
D = QK + EMB
TAIL = 3 * D  # what BLOCK_H=4 reaches past the last token: heads 5 to 7 of token 2
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
    if not hasattr(tuner, "every_config"):
        tuner.every_config = list(tuner.configs)
    chosen = [c for c in tuner.every_config if c.kwargs.get("BLOCK_H") == block_h]
    if not chosen:
        raise NotReached(f"no config BLOCK_H={block_h} among the kernel's configs")
    tuner.configs, tuner.cache = chosen, {}


def reference(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """What fused_apply_mla_rope_for_q computes, in float64: each head's last EMB elements read
    as interleaved pairs (x1, x2) and written as halves [x1 c - x2 s, x2 c + x1 s]."""
    q = q.double()
    c = cos[:, 0, 0, : EMB // 2].double()[:, None, None, :]  # the table's halves are equal
    s = sin[:, 0, 0, : EMB // 2].double()[:, None, None, :]
    x1, x2 = q[..., QK::2], q[..., QK + 1 :: 2]
    return torch.cat([q[..., :QK], x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def run(fused, block_h: int, q0, tail0, cos, sin) -> tuple[int, int]:
    """(wrong elements of q, elements of the tail past q written) under BLOCK_H=block_h."""
    pin(fused.rotary_fwd_q_kernel, block_h)
    buffer = torch.cat([q0.flatten(), tail0]).to(DEVICE)
    q = buffer[: q0.numel()].view(q0.shape)  # stores past q land in the buffer's tail
    fused.fused_apply_mla_rope_for_q(q, cos.to(DEVICE), sin.to(DEVICE), QK, EMB)
    if GPU:
        torch.cuda.synchronize()
    want = reference(q0, cos, sin)
    got = q.double().cpu()
    # f32 arithmetic on values of order 1: 1e-5 is many ulps, far below a wrong rotation.
    wrong = int(((got - want).abs() > 1e-5 * (1 + want.abs())).sum())
    return wrong, int((buffer[q0.numel() :].cpu() != tail0).sum())


def main() -> int:
    if len(sys.argv) > 1:
        os.environ["MLAROPE_MEGATRON_ROOT"] = os.path.abspath(sys.argv[1])
    if not GPU:  # before Triton is imported: its kernels then run on the host
        from mlarope import triton as mt

        mt.interpreter()
    try:
        version, fused = load_fused()
        fn = fused.fused_apply_mla_rope_for_q
        pin(fused.rotary_fwd_q_kernel, 4)
        inspect.signature(fn).bind(None, None, None, QK, EMB)
    except (NotReached, AttributeError, TypeError) as e:
        print(f"not reached: {e}")
        return 3
    print(f"megatron-core {version}, {'GPU' if GPU else 'Triton interpreter'}")

    gen = torch.Generator().manual_seed(0)
    q0 = torch.randn(S, B, H, D, generator=gen)
    tail0 = torch.randn(TAIL, generator=gen)
    angles = torch.arange(S, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, EMB, 2, dtype=torch.float64) / EMB
    )
    halves = torch.cat([angles, angles], dim=-1)[:, None, None, :]  # [S, 1, 1, EMB]: [f, f]
    cos, sin = torch.cos(halves).float(), torch.sin(halves).float()

    results = {}
    for block_h in (1, 4):
        wrong, written = run(fused, block_h, q0, tail0, cos, sin)
        results[block_h] = wrong, written
        print(
            f"BLOCK_H={block_h}: {wrong} of {q0.numel()} elements of q wrong, "
            f"{written} of the {TAIL} elements past q written"
        )
    assert results[1] == (0, 0), "BLOCK_H=1 (one head per block) is wrong: another cause"
    wrong, written = results[4]
    if wrong or written:
        print(
            f"reproduced: BLOCK_H=4 with {H} heads: {wrong} elements of q wrong"
            f"{f', {written} past its end written' if written else ''} (the head mask counts "
            "from the block's first head)"
        )
        return 1
    print(f"not reproduced: BLOCK_H=4 with {H} heads rotates every head once, nothing past q")
    return 0


if __name__ == "__main__":
    sys.exit(main())
