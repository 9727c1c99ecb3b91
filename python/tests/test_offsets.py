# SPDX-License-Identifier: Apache-2.0
"""Offsets past 2^31 under mlarope.triton without the memory: tensors over a lazily mapped
reservation (only the pages a kernel touches cost memory). The interpreter computes an i32
``program_id * stride`` in 32 bits as compiled Triton does, so a planted kernel's row offset
wraps negative past 2^31 elements and its store lands 8 GiB before the tensor, which fails the
call (WildAccess) before it is made; the int64 version stores where it should, with the
process's resident memory growing by a few pages. Skips without Triton."""

import contextlib
import importlib.util
import mmap

import pytest

if importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None:
    pytest.skip("triton or torch is not installed", allow_module_level=True)

from mlarope import triton as mt  # noqa: E402

triton = mt.interpreter()
import torch  # noqa: E402
import triton.language as tl  # noqa: E402

GIB = 1 << 30


@contextlib.contextmanager
def reservation(nbytes: int):
    """A float32 tensor over ``nbytes`` of lazily mapped memory (mt.reserved)."""
    yield mt.reserved((nbytes // 4,))


def resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * mmap.PAGESIZE


@triton.jit
def stamp_rows(x_ptr, row_stride, WIDE: tl.constexpr):
    # Program p writes p + 1 over the first 4 elements of row p (row_stride apart).
    pid = tl.program_id(0)
    if WIDE:
        row = x_ptr + pid.to(tl.int64) * row_stride
    else:  # the planted bug: i32 times i32 wraps once the product passes 2^31
        row = x_ptr + pid * row_stride
    tl.store(row + tl.arange(0, 4), tl.full([4], 1.0, tl.float32) + pid)


ROW_STRIDE = 1 << 28  # elements: row 8 starts at 2^31 elements, 8 GiB in


def test_an_i32_row_offset_past_2_31_is_caught_before_it_stores():
    with reservation(9 * GIB) as x:
        with pytest.raises(Exception) as failure:
            stamp_rows[(9,)](x, ROW_STRIDE, WIDE=False)
        message = str(failure.value)
        assert "WildAccess" in message and "bounds: kernel stamp_rows stores" in message, message
        assert f"{8 * GIB} bytes before the storage of its argument 'x_ptr'" in message, message
        assert float(x[7 * ROW_STRIDE]) == 8.0  # the rows before the wrap were written


def test_its_int64_version_stores_past_8_gib_touching_a_few_pages():
    before = resident_bytes()
    with reservation(9 * GIB) as x:
        stamp_rows[(9,)](x, ROW_STRIDE, WIDE=True)
        rows = [float(x[p * ROW_STRIDE]) for p in range(9)]
        grown = resident_bytes() - before
    assert rows == [p + 1.0 for p in range(9)]
    assert grown < 64 << 20, f"resident memory grew by {grown} bytes"


@triton.jit
def store_at(x_ptr, offset):
    tl.store(x_ptr + offset + tl.arange(0, 4), tl.zeros([4], tl.float32))


def test_a_store_near_a_tensor_is_left_to_the_guards_and_a_far_one_is_wild():
    # x: the first 256 KiB of a 4 MiB mapping (its storage is x's bytes only), so the stores
    # past it land in mapped memory, as past a harness buffer they land in its guards.
    with reservation(4 << 20) as memory:
        x = torch.from_numpy(memory.numpy()[: 1 << 16])
        store_at[(1,)](x, (1 << 16) + 16)  # 64 bytes past the end: near, not wild
        with pytest.raises(Exception, match="bytes past the end of the storage"):
            store_at[(1,)](x, (1 << 16) + mt.WILD_BYTES // 4 + 16)
        del x
