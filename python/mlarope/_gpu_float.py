# SPDX-License-Identifier: Apache-2.0
"""Floating-point arithmetic under Triton's interpreter as Triton's code for an sm_90 GPU
computes it (read from the PTX ``triton.compile`` gives for ``GPUTarget("cuda", 90, 32)``).

The interpreter keeps a bf16 tile as its raw 16-bit patterns: its arithmetic, comparisons and
integer casts work on those patterns as integers, and it converts f32 to bf16 by truncation.
The GPU code uses native bf16 instructions (``mul.bf16``, ``fma.rn.bf16``, ``neg.bf16``)
rounded to nearest even per operation, and ``cvt.rn.bf16.f32``. A bf16 operation here is the
f32 operation on the widened values rounded once to bf16 (round to nearest even), which gives
the same bits: the sum, difference, product or quotient of two bf16 values computed in f32 and
rounded again is the correctly rounded bf16 result (f32 has more than 2 x 8 + 2 bits).

Contraction: with ``enable_fp_fusion`` on (Triton's default) the compiler turns a product that
an addition or subtraction uses into a fused multiply-add (``fma.rn.f32``, ``fma.rn.bf16``),
one rounding instead of two, the left operand's product first, as LLVM's NVPTX back end does
(``x * c - y * s`` becomes ``fma(x, c, -(y * s))``). ``fusion(True)`` models it: a product
carries its exact value (an f64 product of two f32, f16 or bf16 values is exact) to the
addition that uses it, which rounds the exact sum once. ``fusion(False)`` computes as written.

What is not modelled: reductions and scans of bf16 tiles other than a sum (which Triton widens
to f32 first), dot products, f32 division's approximate ``div.full.f32`` (the interpreter
divides exactly rounded), and the NaN payloads (a NaN converted to bf16 is quiet with its sign
and top payload bits, as ml_dtypes gives; a GPU may give the canonical NaN: the harness judges
NaN by being NaN).
"""

from __future__ import annotations

import contextlib

import numpy as np

_PRODUCT = "mlarope_exact_product"  # the attr key of a product's exact f64 value

fp_fusion = True  # contract an addition of a product into one rounding, as Triton does


@contextlib.contextmanager
def fusion(on: bool):
    """While the body runs, multiply-adds are contracted (``on``) or computed as written."""
    global fp_fusion
    outer, fp_fusion = fp_fusion, bool(on)
    try:
        yield
    finally:
        fp_fusion = outer


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """The f32 values of bf16 patterns (exact)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray, truncate: bool = False) -> np.ndarray:
    """bf16 patterns of f32 values, rounded to nearest even (``cvt.rn.bf16.f32``) or toward
    zero (``truncate``, ``cvt.rz``); overflow rounds to infinity; a NaN stays a quiet NaN."""
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    if not truncate:
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
    rounded = (bits >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        quiet = ((values.view(np.uint32) >> 16) | 0x0040).astype(np.uint16)
        rounded = np.where(nan, quiet, rounded)
    return rounded


def _odd_f64_sum(p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """p + c rounded to f64 by round-to-odd: a later rounding to any format at least two bits
    narrower is then the correct rounding of the exact sum (no double-rounding error)."""
    s = p + c
    b = s - p
    err = (p - (s - b)) + (c - b)  # p + c == s + err exactly (TwoSum)
    even = (s.view(np.uint64) & 1) == 0
    inexact = (err != 0) & np.isfinite(s) & even
    if inexact.any():
        s = np.where(inexact, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s


def _round_f64(s: np.ndarray, dtype) -> np.ndarray:
    """An odd-rounded f64 value correctly rounded to f32, f16 or bf16 (its patterns)."""
    if dtype == "bf16":
        f = s.astype(np.float32)  # then round to odd in f32 (24 bits: 8 + 2 and more)
        inexact = (f.astype(np.float64) != s) & np.isfinite(f) & ((f.view(np.uint32) & 1) == 0)
        if inexact.any():
            toward = np.where(s > f, np.float32(np.inf), np.float32(-np.inf))
            f = np.where(inexact, np.nextafter(f, toward), f)
        return f32_to_bf16(f)
    return s.astype(dtype)


def install(builder, tl, TensorHandle) -> None:
    """Patch the interpreter's builder (one instance) so that its float operations compute as
    described above."""
    if getattr(builder, "_mlarope_gpu_float", False):
        return
    bf16 = tl.bfloat16

    def is_bf16(h) -> bool:
        return isinstance(h, TensorHandle) and h.dtype.scalar == bf16

    def widened(h):
        return TensorHandle(bf16_to_f32(h.data), tl.float32) if is_bf16(h) else h

    def as_f64(h) -> np.ndarray:
        return (bf16_to_f32(h.data) if is_bf16(h) else h.data).astype(np.float64)

    def kind(h):
        return "bf16" if is_bf16(h) else h.data.dtype

    # Casts: through f32 wherever bf16 is one side; f32 -> bf16 rounds to nearest even.
    cast_impl = builder.cast_impl

    def cast(src, dst_type, truncate=False):
        src_bf16, dst_bf16 = is_bf16(src), dst_type.scalar == bf16
        if not (src_bf16 or dst_bf16) or (src_bf16 and dst_bf16):
            return cast_impl(src, dst_type)
        if src_bf16:
            wide = widened(src)
            return wide if dst_type.scalar == tl.float32 else cast_impl(wide, dst_type)
        wide = src if src.dtype.scalar == tl.float32 else cast_impl(src, tl.float32)
        return TensorHandle(f32_to_bf16(wide.data, truncate), bf16)

    builder.cast_impl = cast
    if not hasattr(builder, "get_bf16"):  # a bf16 constant (Triton 3.6 lacks it)
        builder.get_bf16 = lambda value: cast(builder.get_fp32(value), bf16)
    fp_to_fp = builder.create_fp_to_fp

    def create_fp_to_fp(src, dst_type, rounding_mode):
        if is_bf16(src) or dst_type.scalar == bf16:
            truncate = rounding_mode is not None and "RTZ" in str(rounding_mode)
            if is_bf16(src) and dst_type.scalar != tl.float32 and dst_type.scalar != bf16:
                return fp_to_fp(widened(src), dst_type, rounding_mode)
            return cast(src, dst_type, truncate)
        return fp_to_fp(src, dst_type, rounding_mode)

    builder.create_fp_to_fp = create_fp_to_fp

    # Element-wise float operations on bf16 tiles: on the widened values, rounded once.
    def on_widened(original, round_result=True):
        def op(*args):
            if not any(is_bf16(a) for a in args):
                return original(*args)
            result = original(*(widened(a) for a in args))
            if round_result and result.dtype.scalar == tl.float32:
                return TensorHandle(f32_to_bf16(result.data), bf16)
            return result

        return op

    unary = ("exp", "exp2", "log", "log2", "cos", "sin", "sqrt", "precise_sqrt", "rsqrt")
    rounding = [f"create_{n}" for n in ("fdiv", "frem", "precise_divf", "approx_divf")]
    rounding += [f"create_{n}" for n in ("minimumf", "minnumf", "maximumf", "maxnumf", "fneg")]
    rounding += [f"create_{n}" for n in unary + ("floor", "ceil", "erf", "clampf")]
    for name in rounding:
        if hasattr(builder, name):
            setattr(builder, name, on_widened(getattr(builder, name)))
    for name in [n for n in dir(builder) if n.startswith("create_fcmp")]:
        setattr(builder, name, on_widened(getattr(builder, name), round_result=False))

    # Products, sums and multiply-adds: rounded once, a product's exact value kept for the
    # addition that contracts it.
    def rounded(value64, like):
        out = _round_f64(value64, kind(like))
        return TensorHandle(out, like.dtype.scalar)

    fmul, fadd, fsub = builder.create_fmul, builder.create_fadd, builder.create_fsub

    def create_fmul(lhs, rhs):
        if not (is_bf16(lhs) or is_bf16(rhs) or fp_fusion):
            return fmul(lhs, rhs)
        exact = as_f64(lhs) * as_f64(rhs)  # two values of at most 24 bits: exact in f64
        product = rounded(exact, lhs)
        if fp_fusion:
            product.attr[_PRODUCT] = exact
        return product

    def sum_of(lhs, rhs, sign, original):
        fused_left = fp_fusion and _PRODUCT in lhs.attr
        fused_right = fp_fusion and not fused_left and _PRODUCT in rhs.attr
        if not (fused_left or fused_right or is_bf16(lhs) or is_bf16(rhs)):
            return original(lhs, rhs)
        left = lhs.attr[_PRODUCT] if fused_left else as_f64(lhs)
        right = rhs.attr[_PRODUCT] if fused_right else as_f64(rhs)
        with np.errstate(all="ignore"):
            return rounded(_odd_f64_sum(left, sign * right), lhs)

    builder.create_fmul = create_fmul
    builder.create_fadd = lambda lhs, rhs: sum_of(lhs, rhs, 1.0, fadd)
    builder.create_fsub = lambda lhs, rhs: sum_of(lhs, rhs, -1.0, fsub)

    def create_fma(x, y, z):  # tl.fma: one rounding, in any mode
        with np.errstate(all="ignore"):
            return rounded(_odd_f64_sum(as_f64(x) * as_f64(y), as_f64(z)), z)

    builder.create_fma = create_fma
    builder._mlarope_gpu_float = True
