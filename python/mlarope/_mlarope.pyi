"""Typed stub of the extension module (python/src/module.cpp); use the functions of mlarope."""

from typing import Any

import numpy as np

class Error(ValueError): ...

class _Common:
    cos: np.ndarray
    sin: np.ndarray
    in_layout: str
    out_layout: str
    table_layout: str
    inverse: bool
    layout: str
    freq_mode: str
    cp_size: int
    cp_rank: int
    max_seqlen: int
    cu_seqlens: np.ndarray | None
    position_ids: np.ndarray | None
    seq_offsets: np.ndarray | None
    dtype: str
    table_dtype: str
    def __init__(self) -> None: ...

def _rope(
    backward: bool, x: np.ndarray, nope_dim: int, emb_dim: int, c: _Common
) -> tuple[np.ndarray, int]: ...
def _kv(
    backward: bool, x0: np.ndarray, x1: np.ndarray, k_dim: int, v_dim: int, emb_dim: int, c: _Common
) -> tuple[np.ndarray, np.ndarray, int]: ...

class _YarnParams:
    rotary_base: float
    scaling_factor: float
    original_max_position_embeddings: float
    beta_fast: float
    beta_slow: float
    mscale: float
    mscale_all_dim: float
    concentration_override: float
    def __init__(self) -> None: ...

def _yarn(
    rows: int, emb_dim: int, params: _YarnParams, offset: int, table_layout: str, dtype: str
) -> tuple[np.ndarray, np.ndarray]: ...
def _fuzz(
    backend: Any,
    seconds: float,
    cases: int,
    seed: int,
    ops: list[str],
    dtypes: list[str],
    table_dtypes: list[str],
    in_place: bool,
    layouts: str,
    position_ids: bool,
    seq_offsets: bool,
    packed: bool,
    power_of_two_dims: bool,
    out: str,
    size: int,
    quiet: bool,
    isolate: bool,
    call_timeout: float,
    steer: bool,
) -> dict[str, Any]: ...
def _check(backend: Any, dir: str, isolate: bool, call_timeout: float) -> dict[str, Any]: ...
def _from_dlpack(capsule: Any, name: str) -> tuple[np.ndarray, bool]: ...
def _load_case(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]: ...
