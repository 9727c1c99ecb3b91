# SPDX-License-Identifier: Apache-2.0
"""flash-attn's Triton rotary kernel (``flash_attn/ops/triton/rotary.py``: ``apply_rotary``) as
an mlarope backend, for ``mlarope.triton.TritonBackend(FlashRotary())``.

flash-attn's package builds CUDA extensions in its setup.py, so nothing of it is installed: the
one file is read out of the release's sdist (``adapters/releases.py``, pinned by hash in
``releases.toml``) and loaded by path. ``apply_rotary(x, cos, sin, seqlen_offsets, cu_seqlens,
max_seqlen, interleaved, inplace, conjugate)`` rotates the first ``rotary_dim`` elements of every
head of ``x`` ([B, S, H, D], or [T, H, D] with ``cu_seqlens``; any strides) with
``cos``/``sin`` of shape [seqlen_ro, rotary_dim / 2] (one entry per pair), token ``s`` of
sequence ``b`` reading row ``s + seqlen_offsets[b]``, in f32. The adapter maps each call the
way flash-attn's ``ApplyRotaryEmb`` calls it, and declines what has no counterpart:

- the rope slice: where ``nope_dim == 0`` (or the head is wider than flash-attn's 256), the
  view ``t[..., nope_dim:]`` is flash-attn's ``x``, a head of ``emb_dim`` elements
  (``rotary_dim == headdim``; the kernel takes every stride from the view, so the slice is
  rotated where it lies), and the adapter copies the nope part itself. Otherwise flash-attn
  gets whole heads with a leading rotary slice (``rotary_dim = emb_dim < headdim``, as
  GPT-NeoX-style partial rotary calls it), laid out [rope | nope] in a guarded scratch, in
  place or out of place as the call is, and its output is stored back, both parts
  (``leading_slice=False``: the slice alone). SBHD is permuted to [B, S, H, D] by a view;
- pair layouts: (half -> half) is ``interleaved=False``, (interleaved -> interleaved) is
  ``interleaved=True``; a table in either layout whose two entries per pair are equal, passed as
  the view of one entry per pair (flash-attn's wrapper makes it contiguous);
- positions: SBHD rows ``s + seq_offsets[b]`` (``seqlen_offsets`` a tensor, or 0); THD through
  ``cu_seqlens`` (rebased to start at 0 when ``cu_seqlens[0] != 0``: only differences count) and
  ``max_seqlen`` (the longest sequence, counted on the host as callers do); ``per_sequence`` is
  flash-attn's own mode, and ``packed`` gives ``seqlen_offsets = cu_seqlens[:-1]`` (plus the
  sequence offsets), so that each sequence reads its rows of one table of the packed batch;
- ``inverse`` is ``conjugate=True``; ``rope_backward`` is ``apply_rotary(..., conjugate=True)``
  on the gradient, as ``ApplyRotaryEmb.backward`` does (``conjugate`` toggled for an inverse
  call): with one entry per pair the conjugate rotation is the transpose, for any table;
- in place is ``inplace=True`` on the view; out of place, flash-attn's own output tensor
  (``torch.empty_like``, guarded by mlarope.triton) is copied into the harness's output;
- ``kv_split``: ``k_pe`` (one head) rotated out of place and expanded over the heads; its
  backward sums the heads' rope gradients in f32 (what autograd of that expand computes) and
  rotates the sum back;
- declined: (interleaved -> half) and (half -> interleaved)
  (flash-attn writes pairs where it reads them), tables whose two entries of a pair differ,
  context parallelism and position ids (flash-attn has neither), rows whose ``freq_row`` lies
  outside the table and invalid ``cu_seqlens`` (flash-attn has no status word: the harness
  expects such rows to pass through), THD padding rows out of place (flash-attn leaves rows
  outside every sequence unwritten in its ``empty_like`` output; in place they are left alone,
  which is passing through), a table with fewer rows than the longest sequence and heads of
  more than 256 elements (flash-attn asserts both).

Shims for Debian's torch 1.13, installed on the loaded module only (its ``torch`` name is a
proxy, ``_Torch``; the rest of torch is untouched):

- ``torch.library.wrap_triton`` (torch >= 2.6) makes the launch traceable by torch.compile; an
  eager call launches the kernel it wraps, so the shim returns the kernel itself;
- ``torch.cuda.device(index)``: flash-attn enters it so that Triton launches on the tensor's
  GPU; a CPU tensor's index is None, and torch 1.13 without CUDA raises on entering it even
  then, so where torch has no CUDA the shim is a context that does nothing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import types

import numpy as np

from mlarope.rope_only import KvSplitByRope

VERSION = "2.8.3.post2"  # the release the adapter is written against (and CI fuzzes)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(HERE))  # adapters/: releases.py
import releases  # noqa: E402

#: The kernel's path inside a release's tree.
KERNEL = os.path.join("flash_attn", "ops", "triton", "rotary.py")


def release_root(version: str = VERSION) -> str:
    """The folder of ``version``'s files, read out of its sdist (downloaded once, its hash
    checked)."""
    return releases.root("flash_attn", version)


def source(version: str = VERSION) -> str:
    """rotary.py of ``version``."""
    return os.path.join(release_root(version), KERNEL)


class _Torch(types.ModuleType):
    """torch as flash-attn's rotary.py sees it on torch 1.13 without CUDA (module docstring)."""

    def __init__(self, torch):
        super().__init__("torch")
        self._torch = torch
        if not hasattr(torch.library, "wrap_triton"):
            self.library = types.SimpleNamespace(wrap_triton=lambda kernel: kernel)
        if not torch.cuda.is_available():
            self.cuda = types.SimpleNamespace(device=lambda index: contextlib.nullcontext())

    def __getattr__(self, name):
        return getattr(self._torch, name)


def load(path: str | None = None):
    """flash-attn's rotary module (from ``path``, or the sdist) under Triton's interpreter."""
    import torch

    from mlarope import triton as mt

    mt.interpreter()  # before the file imports triton
    path = path or source()
    spec = importlib.util.spec_from_file_location("flash_attn_ops_triton_rotary", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.torch = _Torch(torch)
    return module


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


class FlashRotary(KvSplitByRope):
    """flash-attn's apply_rotary on rope and kv_split calls; see the module docstring."""

    def __init__(self, source: str | None = None):
        import torch

        from mlarope import triton as mt

        self.flash = load(source)
        self.torch, self.mt = torch, mt
        # True toggles conjugate on every call: a wrong mapping, for the test that shows the
        # fuzz fails.
        self.flip_conjugate = False
        # False: the rope slice alone, never whole heads with a leading rotary slice.
        self.leading_slice = True

    def kernels(self):
        """The Triton kernels the adapter launches (flash-attn does not autotune its rotary)."""
        return [self.flash.rotary_kernel]

    def environment(self) -> dict:
        return {
            "flash-attn": VERSION,
            "flash-attn sdist sha256": releases.sha256("flash_attn", VERSION),
        }

    # -- what maps

    def supports(self, call):
        return self._decline(call) or (True, "")

    def _sequences(self, call):
        """(starts, lengths) of the THD sequences, or (None, reason)."""
        cu = call.cu_seqlens.astype(np.int64)
        lengths = np.diff(cu)
        if (lengths < 0).any():
            return (
                None,
                "invalid cu_seqlens (a negative length): rows pass through with a status bit",
            )
        if int(lengths.sum()) > call.inputs[0].shape[0]:
            return None, "cu_seqlens cover more rows than T: rows pass through with a status bit"
        return (np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths), None

    def _rows(self, call):
        """The table row flash-attn reads for every token (int64), or (None, reason)."""
        if call.layout == "sbhd":
            S, B = call.inputs[0].shape[:2]
            rows = np.repeat(np.arange(S, dtype=np.int64)[:, None], B, axis=1)
            if call.seq_offsets is not None:
                rows = rows + call.seq_offsets.astype(np.int64)[None, :]
            return rows.reshape(-1), None
        seqs, why = self._sequences(call)
        if seqs is None:
            return None, why
        parts = [
            np.arange(n, dtype=np.int64) + int(offset)
            for n, offset in zip(seqs[1], self._seqlen_offsets(call))
        ]
        return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), None

    def _seqlen_offsets(self, call) -> np.ndarray:
        """flash-attn's seqlen_offsets of a THD call, per sequence (int64)."""
        n = call.cu_seqlens.shape[0] - 1
        offsets = np.zeros(n, dtype=np.int64)
        if call.freq_mode == "packed":
            offsets += call.cu_seqlens.astype(np.int64)[:-1]
        if call.seq_offsets is not None:
            offsets += call.seq_offsets.astype(np.int64)
        return offsets

    def _decline(self, call):
        if call.in_layout != call.out_layout:
            return False, "flash-attn writes pairs where it reads them (half or interleaved)"
        if call.cp_size > 1:
            return False, "context parallelism: flash-attn's rotary has no CP position mapping"
        if call.position_ids is not None:
            return False, "position ids: flash-attn's rotary takes none"
        if call.emb_dim > 256:
            return (
                False,
                "a rope slice of more than 256 elements: flash-attn asserts headdim <= 256",
            )
        rows, why = self._rows(call)
        if rows is None:
            return False, why
        R = call.cos.shape[0]
        if rows.size and (rows.min() < 0 or rows.max() >= R):
            return False, "a freq_row outside the table: the row passes through with a status bit"
        if call.layout == "thd":
            total = int(np.diff(call.cu_seqlens.astype(np.int64)).sum())
            if total < call.inputs[0].shape[0] and not call.in_place:
                return False, (
                    "THD padding rows out of place: flash-attn leaves them unwritten "
                    "in its empty_like output"
                )
            longest = int(np.diff(call.cu_seqlens.astype(np.int64)).max(initial=0))
            if longest > R:
                return False, "a table shorter than the longest sequence: flash-attn asserts it"
        elif call.seq_offsets is None and call.inputs[0].shape[0] > R:
            return False, "a table shorter than the sequence: flash-attn asserts it"
        d = call.emb_dim
        cos = call.cos.reshape(R, d)[rows]
        sin = call.sin.reshape(R, d)[rows]
        for x in (cos, sin):
            a, b = (
                (x[:, : d // 2], x[:, d // 2 :])
                if call.table_layout == "half"
                else (x[:, 0::2], x[:, 1::2])
            )
            if not np.array_equal(_bits(a), _bits(b)):
                return False, "the table's two entries of a pair differ (flash-attn takes one)"
        return None

    # -- the mapping

    def _pe_view(self, call, a):
        return self.mt.torch_view(a, call.dtype)

    def _rotate_pe(self, call, pe, backward: bool):
        # forward into flash-attn's own output; backward on the f32 sum, in place
        return self._apply(call, pe, backward=backward, inplace=backward)

    def _apply(self, call, x, *, backward: bool, inplace: bool):
        """apply_rotary on x (the rope slices: [S, B, H, d] SBHD, [T, H, d] THD); returns the
        result in the same layout as x."""
        torch, d, R = self.torch, call.emb_dim, call.cos.shape[0]
        half = call.table_layout == "half"
        cos, sin = (
            self.mt.torch_view(t.reshape(R, d), call.table_dtype)[:, : d // 2]
            if half
            else self.mt.torch_view(t.reshape(R, d), call.table_dtype)[:, 0::2]
            for t in (call.cos, call.sin)
        )
        conjugate = (call.inverse != backward) != self.flip_conjugate
        kwargs = dict(
            interleaved=call.in_layout == "interleaved", inplace=inplace, conjugate=conjugate
        )
        if call.layout == "sbhd":
            if call.seq_offsets is not None:
                kwargs["seqlen_offsets"] = self.mt.torch_view(call.seq_offsets, "i32")
            y = self.flash.apply_rotary(x.permute(1, 0, 2, 3), cos, sin, **kwargs)
            return y.permute(1, 0, 2, 3)
        cu = call.cu_seqlens.astype(np.int64)
        lengths = np.diff(cu)
        if lengths.size == 0 or lengths.max() == 0:
            return x  # no sequence has a row: flash-attn would launch an empty grid
        local = torch.from_numpy((cu - cu[0]).astype(np.int32))
        offsets = self._seqlen_offsets(call)
        if offsets.any():
            kwargs["seqlen_offsets"] = torch.from_numpy(offsets.astype(np.int32))
        return self.flash.apply_rotary(
            x, cos, sin, cu_seqlens=local, max_seqlen=int(lengths.max()), **kwargs
        )

    def _rotate_leading(self, call, x, y, backward: bool):
        """apply_rotary on x's heads laid out [rope | nope] in a guarded scratch (rotary_dim =
        emb_dim < headdim), its output stored into y, both parts (module docstring)."""
        n, e = call.nope_dim, call.emb_dim
        heads = self.mt.scratch(tuple(x.shape), x.dtype, "flash-attn heads")
        heads[..., :e] = x[..., n:]
        heads[..., e:] = x[..., :n]
        rotated = self._apply(call, heads, backward=backward, inplace=call.in_place)
        y[..., n:] = rotated[..., :e]
        y[..., :n] = rotated[..., e:]

    def rope(self, call):
        t, out, n, dtype = call.inputs[0], call.outputs[0], call.nope_dim, call.dtype
        if out.size == 0:
            return
        x = self.mt.torch_view(t, dtype)
        if self.leading_slice and n > 0 and n + call.emb_dim <= 256:
            y = x if call.in_place else self.mt.torch_view(out, dtype)
            self._rotate_leading(call, x, y, call.op == "rope_backward")
            return
        if call.in_place:
            self._apply(call, x[..., n:], backward=call.op == "rope_backward", inplace=True)
            return
        y = self.mt.torch_view(out, dtype)
        y[..., :n] = x[..., :n]
        y[..., n:] = self._apply(
            call, x[..., n:], backward=call.op == "rope_backward", inplace=False
        )
