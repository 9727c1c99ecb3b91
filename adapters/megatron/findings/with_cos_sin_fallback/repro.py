# SPDX-License-Identifier: Apache-2.0
"""Megatron-Core's apply_rotary_pos_emb_with_cos_sin is wrong without flash-attn.

``rope_utils.apply_rotary_pos_emb_with_cos_sin(t, cos, sin, rotary_interleaved)`` takes
precomputed cos and sin of shape (seq_len, d_rot / 2) and hands them to flash-attn's
``apply_rotary_emb``. When ``flash_attn.layers.rotary`` cannot be imported it falls back to
``torch.stack([cos, sin], dim=-1).flatten(start_dim=-2)`` as ``freqs`` (angles) for
``_apply_rotary_pos_emb_bshd``, which takes cos() and sin() of them again: cos(cos(angle)) and
sin(cos(angle)) where cos(angle) belongs. The stacked pairs (c0, s0, c1, s1, ...) are besides
in a layout neither of Megatron's reads (interleaved wants f0, f0, f1, f1, ...; halves f0, f1,
..., f0, f1, ...).

Input: t SBHD f32 [3, 2, 1, 6] (3 positions, batch 2, 1 head, emb 6), interleaved pairs,
cos/sin [3, 3] of plain RoPE angles (position p times 10000^(-2j/6)). The result is compared
with a float64 rotation of the same pairs. flash-attn is made unimportable here
(``sys.modules["flash_attn"] = None``, which makes every ``import flash_attn...`` raise
ImportError), so a machine that has it installed takes the fallback as well. The fallback is
plain torch: a GPU computes the same wrong values as the host.

Exit status 1 and "reproduced" when the result is wrong, 0 and "not reproduced" when it is
right, 3 and "not reached" when the release has no apply_rotary_pos_emb_with_cos_sin (or it
cannot take these arguments).

    python repro.py [ROOT]

ROOT: a folder holding one release's files as adapters/releases.py unpacks them
(ROOT/megatron/core/..., ROOT/VERSION); without it, the installed megatron-core.
"""

import inspect
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))  # adapters/megatron: megatron_sources

S, B, H, EMB = 3, 2, 1, 6
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def main() -> int:
    if len(sys.argv) > 1:
        os.environ["MLAROPE_MEGATRON_ROOT"] = os.path.abspath(sys.argv[1])
    # The bug is in the fallback taken when flash-attn is absent: block it, installed or not.
    sys.modules["flash_attn"] = None
    import megatron_sources

    megatron = megatron_sources.load()
    rope_utils = megatron.rope_utils
    if getattr(rope_utils, "apply_rotary_emb_flash", None) is not None:
        raise RuntimeError("flash-attn was imported before it was blocked: no fallback to test")
    print(f"megatron-core {megatron.version}, flash-attn blocked, device {DEVICE}")

    gen = torch.Generator().manual_seed(0)
    t = torch.randn(S, B, H, EMB, generator=gen, dtype=torch.float64)
    pos = torch.arange(S, dtype=torch.float64)[:, None]
    angles = pos * 10000.0 ** (-torch.arange(0, EMB, 2, dtype=torch.float64) / EMB)  # [S, 3]
    cos, sin = torch.cos(angles), torch.sin(angles)
    # Reference: each interleaved pair (x[2j], x[2j+1]) of token s rotated by angles[s, j].
    c, s = cos[:, None, None, :], sin[:, None, None, :]
    x1, x2 = t[..., 0::2], t[..., 1::2]
    want = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(start_dim=-2)

    args = (t.float().to(DEVICE), cos.float().to(DEVICE), sin.float().to(DEVICE))
    try:
        fn = rope_utils.apply_rotary_pos_emb_with_cos_sin
        inspect.signature(fn).bind(*args, rotary_interleaved=True)
    except (AttributeError, TypeError) as e:
        print(f"not reached: megatron-core {megatron.version}: {e}")
        return 3
    got = fn(*args, rotary_interleaved=True).double().cpu()

    # f32 arithmetic on values of order 1: 1e-5 is many ulps, far below the bug's errors.
    wrong = (got - want).abs() > 1e-5 * (1 + want.abs())
    if not wrong.any():
        print(f"not reproduced: all {want.numel()} elements rotated right")
        return 0
    first = tuple(int(i) for i in wrong.nonzero()[0])
    err = (got - want).abs().max().item()
    print(
        f"out{list(first)}: expected {want[first].item():.9g}, got {got[first].item():.9g}; "
        f"largest error {err:.3g}"
    )
    # Say what the fallback computed: cos/sin of the cos/sin values, stacked (c0, s0, ...).
    again = torch.stack([cos, sin], dim=-1).flatten(start_dim=-2)[:, None, None, :]
    rot = torch.stack([-x2, x1], dim=-1).flatten(start_dim=-2)
    fallback = t * torch.cos(again) + rot * torch.sin(again)
    if torch.allclose(got, fallback, rtol=1e-5, atol=1e-5):
        print("the result is t * cos(freqs) + rotate_half(t) * sin(freqs), freqs (c0, s0, ...)")
    print(
        f"reproduced: {int(wrong.sum())} of {want.numel()} elements wrong: the fallback took "
        "cos/sin of the cos/sin values, stacked in pairs (c0, s0, c1, s1, ...)"
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
