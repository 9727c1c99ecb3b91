# SPDX-License-Identifier: Apache-2.0
"""DLPack: PyTorch CPU tensors (Debian's python3-torch) into the reference ops, without a copy."""

import numpy as np
import pytest

import mlarope

torch = pytest.importorskip("torch", reason="PyTorch (Debian's python3-torch) is not installed")


def test_torch_cpu_tensors_are_read_through_dlpack_without_a_copy():
    g = torch.Generator().manual_seed(4)
    wide = torch.randn(5, 2, 3, 40, generator=g)
    t = wide[..., 4:28]  # strided: a gap after each head
    cos, sin = torch.randn(5, 16, generator=g), torch.randn(5, 16, generator=g)
    out, status = mlarope.rope(t, cos, sin, nope_dim=8, emb_dim=16, in_layout="half")
    expected, _ = mlarope.rope(
        t.numpy(), cos.numpy(), sin.numpy(), nope_dim=8, emb_dim=16, in_layout="half"
    )
    assert status == 0 and np.array_equal(out, expected)
    view, bf16 = mlarope._mlarope._from_dlpack(t.__dlpack__(), "t")
    t[0, 0, 0, 0] = 123.0  # the view is the tensor's memory
    assert (
        not bf16 and view[0, 0, 0, 0] == 123.0 and view.strides == tuple(4 * s for s in t.stride())
    )


def test_torch_bf16_tensors_come_as_bf16():
    g = torch.Generator().manual_seed(5)
    t = torch.randn(3, 1, 2, 12, generator=g).to(torch.bfloat16)
    cos, sin = (
        torch.randn(3, 8, generator=g).to(torch.bfloat16),
        torch.randn(3, 8, generator=g).to(torch.bfloat16),
    )
    out, _ = mlarope.rope(t, cos, sin, nope_dim=4, emb_dim=8)
    bits = [x.view(torch.int16).numpy().view(np.uint16) for x in (t, cos, sin)]
    expected, _ = mlarope.rope(*bits, nope_dim=4, emb_dim=8, dtype="bf16")
    assert out.dtype == np.uint16 and np.array_equal(out, expected)
    as_torch = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16)  # back to a bf16 tensor
    assert torch.equal(as_torch[..., :4], t[..., :4])
    # An f32 tensor with bf16 tables: each tensor's dtype comes from DLPack.
    out32, _ = mlarope.rope(t.float(), cos, sin, nope_dim=4, emb_dim=8)
    assert out32.dtype == np.float32


def test_kv_split_takes_torch_tensors_and_int_metadata():
    kv = torch.randn(6, 2, 12)
    k_pe = torch.randn(6, 1, 8)
    cos, sin = torch.ones(6, 8), torch.zeros(6, 8)
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    key, value, status = mlarope.kv_split(
        kv, k_pe, cos, sin, k_dim=5, v_dim=7, emb_dim=8, layout="thd", cu_seqlens=cu
    )
    assert status == 0 and np.array_equal(value, kv[..., 5:].numpy())
