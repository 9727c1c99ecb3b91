# SPDX-License-Identifier: Apache-2.0
"""ColossalAI's get_xine_cache in prefill mode reads cumulative lengths past their tensor: a
token's cos/sin row depends on the memory that follows it.

get_xine_cache(lengths, cos_cache, sin_cache, is_prompts=True) takes ``cumsum_lens =
torch.cumsum(lengths)`` (num_seqs entries) and launches prefill_cache_kernel with N_ELEMENTS =
next_power_of_2(num_seqs); the kernel loads N_ELEMENTS entries with no mask
(rotary_cache_copy.py line 25), then takes token idx's position as idx minus the largest
loaded entry <= idx. When num_seqs is not a power of two, an entry past the tensor that holds a
value in [1, idx] gives the token a wrong row, so on a GPU the cos/sin the engine gathers for
a prefill batch of 3, 5, 6, 7, ... sequences depend on what the allocator left there.

Input: lengths [3, 2, 1] (num_seqs 3: the kernel loads 4 entries), cos_cache and sin_cache
[8, 4] f32, contiguous as the engine's, whose row r holds r + j / 100 (sin: its negation) in
column j, so each output row names the row it copied. To make the memory past the lengths
deterministic, the module's ``torch.cumsum`` is given a result at the start of a buffer whose
next entry holds 1, as stale memory may. On the host Triton's interpreter runs the kernel
(through mlarope.triton); on a GPU the same script runs it compiled, with the same expected
outcome.

Exit status 1 and "reproduced" when a token gets a row other than its position, 0 and "not
reproduced" when every token gets its own (positions 0 1 2 0 1 0), 3 and "not reached" when
the release lacks the file or get_xine_cache.

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
LENGTHS = [3, 2, 1]
POSITIONS = [0, 1, 2, 0, 1, 0]  # of the tokens, within their sequences
FOLLOWING = [1]  # what the memory past the cumulative lengths holds here
ROWS, HIDDEN = 8, 4  # the cache: [max position, head_dim / 2]


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


class MemoryPastCumsum:
    """torch as the kernel module sees it, except that ``cumsum`` returns its result as a view
    at the start of a buffer whose following entries hold ``following``."""

    def __init__(self, following):
        self.following = following

    def __getattr__(self, name):
        return getattr(torch, name)

    def cumsum(self, x, dim):
        out = torch.cumsum(x, dim=dim)
        tail = torch.tensor(self.following, dtype=out.dtype, device=out.device)
        return torch.cat([out, tail])[: out.numel()]


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

    cos_cache = torch.arange(ROWS, dtype=torch.float32)[:, None] + torch.arange(HIDDEN) / 100.0
    sin_cache = -cos_cache
    lengths = torch.tensor(LENGTHS, dtype=torch.int32, device=DEVICE)  # as the engine's
    module.torch = MemoryPastCumsum(FOLLOWING)
    cos, sin = module.get_xine_cache(
        lengths, cos_cache.to(DEVICE), sin_cache.to(DEVICE), is_prompts=True
    )
    cos, sin = cos.cpu(), sin.cpu()

    got = cos[:, 0].round().long().tolist()  # the row each token's cos came from
    for t, r in enumerate(got):
        assert torch.equal(cos[t], cos_cache[r]), f"token {t}: cos is not a cache row"
        assert torch.equal(sin[t], sin_cache[r]), f"token {t}: sin is not cos's row"
    print(f"lengths {LENGTHS}, memory after their cumsum {FOLLOWING}")
    print(f"rows gathered: {got}, positions: {POSITIONS}")
    if got == POSITIONS:
        print("not reproduced: every token gets the cos/sin row of its position")
        return 0
    wrong = [t for t in range(len(got)) if got[t] != POSITIONS[t]]
    print(
        f"reproduced: tokens {wrong} get rows {[got[t] for t in wrong]} instead of "
        f"{[POSITIONS[t] for t in wrong]}: prefill_cache_kernel read next_power_of_2("
        f"{len(LENGTHS)}) = 4 cumulative lengths from a tensor of {len(LENGTHS)}"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
