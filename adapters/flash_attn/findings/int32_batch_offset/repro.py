# SPDX-License-Identifier: Apache-2.0
"""flash-attn's Triton rotary kernel computes a batch entry's offset in 32 bits.

rotary_kernel starts with ``X + pid_batch * stride_x_batch`` (``OUT`` likewise): ``pid_batch``
is ``tl.program_id(2)`` (i32) and Triton passes a stride below 2^31 as i32, so the product
wraps once a batch entry starts 2^31 elements into x, and the kernel loads and stores 8 GiB
before it. The varlen path's ``start_idx * stride_x_seqlen`` (start_idx loaded from int32
cu_seqlens) and ``rm * stride_x_seqlen`` within a sequence are i32 products too. A contiguous
x [B, S, H, D] reaches it from (B - 1) x S x H x D >= 2^31: [17, 32768, 32, 128], or packed
sequences of 524,288 tokens of 32 heads of 128.

Here x is [9, 1, 1, 256] with a batch stride of 2^28 elements (a view, which apply_rotary
takes with its strides): entry 8 starts at 2^31, with 9 pages touched. On a CPU the view lies
over a lazily mapped reservation and Triton's interpreter runs the kernel under mlarope.triton,
which stops the wild load before it is made; on a GPU it is 9 GiB of device memory and the
kernel faults or leaves entry 8 unrotated. Exit status 1 and "reproduced" when it reproduces,
0 when every entry is rotated (with int64.patch), 3 when the release has no such kernel.

    python repro.py [ROOT]

ROOT: a folder holding a release's ``flash_attn/ops/triton/rotary.py`` (as
adapters/releases.py unpacks it); without it, the installed flash-attn.
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))  # adapters/flash_attn: flash_rotary

B, D, ROT = 9, 256, 64
BATCH = 1 << 28  # elements between batch entries: entry 8 starts at 2^31
GPU = torch.cuda.is_available()


def x_view() -> torch.Tensor:
    if GPU:
        base = torch.zeros(B * BATCH, device="cuda")
    else:
        from mlarope import triton as mt

        base = mt.reserved((B * BATCH,))
    return base.as_strided((B, 1, 1, D), (BATCH, D, D, 1))


def rotary_module(root):
    """flash_attn/ops/triton/rotary.py of the release at ``root`` (or the installed one), as
    is on a GPU, with flash_rotary's shims for torch 1.13 without CUDA otherwise; None when
    the release has no such file."""
    import importlib.util

    if root is None:
        spec = importlib.util.find_spec("flash_attn")
        if spec is None:
            sys.exit("flash-attn is not installed: give the ROOT of a release's files")
        root = os.path.dirname(list(spec.submodule_search_locations)[0])
    path = os.path.join(root, "flash_attn", "ops", "triton", "rotary.py")
    if not os.path.isfile(path):
        return None
    if not GPU:
        import flash_rotary

        return flash_rotary.load(path)
    spec = importlib.util.spec_from_file_location("flash_attn_rotary", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    if not GPU:
        from mlarope import triton as mt

        mt.interpreter()
    flash = rotary_module(sys.argv[1] if len(sys.argv) > 1 else None)
    if flash is None:
        print("not reached: no flash_attn/ops/triton/rotary.py in this release")
        return 3
    device = "cuda" if GPU else "cpu"
    x = x_view()
    x[..., :ROT] = 1.0
    cos = torch.zeros(1, ROT // 2, device=device)  # a quarter turn: (1, 1) -> (-1, 1)
    sin = torch.ones(1, ROT // 2, device=device)
    try:
        flash.apply_rotary(x, cos, sin, inplace=True)
        if GPU:
            torch.cuda.synchronize()
    except Exception as e:  # mlarope.triton's WildAccess, or a GPU's illegal memory access
        print(f"reproduced: the kernel failed: {str(e).splitlines()[0][:400]}")
        return 1
    want = torch.cat([torch.full((ROT // 2,), -1.0), torch.full((ROT // 2,), 1.0)])
    wrong = [b for b in range(B) if not torch.equal(x[b, 0, 0, :ROT].cpu(), want)]
    if wrong:
        print(f"reproduced: batch entries {wrong} not rotated (their offsets wrapped)")
        return 1
    print(f"not reproduced: all {B} batch entries rotated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
