# SPDX-License-Identifier: Apache-2.0
"""Megatron-Core's fused MLA RoPE kernels compute a token's offset in 32 bits.

rotary_fwd_q_kernel starts with ``Q + pid_m * stride_x_seq``: ``pid_m`` is
``tl.program_id(0)`` (i32) and Triton passes an integer argument below 2^31 as i32, so the
product wraps once a token's first element lies 2^31 elements or more into q, and the kernel
loads and stores 8 GiB before it. The other three kernels (rotary_bwd_q_kernel,
rotary_fwd_kv_kernel, rotary_bwd_kv_kernel) compute their offsets the same way. A tensor of
T x H x (qk_head_dim + emb_dim) >= 2^31 elements reaches it: DeepSeek-V3's q (128 heads of 192
per rank) from 87,382 tokens in one micro-batch, its kv (128 heads of 256) from 65,536.

Here q is THD, 9 tokens of one head of 2^28 elements (qk_head_dim 2^28 - 64, emb_dim 64): the
same product at token 8 with 9 pages touched. On a CPU the tensor lies over a lazily mapped
reservation and Triton's interpreter runs the kernel under mlarope.triton, which stops the wild
load before it is made; on a GPU it is 9 GiB of device memory and the kernel faults or leaves
token 8 unrotated. Exit status 1 and "reproduced" when it reproduces, 0 when every token is
rotated (with int64.patch, which casts pid_m to int64 in the four kernels), 3 when the
release has no fused MLA kernels.

    python repro.py [ROOT]

ROOT: a folder holding a release's ``megatron/core/...`` files (as adapters/releases.py unpacks
them; ``$MLAROPE_MEGATRON_ROOT`` likewise); without it, the installed megatron-core.
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))  # adapters/megatron: megatron_sources

T, EMB = 9, 64
D = 1 << 28  # elements per token (one head): token 8 starts at 2^31
GPU = torch.cuda.is_available()


def q_tensor() -> torch.Tensor:
    if GPU:
        return torch.zeros(T, 1, D, device="cuda")
    from mlarope import triton as mt

    return mt.reserved((T, 1, D))


def main() -> int:
    if not GPU:
        from mlarope import triton as mt

        mt.interpreter()
    import megatron_sources

    if len(sys.argv) > 1:
        os.environ[megatron_sources.ROOT_VARIABLE] = sys.argv[1]
    try:
        fused = megatron_sources.load_fused()
    except ModuleNotFoundError as e:
        print(f"not reached: {e}")
        return 3
    if not GPU:  # one config: the interpreter's autotuner would need a GPU to time them
        tuner = mt._autotuner(fused.rotary_fwd_q_kernel)
        tuner.configs = tuner.configs[:1]
    device = "cuda" if GPU else "cpu"
    q = q_tensor()
    q[:, :, D - EMB :: 2] = 1.0  # interleaved pairs (1, 2): x1 = 1, x2 = 2
    q[:, :, D - EMB + 1 :: 2] = 2.0
    cos = torch.zeros(T, 1, 1, EMB, device=device)  # a quarter turn: left = -x2, right = x1
    sin = torch.ones(T, 1, 1, EMB, device=device)
    cu_seqlens = torch.tensor([0, T], dtype=torch.int32, device=device)
    try:
        fused.fused_apply_mla_rope_for_q(q, cos, sin, D - EMB, EMB, cu_seqlens_q=cu_seqlens)
        if GPU:
            torch.cuda.synchronize()
    except Exception as e:  # mlarope.triton's WildAccess, or a GPU's illegal memory access
        print(f"reproduced: the kernel failed: {str(e).splitlines()[0][:400]}")
        return 1
    want = torch.cat([torch.full((EMB // 2,), -2.0), torch.full((EMB // 2,), 1.0)])
    wrong = [t for t in range(T) if not torch.equal(q[t, 0, D - EMB :].cpu(), want)]
    if wrong:
        print(f"reproduced: tokens {wrong} not rotated (their offsets wrapped at 32 bits)")
        return 1
    print(f"not reproduced: all {T} tokens rotated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
