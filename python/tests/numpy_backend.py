# SPDX-License-Identifier: Apache-2.0
"""A kernel written in NumPy, checked by mlarope.fuzz: rope on SBHD f32 tensors, out of place,
pairs in the half layout (the C ABI's minimal plugin, in Python). Every other call is declined,
and the harness counts it as not supported."""

import numpy as np


class NumpyRope:
    def __init__(self, drop_inverse=False, raise_on_call=False):
        self.drop_inverse = drop_inverse  # a planted bug, for the test that the fuzz fails
        self.raise_on_call = raise_on_call

    def supports(self, call):
        ok = (
            call.op == "rope"
            and not call.in_place
            and call.layout == "sbhd"
            and call.dtype == "f32"
            and call.table_dtype == "f32"
            and call.cp_size == 1
            and call.seq_offsets is None
            and call.in_layout == call.out_layout == call.table_layout == "half"
        )
        return ok, "only SBHD f32 rope out of place, half layouts, no CP or offsets"

    def rope(self, call):
        if self.raise_on_call:
            raise RuntimeError("this kernel is broken on purpose")
        t, out = call.inputs[0], call.outputs[0]
        if t.size == 0:  # zero rows or heads: nothing to write (the table may have no rows)
            return
        n, half = call.nope_dim, call.emb_dim // 2
        sg = 1.0 if (self.drop_inverse or not call.inverse) else -1.0
        S = t.shape[0]
        cos = call.cos.reshape(call.cos.shape[0], call.cos.shape[-1])[:S, None, None, :]
        sin = call.sin.reshape(call.sin.shape[0], call.sin.shape[-1])[:S, None, None, :]
        u, v = t[..., n : n + half], t[..., n + half :]
        out[..., :n] = t[..., :n]
        with np.errstate(invalid="ignore", over="ignore"):  # IEEE: inf - inf is NaN, as in a kernel
            out[..., n : n + half] = u * cos[..., :half] - v * np.float32(sg) * sin[..., :half]
            out[..., n + half :] = v * cos[..., half:] + u * np.float32(sg) * sin[..., half:]
