# SPDX-License-Identifier: Apache-2.0
"""liger-kernel's rope with seq_len == 1, batch > 1, and q laid out [B, H, S, D] contiguously:
rows after the first batch entry are read and written at the wrong address.

rope_forward transposes q to [B, S, H, D] and calls .contiguous(), which is a no-op when S == 1
(torch ignores the stride of a size-1 dimension), then passes q.stride(1) to the kernel as the
stride X between (batch, seq) rows, which is right only when X == H * D. A q contiguous as
[B, H, 1, D] has X == D: program b rotates the heads starting at b * D, so entry 0's heads are
rotated several times and most heads of later entries never. Where X > H * D (any stride of a
size-1 dimension is legal) the kernel stores past q. Hugging Face's attention makes q by
``view(B, S, H, D).transpose(1, 2)``, whose X is H * D: not affected. The kernel's index
arithmetic comes from the wrapper's stride arguments, so a GPU computes the same addresses as
Triton's interpreter, which runs it here when no GPU is present.

Exit status 1 and "reproduced" when it reproduces, 0 when every entry is rotated, 3 when the
release has no such kernel.

    python repro.py [ROOT]

ROOT: a folder holding a release's ``liger_kernel/ops/rope.py`` (as adapters/releases.py
unpacks it); without it, the installed liger-kernel.
"""

import importlib.util
import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
    if not hasattr(torch.Tensor, "untyped_storage"):  # torch < 2 (Triton's interpreter asks)
        torch.Tensor.untyped_storage = lambda self: self.storage().untyped()


def liger_rope_module(root=None):
    """liger_kernel/ops/rope.py of the release at ``root`` (or the installed one), loaded
    alone (the package's __init__ imports what the kernel does not need); None when the
    release has no such file."""
    if root is None:
        spec = importlib.util.find_spec("liger_kernel")
        if spec is None:
            sys.exit("liger-kernel is not installed: give the ROOT of a release's files")
        root = os.path.dirname(list(spec.submodule_search_locations)[0])
    path = os.path.join(root, "liger_kernel", "ops", "rope.py")
    if not os.path.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location("liger_rope", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(x, cos, sin):
    """Hugging Face's rotate_half rotation, in float64."""
    x, cos, sin = x.double(), cos.double()[:, None], sin.double()[:, None]
    h = x.shape[-1] // 2
    rotated = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rotated * sin


def main() -> int:
    rope = liger_rope_module(sys.argv[1] if len(sys.argv) > 1 else None)
    if rope is None:
        print("not reached: no liger_kernel/ops/rope.py in this release")
        return 3
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    B, H, D = 2, 4, 8
    worst = {}
    for S in (2, 1):
        q = torch.randn(B, H, S, D, device=device)  # contiguous [B, H, S, D]
        k = torch.randn(B, 1, S, D, device=device)
        angle = torch.arange(S, device=device)[:, None] + 1.0 + torch.rand(D // 2, device=device)
        cos = torch.cat([angle.cos(), angle.cos()], dim=-1)[None]  # [1, S, D]
        sin = torch.cat([angle.sin(), angle.sin()], dim=-1)[None]
        want = reference(q, cos, sin)
        got, _ = rope.LigerRopeFunction.apply(q.clone(), k.clone(), cos, sin)
        errors = [(got[b].double() - want[b]).abs().max().item() for b in range(B)]
        worst[S] = max(errors)
        print(f"seq_len={S}: max |error| per batch entry {['%.3g' % e for e in errors]}")
    if worst[2] < 1e-5 and worst[1] > 1e-2:
        print("reproduced: seq_len == 1 rotates the wrong rows (seq_len == 2 is right)")
        return 1
    print("not reproduced: every batch entry rotated at seq_len == 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
