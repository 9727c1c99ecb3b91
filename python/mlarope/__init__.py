# SPDX-License-Identifier: Apache-2.0
"""mlarope: the reference MLA RoPE ops (docs/semantics.md) and the harness that checks anyone's
kernels.

The C++ library is the one implementation; this package adapts it.

Reference ops on NumPy arrays or DLPack tensors (PyTorch CPU tensors, bf16 included), read
in place without a copy; NumPy results, bf16 as uint16 arrays of raw bits (pass such arrays
with ``dtype="bf16"``, tables with ``table_dtype="bf16"``)::

    out, status = mlarope.rope(t, cos, sin, nope_dim=0, emb_dim=64)
    cos, sin = mlarope.yarn_tables(4096, 64, scaling_factor=40.0, mscale=1.0, mscale_all_dim=1.0)

Fuzzing a kernel written in Python: a backend is any object with some of the methods
``rope(call)`` (rope and rope_backward, ``call.op``), ``kv_split(call)`` and
``kv_split_backward(call)``, and optionally ``supports(call)`` returning a bool or
``(False, "reason")``. ``call`` has the fields of docs/semantics.md §4 (``call.inputs``,
``call.outputs``: NumPy views of the harness's strided buffers, inputs read-only; ``call.cos``,
``call.sin``, ``call.nope_dim``, ``call.in_layout``, ``call.inverse``, ``call.layout``,
``call.cu_seqlens``, ...). The method writes ``call.outputs`` (in place:
``call.inputs[0] is call.outputs[0]``)::

    result = mlarope.fuzz(MyBackend(), seconds=60)   # raises mlarope.FuzzFailure on a failure

Calls a backend declines or lacks are counted as not supported (``result["summary"]``),
never as failures; a Python exception in a method is a failing case with its traceback.
A backend with ``variants()`` (names) and ``select_variant(name)`` runs every case once per
variant, each counted and named in the summary and ``fuzz.json``; ``environment()`` (a dict)
is recorded there too. Triton kernels without a GPU: ``mlarope.triton``.
"""

from __future__ import annotations

import numpy as _np

from . import _mlarope
from ._mlarope import Error

__all__ = [
    "Error",
    "FuzzFailure",
    "rope",
    "rope_backward",
    "kv_split",
    "kv_split_backward",
    "yarn_tables",
    "fuzz",
    "check",
    "load_case",
]


class FuzzFailure(AssertionError):
    """A fuzz run found failing cases; ``.result`` holds what ``fuzz`` would have returned."""

    def __init__(self, message: str, result: dict):
        super().__init__(message)
        self.result = result


def _host(x, name: str):
    """(NumPy array, is_bf16) of ``x`` without a copy: a NumPy array as it is; a DLPack tensor
    (``__dlpack__``: PyTorch CPU tensors, any framework's host tensors) through its capsule,
    bf16 as uint16 bits; anything else through ``numpy.asarray``."""
    if x is None or isinstance(x, _np.ndarray):
        return x, False
    if hasattr(x, "__dlpack__"):
        return tuple(_mlarope._from_dlpack(x.__dlpack__(), name))
    return _np.asarray(x), False


def _common(
    cos,
    sin,
    in_layout,
    out_layout,
    table_layout,
    inverse,
    layout,
    freq_mode,
    cp_size,
    cp_rank,
    max_seqlen,
    cu_seqlens,
    position_ids,
    seq_offsets,
    dtype,
    table_dtype,
):
    c = _mlarope._Common()
    (c.cos, cos_bf16), (c.sin, sin_bf16) = _host(cos, "cos"), _host(sin, "sin")
    c.in_layout, c.out_layout, c.table_layout = in_layout, out_layout, table_layout
    c.inverse, c.layout, c.freq_mode = bool(inverse), layout, freq_mode
    c.cp_size, c.cp_rank, c.max_seqlen = int(cp_size), int(cp_rank), int(max_seqlen)
    c.cu_seqlens = _host(cu_seqlens, "cu_seqlens")[0]
    c.position_ids = _host(position_ids, "position_ids")[0]
    c.seq_offsets = _host(seq_offsets, "seq_offsets")[0]
    c.dtype = dtype or ""
    c.table_dtype = table_dtype or ("bf16" if cos_bf16 and sin_bf16 else "")
    return c


def _activations(*xs):
    """The arrays of the op's tensor arguments, and "bf16" when they came as bf16 tensors."""
    hosts = [_host(x, name) for name, x in xs]
    return [a for a, _ in hosts], ("bf16" if all(b for _, b in hosts) else None)


def rope(
    t,
    cos,
    sin,
    *,
    nope_dim: int,
    emb_dim: int,
    in_layout: str = "interleaved",
    out_layout: str = "half",
    table_layout: str = "half",
    inverse: bool = False,
    layout: str = "sbhd",
    freq_mode: str = "per_sequence",
    cp_size: int = 1,
    cp_rank: int = 0,
    max_seqlen: int = 0,
    cu_seqlens=None,
    position_ids=None,
    seq_offsets=None,
    dtype: str | None = None,
    table_dtype: str | None = None,
):
    """rope on the reference: ``(out, status)``; t is SBHD [S, B, H, D] or THD [T, H, D].

    Tensors are NumPy arrays or DLPack tensors (PyTorch CPU tensors), read without a copy; the
    result is a new NumPy array (``torch.from_numpy(out)``; bf16 as uint16 bits).
    """
    (x,), bf16 = _activations(("t", t))
    c = _common(
        cos,
        sin,
        in_layout,
        out_layout,
        table_layout,
        inverse,
        layout,
        freq_mode,
        cp_size,
        cp_rank,
        max_seqlen,
        cu_seqlens,
        position_ids,
        seq_offsets,
        dtype or bf16,
        table_dtype,
    )
    out, status = _mlarope._rope(False, x, nope_dim, emb_dim, c)
    return out, status


def rope_backward(grad_out, cos, sin, *, nope_dim: int, emb_dim: int, **kwargs):
    """rope_backward (the adjoint) on the reference: ``(grad_t, status)``."""
    (x,), bf16 = _activations(("grad_out", grad_out))
    c = _common(cos, sin, *_options(kwargs, bf16))
    return tuple(_mlarope._rope(True, x, nope_dim, emb_dim, c))


def kv_split(kv, k_pe, cos, sin, *, k_dim: int, v_dim: int, emb_dim: int, **kwargs):
    """kv_split on the reference: ``(key, value, status)``."""
    (x0, x1), bf16 = _activations(("kv", kv), ("k_pe", k_pe))
    c = _common(cos, sin, *_options(kwargs, bf16))
    return tuple(_mlarope._kv(False, x0, x1, k_dim, v_dim, emb_dim, c))


def kv_split_backward(
    grad_key, grad_value, cos, sin, *, k_dim: int, v_dim: int, emb_dim: int, **kwargs
):
    """kv_split_backward on the reference: ``(grad_kv, grad_k_pe, status)``."""
    (x0, x1), bf16 = _activations(("grad_key", grad_key), ("grad_value", grad_value))
    c = _common(cos, sin, *_options(kwargs, bf16))
    return tuple(_mlarope._kv(True, x0, x1, k_dim, v_dim, emb_dim, c))


def yarn_tables(
    rows: int,
    emb_dim: int,
    *,
    rotary_base: float = 10000.0,
    scaling_factor: float = 1.0,
    original_max_position_embeddings: float = 4096.0,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    mscale: float = 1.0,
    mscale_all_dim: float = 0.0,
    offset: int = 0,
    table_layout: str = "half",
    dtype: str = "f32",
    concentration: float | None = None,
):
    """yarn_tables on the reference: ``(cos, sin)``, each ``[rows, emb_dim]``.

    Rows are positions ``offset .. offset + rows - 1``; the parameters are Megatron's
    ``YarnRotaryEmbedding``'s (correction range rounded to integers, its default), and
    ``concentration`` overrides its factor ``mscale(s, mscale) / mscale(s, mscale_all_dim)``.
    Computed in double and rounded once to ``dtype`` ("f32", "f16", or "bf16" as uint16 bits).
    """
    p = _mlarope._YarnParams()
    p.rotary_base, p.scaling_factor = float(rotary_base), float(scaling_factor)
    p.original_max_position_embeddings = float(original_max_position_embeddings)
    p.beta_fast, p.beta_slow = float(beta_fast), float(beta_slow)
    p.mscale, p.mscale_all_dim = float(mscale), float(mscale_all_dim)
    p.concentration_override = float("nan") if concentration is None else float(concentration)
    return tuple(_mlarope._yarn(int(rows), int(emb_dim), p, int(offset), table_layout, dtype))


_OPTION_DEFAULTS = dict(
    in_layout="interleaved",
    out_layout="half",
    table_layout="half",
    inverse=False,
    layout="sbhd",
    freq_mode="per_sequence",
    cp_size=1,
    cp_rank=0,
    max_seqlen=0,
    cu_seqlens=None,
    position_ids=None,
    seq_offsets=None,
    dtype=None,
    table_dtype=None,
)


def _options(kwargs: dict, bf16) -> list:
    unknown = set(kwargs) - set(_OPTION_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown keyword arguments: {sorted(unknown)}")
    values = dict(_OPTION_DEFAULTS, **kwargs)
    values["dtype"] = values["dtype"] or bf16
    return list(values.values())


def fuzz(
    backend,
    *,
    seconds: float = 0.0,
    cases: int = 0,
    seed: int = 1,
    ops=None,
    dtypes=None,
    table_dtypes=None,
    in_place: bool = True,
    layouts: str = "",
    position_ids: bool = True,
    seq_offsets: bool = True,
    packed: bool = True,
    power_of_two_dims: bool = False,
    out: str = "fuzz-out",
    size: int = 100,
    quiet: bool = False,
    isolate: bool = True,
    call_timeout: float = 0.0,
    steer: bool = True,
) -> dict:
    """Random cases through every check against ``backend`` (see the module docstring).

    The backend runs in a worker process (``isolate=True``, forked from this one): a method that
    crashes the process (a segfault through ctypes, an abort) or does not return within
    ``call_timeout`` seconds (0: 30 s + 1000 x the reference's time on the case) is a failing
    case, "crash" or "timeout", with the worker's stderr (faulthandler's Python stack) in its
    directory, and the fuzz goes on with a new worker. ``isolate=False`` runs it in this
    process: faster, and a crash ends the interpreter. ``steer`` (default) first offers drawn
    cases to ``supports`` and draws 7 cases in 8 from what it took (docs/check-your-kernel.md);
    ``steer=False`` draws evenly.

    Stops after ``seconds`` or ``cases`` (60 s when neither is given). ``ops``, ``dtypes``
    (activations), ``table_dtypes`` (each of "f32", "bf16", "f16"), ``in_place=False`` and
    ``layouts`` ("IN/OUT/TABLE", each "half", "interleaved" or "*"), ``position_ids=False``,
    ``seq_offsets=False``, ``packed=False`` (no packed frequency mode) and
    ``power_of_two_dims=True`` (emb_dim / 2, k_dim and v_dim powers of two, as Triton's
    ``tl.arange`` needs) narrow what is drawn to what
    a backend provides, so that more of the budget runs; what is still
    declined is counted as not supported. Writes ``out/fuzz.json``
    and each failing case under ``out/failures/``. Returns a dict (cases, failing_cases,
    summary, failures); raises FuzzFailure naming the first failing case's directory and how
    to load it when any case fails.
    """
    result = _mlarope._fuzz(
        backend,
        float(seconds),
        int(cases),
        int(seed),
        list(ops or []),
        list(dtypes or []),
        list(table_dtypes or []),
        bool(in_place),
        str(layouts),
        bool(position_ids),
        bool(seq_offsets),
        bool(packed),
        bool(power_of_two_dims),
        str(out),
        int(size),
        bool(quiet),
        bool(isolate),
        float(call_timeout),
        bool(steer),
    )
    if result["failing_cases"]:
        first = result["failures"][0]
        checks = "; ".join(f"{check}: {message}" for check, message in first["checks"])
        raise FuzzFailure(
            f"{result['failing_cases']} of {result['cases']} cases failed; "
            f"first: {first['description']}\n"
            f"  {checks}\n  repro: {first['dir']} (mlarope.load_case({first['dir']!r}) loads it)",
            result,
        )
    return result


def check(backend, case_dir: str, *, isolate: bool = True, call_timeout: float = 0.0) -> dict:
    """Every check (docs/architecture.md) on one case directory (a fuzz repro replays with its
    checks.json).

    Returns ``{"ok": bool, "unsupported": reason or None, "results": [(check, outcome, line)],
    "status": device status word}``; ``ok`` is False when a check failed. In a worker process
    (``isolate``, as ``fuzz``), a crash or a hang is the one result ("crash" or "timeout",
    "fail", line) and the dict has the worker's ``stderr``.
    """
    return _mlarope._check(backend, str(case_dir), bool(isolate), float(call_timeout))


def load_case(path: str):
    """A case directory (docs/semantics.md §7) as ``(config, arrays)``: case.json as a dict, inputs
    by name."""
    return _mlarope._load_case(str(path))
