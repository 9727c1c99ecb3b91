# SPDX-License-Identifier: Apache-2.0
"""Megatron-Core's fused MLA RoPE q kernels store over bytes other threads have yet to load.

rotary_fwd_q_kernel loads each head's rope slice as interleaved pairs (``x_1`` at even offsets,
``x_2`` at odd ones) and stores the result as halves (``x_left`` at the first emb_dim / 2
offsets, ``x_right`` at the rest) over the same bytes, with no barrier between: the store of
element i lands on bytes that element i / 2 loads. A program's tile is spread over the threads
of its warps, which nothing orders, so one thread can overwrite an element another has not
loaded yet. rotary_bwd_q_kernel (the gradient, through autograd) does the same the other way
(loads halves, stores pairs). barrier.patch, beside this file, puts a tl.debug_barrier()
before each kernel's stores.

Input: q SBHD [2, 1, 2, 12] f32 (2 heads, qk_head_dim 4, emb_dim 8), rotated in place by
fused_apply_mla_rope_for_q; then its gradient. On the host Triton's interpreter runs one
program at a time and each tile operation whole, so the values come out right: the race shows
only in the record of accesses that mlarope.triton checks (``race_check``: a byte stored and
loaded by different tile elements between two barriers), which names both source lines. On a
GPU the script instead runs each kernel many times on a large tensor (SBHD [4096, 1, 128, 192],
emb_dim 64; f32 and bf16; every BLOCK_H config in turn) and compares every result with a
float64 rotation: a wrong element is the race showing. It may not show in a given number of
runs; the script then says so.

Exit status 1 and "reproduced" when a race is recorded (host) or a result is wrong (GPU), 0
and "not reproduced" when neither kernel races (host: with barrier.patch applied) or no run
showed it (GPU), 3 and "not reached" when the release lacks the fused file,
fused_apply_mla_rope_for_q or the q kernels.

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

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
# The host's tensor is small (the interpreter is slow, and one program shows the race); a
# GPU's is large, so that many programs run at once. 128 heads: every BLOCK_H divides it or
# covers it whole, so no block reaches past the last head (another finding).
S, H, QK, EMB = (4096, 128, 128, 64) if GPU else (2, 2, 4, 8)
D = QK + EMB
RUNS = 200  # launches of each kernel per dtype on a GPU, spread over the configs
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


def tuner_of(kernel):
    from triton.runtime.autotuner import Autotuner

    tuner = kernel
    while not isinstance(tuner, Autotuner):
        tuner = getattr(tuner, "fn", None)
        if tuner is None:
            raise NotReached(f"{kernel} is not autotuned")
    if not hasattr(tuner, "every_config"):
        tuner.every_config = list(tuner.configs)
    return tuner


def pin(tuners, index: int) -> None:
    """Give each autotuner one config, its index-th: with one config it runs it without timing
    (the interpreter cannot time; a GPU would keep whichever ran fastest)."""
    for tuner in tuners:
        tuner.configs, tuner.cache = [tuner.every_config[index % len(tuner.every_config)]], {}


def forward_ref(q: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The rope slice after the forward kernel, float64: interleaved pairs (x1, x2) in, halves
    [x1 c - x2 s, x2 c + x1 s] out. ``c``, ``s``: [S, 1, 1, EMB / 2], broadcast over B and H."""
    x1, x2 = q[..., QK::2].double(), q[..., QK + 1 :: 2].double()
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def backward_ref(g: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The rope slice of the gradient after the backward kernel, float64: the forward's
    transpose, halves (gl, gr) in, interleaved pairs (gl c + gr s, gr c - gl s) out."""
    gl, gr = g[..., QK : QK + EMB // 2].double(), g[..., QK + EMB // 2 :].double()
    return torch.stack([gl * c + gr * s, gr * c - gl * s], dim=-1).flatten(start_dim=-2)


def forward_for_grad(fn, cos, sin, like):
    """(out, leaf): fn's forward kernel run on a copy of a leaf shaped ``like``, so that
    ``torch.autograd.grad(out, leaf, g)`` runs the backward kernel, which rotates g in place
    and returns it."""
    leaf = torch.zeros(like.shape, dtype=like.dtype, device=like.device, requires_grad=True)
    return fn(leaf.clone(), cos, sin, QK, EMB), leaf


def host(fn, q0, g0, cos, sin, c, s) -> int:
    """Each kernel once under mlarope.triton's race check."""
    from mlarope import triton as mt
    from mlarope._races import RaceFound

    races = []
    q = q0.clone()
    try:
        with mt.race_check({"q": q}):
            fn(q, cos, sin, QK, EMB)
    except RaceFound as e:
        races.append(str(e))
    assert torch.allclose(q[..., QK:].double(), forward_ref(q0, c, s), atol=1e-5), "forward"
    print(f"rotary_fwd_q_kernel: values right; {races[-1] if races else 'no race'}")

    out, leaf = forward_for_grad(fn, cos, sin, g0)
    (got,) = torch.autograd.grad(out, leaf, grad_outputs=g0.clone())
    assert torch.allclose(got[..., QK:].double(), backward_ref(g0, c, s), atol=1e-5), "backward"
    out, leaf = forward_for_grad(fn, cos, sin, g0)  # the forward kernel, outside the check
    g = g0.clone()
    found = len(races)
    try:
        with mt.race_check({"grad": g}):
            torch.autograd.grad(out, leaf, grad_outputs=g)
    except RaceFound as e:
        races.append(str(e))
    print(f"rotary_bwd_q_kernel: values right; {races[-1] if len(races) > found else 'no race'}")
    if races:
        print(
            f"reproduced: {len(races)} of the 2 q kernels load and store the same bytes in one "
            "barrier epoch (different tile elements): a race on a GPU"
        )
        return 1
    print("not reproduced: neither q kernel stores over bytes it loads in the same epoch")
    return 0


def device(fn, tuners, cos, sin, c, s) -> int:
    """RUNS launches of each kernel per dtype, the configs in turn, each result compared."""
    gen = torch.Generator().manual_seed(0)
    q0 = torch.randn(S, 1, H, D, generator=gen).to(DEVICE)
    wrong_runs = []
    for dtype in (torch.float32, torch.bfloat16):
        x0 = q0.to(dtype)
        # f32: within 1e-5 relative; bf16: the result's rounding (2^-8 relative) and a margin.
        tol = 1e-5 if dtype == torch.float32 else 2.0**-7
        want_fwd, want_bwd = forward_ref(x0, c, s), backward_ref(x0, c, s)
        q = torch.empty_like(x0)
        for run in range(RUNS):
            pin(tuners, run)
            config = tuners[0].configs[0]
            q.copy_(x0)
            fn(q, cos, sin, QK, EMB)
            bad = (q[..., QK:].double() - want_fwd).abs() > tol * (1 + want_fwd.abs())
            if bad.any():
                wrong_runs.append(f"forward {dtype} {config.kwargs}: {int(bad.sum())} wrong")
            out, leaf = forward_for_grad(fn, cos, sin, x0)
            (got,) = torch.autograd.grad(out, leaf, grad_outputs=x0.clone())
            bad = (got[..., QK:].double() - want_bwd).abs() > tol * (1 + want_bwd.abs())
            if bad.any():
                wrong_runs.append(f"backward {dtype} {config.kwargs}: {int(bad.sum())} wrong")
        print(f"{dtype}: {RUNS} launches of each q kernel, {len(wrong_runs)} wrong so far")
    if wrong_runs:
        print("\n".join(wrong_runs[:10]))
        print(f"reproduced: {len(wrong_runs)} launches computed wrong elements (the race)")
        return 1
    print(
        f"not reproduced: the race did not show in {RUNS} launches of each q kernel per dtype "
        "(f32, bf16) on this GPU (on the host, mlarope's race check shows it without a GPU)"
    )
    return 0


def main() -> int:
    if len(sys.argv) > 1:
        os.environ["MLAROPE_MEGATRON_ROOT"] = os.path.abspath(sys.argv[1])
    if not GPU:  # before Triton is imported: its kernels then run on the host
        from mlarope import triton as mt

        mt.interpreter()
    try:
        version, fused = load_fused()
        fn = fused.fused_apply_mla_rope_for_q
        tuners = [tuner_of(fused.rotary_fwd_q_kernel), tuner_of(fused.rotary_bwd_q_kernel)]
        inspect.signature(fn).bind(None, None, None, QK, EMB)
    except (NotReached, AttributeError, TypeError) as e:
        print(f"not reached: {e}")
        return 3
    print(f"megatron-core {version}, {'GPU' if GPU else 'Triton interpreter'}")
    # Any config races; the host runs one (the first), a GPU all in turn.
    pin(tuners, 0)

    angles = torch.arange(S, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, EMB, 2, dtype=torch.float64) / EMB
    )
    halves = torch.cat([angles, angles], dim=-1)[:, None, None, :]  # [S, 1, 1, EMB]: [f, f]
    cos, sin = (f(halves).float().to(DEVICE) for f in (torch.cos, torch.sin))
    c, s = (t[..., : EMB // 2].double() for t in (cos, sin))  # the reference's, in float64
    if GPU:
        return device(fn, tuners, cos, sin, c, s)
    gen = torch.Generator().manual_seed(0)
    q0, g0 = torch.randn(2, S, 1, H, D, generator=gen)
    return host(fn, q0, g0, cos, sin, c, s)


if __name__ == "__main__":
    sys.exit(main())
