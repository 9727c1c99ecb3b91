# SPDX-License-Identifier: Apache-2.0
"""ColossalAI's fused_rotary_embedding reads cumulative lengths past their tensor: a token's
position depends on the memory that follows it.

fused_rotary_embedding(q, k, cos, sin, lengths) takes ``cumsum_lens = torch.cumsum(lengths)``
(num_seqs entries) and launches fused_rotary_emb with N_ELEMENTS = next_power_of_2(T), T the
token count; the kernel loads N_ELEMENTS entries with no mask (fused_rotary_embedding.py line
34), then takes token idx's position as idx minus the largest loaded entry <= idx. Any entry
past the tensor that holds a value in [1, idx] moves the token to a wrong table row, so on a
GPU the result depends on what the allocator left there.

Input: lengths [3, 2] (T = 5: the kernel loads 8 entries from a tensor of 2), q and k [5, 1,
8] f32, q's first half 1 and second half 0, k zero; cos and sin [8, 8] whose row r holds r +
j / 100 in column j. The rotated q's first half is then q_0 * cos - q_1 * sin = the cos row
used, which names the position each token got. (Only q's first half is read: fused_rotary_emb
computes q's second half from k, another finding, fused_rotary_emb_crossed_qk.) To make the
memory past the lengths deterministic, the module's ``torch.cumsum`` is given a result at the
start of a buffer whose 6 following entries hold 1, as stale memory may. On the host Triton's
interpreter runs the kernel (through mlarope.triton); on a GPU the same script runs it
compiled, with the same expected outcome.

Exit status 1 and "reproduced" when a token uses a row other than its position, 0 and "not
reproduced" when every token uses its own (positions 0 1 2 0 1), 3 and "not reached" when the
release lacks the file or fused_rotary_embedding.

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
LENGTHS = [3, 2]
POSITIONS = [0, 1, 2, 0, 1]  # of the T tokens, within their sequences
FOLLOWING = [1] * 6  # what the memory past the cumulative lengths holds here
D = 8
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
    if module is None or not hasattr(module, "fused_rotary_embedding"):
        print(f"not reached: no fused_rotary_embedding in colossalai/kernel/triton/{MODULE}.py")
        return 3
    print(f"{module.__file__}, {'GPU' if GPU else 'Triton interpreter'}")

    T = sum(LENGTHS)
    q = torch.cat([torch.ones(T, 1, D // 2), torch.zeros(T, 1, D // 2)], dim=-1).to(DEVICE)
    k = torch.zeros(T, 1, D, device=DEVICE)
    table = torch.arange(ROWS, dtype=torch.float32)[:, None] + torch.arange(D) / 100.0
    lengths = torch.tensor(LENGTHS, device=DEVICE)
    module.torch = MemoryPastCumsum(FOLLOWING)
    module.fused_rotary_embedding(q, k, table.to(DEVICE), table.to(DEVICE), lengths)

    rows = q[:, 0, : D // 2].cpu()  # q_0 * cos - q_1 * sin = the cos row used
    got = rows[:, 0].round().long().tolist()
    for t, r in enumerate(got):
        assert torch.allclose(rows[t], table[r, : D // 2]), f"token {t}: not a table row"
    print(f"lengths {LENGTHS}, memory after their cumsum {FOLLOWING}")
    print(f"rows used: {got}, positions: {POSITIONS}")
    if got == POSITIONS:
        print("not reproduced: every token rotated with the row of its position")
        return 0
    wrong = [t for t in range(T) if got[t] != POSITIONS[t]]
    print(
        f"reproduced: tokens {wrong} rotated with rows {[got[t] for t in wrong]} instead of "
        f"{[POSITIONS[t] for t in wrong]}: the kernel read next_power_of_2({T}) = 8 "
        f"cumulative lengths from a tensor of {len(LENGTHS)}"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
