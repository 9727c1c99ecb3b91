# SPDX-License-Identifier: Apache-2.0
"""megatron-core's unfused PyTorch RoPE (rope_utils.apply_rotary_pos_emb with
apply_rope_fusion=False) as an mlarope backend: ``mlarope.fuzz(MegatronUnfused())``.

Megatron's entry point predates these primitives, so the adapter maps each call onto it the
way Megatron's MLA layer calls it, and declines (with the reason) what has no counterpart:

- the rope slice only: Megatron rotates the leading ``freqs.shape[-1]`` elements, and its MLA
  layer splits off the nope part and concatenates it back; the adapter gives Megatron the rope
  slice and copies the nope part (in both directions) itself;
- Megatron takes angles (``freqs``) and one ``mscale`` (``cos = cos(freqs) * mscale``), not
  tables: the adapter recovers the angles (``atan2``, float64) and the one concentration of a
  table that is cos/sin of one angle per pair times one factor (our YaRN tables), and
  declines other tables. ``inverse`` is rotation by minus the angles;
- pair layouts: (half -> half) is ``rotary_interleaved=False``, (interleaved -> half) is
  ``multi_latent_attention=True``, (interleaved -> interleaved) is ``rotary_interleaved=True``;
  (half -> interleaved) has no Megatron mode. Any table layout: the angles are laid out as each
  mode needs them;
- THD through ``_apply_rotary_pos_emb_thd`` with a one-process context-parallel group of the
  call's size and rank. Megatron picks the packed frequency mode when the table has exactly
  ``cu_seqlens[-1]`` rows: the adapter passes that many rows for ``packed`` and one more for
  ``per_sequence``;
- ``rope_backward`` is autograd through the same forward (out of place);
- kv_split and its backward are not provided (rope_utils has no kv entry point);
- declined: in place (no in-place form), f16/bf16
  activations (Megatron's unfused path rounds every product to the activation dtype, outside
  the f32 tolerance model (docs/architecture.md): see docs/megatron.md's findings;
  ``low_precision=True`` runs them anyway), tables in a dtype other than f32 (Megatron rounds
  its table to the activation dtype), SBHD context parallelism on the host (Megatron slices the
  table through CUDA), position ids, sequence offsets, padding rows and invalid cu_seqlens
  (Megatron does not check them).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

import megatron_sources

_EPS = {"f32": 2.0**-23, "f16": 2.0**-10, "bf16": 2.0**-7}
_TORCH_DTYPE = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


class _Group:
    """A context-parallel group of one process: what Megatron asks of it is size() and rank()."""

    def __init__(self, size: int, rank: int):
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


def to_torch(a: np.ndarray, dtype: str) -> torch.Tensor:
    """A tensor over the same memory as the NumPy view (bf16 arrives as uint16 bits)."""
    with warnings.catch_warnings():  # inputs are read-only views; Megatron must not write them
        warnings.simplefilter("ignore", UserWarning)
        if dtype == "bf16":
            return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(a)


def write(out: np.ndarray, value: torch.Tensor, dtype: str) -> None:
    """Store a result into a harness output view."""
    value = value.detach().to(_TORCH_DTYPE[dtype])
    if dtype == "bf16":
        out.view(np.int16)[...] = value.view(torch.int16).numpy()
    else:
        out[...] = value.numpy()


def values(a: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values of a harness array (bf16 arrives as uint16 bits)."""
    if dtype == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def table_angles(call):
    """(angles [R, d/2] float64, mscale) of the call's table, or (None, reason)."""
    d, dtype = call.emb_dim, call.table_dtype
    cos = values(call.cos.reshape(call.cos.shape[0], d), dtype)
    sin = values(call.sin.reshape(call.sin.shape[0], d), dtype)
    if call.table_layout == "half":
        pairs = [(x[:, : d // 2], x[:, d // 2 :]) for x in (cos, sin)]
    else:
        pairs = [(x[:, 0::2], x[:, 1::2]) for x in (cos, sin)]
    if any(not np.array_equal(a, b) for a, b in pairs):
        return None, "the table's two entries of a pair differ (Megatron has one angle per pair)"
    c, s = pairs[0][0], pairs[1][0]
    radius = np.hypot(c, s)
    if radius.size == 0:
        return np.zeros_like(c), 1.0
    mscale = float(np.median(radius))
    if not mscale > 0 or np.abs(radius - mscale).max() > 4 * _EPS[dtype] * mscale:
        return None, "the table is not cos/sin of angles times one mscale (Megatron takes angles)"
    angles = np.arctan2(s, c)
    if (
        dtype != "f32"
    ):  # Megatron rounds cos(angle) * mscale to the dtype: it must give the table back
        again = [
            torch.from_numpy(f(angles) * mscale).to(_TORCH_DTYPE[dtype]).double().numpy()
            for f in (np.cos, np.sin)
        ]
        if not (np.array_equal(again[0], c) and np.array_equal(again[1], s)):
            return (
                None,
                f"Megatron's rounding of cos/sin(angle) * mscale to {dtype} "
                "does not give this table",
            )
    return angles, mscale


def megatron_freqs(angles: np.ndarray, interleaved: bool) -> torch.Tensor:
    """Megatron's freqs [R, 1, 1, d] (float64) from the angles per pair."""
    a = torch.from_numpy(angles)
    f = a.repeat_interleave(2, dim=-1) if interleaved else torch.cat([a, a], dim=-1)
    return f[:, None, None, :]


class MegatronUnfused:
    """The backend: ``rope`` for rope and rope_backward (see the module docstring)."""

    def __init__(self, low_precision: bool = False):
        self.megatron = megatron_sources.load()
        self.low_precision = low_precision

    def supports(self, call):
        return self._decline(call) or (True, "")

    def _decline(self, call):
        """(False, reason) for a call Megatron's unfused path has no counterpart for; else None."""
        if call.in_place:
            return False, "Megatron's unfused rope has no in-place form"
        if call.dtype != "f32" and not self.low_precision:
            return False, (
                f"{call.dtype} activations: Megatron's unfused path rounds each product to "
                f"{call.dtype}, outside the f32 tolerance model (docs/megatron.md, finding 1)"
            )
        if call.table_dtype != call.dtype:
            return (
                False,
                f"a {call.table_dtype} table: Megatron rounds its table to the activation dtype",
            )
        if (call.in_layout, call.out_layout) == ("half", "interleaved"):
            return False, "no Megatron mode reads half pairs and writes interleaved ones"
        if call.position_ids is not None or call.seq_offsets is not None:
            return False, "Megatron's unfused rope takes no position ids or sequence offsets"
        if call.layout == "sbhd" and call.cp_size > 1:
            return False, "SBHD context parallelism: Megatron slices the table through CUDA"
        if call.layout == "thd":
            cu = call.cu_seqlens.astype(np.int64)
            lengths = np.diff(cu)
            if (lengths < 0).any() or (
                lengths % (2 * call.cp_size if call.cp_size > 1 else 1)
            ).any():
                return False, "invalid cu_seqlens: Megatron does not check them"
            if (lengths // call.cp_size).sum() != call.inputs[0].shape[0]:
                return (
                    False,
                    "THD padding rows: Megatron's torch.split needs the sequences "
                    "to cover every row",
                )
            if call.freq_mode == "per_sequence" and call.cos.shape[0] < (lengths.max(initial=0)):
                return False, "the table is shorter than the longest sequence"
        angles, why = table_angles(call)
        if angles is None:
            return False, why
        return None

    def rope(self, call):
        t, out, dtype = call.inputs[0], call.outputs[0], call.dtype
        if t.size == 0:
            return
        angles, mscale = table_angles(call)
        if call.inverse:
            angles = -angles
        interleaved = (call.in_layout, call.out_layout) == ("interleaved", "interleaved")
        mla = (call.in_layout, call.out_layout) == ("interleaved", "half")
        freqs = self._rows(call, megatron_freqs(angles, interleaved))
        config = _Config(rotary_interleaved=interleaved, multi_latent_attention=mla)
        cu = None if call.layout == "sbhd" else torch.from_numpy(call.cu_seqlens.astype(np.int32))
        group = _Group(call.cp_size, call.cp_rank)
        n = call.nope_dim

        def rotate(x):  # Megatron's rope on the rope slice
            return self.megatron.rope_utils.apply_rotary_pos_emb(
                x, freqs, config, cu_seqlens=cu, mscale=mscale, cp_group=group
            )

        x = to_torch(t, dtype)
        write(
            out[..., :n], x[..., :n], dtype
        )  # the nope part: copied, as Megatron's MLA layer does
        if call.op == "rope":
            write(out[..., n:], rotate(x[..., n:]), dtype)
        else:  # the adjoint: autograd through the same forward
            leaf = torch.zeros(x[..., n:].shape, dtype=x.dtype, requires_grad=True)
            (grad,) = torch.autograd.grad(rotate(leaf), leaf, grad_outputs=x[..., n:])
            write(out[..., n:], grad, dtype)

    def _rows(self, call, freqs: torch.Tensor) -> torch.Tensor:
        """The table rows Megatron is given: SBHD reads freqs[s] for row s; THD infers the
        frequency mode from the row count (see the module docstring)."""
        if call.layout == "sbhd":
            return freqs[: call.inputs[0].shape[0]]
        total = int(call.cu_seqlens[-1])
        if call.freq_mode == "packed":
            return freqs[:total]
        if freqs.shape[0] == total:  # would read as packed: one more row keeps it per sequence
            freqs = torch.cat([freqs, freqs[-1:]])
        return freqs


class _Config:
    """The TransformerConfig fields apply_rotary_pos_emb reads."""

    def __init__(self, rotary_interleaved: bool, multi_latent_attention: bool):
        self.apply_rope_fusion = False
        self.rotary_interleaved = rotary_interleaved
        self.multi_latent_attention = multi_latent_attention
        self.mrope_section = None


class MegatronWithCosSin:
    """rope_utils.apply_rotary_pos_emb_with_cos_sin(t, cos, sin, rotary_interleaved): cos and sin
    of size (seq_len, d_rot / 2), SBHD, out of place, one context-parallel rank. Without flash-attn
    (any host) Megatron takes its fallback, which stacks the cos and sin values into ``freqs`` and
    then takes cos() and sin() of them again: docs/megatron.md finding 2, kept by a test."""

    def __init__(self):
        self.megatron = megatron_sources.load()

    def supports(self, call):
        ok = (
            call.op == "rope"
            and not call.in_place
            and call.layout == "sbhd"
            and call.dtype == "f32"
            and call.table_dtype == "f32"
            and call.cp_size == 1
            and call.seq_offsets is None
            and call.in_layout == call.out_layout
        )
        if not ok:
            return (
                False,
                "apply_rotary_pos_emb_with_cos_sin: SBHD f32 rope out of place, no CP or offsets",
            )
        angles, why = table_angles(call)
        return (angles is not None and True), why or ""

    def rope(self, call):
        t, out, n = call.inputs[0], call.outputs[0], call.nope_dim
        if t.size == 0:
            return
        angles, mscale = table_angles(call)
        sign = -1.0 if call.inverse else 1.0
        S = t.shape[0]
        cos = torch.from_numpy(np.cos(angles[:S]) * mscale).float()
        sin = torch.from_numpy(sign * np.sin(angles[:S]) * mscale).float()
        x = to_torch(t, "f32")
        write(out[..., :n], x[..., :n], "f32")
        y = self.megatron.rope_utils.apply_rotary_pos_emb_with_cos_sin(
            x[..., n:], cos, sin, rotary_interleaved=call.in_layout == "interleaved"
        )
        write(out[..., n:], y, "f32")
