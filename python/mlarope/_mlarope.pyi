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
    def __init__(self) -> None: ...

def _rope(backward: bool, x: np.ndarray, nope_dim: int, emb_dim: int, c: _Common) -> tuple[np.ndarray, int]: ...
def _kv(backward: bool, x0: np.ndarray, x1: np.ndarray, k_dim: int, v_dim: int, emb_dim: int,
        c: _Common) -> tuple[np.ndarray, np.ndarray, int]: ...
def _fuzz(backend: Any, seconds: float, cases: int, seed: int, ops: list[str], out: str, size: int,
          quiet: bool) -> dict[str, Any]: ...
def _load_case(path: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]: ...
