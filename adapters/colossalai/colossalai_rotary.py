# SPDX-License-Identifier: Apache-2.0
"""ColossalAI's Triton rotary kernels (``colossalai/kernel/triton/``) as mlarope backends, for
``mlarope.triton.TritonBackend(ColossalRotary())`` and its siblings below.

ColossalAI's inference engine (``inference/modeling/models/nopadding_llama.py`` and
``backends/pre_attention_backend.py``) works on packed tokens: ``q`` [T, Hq, D], ``k`` [T, Hk,
D] (grouped-query heads, ``Hq % Hk == 0``), a model-wide cos/sin cache ``[max_pos, D / 2]``
(one entry per pair, ``utils.py``), and per-token tables ``[T, D / 2]`` that
``rotary_cache_copy.get_xine_cache(sequence_lengths, cos_cache, sin_cache, is_prompts)``
gathers from it: in prefill row ``p`` for the token at position ``p`` of its sequence, in
decoding row ``length - 1`` for the one token of each sequence. Every kernel rotates
(i, i + D/2) pairs of whole heads, token ``n`` with row ``n`` of its table, computing in the
wider of the activation and table types. The four entry points and their classes:

- ``ColossalRotary``: ``no_pad_rotary_embedding.rotary_embedding(q, k, cos, sin)`` (the prefill
  and speculative-decoding call; ``rotary_embedding_kernel``), rotating ``q`` and ``k`` in place;
- ``ColossalDecodingRotary``: ``decoding_fused_rotary_embedding(q, k, v, cos, sin, k_cache,
  v_cache, block_tables, kv_lengths, use_new_kcache_layout)`` (the decoding call), rotating
  ``q`` in place and writing the rotated ``k`` (and ``v`` as it is) into the paged caches,
  sequence ``n``'s slot ``kv_lengths[n] - 1``; ``k`` itself is not written;
- ``ColossalRotaryKCache``: ``rotary_embedding(q, k, cos, sin, k_cache, block_tables,
  kv_lengths)`` (the deprecated fused path, ``fused_rotary_embedding_kernel_v2``): the same
  contract as decoding, without ``v``, the cache's heads those of ``q``;
- ``ColossalFusedRotary``: ``fused_rotary_embedding.fused_rotary_embedding(q, k, cos_cache,
  sin_cache, lengths)``, which gathers the rows itself (the position within each sequence, from
  the cumulative ``lengths``). Nothing in the release calls it; its own test is marked skip
  ("cuda error") and asserts nothing.

How our calls (docs/semantics.md) map onto them:

- the rope slice only: ``t[..., nope_dim:]`` is a head of ``emb_dim`` elements (the kernels take
  every stride from the view and rotate whole heads); the adapter copies the nope part itself.
  THD is ColossalAI's [T, H, D]; SBHD is flattened to [S * B, H, D] where ``view`` can, else
  given one batch entry ([S, H, D]) at a time (to ``fused_rotary_embedding`` always one batch
  entry, one sequence, at a time);
- out of place: the input is copied into the output first and the kernel rotates the output in
  place (every kernel rotates ``q`` in place); in place: the kernel runs on the tensor itself;
- rope calls go through the kernels' ``q`` path, ``kv_split`` through their ``k`` path (``k_pe``
  is a one-head ``k``, as a grouped-query key; its backward sums the heads' rope gradients in
  f32, what autograd of the expand computes, and rotates the sum back). ``rotary_embedding``
  gets a rope call's heads as both: its last ``k`` heads are ``k`` and the others ``q``, a
  grouped-query pair (``k`` the largest divisor of ``H`` at most ``H / 3``, so ``Hq % Hk == 0``
  as the kernel asserts: ``mlarope.rope_only``; ``grouped_query=False`` gives every head to
  ``q``). Otherwise the tensor a call has no use for is a one-head zero tensor (for the
  deprecated path, whose cache and ``k`` have the heads of ``q``, an ``H``-head one). Where the
  rotated ``k`` is written to the cache only, the adapter reads it back from each token's slot;
- positions: each token's ``freq_row`` (docs/semantics.md §2: context parallelism, sequence
  offsets, THD sequences, packed mode, position ids) becomes a per-token table through
  ``get_xine_cache``, as the engine makes it: in prefill mode where the rows are the positions
  0, 1, ... of consecutive sequences (their lengths read off the rows), else in decoding mode,
  each token the last of a sequence of length ``freq_row + 1``. Decoding passes the same
  lengths as ``kv_lengths``, so slot and position agree as in the engine; the block table gives
  every token a block of its own (``block_size`` 4), at the index of its last block.
  ``fused_rotary_embedding`` maps the calls whose rows are such positions only;
- THD padding rows are left out: ColossalAI's tensors hold the sequences' tokens only, so the
  kernels get the first ``L_0 + ... + L_{N-1}`` rows, and the rest pass through, as the
  semantics want;
- tables: the call's table as ColossalAI's cache: a half-layout table in the compute type
  whose rows are contiguous is given whole ([R, emb_dim]; the kernels read the first half of a
  row), any other one as its first (half) or even (interleaved) columns copied into a guarded
  contiguous [R, emb_dim / 2] scratch. ``fused_rotary_embedding`` reads the table through its
  strides, so it gets any half-layout table as it is. Tables are given in f32, an exact
  widening of an f16 or bf16 table (a model that keeps its cache in f32), so that f16 and bf16
  activations are computed in f32 like every backend of this harness; ``table_as_given=True``
  gives an f16 or bf16 table as it is (the kernels then compute in it, as the engine's cache in
  the model's dtype makes them);
- pair layouts: (half -> half) only; a table in either layout whose two entries per pair are
  equal at every row the call reads (ColossalAI reads one entry per pair);
- ``inverse`` is a negated ``sin`` table; ``rope_backward`` too: with one angle per pair the
  transpose of the rotation is the rotation by ``-sin`` (ColossalAI has no backward);
- declined, with the reason: other pair layouts, tables whose two entries of a pair differ,
  ``emb_dim / 2`` not a power of two (``tl.arange(0, HEAD_DIM // 2)``), rows whose
  ``freq_row`` lies outside the table and invalid ``cu_seqlens`` (no status word: the harness
  expects such rows to pass through); for ``fused_rotary_embedding`` rows that are not
  positions within sequences; for the split-x key cache, ``emb_dim`` not a multiple of
  ``x = 16 / element size``.

Where a kernel is wrong the adapter works around it, so that the rest of the call is still
checked, and a flag gives the kernel the input as a caller would, to reproduce the fault:

- ``fused_rotary_emb`` computes ``q``'s second half from ``k`` and ``k``'s first half from
  ``q`` (``out_q1 = k_0 * sin + k_1 * cos``, ``out_k0 = q_0 * cos - q_1 * sin``), addresses
  ``k``'s second half with ``q``'s token stride and takes ``k``'s head count from ``q``. Given
  the same tensor as ``q`` and ``k`` the crossed operands are the right ones and both stores
  write the same values, which is what the adapter does; ``alias_k=False`` passes a zero ``k``
  of its own (laid out as ``q``), whose rotation makes ``q``'s second half zero;
- ``fused_rotary_emb`` and ``prefill_cache_kernel`` load ``N_ELEMENTS`` cumulative lengths
  without a mask, ``next_power_of_2(T)`` and ``next_power_of_2(num_seqs)`` of them, from a
  tensor of ``num_seqs``: past its end they read whatever memory follows, and a value there at
  most the token's index shifts its position. The adapter appends zero-length sequences up to
  that count (their cumulative length is ``T``, which no token's index reaches);
  ``pad_lengths=False`` passes the lengths as they are;
- ``get_xine_cache`` writes its contiguous outputs with the strides of the cache it reads, so
  a cache whose rows are not contiguous (ColossalAI's own test passes ``cos_cache[:, :D // 2]``)
  makes it store past its outputs. The engine's cache is contiguous, and so is every cache the
  adapter gives; ``strided_cache=True`` gives the half view of a half-layout table instead.

The files are loaded by path from the release's sdist (``adapters/releases.py``, pinned by hash
in releases.toml); they import torch and triton only. ColossalAI autotunes none of these
kernels (the autotune decorator of no_pad_rotary_embedding.py is in a string), so each class
runs one variant. Their masks are scalar comparisons spread over a block (``idx <
total_length``), which mlarope.triton's interpreter makes the int1 masks a GPU compiles. The
bugs above are findings (``findings/``, docs/findings.md).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
import warnings

import numpy as np

from mlarope.rope_only import KvSplitByRope, grouped_query_k_heads

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(HERE))  # adapters/: releases.py
sys.path.append(os.path.join(os.path.dirname(HERE), "liger"))  # liger_rope's position helpers
import releases  # noqa: E402
from liger_rope import freq_rows, one_angle_per_pair  # noqa: E402

VERSION = "0.5.0"  # the release the adapter is written against (releases.toml)
#: The kernels' folder inside a release's tree, and their files.
KERNELS = os.path.join("colossalai", "kernel", "triton")
NO_PAD = "no_pad_rotary_embedding.py"
FUSED = "fused_rotary_embedding.py"
CACHE_COPY = "rotary_cache_copy.py"
#: Slots per block of the paged key cache the adapter builds (the engine's default is 16: a
#: small one puts tokens at other offsets than 0 of their blocks).
BLOCK_SIZE = 4


def release_root(version: str = VERSION) -> str:
    """The folder of ``version``'s files, read out of its sdist (downloaded once, its hash
    checked)."""
    return releases.root("colossalai", version)


def load(name: str, root: str | None = None) -> types.ModuleType:
    """ColossalAI's ``kernel/triton/<name>``, loaded from its file alone (it imports torch and
    triton only) under Triton's interpreter."""
    from mlarope import triton as mt

    mt.interpreter()  # before the file imports triton
    path = os.path.join(root or release_root(), KERNELS, name)
    spec = importlib.util.spec_from_file_location(f"colossalai_triton_{name[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def token_rows(call):
    """The table row of every token ([S, B] for SBHD, [n] for the n THD rows that belong to a
    sequence), or (None, reason) where a row would pass through with a status bit."""
    rows, why = freq_rows(call)
    if rows is not None or call.layout != "thd" or not why.startswith("THD padding"):
        return rows, why
    # The rows of the sequences, as if T were their count: padding rows are left out.
    n = int((np.diff(call.cu_seqlens.astype(np.int64)) // call.cp_size).sum())
    position_ids = call.position_ids
    sequences = types.SimpleNamespace(
        cos=call.cos,
        layout="thd",
        inputs=[call.inputs[0][:n]],
        cu_seqlens=call.cu_seqlens,
        cp_size=call.cp_size,
        cp_rank=call.cp_rank,
        freq_mode=call.freq_mode,
        seq_offsets=call.seq_offsets,
        position_ids=None if position_ids is None else position_ids[:n],
    )
    return freq_rows(sequences)


def sequence_lengths(rows: np.ndarray):
    """The lengths of consecutive sequences whose positions 0, 1, ... are ``rows`` ([n]), or
    None where the rows are not such positions."""
    starts = np.flatnonzero(rows == 0)
    if len(rows) == 0 or starts.size == 0 or starts[0] != 0:
        return None
    lengths = np.diff(np.append(starts, len(rows)))
    expected = np.concatenate([np.arange(n) for n in lengths])
    return lengths if np.array_equal(rows, expected) else None


# ---- rotary_embedding, the prefill path --------------------------------------------------------


class ColossalRotary(KvSplitByRope):
    """``rotary_embedding(q, k, cos, sin)`` with per-token tables from ``get_xine_cache``, on
    rope and kv_split calls; see the module docstring."""

    heads_dim = -2  # [S, B, H, D] and [T, H, D]

    def __init__(
        self,
        root: str | None = None,
        table_as_given: bool = False,
        pad_lengths: bool = True,
        strided_cache: bool = False,
    ):
        import torch

        from mlarope import triton as mt

        self.root = root or release_root()
        self.no_pad = load(NO_PAD, self.root)
        self.cache_copy = load(CACHE_COPY, self.root)
        self.torch, self.mt = torch, mt
        self.table_as_given = table_as_given
        self.pad_lengths = pad_lengths
        self.strided_cache = strided_cache
        # True negates sin on every call: a wrong mapping, for the test that shows the fuzz fails.
        self.flip_sin = False
        # False gives a rope call's heads to q alone (rotary_embedding's k a one-head zero).
        self.grouped_query = True

    entry_point = "no_pad_rotary_embedding.rotary_embedding"

    def kernels(self):
        """The Triton kernels the adapter launches (ColossalAI autotunes none of them: the
        autotune decorator of no_pad_rotary_embedding.py is in a string)."""
        return [
            self.no_pad.rotary_embedding_kernel,
            self.cache_copy.prefill_cache_kernel,
            self.cache_copy.decoding_cache_kernel,
        ]

    def environment(self) -> dict:
        version = releases.version_of(self.root)
        env = {"colossalai": version, "kernel": self.entry_point}
        if version in releases.versions("colossalai"):
            env["colossalai sdist sha256"] = releases.sha256("colossalai", version)
        return env

    # -- what maps

    def supports(self, call):
        return self._decline(call) or (True, "")

    def _decline(self, call):
        if (call.in_layout, call.out_layout) != ("half", "half"):
            return False, "ColossalAI rotates (i, i + d/2) pairs in and out: half -> half only"
        if not _power_of_two(call.emb_dim // 2):
            return False, "emb_dim / 2 not a power of two (tl.arange(0, HEAD_DIM // 2))"
        rows, why = token_rows(call)
        if rows is None:
            return False, why
        d = call.emb_dim
        cos2d = call.cos.reshape(call.cos.shape[0], d)[rows.reshape(-1)]
        sin2d = call.sin.reshape(call.sin.shape[0], d)[rows.reshape(-1)]
        if not one_angle_per_pair(cos2d, sin2d, call.table_layout):
            return False, "the table's two entries of a pair differ (ColossalAI reads one per pair)"
        return None

    # -- tables

    def _compute_dtype(self, call):
        torch = self.torch
        as_given = {"f16": torch.float16, "bf16": torch.bfloat16}.get(call.table_dtype)
        return (as_given if self.table_as_given else None) or torch.float32

    def _caches(self, call, backward: bool, strided: bool = False):
        """ColossalAI's cos and sin caches (see the module docstring); ``strided``: the kernel
        reads them through their strides."""
        torch, d = self.torch, call.emb_dim
        negate = (call.inverse != backward) != self.flip_sin
        dtype = self._compute_dtype(call)
        tables = [t.reshape(t.shape[0], d) for t in (call.cos, call.sin)]
        full = [self.mt.torch_view(t, call.table_dtype) for t in tables]
        if call.table_layout == "half" and not negate and full[0].dtype == dtype:
            if strided or self.strided_cache:
                return [f[:, : d // 2] for f in full]
            if all(f.stride(0) == d for f in full):  # the tables, as the engine's cache
                return full
        caches = []
        for table, sign in zip(tables, (1.0, -1.0 if negate else 1.0)):
            values = self.mt.values_of(table, call.table_dtype).astype(np.float64)
            values = values[:, : d // 2] if call.table_layout == "half" else values[:, 0::2]
            cache = self.mt.scratch((table.shape[0], d // 2), dtype, "colossalai cache")
            cache.copy_(torch.from_numpy(values * sign))
            caches.append(cache)
        return caches

    def _lengths(self, lengths: np.ndarray, count: int | None = None):
        """``lengths`` as the engine's int32 tensor, zero-length sequences appended up to
        ``count`` entries (the next power of two by default) where ``pad_lengths``."""
        if self.pad_lengths:
            count = count or (1 << max(0, len(lengths) - 1).bit_length())
            lengths = np.concatenate([lengths, np.zeros(count - len(lengths), np.int64)])
        return self.torch.from_numpy(np.ascontiguousarray(lengths, dtype=np.int32))

    def _per_token(self, call, rows: np.ndarray, backward: bool):
        """The per-token cos and sin ([n, *]) for tokens reading ``rows``, from get_xine_cache
        (prefill mode where the rows are positions within sequences, else decoding mode)."""
        cos, sin = self._caches(call, backward)
        lengths = sequence_lengths(rows)
        if lengths is not None:
            return self.cache_copy.get_xine_cache(self._lengths(lengths), cos, sin, True)
        lengths = self.torch.from_numpy((rows + 1).astype(np.int32))
        return self.cache_copy.get_xine_cache(lengths, cos, sin, False)

    # -- launches

    def _launch(self, call, x, rows: np.ndarray, backward: bool, role: str):
        """The kernel on x ([n, H, d], a view of harness memory or a tensor of the adapter) as
        ``q`` or ``k`` (``role``), token i reading table row ``rows[i]``; returns the rotated
        tensor (x itself, rotated in place)."""
        torch = self.torch
        cos, sin = self._per_token(call, rows, backward)
        H = x.shape[1]
        heads_k = grouped_query_k_heads(H) if role == "q" and self.grouped_query else 0
        if heads_k:
            self.no_pad.rotary_embedding(x[:, : H - heads_k], x[:, H - heads_k :], cos, sin)
            return x
        other = torch.zeros((x.shape[0], 1, x.shape[2]), dtype=x.dtype)
        q, k = (x, other) if role == "q" else (other, x)
        self.no_pad.rotary_embedding(q, k, cos, sin)
        return x

    def _rotate(self, call, x, rows: np.ndarray, backward: bool, role: str):
        """x ([S, B, H, d] or [T, H, d]) rotated, the THD padding rows past ``len(rows)`` left
        as they are; the result is stored into x."""
        if call.layout == "thd":
            tokens = x[: len(rows)]  # THD padding rows pass through
            if len(rows):
                self._store(tokens, self._launch(call, tokens, rows, backward, role))
            return
        S, B, H, d = x.shape
        try:
            flat = x.view(S * B, H, d)
        except RuntimeError:  # (S, B) cannot be merged: one batch entry at a time
            for b in range(B):
                self._store(x[:, b], self._launch(call, x[:, b], rows[:, b], backward, role))
            return
        self._store(flat, self._launch(call, flat, rows.reshape(-1), backward, role))

    @staticmethod
    def _store(x, y):
        if y.data_ptr() != x.data_ptr() or y.stride() != x.stride():
            x.copy_(y)

    def rope(self, call):
        t, out, n, dtype = call.inputs[0], call.outputs[0], call.nope_dim, call.dtype
        if out.size == 0:
            return
        if not call.in_place:
            out[...] = t  # ColossalAI rotates q in place: it gets the output, holding the input
        rows, _ = token_rows(call)
        x = self.mt.torch_view(out[..., n:], dtype)
        self._rotate(call, x, rows, call.op == "rope_backward", "q")

    def _pe_view(self, call, a: np.ndarray):
        return self.mt.torch_view(a, call.dtype)

    def _rotate_pe(self, call, pe, backward: bool):
        """The ``k`` path on a one-head tensor ([S, B, 1, d] or [T, 1, d]); a new tensor."""
        rows, _ = token_rows(call)
        k = self.mt.scratch(pe.shape, pe.dtype, "colossalai k")
        k.copy_(pe)
        self._rotate(call, k, rows, backward, "k")
        return k


# ---- decoding_fused_rotary_embedding and the deprecated k_cache path -----------------------------


class ColossalDecodingRotary(ColossalRotary):
    """``decoding_fused_rotary_embedding``: ``q`` rotated in place, the rotated ``k`` read back
    from the paged key cache; ``new_kcache_layout`` selects the [blocks, heads, D / x,
    block_size, x] cache (``use_new_kcache_layout=True``)."""

    entry_point = "no_pad_rotary_embedding.decoding_fused_rotary_embedding"

    def __init__(self, *args, new_kcache_layout: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.new_kcache_layout = new_kcache_layout

    def kernels(self):
        return [self.no_pad.decoding_fused_rotary_embedding_kernel]

    def environment(self) -> dict:
        return {**super().environment(), "use_new_kcache_layout": self.new_kcache_layout}

    def _split_x(self, dtype) -> int:
        """x of the split key cache: 16 bytes of elements (ColossalAI's tests and engine)."""
        return 16 // self.torch.tensor([], dtype=dtype).element_size()

    def _decline(self, call):
        why = super()._decline(call)
        if why is None and self.new_kcache_layout:
            torch = self.torch
            kv_dtype = torch.float32 if call.op == "kv_split_backward" else None
            dtype = kv_dtype or {"f32": torch.float32, "f16": torch.float16}.get(
                call.dtype, torch.bfloat16
            )
            if call.emb_dim % self._split_x(dtype):
                return False, "emb_dim not a multiple of x = 16 / element size (split key cache)"
        return why

    def _paged(self, rows: np.ndarray):
        """kv_lengths (rows + 1) and a block table giving token n block n at the index of its
        last block; -1 (no block) elsewhere."""
        torch, n = self.torch, len(rows)
        kv_lengths = torch.from_numpy((rows + 1).astype(np.int32))
        width = int(rows.max()) // BLOCK_SIZE + 1 if n else 1
        tables = np.full((n, width), -1, dtype=np.int32)
        tables[np.arange(n), rows // BLOCK_SIZE] = np.arange(n, dtype=np.int32)
        return kv_lengths, torch.from_numpy(tables)

    def _k_cache(self, n: int, heads: int, d: int, dtype):
        if self.new_kcache_layout:
            x = self._split_x(dtype)
            return self.mt.scratch((n, heads, d // x, BLOCK_SIZE, x), dtype, "colossalai k_cache")
        return self.mt.scratch((n, heads, BLOCK_SIZE, d), dtype, "colossalai k_cache")

    def _cached_k(self, k_cache, rows: np.ndarray, d: int):
        """The keys stored at each token's slot ([n, heads, d])."""
        slots = self.torch.from_numpy(rows % BLOCK_SIZE)
        tokens = self.torch.arange(len(rows))
        if self.new_kcache_layout:
            n, heads = k_cache.shape[:2]
            return k_cache[tokens, :, :, slots, :].reshape(n, heads, d)
        return k_cache[tokens, :, slots, :]

    def _launch(self, call, x, rows: np.ndarray, backward: bool, role: str):
        torch = self.torch
        n, heads, d = x.shape
        cos, sin = self._per_token_decoding(call, rows, backward)
        kv_lengths, block_tables = self._paged(rows)
        other = torch.zeros((n, 1, d), dtype=x.dtype)
        q, k = (x, other) if role == "q" else (other, x)
        kv_heads = k.shape[1]
        k_cache = self._k_cache(n, kv_heads, d, k.dtype)
        v_cache = self.mt.scratch((n, kv_heads, BLOCK_SIZE, d), k.dtype, "colossalai v_cache")
        # v is read with k's strides (the kernel's off_kv): v is k itself, which it copies.
        self.no_pad.decoding_fused_rotary_embedding(
            q,
            k,
            k,
            cos,
            sin,
            k_cache,
            v_cache,
            block_tables,
            kv_lengths,
            self.new_kcache_layout,
        )
        return x if role == "q" else self._cached_k(k_cache, rows, d)

    def _per_token_decoding(self, call, rows: np.ndarray, backward: bool):
        """Decoding's per-token tables: get_xine_cache(kv_lengths, ..., is_prompts=False)."""
        cos, sin = self._caches(call, backward)
        lengths = self.torch.from_numpy((rows + 1).astype(np.int32))
        return self.cache_copy.get_xine_cache(lengths, cos, sin, False)


class ColossalRotaryKCache(ColossalDecodingRotary):
    """``rotary_embedding(q, k, cos, sin, k_cache, block_tables, kv_lengths)``: the deprecated
    fused path (``fused_rotary_embedding_kernel_v2``), whose ``k`` and cache have the heads of
    ``q``; ``q`` rotated in place, the rotated ``k`` read back from the cache."""

    entry_point = "no_pad_rotary_embedding.rotary_embedding(k_cache=...)"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, new_kcache_layout=False, **kwargs)

    def kernels(self):
        return [self.no_pad.fused_rotary_embedding_kernel_v2]

    def environment(self) -> dict:
        env = super().environment()
        del env["use_new_kcache_layout"]
        return env

    def _launch(self, call, x, rows: np.ndarray, backward: bool, role: str):
        torch = self.torch
        n, heads, d = x.shape
        cos, sin = self._per_token_decoding(call, rows, backward)
        kv_lengths, block_tables = self._paged(rows)
        other = torch.zeros((n, heads, d), dtype=x.dtype)  # k has q's heads, q has k's
        q, k = (x, other) if role == "q" else (other, x)
        k_cache = self._k_cache(n, heads, d, k.dtype)
        with warnings.catch_warnings():  # "will be deprecated": the path is what is checked
            warnings.simplefilter("ignore")
            self.no_pad.rotary_embedding(q, k, cos, sin, k_cache, block_tables, kv_lengths)
        return x if role == "q" else self._cached_k(k_cache, rows, d)


# ---- fused_rotary_embedding.py -----------------------------------------------------------------


class ColossalFusedRotary(ColossalRotary):
    """``fused_rotary_embedding(q, k, cos_cache, sin_cache, lengths)``: the kernel gathers each
    token's row, its position within its sequence; ``q`` and ``k`` the same tensor
    (``alias_k``, see the module docstring)."""

    entry_point = "fused_rotary_embedding.fused_rotary_embedding"

    def __init__(self, root: str | None = None, alias_k: bool = True, **kwargs):
        super().__init__(root, **kwargs)
        self.fused = load(FUSED, self.root)
        self.alias_k = alias_k

    def kernels(self):
        return [self.fused.fused_rotary_emb]

    def _decline(self, call):
        why = super()._decline(call)
        if why is not None:
            return why
        rows, _ = token_rows(call)
        columns = [rows] if call.layout == "thd" else list(rows.T)  # SBHD: one batch entry each
        if any(len(c) and sequence_lengths(c) is None for c in columns):
            return False, (
                "rows that are not positions 0, 1, ... within sequences "
                "(fused_rotary_embedding indexes the table by the position in a sequence)"
            )
        return None

    def _rotate(self, call, x, rows: np.ndarray, backward: bool, role: str):
        if call.layout == "thd":
            self._launch(call, x[: len(rows)], rows, backward, role)
            return
        for b in range(x.shape[1]):  # one batch entry, one sequence, at a time
            self._launch(call, x[:, b], rows[:, b], backward, role)

    def _launch(self, call, x, rows: np.ndarray, backward: bool, role: str):
        """x rotated in place: its tokens are the sequences of ``sequence_lengths(rows)``."""
        if x.shape[0] == 0:
            return x
        cos, sin = self._caches(call, backward, strided=True)
        lengths = self._lengths(sequence_lengths(rows), self.fused_count(x.shape[0]))
        k = x
        if not self.alias_k:  # a k of its own, laid out as q (which the kernel's off_k1 assumes)
            k = self.torch.empty_strided(x.shape, x.stride(), dtype=x.dtype).zero_()
        self.fused.fused_rotary_embedding(x, k, cos, sin, lengths)
        return x

    @staticmethod
    def fused_count(tokens: int) -> int:
        """How many cumulative lengths the kernel loads: N_ELEMENTS = next_power_of_2(T)."""
        return 1 << max(0, tokens - 1).bit_length()
