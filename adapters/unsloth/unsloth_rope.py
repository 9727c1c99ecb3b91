# SPDX-License-Identifier: Apache-2.0
"""Unsloth's Triton RoPE (``unsloth/kernels/rope_embedding.py``: ``fast_rope_embedding`` and
the backward of its autograd Functions, one kernel, ``_rope_embedding_QK``) as an mlarope
backend, for ``mlarope.triton.TritonBackend(UnslothRope())``.

``fast_rope_embedding(Q, K, cos, sin, rope_embedding_indices=None)`` rotates every element of
every head of ``Q`` and ``K`` ([B, H, S, D] at any strides; ``K`` may have fewer heads) as
(i, i + D/2) pairs, with ``cos``/``sin`` of shape [R, D] in the ``cat(freqs, freqs)`` layout
(squeezed: [1, 1, R, D] works too; the kernel reads the first D/2 entries of a row, the row at
the table's row stride, the entries at stride 1). Token ``s`` of batch entry ``b`` reads row
``rope_embedding_indices[b, s]`` (Hugging Face's ``position_ids``, [B, S]), or row ``s``
without them. Without indices it runs ``Fast_RoPE_Embedding_QK_Positions`` (in place where
``X.transpose(1, 2)`` is contiguous, else into a fresh [B, S, H, D] buffer; ``X`` cast to the
table's dtype), with them ``Fast_RoPE_Embedding_QK`` (in place where ``X`` is contiguous, else
into ``torch.empty_like``; ``X`` kept in its dtype, promoted by the products). Both backwards
launch the same kernel with ``BACKWARD_PASS`` (the sine negated), out of place into fresh
tensors, at any strides of the gradient, stride 0 included. The adapter maps each call the way
Unsloth's Llama attention calls it (``Q.view(B, S, H, D).transpose(1, 2)``, the cached
``cos``/``sin`` and the batch's ``position_ids``), and declines what has no counterpart:

- the rope slice only: the view ``t[..., nope_dim:]`` is Unsloth's ``Q``, a head of
  ``emb_dim`` elements (the kernel rotates the whole head: Unsloth has no partial rotation),
  given at its own strides; the adapter copies the nope part itself. SBHD is permuted to
  [B, H, S, D] by a view; THD is one batch entry of T tokens. Rope calls go through both: the
  last ``k`` of the ``H`` heads are Unsloth's ``K`` and the others its ``Q``, so that one
  launch rotates a grouped-query pair of different head counts, as Llama's attention gives it
  (``k`` the largest divisor of ``H`` at most ``H / 3``: ``mlarope.rope_only``; with one head,
  ``K`` is a one-head zero tensor; ``grouped_query=False`` gives every head to ``Q``).
  ``kv_split`` goes through the ``K`` heads (``k_pe``, one head, as DeepSeek's) beside a
  one-head zero ``Q`` (Unsloth always takes both);
- positions: where every batch entry reads rows 0 .. S-1 (no context parallelism, sequence
  offsets, packed mode or position ids; THD of one sequence from row 0), no indices are given:
  the kernel's own ``row % seq_len``. Otherwise the row of each token at its ``freq_row``
  (docs/semantics.md §2) is Unsloth's ``rope_embedding_indices``, [B, S] for SBHD and [1, T]
  for THD, int64 as Hugging Face's ``position_ids`` (int32 where the call's position ids are
  int32, as TRL's rotary indices), over the call's whole table;
- tables: the call's table itself, as a model's cached cos/sin, where it is an f32 table in the
  half layout and the sine is not negated; otherwise a NaN-guarded scratch [R, emb_dim], f32,
  the rows in the half layout (an interleaved table's even entries, twice), the sine negated
  for an ``inverse`` call. Unsloth's Llama casts its cache to ``Q``'s dtype, so that a bf16
  model computes in bf16 (two bf16 roundings per output); the adapter gives f32 tables, an
  exact widening of an f16 or bf16 table, as a model that keeps its cache in f32, so that f16
  and bf16 activations are computed in f32 like every backend of this harness;
  ``table_as_given=True`` passes an f16 or bf16 table in its own dtype;
- pair layouts: (half -> half) only; a table in either layout whose two entries per pair are
  equal at every row the call reads (Unsloth reads one entry per pair);
- out of place: the input view itself, where Unsloth writes a fresh tensor (its in-place test
  fails on the view), its result copied into the harness's output; where Unsloth would rotate
  the input in place, the input is copied into the output first and Unsloth rotates that.
  In place: Unsloth on the tensor itself, its result stored back where it wrote a fresh one;
- ``inverse`` is a negated ``sin`` table; ``rope_backward`` is the ``backward`` of the
  Function the forward ran (what autograd calls), given the gradient view as it is, with the
  context its ``forward`` leaves (squeezed ``cos``/``sin``; the indices as an int32 vector);
- ``kv_split``: ``k_pe`` is Unsloth's ``K`` (one head, as DeepSeek's ``k_pe``; a copy where
  Unsloth would rotate it in place), rotated and expanded over the heads; its backward sums the
  heads' rope gradients in f32 (what autograd of that expand computes) and gives the sum to the
  backward;
- declined: interleaved pairs, tables whose two entries of a pair differ, rows whose
  ``freq_row`` lies outside the table and invalid ``cu_seqlens`` (Unsloth has no status word:
  the harness expects such rows to pass through), THD padding rows (no sequence, no table row).

Only rope_embedding.py of the wheel runs, loaded by path (``adapters/releases.py`` unpacks it
and the files it imports from, pinned by hash in releases.toml): the package's ``__init__``
needs a GPU, unsloth_zoo and transformers. What it imports from the package is installed under
``unsloth.*`` in ``sys.modules`` for the time of the load (whatever was there is put back):

- ``unsloth.device_type``: ``DEVICE_TYPE_TORCH = "cuda"`` and ``DEVICE_COUNT = 1``: one
  device, as on one GPU (device_type.py reports "cuda" for its CPU test mode too), so the
  module's split-model stream drain (``_sync_if_split``) does nothing;
- ``unsloth.kernels.utils``: ``next_power_of_2`` is ``triton.next_power_of_2`` and
  ``torch_gpu_device`` a context that does nothing, as utils.py defines them with one device;
  ``torch_device_stream`` is ``torch.cuda.current_stream`` (used only with several devices);
  ``long_indexing``: the release's own ``kernels/indexing.py``, loaded by path (utils.py
  imports it from there; it imports nothing);
- ``unsloth.kernels.rms_layernorm``: ``_eager_kernel`` returns the kernel (as the file's own
  ``lambda kernel: kernel``); ``_TRACEABLE = _BF16_TRACEABLE = False``: the ``torch.compile``
  ops (``torch.library.triton_op``, torch >= 2.6, a CUDA device) are not registered, and
  ``fast_rope_embedding`` outside a compiled graph runs the eager Functions whatever their
  value; ``_traced_kernel`` and ``_tag_compile_cache`` are then never called (stand-ins that
  raise).

``load`` checks that the release's utils.py and rms_layernorm.py still define what these
stand-ins restate. The file's ``torch`` is a proxy (``_Torch``; ``sys.modules["torch"]`` for the
time of the load, the module's global after), and the rest of torch is untouched:
``torch.compiler`` (torch >= 2.1) is ``disable`` returning the function and ``is_compiling``
False where torch lacks it (an eager call); without CUDA, ``torch.cuda.current_device()`` is 0,
which the launcher reads for a tensor without a device index (``_eviction_hints_ok``: on a CPU
tensor it then returns True, as on a GPU of sm_70 or newer, so ``EVICT_INDICES`` is what a GPU
compiles; the interpreter ignores the hint).
"""

from __future__ import annotations

import contextlib
import os
import sys
import types

import numpy as np

from mlarope.rope_only import KvSplitByRope, grouped_query_k_heads

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(HERE))  # adapters/: releases.py
sys.path.append(os.path.join(os.path.dirname(HERE), "liger"))  # liger_rope's position helpers
import releases  # noqa: E402
from liger_rope import freq_rows, one_angle_per_pair  # noqa: E402
from stand_ins import in_sys_modules, module_from, package  # noqa: E402

VERSION = "2026.10.9"  # the release the adapter is written against (releases.toml)
#: The kernel's path inside a release's tree, and the files its stand-ins are checked against.
KERNEL = os.path.join("unsloth", "kernels", "rope_embedding.py")
INDEXING = os.path.join("unsloth", "kernels", "indexing.py")
UTILS = os.path.join("unsloth", "kernels", "utils.py")
RMS_LAYERNORM = os.path.join("unsloth", "kernels", "rms_layernorm.py")
#: Lines of the release's files that the stand-ins restate (module docstring).
RESTATED = {
    UTILS: ("next_power_of_2 = triton.next_power_of_2", "return nullcontext()"),
    RMS_LAYERNORM: ("_eager_kernel = lambda kernel: kernel",),
}


def release_root(version: str = VERSION) -> str:
    """The folder of ``version``'s files, read out of its wheel (downloaded once, its hash
    checked)."""
    return releases.root("unsloth", version)


class _Torch(types.ModuleType):
    """torch as rope_embedding.py sees it on torch 1.13 without CUDA (module docstring)."""

    def __init__(self, torch):
        super().__init__("torch")
        self._torch = torch
        if not hasattr(torch, "compiler"):
            self.compiler = types.SimpleNamespace(disable=lambda fn: fn, is_compiling=lambda: False)
        if not torch.cuda.is_available():
            self.cuda = types.SimpleNamespace(
                current_device=lambda: 0, current_stream=torch.cuda.current_stream
            )

    def __getattr__(self, name):
        return getattr(self._torch, name)


def _never_called(name: str):
    def stand_in(*args, **kwargs):
        raise RuntimeError(f"{name}: a compiled-graph helper, not used by the eager path")

    return stand_in


def _check_restated(root: str) -> None:
    if not releases.has(root, INDEXING):
        raise ImportError(f"{root}: no {INDEXING} (a release older than the adapter knows)")
    for path, lines in RESTATED.items():
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        for line in lines:
            if line not in text:
                raise ImportError(
                    f"{path} of {releases.version_of(root)} no longer has {line!r}: the "
                    "stand-in that restates it (unsloth_rope.py) needs a look"
                )


@contextlib.contextmanager
def _stand_ins(root: str, torch_proxy):
    """``unsloth``, ``unsloth.kernels`` and the stand-ins of the module docstring in
    sys.modules, and ``torch`` the proxy, while the body runs; whatever was there is put
    back."""
    import torch
    import triton

    device_type = types.ModuleType("unsloth.device_type")
    device_type.DEVICE_TYPE = device_type.DEVICE_TYPE_TORCH = "cuda"
    device_type.DEVICE_COUNT = 1
    indexing = module_from(os.path.join(root, INDEXING), "unsloth_kernels_indexing")
    utils = types.ModuleType("unsloth.kernels.utils")
    utils.long_indexing = indexing.long_indexing
    utils.next_power_of_2 = triton.next_power_of_2
    utils.torch_gpu_device = lambda device: contextlib.nullcontext()
    utils.torch_device_stream = torch.cuda.current_stream
    norm = types.ModuleType("unsloth.kernels.rms_layernorm")
    norm._TRACEABLE = norm._BF16_TRACEABLE = False
    norm._eager_kernel = lambda kernel: kernel
    norm._traced_kernel = _never_called("_traced_kernel")
    norm._tag_compile_cache = _never_called("_tag_compile_cache")
    stand_ins = {
        "torch": torch_proxy,
        "unsloth": package("unsloth"),
        "unsloth.device_type": device_type,
        "unsloth.kernels": package("unsloth.kernels"),
        "unsloth.kernels.utils": utils,
        "unsloth.kernels.rms_layernorm": norm,
    }
    with in_sys_modules(stand_ins):
        yield


def load(root: str | None = None):
    """Unsloth's rope_embedding module (from the release unpacked in ``root``, or the pinned
    release) under Triton's interpreter."""
    from mlarope import triton as mt

    mt.interpreter()  # before the file imports triton
    import torch

    root = root or release_root()
    _check_restated(root)
    proxy = _Torch(torch)
    with _stand_ins(root, proxy):
        module = module_from(os.path.join(root, KERNEL), "unsloth.kernels.rope_embedding")
    module.torch = proxy
    return module


def _same_elements(x, y) -> bool:
    """Whether y is x (the strides of size-1 dimensions aside, which address nothing)."""
    strides = [(a, b) for a, b, n in zip(x.stride(), y.stride(), x.shape) if n > 1]
    return y.data_ptr() == x.data_ptr() and y.shape == x.shape and all(a == b for a, b in strides)


# ---- The backend --------------------------------------------------------------------------------


class UnslothRope(KvSplitByRope):
    """Unsloth's fast_rope_embedding (forward and backward) on rope and kv_split calls; see the
    module docstring."""

    heads_dim = 1  # Unsloth's [B, H, S, D]

    def __init__(self, root: str | None = None, table_as_given: bool = False):
        import torch

        from mlarope import triton as mt

        self.root = root or release_root()
        self.unsloth = load(self.root)
        self.torch, self.mt = torch, mt
        self.table_as_given = table_as_given
        # True negates sin on every call: a wrong mapping, for the test that shows the fuzz fails.
        self.flip_sin = False
        # True gives every batch entry the rows of entry 0: a kernel that ignores per-entry
        # position ids, for the test that shows the fuzz draws them.
        self.first_entry_rows = False
        # False gives a rope call's heads to Q alone (K a one-head zero tensor).
        self.grouped_query = True

    def kernels(self):
        """The Triton kernels the adapter launches (Unsloth does not autotune its rope)."""
        return [self.unsloth._rope_embedding_QK]

    def environment(self) -> dict:
        version = releases.version_of(self.root)
        env = {"unsloth": version, "kernel": KERNEL.replace(os.sep, "/")}
        if version in releases.versions("unsloth"):
            env["unsloth wheel sha256"] = releases.sha256("unsloth", version)
        return env

    # -- what maps

    def supports(self, call):
        return self._decline(call) or (True, "")

    def _decline(self, call):
        if (call.in_layout, call.out_layout) != ("half", "half"):
            return False, "Unsloth rotates (i, i + d/2) pairs in and out: half -> half only"
        rows, why = freq_rows(call)
        if rows is None:
            return False, why
        d = call.emb_dim
        cos2d = call.cos.reshape(call.cos.shape[0], d)[rows.reshape(-1)]
        sin2d = call.sin.reshape(call.sin.shape[0], d)[rows.reshape(-1)]
        if not one_angle_per_pair(cos2d, sin2d, call.table_layout):
            return False, "the table's two entries of a pair differ (Unsloth reads one per pair)"
        return None

    # -- the mapping

    def _kernel_view(self, call, a: np.ndarray, dtype: str):
        """A tensor over the harness array, as Unsloth's [B, H, S, D] (SBHD permuted, THD B = 1)."""
        x = self.mt.torch_view(a, dtype)
        return x.permute(1, 2, 0, 3) if call.layout == "sbhd" else x.permute(1, 0, 2)[None]

    def _indices(self, call):
        """Unsloth's rope_embedding_indices, [B, S] (None where every batch entry reads rows
        0 .. S-1: the kernel's own positions)."""
        rows, _ = freq_rows(call)
        rows = rows.T if call.layout == "sbhd" else rows[None]  # [B, S]
        if self.first_entry_rows:
            rows = np.repeat(rows[:1], rows.shape[0], axis=0)
        if (rows == np.arange(rows.shape[1])).all():
            return None
        dtype = np.int64  # Hugging Face's position_ids
        if call.position_ids is not None and call.position_ids.dtype == np.int32:
            dtype = np.int32
        return self.torch.from_numpy(np.ascontiguousarray(rows, dtype=dtype))

    def _tables(self, call):
        """Unsloth's cos and sin, [R, d] (see the module docstring)."""
        torch, d = self.torch, call.emb_dim
        as_given = {"f16": torch.float16, "bf16": torch.bfloat16}.get(call.table_dtype)
        dtype = (as_given if self.table_as_given else None) or torch.float32
        negate = call.inverse != self.flip_sin
        tables = []
        for table, sign in ((call.cos, 1.0), (call.sin, -1.0 if negate else 1.0)):
            view = self.mt.torch_view(table, call.table_dtype)
            if call.table_layout == "half" and sign == 1.0 and view.dtype == dtype:
                tables.append(view)  # the table itself, as a model's cached cos/sin
                continue
            rows = table.reshape(table.shape[0], d)
            values = self.mt.values_of(rows, call.table_dtype).astype(np.float64) * sign
            if call.table_layout == "interleaved":
                f = values[:, 0::2]
                values = np.concatenate([f, f], axis=1)
            out = self.mt.scratch(values.shape, dtype, "unsloth table")
            out.copy_(torch.from_numpy(values))
            tables.append(out)
        return tables

    @staticmethod
    def _writes_in_place(x, indices) -> bool:
        """Whether Unsloth's forward writes x itself (its Functions' tests, module docstring)."""
        return x.is_contiguous() if indices is not None else x.transpose(1, 2).is_contiguous()

    def _run(self, call, q, k, indices, backward: bool):
        """Unsloth's forward (fast_rope_embedding) or backward on q and k, [B, H, S, d]: the
        rotated (q, k), each q or k itself where Unsloth rotated it in place."""
        fn = self.unsloth
        cos, sin = self._tables(call)
        if not backward:
            return fn.fast_rope_embedding(q, k, cos, sin, indices)
        # The context the Function's forward leaves for its backward (what autograd passes).
        ctx = types.SimpleNamespace(cos=cos.squeeze(), sin=sin.squeeze())
        function = fn.Fast_RoPE_Embedding_QK_Positions
        if indices is not None:
            function = fn.Fast_RoPE_Embedding_QK
            ctx.has_indices = True
            ctx.rope_indices = indices.reshape(-1).to(dtype=self.torch.int32).contiguous()
        dq, dk, *_ = function.backward(ctx, q, k)  # and None for cos, sin (and indices)
        return dq, dk

    def _other(self, x):
        """A one-head zero tensor beside x ([B, H, S, d]): the Q or K the call has no use for."""
        B, _, S, d = x.shape
        return self.torch.zeros((B, 1, S, d), dtype=x.dtype)

    def _parts(self, x):
        """The views of x ([B, H, S, d]) that Unsloth gets as Q and K: its first H - k heads and
        its last k (module docstring), or x alone as Q."""
        H = x.shape[1]
        k = grouped_query_k_heads(H) if self.grouped_query else 0
        return [x[:, : H - k], x[:, H - k :]] if k else [x]

    def rope(self, call):
        t, out, n, dtype = call.inputs[0], call.outputs[0], call.nope_dim, call.dtype
        if out.size == 0:
            return
        backward, indices = call.op == "rope_backward", self._indices(call)
        into = self._kernel_view(call, out[..., n:], dtype)
        x = into
        if not call.in_place:
            out[..., :n] = t[..., :n]
            x = self._kernel_view(call, t[..., n:], dtype)
            if not backward and any(self._writes_in_place(p, indices) for p in self._parts(x)):
                out[..., n:] = t[..., n:]  # Unsloth rotates its input: it gets the output
                x = into
        q, k = [*self._parts(x), self._other(x)][:2]
        rotated = self._run(call, q, k, indices, backward)
        for target, y in zip(self._parts(into), rotated):
            if not _same_elements(target, y):  # else Unsloth rotated the output in place
                target.copy_(y)

    def _pe_view(self, call, a: np.ndarray):
        return self._kernel_view(call, a, call.dtype)

    def _rotate_pe(self, call, pe, backward: bool):
        """Unsloth's K heads on a one-head tensor ([B, 1, S, d]); the result, a tensor that is
        not pe's memory."""
        indices = self._indices(call)
        if not backward and self._writes_in_place(pe, indices):
            pe = pe.clone()  # k_pe is an input: Unsloth would rotate it in place
        _, y = self._run(call, self._other(pe), pe, indices, backward)
        return y
