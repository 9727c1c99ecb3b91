"""mlarope: the reference MLA RoPE ops (SPEC.md) and the harness that checks anyone's kernels.

The C++ library is the one implementation; this package adapts it.

Reference ops (NumPy arrays, or anything ``numpy.asarray`` views without a copy, such as
PyTorch CPU tensors through ``.numpy()``; bf16 as uint16 arrays of raw bits with
``dtype="bf16"``)::

    out, status = mlarope.rope(t, cos, sin, nope_dim=0, emb_dim=64)

Fuzzing a kernel written in Python: a backend is any object with some of the methods
``rope(call)`` (rope and rope_backward, ``call.op``), ``kv_split(call)`` and
``kv_split_backward(call)``, and optionally ``supports(call)`` returning a bool or
``(False, "reason")``. ``call`` has the fields of SPEC.md §4 (``call.inputs``, ``call.outputs``:
NumPy views of the harness's strided buffers, inputs read-only; ``call.cos``, ``call.sin``,
``call.nope_dim``, ``call.in_layout``, ``call.inverse``, ``call.layout``, ``call.cu_seqlens``,
...). The method writes ``call.outputs`` (in place: ``call.inputs[0] is call.outputs[0]``)::

    result = mlarope.fuzz(MyBackend(), seconds=60)   # raises mlarope.FuzzFailure on a failure

Calls a backend declines or lacks are counted as not supported (``result["summary"]``),
never as failures; a Python exception in a method is a failing case with its traceback.
"""
from __future__ import annotations

import numpy as _np

from . import _mlarope
from ._mlarope import Error

__all__ = ["Error", "FuzzFailure", "rope", "rope_backward", "kv_split", "kv_split_backward",
           "fuzz", "load_case"]


class FuzzFailure(AssertionError):
    """A fuzz run found failing cases; ``.result`` holds what ``fuzz`` would have returned."""

    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


def _common(cos, sin, in_layout, out_layout, table_layout, inverse, layout, freq_mode,
            cp_size, cp_rank, max_seqlen, cu_seqlens, position_ids, seq_offsets, dtype):
    c = _mlarope._Common()
    c.cos, c.sin = _np.asarray(cos), _np.asarray(sin)
    c.in_layout, c.out_layout, c.table_layout = in_layout, out_layout, table_layout
    c.inverse, c.layout, c.freq_mode = bool(inverse), layout, freq_mode
    c.cp_size, c.cp_rank, c.max_seqlen = int(cp_size), int(cp_rank), int(max_seqlen)
    c.cu_seqlens = None if cu_seqlens is None else _np.asarray(cu_seqlens)
    c.position_ids = None if position_ids is None else _np.asarray(position_ids)
    c.seq_offsets = None if seq_offsets is None else _np.asarray(seq_offsets)
    c.dtype = dtype or ""
    return c


def rope(t, cos, sin, *, nope_dim: int, emb_dim: int, in_layout: str = "interleaved",
         out_layout: str = "half", table_layout: str = "half", inverse: bool = False,
         layout: str = "sbhd", freq_mode: str = "per_sequence", cp_size: int = 1, cp_rank: int = 0,
         max_seqlen: int = 0, cu_seqlens=None, position_ids=None, seq_offsets=None,
         dtype: str | None = None):
    """SPEC.md's rope on the reference: ``(out, status)``; t is SBHD [S, B, H, D] or THD [T, H, D]."""
    c = _common(cos, sin, in_layout, out_layout, table_layout, inverse, layout, freq_mode,
                cp_size, cp_rank, max_seqlen, cu_seqlens, position_ids, seq_offsets, dtype)
    out, status = _mlarope._rope(False, _np.asarray(t), nope_dim, emb_dim, c)
    return out, status


def rope_backward(grad_out, cos, sin, *, nope_dim: int, emb_dim: int, **kwargs):
    """SPEC.md's rope_backward (the adjoint) on the reference: ``(grad_t, status)``."""
    c = _common(cos, sin, *_options(kwargs))
    return tuple(_mlarope._rope(True, _np.asarray(grad_out), nope_dim, emb_dim, c))


def kv_split(kv, k_pe, cos, sin, *, k_dim: int, v_dim: int, emb_dim: int, **kwargs):
    """SPEC.md's kv_split on the reference: ``(key, value, status)``."""
    c = _common(cos, sin, *_options(kwargs))
    return tuple(_mlarope._kv(False, _np.asarray(kv), _np.asarray(k_pe), k_dim, v_dim, emb_dim, c))


def kv_split_backward(grad_key, grad_value, cos, sin, *, k_dim: int, v_dim: int, emb_dim: int, **kwargs):
    """SPEC.md's kv_split_backward on the reference: ``(grad_kv, grad_k_pe, status)``."""
    c = _common(cos, sin, *_options(kwargs))
    return tuple(_mlarope._kv(True, _np.asarray(grad_key), _np.asarray(grad_value), k_dim, v_dim, emb_dim, c))


_OPTION_DEFAULTS = dict(in_layout="interleaved", out_layout="half", table_layout="half", inverse=False,
                        layout="sbhd", freq_mode="per_sequence", cp_size=1, cp_rank=0, max_seqlen=0,
                        cu_seqlens=None, position_ids=None, seq_offsets=None, dtype=None)


def _options(kwargs: dict) -> list:
    unknown = set(kwargs) - set(_OPTION_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown keyword arguments: {sorted(unknown)}")
    return [kwargs.get(k, v) for k, v in _OPTION_DEFAULTS.items()]


def fuzz(backend, *, seconds: float = 0.0, cases: int = 0, seed: int = 1, ops=None,
         out: str = "fuzz-out", size: int = 100, quiet: bool = False) -> dict:
    """Random cases through every check against ``backend`` (see the module docstring).

    Stops after ``seconds`` or ``cases`` (60 s when neither is given). Writes ``out/fuzz.json``
    and each failing case under ``out/failures/``. Returns a dict (cases, failing_cases,
    summary, failures); raises FuzzFailure naming the first failing case's directory and how
    to load it when any case fails.
    """
    result = _mlarope._fuzz(backend, float(seconds), int(cases), int(seed), list(ops or []), str(out),
                            int(size), bool(quiet))
    if result["failing_cases"]:
        first = result["failures"][0]
        checks = "; ".join(f"{check}: {message}" for check, message in first["checks"])
        raise FuzzFailure(
            f"{result['failing_cases']} of {result['cases']} cases failed; first: {first['description']}\n"
            f"  {checks}\n  repro: {first['dir']} (mlarope.load_case({first['dir']!r}) loads it)", result)
    return result


def load_case(path: str):
    """A case directory (SPEC.md §7) as ``(config, arrays)``: case.json as a dict, inputs by name."""
    return _mlarope._load_case(str(path))
