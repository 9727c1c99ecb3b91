# SPDX-License-Identifier: Apache-2.0
"""ColossalAI's get_xine_cache stores its outputs with the strides of the cache it reads: a
cache whose rows are not contiguous makes it write past its outputs.

get_xine_cache(lengths, cos_cache, sin_cache, is_prompts) allocates cos_output and sin_output
contiguous, [n, hidden_dim], and passes the kernels ``cos_cache.stride(0)`` and
``cos_cache.stride(1)``, with which both read the cache and store the outputs
(rotary_cache_copy.py lines 34 and 39 in prefill_cache_kernel, 69 and 74 in
decoding_cache_kernel). For a view such as ``cos_cache[:, :head_dim // 2]`` (what ColossalAI's
own tests/test_infer/test_kernels/triton/test_fused_rotary_embedding.py passes) the row stride
is head_dim, twice the outputs' row: token t is stored at output row 2t, so half the rows
are never written and the second half of the tokens lands past the output, on whatever
memory follows it (a CUDA error, or another tensor overwritten).

Input: lengths [3, 2, 2, 1] (4 sequences: prefill_cache_kernel loads next_power_of_2(4) = 4
cumulative lengths, all inside their tensor; the load past it when num_seqs is not a power of
two is another finding, get_xine_cache_unmasked_lengths); cos and sin caches [8, 8] f32 whose
row r holds r + j / 100 (sin: its negation) in column j, given as their views [:, :4] (row
stride 8); prefill mode (8 tokens, positions 0 1 2 0 1 0 1 0) and decoding mode (4 tokens,
rows 2 1 1 0). To see the stores
past the outputs without a crash, the module's ``torch.empty`` gives each output as a view at
the start of a NaN-filled buffer three times its size; the script checks the outputs and the
buffer past them. On the host Triton's interpreter runs the kernels (through mlarope.triton);
on a GPU the same script runs them compiled, with the same expected outcome.

Exit status 1 and "reproduced" when a kernel writes past its outputs, 0 and "not reproduced"
when both modes fill their outputs with the right rows and write nothing past them, 3 and
"not reached" when the release lacks the file or get_xine_cache. Outputs wrong with nothing
written past them are another cause: an AssertionError.

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
MODULE = "rotary_cache_copy"
LENGTHS = [3, 2, 2, 1]  # 4 sequences: all 4 cumulative lengths prefill loads are inside them
ROWS = {True: [0, 1, 2, 0, 1, 0, 1, 0], False: [2, 1, 1, 0]}  # the rows wanted, by is_prompts
ROW_COUNT, HEAD_DIM = 8, 8


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


class GuardedEmpty:
    """torch as the kernel module sees it, except that ``empty`` returns a view at the start
    of a NaN-filled buffer three times its size (kept in ``buffers``, to check past it)."""

    def __init__(self):
        self.buffers = []

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, shape, dtype=None, device=None):
        numel = 1
        for n in shape:
            numel *= n
        buffer = torch.full((3 * numel,), float("nan"), dtype=dtype, device=device)
        self.buffers.append((buffer, numel))
        return buffer[:numel].view(shape)


def main() -> int:
    root = sys.argv[1] if len(sys.argv) > 1 else None
    if not GPU:  # before Triton is imported: its kernels then run on the host
        from mlarope import triton as mt

        mt.interpreter()
    module = kernel_module(root)
    if module is None or not hasattr(module, "get_xine_cache"):
        print(f"not reached: no get_xine_cache in colossalai/kernel/triton/{MODULE}.py")
        return 3
    print(f"{module.__file__}, {'GPU' if GPU else 'Triton interpreter'}")

    table = torch.arange(ROW_COUNT, dtype=torch.float32)[:, None] + torch.arange(HEAD_DIM) / 100
    cos_cache, sin_cache = table.to(DEVICE), (-table).to(DEVICE)
    half = HEAD_DIM // 2
    lengths = torch.tensor(LENGTHS, dtype=torch.int32, device=DEVICE)
    past = {}
    for is_prompts, rows in ROWS.items():
        mode = "prefill" if is_prompts else "decoding"
        guarded = GuardedEmpty()
        module.torch = guarded
        cos, sin = module.get_xine_cache(
            lengths, cos_cache[:, :half], sin_cache[:, :half], is_prompts=is_prompts
        )
        module.torch = torch
        written = [int((~buffer[numel:].isnan()).sum()) for buffer, numel in guarded.buffers]
        right = torch.equal(cos.cpu(), table[rows, :half]) and torch.equal(
            sin.cpu(), -table[rows, :half]
        )
        nan_rows = int(cos.cpu().isnan().any(dim=1).sum())
        print(
            f"{mode}: {cos.shape[0]} tokens, outputs {'right' if right else 'wrong'} "
            f"(rows never written: {nan_rows}), elements written past cos_output and "
            f"sin_output: {written}"
        )
        assert right or any(written), f"{mode}: outputs wrong, nothing written past them"
        if any(written):
            past[mode] = sum(written)
    if not past:
        print("not reproduced: the outputs hold the right rows and nothing is written past them")
        return 0
    print(
        f"reproduced: a cache view with row stride {HEAD_DIM} (rows of {half}) makes "
        + " and ".join(f"{m} write {n} elements" for m, n in past.items())
        + " past its outputs: they are stored with the cache's strides"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
