# SPDX-License-Identifier: Apache-2.0
"""liger-kernel's Llama 4 rope with seq_len == 1, batch > 1, and q whose size-1 dimension has
a stride other than the batch stride: rows after the first batch entry are read and written at
the wrong address.

llama4_rope_forward takes q of shape [B, S, H, D], calls .contiguous() (a no-op when torch
deems the tensor contiguous, which ignores the stride of a size-1 dimension) and passes
q.stride(1) to the kernel, which addresses row (b, s) at (b * S + s) * stride(1). With S == 1
that is right only when stride(1) equals the batch stride. Here q is the transpose of a tensor
contiguous as [B, H, 1, D] (stride(1) == D): program b rotates the heads that start at b * D,
so entry 0's heads are rotated several times and most heads of later entries never. Hugging
Face's Llama 4 makes q by view(B, S, H, D) of a projection (stride(1) == H * D): not affected.
The addresses come from the wrapper's stride arguments, so a GPU computes the same ones as
Triton's interpreter, which runs the kernel here when no GPU is present.

Exit status 1 and "reproduced" when it reproduces, 0 when every entry is rotated, 3 when the
release has no such kernel.

    python repro.py [ROOT]

ROOT: a folder holding a release's ``liger_kernel/ops/llama4_rope.py`` (as adapters/releases.py
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


def llama4_rope_module(root=None):
    """liger_kernel/ops/llama4_rope.py of the release at ``root`` (or the installed one),
    loaded alone; None when the release has no such file."""
    if root is None:
        spec = importlib.util.find_spec("liger_kernel")
        if spec is None:
            sys.exit("liger-kernel is not installed: give the ROOT of a release's files")
        root = os.path.dirname(list(spec.submodule_search_locations)[0])
    path = os.path.join(root, "liger_kernel", "ops", "llama4_rope.py")
    if not os.path.isfile(path):
        return None
    spec = importlib.util.spec_from_file_location("liger_llama4_rope", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(x, freqs):
    """Llama 4's rotation (interleaved pairs times freqs_cis), in complex128."""
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    rotated = pairs * freqs.to(torch.complex128)[None, :, None, :]
    return torch.view_as_real(rotated).reshape(x.shape)


def main() -> int:
    rope = llama4_rope_module(sys.argv[1] if len(sys.argv) > 1 else None)
    if rope is None:
        print("not reached: no liger_kernel/ops/llama4_rope.py in this release")
        return 3
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    B, H, D = 2, 4, 8
    worst = {}
    for S in (2, 1):
        # [B, S, H, D] as a transpose of a tensor contiguous in [B, H, S, D]
        q = torch.randn(B, H, S, D, device=device).transpose(1, 2)
        k = torch.randn(B, 1, S, D, device=device).transpose(1, 2)
        angle = torch.arange(S, device=device)[:, None] + 1.0 + torch.rand(D // 2, device=device)
        freqs = torch.polar(torch.ones_like(angle), angle)  # [S, D / 2], complex64
        want = reference(q, freqs)
        got, _ = rope.LigerLlama4RopeFunction.apply(q.clone(), k.clone(), freqs)
        errors = [(got[b].double() - want[b]).abs().max().item() for b in range(B)]
        worst[S] = max(errors)
        print(f"seq_len={S}: max |error| per batch entry {['%.3g' % e for e in errors]}")
    if worst[2] < 1e-5 and worst[1] > 1e-2:
        print("reproduced: seq_len == 1 rotates the wrong rows (seq_len == 2 is right)")
        return 1
    if worst[2] >= 1e-5:
        raise AssertionError(f"seq_len == 2 is wrong too ({worst[2]:.3g}): another cause")
    print("not reproduced: every batch entry rotated at seq_len == 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
