# SPDX-License-Identifier: Apache-2.0
"""Liger-Kernel's Triton RoPE (``liger_kernel/ops/rope.py``) as an mlarope backend, for
``mlarope.triton.TritonBackend(LigerRope(), kernels=LigerRope().kernels())``.

Only that one file of the liger-kernel wheel is loaded (by path): the package's __init__
imports model patches and other kernels that the rope file does not need. Liger's rope is the
Hugging Face (Llama, NeoX) rotation: ``q`` and ``k`` of shape [B, H, S, D] whose memory is laid
out [B, S, H, D], ``cos``/``sin`` of shape [1 or B, S, rd] in the ``cat(freqs, freqs)`` layout
(the kernel reads the first rd/2 entries of a row), the leading ``rd`` elements of each head
rotated as (i, i + rd/2) pairs, in place on the contiguous [B, S, H, D] tensor. The adapter
maps each call the way Hugging Face models call it, and declines what has no counterpart:

- the rope slice: like DeepSeek's attention in transformers (``q_pe``, ``k_pe``), the
  adapter gives Liger the slice ``t[..., nope_dim:]`` as a head of ``emb_dim`` elements (full
  rotation) and copies the nope part itself. SBHD is permuted to Liger's [B, H, S, D] by a view;
  THD is one batch entry of T tokens. Where the release takes ``rotary_dim`` (partial rotation,
  from 0.8.5) and ``nope_dim > 0``, Liger gets whole heads instead, laid out [rope | nope] in a
  guarded scratch ([B, S, H, D] memory), as partial-rotary models (GPT-NeoX, Phi, GLM) lay
  theirs out: the leading ``rotary_dim = emb_dim`` elements rotated and the rest passed through
  by Liger, whose output the adapter stores back, both parts (``leading_slice=False`` passes the
  slice instead);
- q and k: Liger rotates both in one launch; a rope call's last ``k`` heads are Liger's ``k``
  and the others its ``q``, a grouped-query pair of different head counts (``k`` the largest
  divisor of ``H`` at most ``H / 3``: ``mlarope.rope_only``; ``grouped_query=False`` gives
  every head to ``q``); with one head, and for ``kv_split`` below, the tensor a call has no use
  for is a one-head zero tensor;
- out of place: the input is copied into the output first and Liger rotates the output in
  place (Liger writes the tensor it is given whenever that tensor is contiguous); in place:
  Liger runs on the tensor itself. Where the view is not contiguous Liger works on a copy and
  returns it, and the adapter stores it back;
- positions: Liger reads row ``s`` of its table for token ``s`` (of batch entry ``b`` when the
  table has B rows), the way transformers computes cos/sin for each token's ``position_ids``.
  The adapter passes the table itself where the rows are 0 .. S-1, and otherwise the rows of
  our table at each token's ``freq_row`` (docs/semantics.md §2: context parallelism, sequence
  offsets, THD sequences, packed mode, position ids), gathered into a NaN-guarded scratch
  table of shape [1, S, d] (the same rows for every batch entry) or [B, S, d];
- pair layouts: (half -> half) only; a table in either layout whose two entries per pair are
  equal (Liger reads one entry per pair). Interleaved tables are de-interleaved into scratch;
- ``inverse`` is a negated ``sin`` table; ``rope_backward`` is ``rope_backward`` of the same file
  (what ``LigerRopeFunction.backward`` calls), which rotates by the transposed matrix;
- ``kv_split``: ``k_pe`` is Liger's ``k`` (one head, as DeepSeek's ``k_pe``), rotated and
  expanded over the heads; its backward sums the heads' rope gradients in f32 (what autograd of
  that expand computes) and gives the sum to Liger's backward;
- one token per sequence (S == 1, B > 1): Liger takes ``q.stride(1)`` of its [B, S, H, D] view
  as the stride between tokens, and ``.contiguous()`` leaves a size-1 dimension's stride as it
  is, so any stride other than H * D makes it rotate the wrong rows or store past the tensor
  (findings/seq1_row_stride). The adapter gives Liger such a tensor with that stride set to
  the batch stride (H * D for a [B, 1, H, D] tensor of a model's projection), so the rest of
  the call is still checked; ``restride_single_token=False`` passes the views as they are;
- Liger computes in the table's dtype (``q`` is converted to it). Tables are given in f32, an
  exact widening of an f16 or bf16 table, as a model that keeps its cos/sin cache in f32 does,
  so that f16 and bf16 activations are computed in f32 like every backend of this harness;
  ``table_as_given=True`` passes an f16 or bf16 table as it is (Liger then computes in it);
- declined: interleaved pairs, tables whose two entries of a pair differ, rows whose
  ``freq_row`` lies outside the table and invalid ``cu_seqlens`` (Liger has no status word: the
  harness expects such rows to pass through), THD padding rows (no sequence, no table row).
"""

from __future__ import annotations

import importlib.util
import inspect
import os

import numpy as np

from mlarope.rope_only import KvSplitByRope, grouped_query_k_heads

VERSION = "0.8.5"  # requirements.txt pins this wheel by hash


def _ops_file(name: str = "rope.py") -> str:
    """The path of liger_kernel/ops/<name> in the installed wheel (without importing it)."""
    spec = importlib.util.find_spec("liger_kernel")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"liger-kernel is not installed (pip install --no-deps liger-kernel=={VERSION})"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "ops", name)


def load(path: str | None = None, name: str = "rope.py"):
    """Liger's ``ops/<name>`` module, loaded from its file alone, under Triton's interpreter.

    ``path`` may name another copy of the file (another release's, to compare)."""
    from mlarope import triton as mt

    mt.interpreter()  # before the file imports triton
    path = path or _ops_file(name)
    spec = importlib.util.spec_from_file_location(f"liger_kernel_ops_{name[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- Which table row each token uses (docs/semantics.md §2) -------------------------------------


def _cp_pos(lp: np.ndarray, length, cp_size: int, cp_rank: int) -> np.ndarray:
    if cp_size == 1:
        return lp
    half = length // 2
    return np.where(
        lp < half, cp_rank * half + lp, length * cp_size - (cp_rank + 1) * half + (lp - half)
    )


def thd_sequences(call):
    """(local starts, local lengths) of the THD sequences, or (None, reason) where the harness
    expects rows to pass through (invalid cu_seqlens) or rows belong to no sequence."""
    cu = call.cu_seqlens.astype(np.int64)
    lengths = np.diff(cu)
    if (lengths < 0).any():
        return None, "invalid cu_seqlens (a negative length): rows pass through with a status bit"
    if call.cp_size > 1 and (lengths % (2 * call.cp_size)).any():
        return (
            None,
            "a THD length not divisible by 2 * cp_size: rows pass through with a status bit",
        )
    local = lengths // call.cp_size
    total = int(local.sum())
    rows = call.inputs[0].shape[0]
    if total > rows:
        return None, "cu_seqlens cover more rows than T: rows pass through with a status bit"
    if total < rows:
        return None, "THD padding rows: they belong to no sequence and pass through"
    starts = np.concatenate([[0], np.cumsum(local)[:-1]]).astype(np.int64)
    return (starts, local), None


def freq_rows(call):
    """The table row of every token: [S, B] for SBHD, [T] for THD (int64), or (None, reason)
    where some row would pass through (a status bit, or a padding row)."""
    R = call.cos.shape[0]
    if call.layout == "sbhd":
        S, B = call.inputs[0].shape[:2]
        rows = _cp_pos(np.arange(S, dtype=np.int64), S, call.cp_size, call.cp_rank)
        rows = np.repeat(rows[:, None], B, axis=1)
        if call.seq_offsets is not None:
            rows = rows + call.seq_offsets.astype(np.int64)[None, :]
    else:
        seqs, why = thd_sequences(call)
        if seqs is None:
            return None, why
        if call.position_ids is not None:
            rows = call.position_ids.astype(np.int64).copy()
        else:
            starts, local = seqs
            rows = np.empty(call.inputs[0].shape[0], dtype=np.int64)
            cu = call.cu_seqlens.astype(np.int64)
            for i, (start, n) in enumerate(zip(starts, local)):
                lp = np.arange(n, dtype=np.int64)
                r = _cp_pos(lp, n, call.cp_size, call.cp_rank)
                if call.freq_mode == "packed":
                    r = r + cu[i]
                if call.seq_offsets is not None:
                    r = r + int(call.seq_offsets[i])
                rows[start : start + n] = r
    if rows.size and (rows.min() < 0 or rows.max() >= R):
        return None, "a freq_row outside the table: the row passes through with a status bit"
    return rows, None


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def one_angle_per_pair(cos2d: np.ndarray, sin2d: np.ndarray, layout: str) -> bool:
    """Whether both entries of every pair hold the same bits (the tables rows given)."""
    h = cos2d.shape[1] // 2
    for x in (cos2d, sin2d):
        a, b = (x[:, :h], x[:, h:]) if layout == "half" else (x[:, 0::2], x[:, 1::2])
        if not np.array_equal(_bits(np.ascontiguousarray(a)), _bits(np.ascontiguousarray(b))):
            return False
    return True


# ---- The backend --------------------------------------------------------------------------------


class LigerRope(KvSplitByRope):
    """Liger's rope (forward and backward) on rope and kv_split calls; see the module docstring."""

    def __init__(
        self,
        source: str | None = None,
        table_as_given: bool = False,
        restride_single_token: bool = True,
    ):
        import torch

        from mlarope import triton as mt

        self.liger = load(source)
        self.torch, self.mt = torch, mt
        self.table_as_given = table_as_given
        self.restride_single_token = restride_single_token
        # True negates sin on every call: a wrong mapping, for the test that shows the fuzz fails.
        self.flip_sin = False
        # False: the rope slice alone, never whole heads with a leading rotary slice.
        self.leading_slice = True
        # False: a rope call's heads all go to q (k a one-head zero tensor).
        self.grouped_query = True

    def kernels(self):
        """The Triton kernels the adapter launches (Liger does not autotune its rope)."""
        return [self.liger._triton_rope]

    def environment(self) -> dict:
        return {"liger-kernel": VERSION}

    # -- what maps

    def supports(self, call):
        return self._decline(call) or (True, "")

    def _decline(self, call):
        if (call.in_layout, call.out_layout) != ("half", "half"):
            return False, "Liger rotates (i, i + d/2) pairs in and out: half -> half only"
        rows, why = freq_rows(call)
        if rows is None:
            return False, why
        d = call.emb_dim
        cos2d = call.cos.reshape(call.cos.shape[0], d)[rows.reshape(-1)]
        sin2d = call.sin.reshape(call.sin.shape[0], d)[rows.reshape(-1)]
        if not one_angle_per_pair(cos2d, sin2d, call.table_layout):
            return False, "the table's two entries of a pair differ (Liger reads one per pair)"
        return None

    # -- the mapping

    def _kernel_view(self, call, a: np.ndarray, dtype: str):
        """A tensor over the harness array, as Liger's [B, H, S, D] (SBHD permuted, THD B = 1)."""
        x = self.mt.torch_view(a, dtype)
        return x.permute(1, 2, 0, 3) if call.layout == "sbhd" else x.permute(1, 0, 2)[None]

    def _tables(self, call):
        """Liger's cos and sin, [1 or B, S, d] (see the module docstring)."""
        torch, d = self.torch, call.emb_dim
        rows, _ = freq_rows(call)
        rows = rows.T if call.layout == "sbhd" else rows[None]  # [B, S]
        if (rows == rows[:1]).all():
            rows = rows[:1]
        S = rows.shape[1]
        as_given = {"f16": torch.float16, "bf16": torch.bfloat16}.get(call.table_dtype)
        dtype = (as_given if self.table_as_given else None) or torch.float32
        tables = []
        negate = call.inverse != self.flip_sin
        for table, sign in ((call.cos, 1.0), (call.sin, -1.0 if negate else 1.0)):
            table = table.reshape(table.shape[0], d)
            direct = (
                rows.shape[0] == 1
                and call.table_layout == "half"
                and sign == 1.0
                and (rows[0] == np.arange(S)).all()
                and table.dtype == np.dtype(np.float32 if dtype == torch.float32 else np.float16)
            )
            if direct:  # the table itself, as a model passes its cached cos/sin
                tables.append(self.mt.torch_view(table[:S], call.table_dtype)[None])
                continue
            gathered = table[rows.reshape(-1)]
            gathered = self.mt.values_of(gathered, call.table_dtype).astype(np.float64) * sign
            if call.table_layout == "interleaved":
                f = gathered[:, 0::2]
                gathered = np.concatenate([f, f], axis=1)
            out = self.mt.scratch((rows.shape[0], S, d), dtype, "liger table")
            out.copy_(torch.from_numpy(gathered.reshape(rows.shape[0], S, d)))
            tables.append(out)
        return tables

    def _rows_as_liger_assumes(self, x):
        """x (the kernel's view, tokens along ``tokens_dim``) with the stride of a size-1 S set
        to the batch stride: the same elements, the token stride Liger reads (see the module
        docstring); the Llama 4 kernel the same. Liger addresses
        (batch, token) row r at r * stride(S), so with S == 1 entry b lies b * stride(S) away,
        right only when that is the batch stride (H times the head stride is not: a broadcast
        one-head k_pe has head stride 0)."""
        if x.shape[self.tokens_dim] != 1 or not self.restride_single_token:
            return x
        stride = list(x.stride())
        stride[self.tokens_dim] = stride[0]
        return x.as_strided(x.shape, stride, x.storage_offset())

    def _q_and_k(self, x):
        """x's heads as the q and k of one launch (module docstring): (q, k) and how many of
        them are views of x (2, or 1 where k is a one-head zero tensor)."""
        H = x.shape[self.heads_dim]
        k = grouped_query_k_heads(H) if self.grouped_query else 0
        if k:
            return (x.narrow(self.heads_dim, 0, H - k), x.narrow(self.heads_dim, H - k, k)), 2
        shape = list(x.shape)
        shape[self.heads_dim] = 1
        return (x, self.torch.zeros(shape, dtype=x.dtype)), 1

    def _rotate(self, call, x, backward: bool):
        """Liger on x ([B, H, S, d], a view of harness memory): the result stored back into x."""
        cos, sin = self._tables(call)
        x = self._rows_as_liger_assumes(x)
        pair, views = self._q_and_k(x)
        if backward:
            rotated = self.liger.rope_backward(*pair, cos, sin)
        else:
            rotated = self.liger.LigerRopeFunction.apply(*pair, cos, sin)
        for target, y in list(zip(pair, rotated))[:views]:
            target.copy_(y)  # a no-op copy where Liger wrote the view itself

    def _takes_leading_slice(self, call) -> bool:
        """Whether the call goes to Liger as whole heads with a leading rotary slice."""
        if not self.leading_slice or call.nope_dim == 0:
            return False
        return "rotary_dim" in inspect.signature(self.liger.rope_forward).parameters

    def _rotate_leading(self, call, src, dst, backward: bool):
        """Liger's partial rotation on src's heads ([B, H, S, D] views of harness memory) laid out
        [rope | nope] in a guarded scratch, its output stored into dst (module docstring)."""
        n, e = call.nope_dim, call.emb_dim
        B, H, S, D = src.shape
        heads = self.mt.scratch((B, S, H, D), src.dtype, "liger heads").permute(0, 2, 1, 3)
        heads[..., :e] = src[..., n:]
        heads[..., e:] = src[..., :n]
        self._rotate(call, heads, backward)
        dst[..., n:] = heads[..., :e]
        dst[..., :n] = heads[..., e:]

    heads_dim, tokens_dim = 1, 2  # Liger's [B, H, S, D]

    def _pe_view(self, call, a: np.ndarray):
        return self._kernel_view(call, a, call.dtype)

    def _rotate_pe(self, call, pe, backward: bool):
        """Liger's k path on a one-head tensor ([B, 1, S, d]); the result, a new tensor."""
        torch = self.torch
        cos, sin = self._tables(call)
        B, _, S, d = pe.shape
        k = self._rows_as_liger_assumes(pe.contiguous().clone())
        other = torch.zeros((B, 1, S, d), dtype=k.dtype)
        if backward:
            _, y = self.liger.rope_backward(other, k, cos, sin)
        else:
            _, y = self.liger.LigerRopeFunction.apply(other, k, cos, sin)
        return y

    def rope(self, call):
        t, out, n, dtype = call.inputs[0], call.outputs[0], call.nope_dim, call.dtype
        if out.size == 0:
            return
        if self._takes_leading_slice(call):
            src, dst = (self._kernel_view(call, a, dtype) for a in (t, out))
            self._rotate_leading(call, src, dst, call.op == "rope_backward")
            return
        if not call.in_place:
            out[...] = t  # Liger rotates in place: it gets the output, holding the input
        self._rotate(call, self._kernel_view(call, out[..., n:], dtype), call.op == "rope_backward")
