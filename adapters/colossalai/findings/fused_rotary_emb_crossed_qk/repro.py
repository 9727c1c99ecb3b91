# SPDX-License-Identifier: Apache-2.0
"""ColossalAI's fused_rotary_embedding writes k's rotation into q's second half and q's into
k's first half.

fused_rotary_emb (colossalai/kernel/triton/fused_rotary_embedding.py) loads the halves q_0,
q_1 of each q head and k_0, k_1 of each k head, then computes

    out_q0 = q_0 * cos - q_1 * sin      out_q1 = k_0 * sin + k_1 * cos   (line 92: k)
    out_k0 = q_0 * cos - q_1 * sin      out_k1 = k_0 * sin + k_1 * cos   (line 94: q)

so q's second half is the second half of k's rotation and k's first half the first half of
q's. The same file also addresses k's second half with q's token stride (line 62) and takes
k's head count from q (line 155); this script gives k q's shape and layout, so only the
crossing shows (fix.patch ends all four).

Input: q and k [4, 2, 8] f32, different values, laid out alike; lengths [1, 1, 1, 1] (four
one-token sequences: the kernel loads next_power_of_2(T) = 4 cumulative lengths, all of them
inside the tensor, so no position depends on memory past it: that is another finding); cos and
sin [8, 8] of random angles, halves equal, as the docstring's [max_position_len, head_dim].
Every token is at position 0 of its sequence and is rotated by row 0. On the host Triton's
interpreter runs the kernel (through mlarope.triton); on a GPU the same script runs it
compiled, with the same expected outcome.

Exit status 1 and "reproduced" when q's second half is k's rotation (and k's first half q's),
0 and "not reproduced" when both come out as their own rotation, 3 and "not reached" when the
release lacks the file or fused_rotary_embedding. Any other wrong result is another cause: an
AssertionError.

    python repro.py [ROOT]

ROOT: a folder holding one release's files as adapters/releases.py unpacks them
(ROOT/colossalai/kernel/triton/..., ROOT/VERSION); without it, the installed colossalai on a
GPU, else the newest release pinned in adapters/colossalai/releases.toml (0.5.0).
"""

import importlib
import importlib.util
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
MODULE = "fused_rotary_embedding"
T, H, D = 4, 2, 8
LENGTHS = [1, 1, 1, 1]
ROWS = 8  # table rows


def kernel_module(root):
    """colossalai/kernel/triton/<MODULE>.py: the installed one on a GPU without ROOT, else the
    release's file loaded alone (it imports torch and triton only); None when it is absent."""
    if root is None and GPU and importlib.util.find_spec("colossalai") is not None:
        return importlib.import_module(f"colossalai.kernel.triton.{MODULE}")
    if root is None:
        sys.path.insert(0, os.path.join(HERE, "..", "..", ".."))  # adapters/: releases.py
        import releases

        root = releases.root("colossalai")
    path = os.path.join(root, "colossalai", "kernel", "triton", f"{MODULE}.py")
    if not os.path.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location(f"colossalai_{MODULE}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rotated(x, cos_row, sin_row):
    """x [T, H, D] rotated as (i, i + D/2) pairs by one table row, in float64."""
    x = x.double()
    c, s = cos_row[: D // 2].double(), sin_row[: D // 2].double()
    x0, x1 = x[..., : D // 2], x[..., D // 2 :]
    return torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)


def close(got, want) -> bool:
    # f32 arithmetic on values of order 1: 1e-5 is many ulps, far below a wrong operand.
    return bool(((got.double() - want).abs() <= 1e-5 * (1 + want.abs())).all())


def main() -> int:
    root = sys.argv[1] if len(sys.argv) > 1 else None
    if not GPU:  # before Triton is imported: its kernels then run on the host
        from mlarope import triton as mt

        mt.interpreter()
    module = kernel_module(root)
    if module is None or not hasattr(module, "fused_rotary_embedding"):
        print(f"not reached: no fused_rotary_embedding in colossalai/kernel/triton/{MODULE}.py")
        return 3
    print(f"{module.__file__}, {'GPU' if GPU else 'Triton interpreter'}")

    gen = torch.Generator().manual_seed(0)
    q0, k0 = torch.randn(T, H, D, generator=gen), torch.randn(T, H, D, generator=gen)
    angles = torch.rand(ROWS, D // 2, generator=gen, dtype=torch.float64) * 6.0
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1).float()  # [ROWS, D], halves equal
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1).float()
    q, k = q0.clone().to(DEVICE), k0.clone().to(DEVICE)  # rotated in place: q0, k0 stay
    lengths = torch.tensor(LENGTHS, device=DEVICE)
    module.fused_rotary_embedding(q, k, cos.to(DEVICE), sin.to(DEVICE), lengths)
    q, k = q.cpu(), k.cpu()

    want_q, want_k = rotated(q0, cos[0], sin[0]), rotated(k0, cos[0], sin[0])  # position 0
    if close(q, want_q) and close(k, want_k):
        print("not reproduced: q and k each rotated by their own values")
        return 0
    half = D // 2
    assert close(q[..., :half], want_q[..., :half]), "q's first half wrong"
    assert close(k[..., half:], want_k[..., half:]), "k's second half wrong"
    crossed_q = close(q[..., half:], want_k[..., half:])
    crossed_k = close(k[..., :half], want_q[..., :half])
    assert crossed_q and crossed_k, "q's second half or k's first half wrong, but not crossed"
    wrong = int((q.double() - want_q).abs().gt(1e-5).sum())
    t, h, d = 0, 0, half  # an example element
    print(
        f"q[{t}, {h}, {d}]: expected {want_q[t, h, d].item():.7g} (q's rotation), got "
        f"{q[t, h, d].item():.7g} (k's rotation: {want_k[t, h, d].item():.7g})"
    )
    print(
        f"reproduced: q's second half is k's rotation and k's first half q's ({wrong} of "
        f"{q.numel()} elements of q wrong): out_q1 and out_k0 read the other tensor"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
