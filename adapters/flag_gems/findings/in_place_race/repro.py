# SPDX-License-Identifier: Apache-2.0
"""FlagGems' in-place rotary kernel stores over elements other threads have yet to load.

apply_rotary_pos_emb_inplace_kernel rotates one token per program: for each head it loads every
element (``q``) and its rotary partner (``rotated_q``: element i + D/2, or i ^ 1 interleaved),
then stores each element's result over the element itself, with no barrier between. The store
of element i lands on bytes that the thread holding element i's partner loads, and the
elements of a head are spread over the threads of the program's warps, which nothing orders:
one thread can overwrite an element another has not loaded yet. The k loop does the same. The
out-of-place kernel writes another tensor and does not.

On the host Triton's interpreter runs each tile operation whole, so the values come out right:
the race shows in the record of accesses that mlarope.triton checks (``race_check``: a byte
stored and loaded by different tile elements between two barriers), which names both lines.
Input there: q and k [2, 1, 8] f32, rope in place, half pairs. On a GPU the script instead runs
the kernel many times on q [4096, 32, 128] and k [4096, 8, 128] (head_dim 128: partners 64
elements apart, in other warps), f32 and bf16, against a float64 rotation: a wrong element is
the race showing. It may not show in a given number of runs; the script then says so.

Exit status 1 and "reproduced" when a race is recorded (host) or a result is wrong (GPU), 0
and "not reproduced" when it is not (host: with barrier.patch applied; GPU: no run showed it),
3 and "not reached" when the release lacks the in-place kernel.

    python repro.py [ROOT]

ROOT: a folder holding a release's ``flag_gems/fused/rotary_embedding.py`` and
``flag_gems/utils/triton_lang_extension.py`` (as adapters/releases.py unpacks them); without
it, the installed flag_gems on a GPU, the pinned release on the host.
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
GPU = torch.cuda.is_available()
RUNS = 200  # launches per dtype on a GPU


def rotary_module(root):
    """FlagGems' rotary_embedding module: on the host (or with ROOT) through the adapter's
    loader, which stands in for the package's other modules; on a GPU without ROOT, the
    installed package."""
    if GPU and root is None:
        from flag_gems.fused import rotary_embedding

        return rotary_embedding
    sys.path.insert(0, os.path.join(HERE, "..", ".."))  # adapters/flag_gems
    import flag_gems_rotary

    path = os.path.join(root or flag_gems_rotary.release_root(), flag_gems_rotary.KERNEL)
    return flag_gems_rotary.load(root) if os.path.isfile(path) else None


def tables(positions: int, half: int, device: str):
    angle = torch.arange(positions, device=device, dtype=torch.float64)[:, None] / (
        10000.0 ** (torch.arange(half, device=device, dtype=torch.float64) / half)
    )
    return angle.cos(), angle.sin()


def reference(x, cos, sin, positions):
    """Half pairs rotated by the table rows at ``positions``, in float64."""
    x = x.double()
    c, s = cos[positions][:, None, :], sin[positions][:, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def host(rope) -> int:
    from mlarope import triton as mt
    from mlarope._races import RaceFound

    T, D = 2, 8
    cos, sin = tables(T, D // 2, "cpu")
    q0, k0 = torch.randn(T, 1, D), torch.randn(T, 1, D)
    positions = torch.arange(T)
    q, k = q0.clone(), k0.clone()
    try:
        with mt.race_check({"q": q, "k": k}):
            rope.apply_rotary_pos_emb(
                q, k, cos.float(), sin.float(), positions, rotary_interleaved=False, inplace=True
            )
    except RaceFound as e:
        assert torch.allclose(q.double(), reference(q0, cos, sin, positions), atol=1e-5)
        print(f"values right (the interpreter runs a tile operation whole); {e}")
        print(
            "reproduced: the in-place kernel stores over elements other threads load in the "
            "same barrier epoch: a race on a GPU"
        )
        return 1
    print("not reproduced: no element is stored over bytes another loads in the same epoch")
    return 0


def gpu(rope) -> int:
    T, D = 4096, 128
    cos, sin = tables(T, D // 2, "cuda")
    positions = torch.arange(T, device="cuda")
    for dtype, atol in ((torch.float32, 1e-4), (torch.bfloat16, 3e-2)):
        q0 = torch.randn(T, 32, D, device="cuda").to(dtype)
        k0 = torch.randn(T, 8, D, device="cuda").to(dtype)
        want_q = reference(q0, cos, sin, positions)
        want_k = reference(k0, cos, sin, positions)
        for run in range(RUNS):
            q, k = q0.clone(), k0.clone()
            rope.apply_rotary_pos_emb(
                q, k, cos.float(), sin.float(), positions, rotary_interleaved=False, inplace=True
            )
            torch.cuda.synchronize()
            wrong_q = ((q.double() - want_q).abs() > atol).sum().item()
            wrong_k = ((k.double() - want_k).abs() > atol).sum().item()
            if wrong_q or wrong_k:
                print(
                    f"reproduced: run {run} ({dtype}): {wrong_q} elements of q and {wrong_k} "
                    "of k wrong (an element overwritten before its partner loaded it)"
                )
                return 1
    print(f"not reproduced: the race did not show in {RUNS} launches per dtype")
    return 0


def main() -> int:
    root = sys.argv[1] if len(sys.argv) > 1 else None
    if not GPU:
        from mlarope import triton as mt

        mt.interpreter()
    rope = rotary_module(root)
    if rope is None or not hasattr(rope, "apply_rotary_pos_emb_inplace_kernel"):
        print("not reached: no in-place rotary kernel in this release")
        return 3
    torch.manual_seed(0)
    return gpu(rope) if GPU else host(rope)


if __name__ == "__main__":
    sys.exit(main())
