# SPDX-License-Identifier: Apache-2.0
"""Liger-Kernel's Triton RoPE for Llama 4 (``liger_kernel/ops/llama4_rope.py``) as an mlarope
backend, for ``mlarope.triton.TritonBackend(LigerLlama4Rope(), kernels=...kernels())``.

Llama 4 rotates interleaved pairs (2i, 2i + 1) as complex numbers: ``q`` and ``k`` of shape
[B, S, H, D] (not transposed), ``freqs_cis`` complex [S, D/2] (or its ``view_as_real``,
[S, D/2, 2] of (cos, sin)), token ``s`` of every batch entry reading row ``s``. The kernel
rotates in place when its input is contiguous in the compute dtype (the function returns the
tensor it rotated); the backward is the same kernel with the sine negated (``imag_sign=-1``).
The adapter maps each call the way Hugging Face's Llama 4 calls it, sharing LigerRope's
mapping of positions and of the rope slice (liger_rope.py), and declines what has no
counterpart:

- pair layouts: (interleaved -> interleaved) only; a table in either layout whose two entries
  per pair are equal, passed as (cos, sin) per pair gathered at each token's ``freq_row``
  into a scratch table, f32, the sine negated for an ``inverse`` call;
- positions: one table row per token position, the same for every batch entry (Llama 4's
  ``freqs_cis`` has no batch dimension): calls whose batch entries read different rows
  (sequence offsets, THD sequences of different starts) are declined;
- SBHD is permuted to [B, S, H, D] by a view; THD is one batch entry of T tokens; a rope
  call's heads are split into ``q`` and ``k`` of one launch as for LigerRope (a grouped-query
  pair); the rope slice alone, never whole heads (the kernel rotates whole heads);
- one token per sequence (S == 1, B > 1): the kernel takes ``q.stride(1)`` as the stride
  between (batch, token) rows, the same idiom as ``ops/rope.py`` (findings/seq1_row_stride),
  and a size-1 dimension's stride is whatever the view has (an SBHD view permuted has B x H x D
  there: the kernel would store past the tensor). The adapter gives the size-1 dimension the
  batch stride, which addresses the same elements (``restride_single_token=False``: the views
  as they are).
"""

from __future__ import annotations

import numpy as np
from liger_rope import VERSION, LigerRope, freq_rows, load, one_angle_per_pair


def _same_elements(x, y) -> bool:
    """Whether y is x (the strides of size-1 dimensions aside, which address nothing)."""
    strides = [(a, b) for a, b, n in zip(x.stride(), y.stride(), x.shape) if n > 1]
    return y.data_ptr() == x.data_ptr() and y.shape == x.shape and all(a == b for a, b in strides)


class LigerLlama4Rope(LigerRope):
    """Liger's Llama 4 rope (forward and backward); see the module docstring."""

    heads_dim, tokens_dim = 2, 1  # [B, S, H, D]

    def __init__(self, source: str | None = None, restride_single_token: bool = True):
        super().__init__(restride_single_token=restride_single_token)
        self.llama4 = load(source, "llama4_rope.py")
        self.leading_slice = False  # the Llama 4 kernel rotates whole heads

    def kernels(self):
        return [self.llama4._llama4_rope_kernel]

    def environment(self) -> dict:
        return {"liger-kernel": VERSION, "kernel": "ops/llama4_rope.py"}

    def _decline(self, call):
        if (call.in_layout, call.out_layout) != ("interleaved", "interleaved"):
            return False, "Llama 4 rotates interleaved pairs in and out: interleaved only"
        rows, why = freq_rows(call)
        if rows is None:
            return False, why
        batch_rows = rows.T if call.layout == "sbhd" else rows[None]
        if not (batch_rows == batch_rows[:1]).all():
            return False, "batch entries read different table rows (freqs_cis has no batch)"
        d = call.emb_dim
        cos2d = call.cos.reshape(call.cos.shape[0], d)[rows.reshape(-1)]
        sin2d = call.sin.reshape(call.sin.shape[0], d)[rows.reshape(-1)]
        if not one_angle_per_pair(cos2d, sin2d, call.table_layout):
            return False, "the table's two entries of a pair differ (one angle per pair)"
        return None

    def _kernel_view(self, call, a: np.ndarray, dtype: str):
        """A tensor over the harness array, as Llama 4's [B, S, H, D]."""
        x = self.mt.torch_view(a, dtype)
        return x.permute(1, 0, 2, 3) if call.layout == "sbhd" else x[None]

    def _freqs(self, call):
        """freqs_cis as real [S, d/2, 2]: (cos, sin) of each pair at each token's row."""
        torch, d = self.torch, call.emb_dim
        rows, _ = freq_rows(call)
        rows = (rows.T if call.layout == "sbhd" else rows[None])[0]
        pairs = []
        for table in (call.cos, call.sin):
            table = self.mt.values_of(table.reshape(table.shape[0], d)[rows], call.table_dtype)
            table = table.astype(np.float64)
            pairs.append(
                table[:, 0::2] if call.table_layout == "interleaved" else table[:, : d // 2]
            )
        if call.inverse != self.flip_sin:
            pairs[1] = -pairs[1]
        freqs = self.mt.scratch((len(rows), d // 2, 2), torch.float32, "llama4 freqs")
        freqs.copy_(torch.from_numpy(np.stack(pairs, axis=-1)))
        return freqs

    def _run(self, call, q, k, backward: bool):
        freqs = self._freqs(call)
        if backward:
            return self.llama4.llama4_rope_forward(q, k, freqs, imag_sign=-1.0)
        return self.llama4.LigerLlama4RopeFunction.apply(q, k, freqs)

    def _rotate(self, call, x, backward: bool):
        x = self._rows_as_liger_assumes(x)
        pair, views = self._q_and_k(x)
        for target, y in list(zip(pair, self._run(call, *pair, backward)))[:views]:
            if not _same_elements(target, y):  # else the kernel rotated the view in place
                target.copy_(y)

    def _rotate_pe(self, call, pe, backward: bool):
        B, S, _, d = pe.shape
        k = self._rows_as_liger_assumes(pe.contiguous().clone())
        other = self.torch.zeros((B, S, 1, d), dtype=k.dtype)
        _, y = self._run(call, other, k, backward)
        return y
