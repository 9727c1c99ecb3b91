# SPDX-License-Identifier: Apache-2.0
"""Arithmetic of Triton kernels under mlarope.triton's interpreter as an sm_90 GPU computes
it (mlarope/_gpu_float.py): bf16 conversions against ml_dtypes over all 65,536 patterns and a
sample of f32 values (a planted truncating conversion is caught), bf16 operations rounded
once each, and multiply-adds contracted (one rounding) or as written (two), checked against
exact rational arithmetic. Skips without Triton, torch or ml_dtypes."""

import importlib.util
from fractions import Fraction

import numpy as np
import pytest

if any(importlib.util.find_spec(m) is None for m in ("triton", "torch", "ml_dtypes")):
    pytest.skip("triton, torch or ml_dtypes is not installed", allow_module_level=True)

import ml_dtypes  # noqa: E402

from mlarope import _gpu_float  # noqa: E402
from mlarope import triton as mt  # noqa: E402

triton = mt.interpreter()
import torch  # noqa: E402
import triton.language as tl  # noqa: E402

BLOCK = 1024


@triton.jit
def widen(src, dst, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + i, tl.load(src + i, mask=i < n).to(tl.float32), mask=i < n)


@triton.jit
def narrow(src, dst, n, TRUNCATE: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(src + i, mask=i < n)
    if TRUNCATE:  # the planted conversion: keep the top 16 bits
        b = (v.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        b = v.to(tl.bfloat16)
    tl.store(dst + i, b, mask=i < n)


@triton.jit
def rotate(x_ptr, y_ptr, c_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x, y = tl.load(x_ptr + i, mask=m), tl.load(y_ptr + i, mask=m)
    c, s = tl.load(c_ptr + i, mask=m), tl.load(s_ptr + i, mask=m)
    tl.store(out_ptr + i, x * c - y * s, mask=m)


@triton.jit
def fused(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x, y = tl.load(x_ptr + i, mask=m), tl.load(y_ptr + i, mask=m)
    tl.store(out_ptr + i, tl.fma(x, y, tl.load(z_ptr + i, mask=m)), mask=m)


def launch(kernel, *tensors, n, **meta):
    kernel[(-(-n // BLOCK),)](*tensors, n, BLOCK=BLOCK, **meta)


def bf16_tensor(bits: np.ndarray):
    return torch.from_numpy(bits.astype(np.uint16).view(np.int16).copy()).view(torch.bfloat16)


def bits_of(t) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16)


def same_or_both_nan(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Equal bits, or NaN both (the harness judges a NaN by being one, not by its payload)."""
    bits = got.view(np.uint16) == want.view(np.uint16)
    with np.errstate(invalid="ignore"):
        return bits | (np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32)))


def test_every_bf16_pattern_widens_as_ml_dtypes_does():
    bits = np.arange(1 << 16, dtype=np.uint16)
    out = torch.empty(bits.size, dtype=torch.float32)
    launch(widen, bf16_tensor(bits), out, n=bits.size)
    want = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    got = out.numpy()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), "widening differs"


def f32_sample() -> np.ndarray:
    """Every bf16 value, each midpoint between neighbours (the ties), one bit either side of
    them, and a million random f32 patterns (NaNs, infinities and subnormals among them)."""
    top = np.arange(1 << 16, dtype=np.uint32) << 16
    rng = np.random.default_rng(5)
    parts = [top, top | 0x8000, top | 0x7FFF, top | 0x8001, rng.integers(0, 1 << 32, 1 << 20)]
    return np.concatenate(parts).astype(np.uint32).view(np.float32)


def narrowed(values: np.ndarray, truncate: bool) -> np.ndarray:
    out = torch.empty(values.size, dtype=torch.bfloat16)
    launch(narrow, torch.from_numpy(values), out, n=values.size, TRUNCATE=truncate)
    return bits_of(out)


def test_f32_rounds_to_bf16_as_ml_dtypes_does_and_a_truncating_conversion_is_caught():
    values = f32_sample()
    with np.errstate(invalid="ignore"):
        want = values.astype(ml_dtypes.bfloat16)
    ok = same_or_both_nan(narrowed(values, truncate=False).view(ml_dtypes.bfloat16), want)
    assert ok.all(), f"{int((~ok).sum())} of {values.size} differ, first {values[~ok][:4]}"
    planted = same_or_both_nan(narrowed(values, truncate=True).view(ml_dtypes.bfloat16), want)
    assert (~planted).sum() > values.size // 4, "the truncating conversion was not caught"


def exact(a) -> list:
    return [Fraction(float(v)) for v in np.asarray(a, dtype=np.float64)]


def nearest(values: list, dtype) -> np.ndarray:
    """Each exact rational rounded to nearest even in ``dtype`` (np.float32 or bf16): of the
    value a float64 conversion gives and its two neighbours, the nearest (then the even)."""
    width = np.uint16 if dtype == ml_dtypes.bfloat16 else np.uint32

    mask = (1 << (8 * np.dtype(width).itemsize)) - 1

    def distance(pattern: int, v: Fraction):
        f = float(np.array([pattern & mask], width).view(dtype).astype(np.float64)[0])
        return (abs(Fraction(f) - v) if np.isfinite(f) else Fraction(1 << 200), pattern & 1)

    out = np.empty(len(values), dtype=width)
    for k, v in enumerate(values):
        b = int(np.array([float(v)]).astype(dtype).view(width)[0])
        out[k] = min((b - 1, b, b + 1), key=lambda p: distance(p, v)) & mask
    return out.view(dtype)


def operands(dtype, n=512):
    rng = np.random.default_rng(11)
    return [rng.standard_normal(n).astype(np.float32).astype(dtype) for _ in range(4)]


def run_rotate(xs, dtype, fusion: bool) -> np.ndarray:
    if dtype == ml_dtypes.bfloat16:
        tensors = [bf16_tensor(a.view(np.uint16)) for a in xs]
        out = torch.empty(xs[0].size, dtype=torch.bfloat16)
    else:
        tensors = [torch.from_numpy(a.copy()) for a in xs]
        out = torch.empty(xs[0].size, dtype=torch.float32)
    with _gpu_float.fusion(fusion):
        launch(rotate, *tensors, out, n=xs[0].size)
    return bits_of(out).view(dtype) if dtype == ml_dtypes.bfloat16 else out.numpy()


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
def test_x_c_minus_y_s_is_rounded_as_written_or_contracted(dtype):
    x, y, c, s = operands(dtype)
    ys = nearest([a * b for a, b in zip(exact(y), exact(s))], dtype)  # the right product
    xc = nearest([a * b for a, b in zip(exact(x), exact(c))], dtype)
    as_written = nearest([a - b for a, b in zip(exact(xc), exact(ys))], dtype)
    contracted = nearest([a * b - d for a, b, d in zip(exact(x), exact(c), exact(ys))], dtype)
    got_written, got_contracted = (
        run_rotate([x, y, c, s], dtype, False),
        run_rotate([x, y, c, s], dtype, True),
    )
    width = np.uint16 if dtype == ml_dtypes.bfloat16 else np.uint32
    assert np.array_equal(got_written.view(width), as_written.view(width))
    assert np.array_equal(got_contracted.view(width), contracted.view(width))
    assert not np.array_equal(as_written.view(width), contracted.view(width)), (
        "the sample does not tell the two apart"
    )


def test_tl_fma_rounds_once_in_either_mode():
    x, y, z, _ = operands(np.float32)
    want = nearest([a * b + d for a, b, d in zip(exact(x), exact(y), exact(z))], np.float32)
    for fusion in (False, True):
        out = torch.empty(x.size, dtype=torch.float32)
        with _gpu_float.fusion(fusion):
            launch(fused, *(torch.from_numpy(a.copy()) for a in (x, y, z)), out, n=x.size)
        assert np.array_equal(out.numpy().view(np.uint32), want.view(np.uint32))


@triton.jit
def select(x_ptr, c_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # bf16 tiles compared, negated, maximised and scaled by a bf16 constant (the interpreter
    # alone compares and negates the raw patterns as integers)
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    x, c = tl.load(x_ptr + i, mask=m), tl.load(c_ptr + i, mask=m)
    tl.store(out_ptr + i, tl.where(x < c, -x, tl.maximum(x, c * c * 0.5)), mask=m)


def test_bf16_comparison_negation_maximum_and_constants_act_on_values():
    x, c, _, _ = operands(ml_dtypes.bfloat16)
    cc = nearest([b * b for b in exact(c)], ml_dtypes.bfloat16)
    want = [-a if a < b else max(a, d / 2) for a, b, d in zip(exact(x), exact(c), exact(cc))]
    want = nearest(want, ml_dtypes.bfloat16)
    out = torch.empty(x.size, dtype=torch.bfloat16)
    launch(select, bf16_tensor(x.view(np.uint16)), bf16_tensor(c.view(np.uint16)), out, n=x.size)
    assert np.array_equal(bits_of(out), want.view(np.uint16))
