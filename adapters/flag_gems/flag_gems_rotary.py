# SPDX-License-Identifier: Apache-2.0
"""FlagGems' Triton rotary embedding (``flag_gems/fused/rotary_embedding.py``:
``apply_rotary_pos_emb``) as an mlarope backend, for
``mlarope.triton.TritonBackend(FlagGemsRotary())``.

``apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, rotary_interleaved=False,
inplace=False)`` rotates every element of every head of ``q`` ([*, Hq, D]) and ``k`` ([*, Hk,
D]; the same leading dimensions) with ``cos``/``sin`` of shape [max_pos, D / 2] (one entry per
pair, the last dimension contiguous), token ``n`` of the flattened leading dimensions reading
row ``position_ids[n]``, or, without ``position_ids``, row ``s`` of a [B, S, H, D] tensor (``n %
S``). The kernels widen the tables to f32 and compute in f32 whatever the activation type. Out
of place, the wrapper allocates the outputs (``torch.empty_like``, guarded by mlarope.triton);
in place, it writes ``q`` and ``k``. The adapter maps each call the way vLLM-style users call
it (``q``/``k`` [T, H, D], a ``[max_pos, D / 2]`` cos/sin cache, ``positions`` [T]), and
declines what has no counterpart:

- the rope slice only: the view ``t[..., nope_dim:]`` is FlagGems' ``q``, a head of ``emb_dim``
  elements (the kernel asserts ``cos.shape[-1] * 2 == D``, so there is no partial rotation, and
  takes every stride from the view, so the slice is rotated where it lies); the adapter copies
  the nope part itself. Rope calls go through the ``q`` path of the kernels, ``kv_split`` through
  the ``k`` path (``k_pe``, one head, as DeepSeek's); the tensor a call has no use for is a
  one-head zero tensor;
- positions: the table rows of every token at its ``freq_row`` (docs/semantics.md §2: context
  parallelism, sequence offsets, THD sequences, packed mode, position ids) as FlagGems'
  ``position_ids``, [S, B] for SBHD and [T] for THD (int32 where the call's position ids are
  int32, else int64, as vLLM's positions). Where every token reads row ``s`` of its sequence
  and the tensor is a [B, S, H, D] view FlagGems can flatten (THD whose tokens read rows 0 ..
  T-1; SBHD with B == 1 or S == 1), no ``position_ids`` is given: the kernel's own ``s_id %
  seq_len`` path. The wrapper flattens the leading dimensions with ``view``; an SBHD view whose
  (S, B) cannot be merged (padded rows, broadcast inputs) is given one batch entry at a time,
  [S, H, D] with that entry's positions, so the kernel still works on the harness's memory;
- tables: the call's own table, whole, as the cache (``MAX_POSITION_EMBEDDINGS`` its rows): a
  half-layout table as the view of its first ``emb_dim / 2`` columns, an interleaved one as its
  even columns copied into a NaN-guarded scratch [R, emb_dim / 2] (FlagGems asserts a
  contiguous last dimension), in the table's dtype (the kernel widens it to f32);
- pair layouts: (half -> half) is ``rotary_interleaved=False``, (interleaved -> interleaved)
  ``rotary_interleaved=True``; a table in either layout whose two entries per pair are equal at
  every row the call reads (FlagGems reads one entry per pair);
- ``inverse`` is a negated ``sin`` table (scratch); ``rope_backward`` too: with one angle per
  pair the transpose of the rotation is the rotation by ``-sin`` (an inverse call's backward is
  the rotation by ``sin``). FlagGems has no backward of its own;
- out of place is ``inplace=False`` (``apply_rotary_pos_emb_kernel``), its output copied into
  the harness's output; in place would be ``inplace=True`` on the view
  (``apply_rotary_pos_emb_inplace_kernel``), but that kernel races (below), so in-place calls
  are declined (``decline_in_place=False`` runs them, for the test that shows the race);
- ``kv_split``: ``k_pe`` is FlagGems' ``k``, rotated out of place and expanded over the heads;
  its backward sums the heads' rope gradients in f32 (what autograd of that expand computes)
  and rotates the sum back;
- declined: (interleaved -> half) and (half -> interleaved) (FlagGems writes pairs where it
  reads them), tables whose two entries of a pair differ, rows whose ``freq_row`` lies outside
  the table and invalid ``cu_seqlens`` (FlagGems has no status word and only a debug-mode
  ``device_assert`` on the position: the harness expects such rows to pass through), THD
  padding rows (no sequence, no table row), and in place.

The in-place race: for each head, ``apply_rotary_pos_emb_inplace_kernel`` loads ``q`` at
``ordered_cols`` and the partner of each element at ``rotated_cols`` (element ``i + D/2`` or
``i ^ 1``), then stores ``y`` at ``ordered_cols``, with no barrier between (rotary_embedding.py
lines 165 to 167 for ``q``, 176 to 178 for ``k``). The element one lane stores is the one
another lane loads as its partner, and on a GPU nothing orders that store before or after the
load: where Triton's layout puts an element and its partner in different warps (the two halves
of a head long enough to span warps), a lagging warp may rotate its elements with partners
already rotated. Triton's interpreter runs a block's loads before its stores, so the values
agree here; the races check of mlarope.triton reports it. The out-of-place kernel loads from
``q`` and stores to ``q_embed``, which do not overlap. The finding, its repro and the releases
it affects: ``findings/in_place_race`` (docs/findings.md).
"""

from __future__ import annotations

import contextlib
import os
import sys
import types

import numpy as np

from mlarope.rope_only import KvSplitByRope

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(HERE))  # adapters/: releases.py
sys.path.append(os.path.join(os.path.dirname(HERE), "liger"))  # liger_rope's position helpers
import releases  # noqa: E402
from liger_rope import freq_rows, one_angle_per_pair  # noqa: E402
from stand_ins import in_sys_modules, module_from, package  # noqa: E402

VERSION = "5.0.2"  # the release the adapter is written against (releases.toml)
#: The kernel's path inside a release's tree, and the helper file it imports as ``tle``.
KERNEL = os.path.join("flag_gems", "fused", "rotary_embedding.py")
TLE = os.path.join("flag_gems", "utils", "triton_lang_extension.py")


def release_root(version: str = VERSION) -> str:
    """The folder of ``version``'s files, read out of its wheel (downloaded once, its hash
    checked)."""
    return releases.root("flag_gems", version)


@contextlib.contextmanager
def _stand_ins(root: str):
    """``flag_gems``, ``flag_gems.runtime``, ``flag_gems.utils`` (and its ``libentry``,
    ``triton_lang_helper``, ``triton_lang_extension``) in sys.modules while the body runs (the
    module docstring); whatever was there before is put back."""
    runtime = types.ModuleType("flag_gems.runtime")
    runtime.torch_device_fn = types.SimpleNamespace(device=lambda device: contextlib.nullcontext())
    utils = package("flag_gems.utils")
    utils.libentry = lambda: lambda kernel: kernel
    helper = types.ModuleType("flag_gems.utils.triton_lang_helper")
    helper.use_tl_extra = lambda function: function
    stand_ins = {
        "flag_gems": package("flag_gems"),
        "flag_gems.runtime": runtime,
        "flag_gems.utils": utils,
        "flag_gems.utils.triton_lang_helper": helper,
    }
    with in_sys_modules(stand_ins):
        name = "flag_gems.utils.triton_lang_extension"
        tle = module_from(os.path.join(root, TLE), name)  # the release's own, over the stand-ins
        utils.triton_lang_extension = tle
        with in_sys_modules({name: tle}):
            yield


def load(root: str | None = None):
    """FlagGems' rotary_embedding module (from the release unpacked in ``root``, or the pinned
    release) under Triton's interpreter."""
    from mlarope import triton as mt

    mt.interpreter()  # before the file imports triton
    root = root or release_root()
    with _stand_ins(root):
        return module_from(os.path.join(root, KERNEL), "flag_gems_fused_rotary_embedding")


class FlagGemsRotary(KvSplitByRope):
    """FlagGems' apply_rotary_pos_emb on rope and kv_split calls; see the module docstring."""

    heads_dim = -2  # [S, B, H, D] and [T, H, D]

    def __init__(self, root: str | None = None):
        import torch

        from mlarope import triton as mt

        self.root = root or release_root()
        self.gems = load(self.root)
        self.torch, self.mt = torch, mt
        # True negates sin on every call: a wrong mapping, for the test that shows the fuzz fails.
        self.flip_sin = False
        # False runs in-place calls through the in-place kernel, which races (module docstring).
        self.decline_in_place = True

    def kernels(self):
        """The Triton kernels the adapter launches (FlagGems does not autotune them)."""
        return [
            self.gems.apply_rotary_pos_emb_kernel,
            self.gems.apply_rotary_pos_emb_inplace_kernel,
        ]

    def environment(self) -> dict:
        version = releases.version_of(self.root)
        env = {"flag-gems": version, "kernel": KERNEL.replace(os.sep, "/")}
        if version in releases.versions("flag_gems"):
            env["flag-gems wheel sha256"] = releases.sha256("flag_gems", version)
        return env

    # -- what maps

    def supports(self, call):
        return self._decline(call) or (True, "")

    def _decline(self, call):
        if call.in_layout != call.out_layout:
            return False, "FlagGems writes pairs where it reads them: half or interleaved only"
        if call.in_place and self.decline_in_place:
            # Each lane stores the element another lane loads as its partner (module docstring).
            return False, "FlagGems' in-place kernel races: a lane stores a partner another loads"
        rows, why = freq_rows(call)
        if rows is None:
            return False, why
        d = call.emb_dim
        cos2d = call.cos.reshape(call.cos.shape[0], d)[rows.reshape(-1)]
        sin2d = call.sin.reshape(call.sin.shape[0], d)[rows.reshape(-1)]
        if not one_angle_per_pair(cos2d, sin2d, call.table_layout):
            return False, "the table's two entries of a pair differ (FlagGems reads one per pair)"
        return None

    # -- the mapping

    def _tables(self, call, backward: bool):
        """FlagGems' cos and sin caches, [R, emb_dim / 2] (see the module docstring)."""
        h = call.emb_dim // 2
        negate = (call.inverse != backward) != self.flip_sin
        tables = []
        for table, sign in ((call.cos, False), (call.sin, negate)):
            full = self.mt.torch_view(table.reshape(table.shape[0], 2 * h), call.table_dtype)
            half = full[:, :h] if call.table_layout == "half" else full[:, 0::2]
            if call.table_layout == "half" and not sign:  # the table itself, as a model's cache
                tables.append(half)
                continue
            cache = self.mt.scratch(half.shape, half.dtype, "flag_gems table")
            cache.copy_(half)
            if sign:
                cache.neg_()
            tables.append(cache)
        return tables

    def _positions(self, call, rows: np.ndarray):
        dtype = np.int64
        if call.position_ids is not None and call.position_ids.dtype == np.int32:
            dtype = np.int32
        return self.torch.from_numpy(np.ascontiguousarray(rows, dtype=dtype))

    @staticmethod
    def _flattens(x) -> bool:
        """Whether FlagGems' ``x.view(-1, H, D)`` works on x."""
        try:
            x.view(-1, x.shape[-2], x.shape[-1])
        except RuntimeError:
            return False
        return True

    def _launch(self, call, x, into, rows, tables, role: str) -> None:
        """FlagGems on x ([S, B, H, d] or [T, H, d]) as its ``q`` or ``k`` (``role``), reading
        table rows ``rows`` ([S, B] or [T]); the result lands in ``into`` (x itself: in place)."""
        torch = self.torch
        cos, sin = tables
        interleaved = call.in_layout == "interleaved"
        inplace = into is x

        def run(q, positions):
            other = torch.zeros((*q.shape[:-2], 1, q.shape[-1]), dtype=q.dtype)
            qk = (q, other) if role == "q" else (other, q)
            got = self.gems.apply_rotary_pos_emb(
                *qk, cos, sin, positions, rotary_interleaved=interleaved, inplace=inplace
            )
            return got[0 if role == "q" else 1]

        if call.layout == "thd":
            if (rows == np.arange(len(rows))).all():  # one sequence from row 0: [1, T, H, d]
                y = run(x[None], None)[0]
            else:
                y = run(x, self._positions(call, rows))
            if not inplace:
                into.copy_(y)
            return
        S, B = rows.shape
        bshd = x.permute(1, 0, 2, 3)
        if (rows == np.arange(S)[:, None]).all() and self._flattens(bshd):
            y = run(bshd, None).permute(1, 0, 2, 3)
        elif self._flattens(x):
            y = run(x, self._positions(call, rows))
        else:  # one batch entry at a time
            for b in range(B):
                y = run(x[:, b], self._positions(call, rows[:, b]))
                if not inplace:
                    into[:, b].copy_(y)
            return
        if not inplace:
            into.copy_(y)

    def rope(self, call):
        t, out, n, dtype = call.inputs[0], call.outputs[0], call.nope_dim, call.dtype
        if out.size == 0:
            return
        rows, _ = freq_rows(call)
        tables = self._tables(call, call.op == "rope_backward")
        into = self.mt.torch_view(out[..., n:], dtype)
        if call.in_place:
            self._launch(call, into, into, rows, tables, "q")
            return
        out[..., :n] = t[..., :n]
        self._launch(call, self.mt.torch_view(t[..., n:], dtype), into, rows, tables, "q")

    def _pe_view(self, call, a: np.ndarray):
        return self.mt.torch_view(a, call.dtype)

    def _rotate_pe(self, call, pe, backward: bool):
        """FlagGems' k path on a one-head tensor ([S, B, 1, d] or [T, 1, d]); a new tensor."""
        rows, _ = freq_rows(call)
        into = self.torch.zeros(pe.shape, dtype=pe.dtype)
        self._launch(call, pe, into, rows, self._tables(call, backward), "k")
        return into
