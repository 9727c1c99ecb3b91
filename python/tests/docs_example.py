# SPDX-License-Identifier: Apache-2.0
# A kernel in NumPy (rope on SBHD f32, out of place, half layouts), checked by mlarope.fuzz.
import numpy as np

import mlarope


class MyRope:
    def supports(self, c):
        return (
            c.op == "rope"
            and not c.in_place
            and c.layout == "sbhd"
            and c.dtype == c.table_dtype == "f32"
            and c.cp_size == 1
            and c.seq_offsets is None
            and c.in_layout == c.out_layout == c.table_layout == "half"
        ), "not my kernel's case"

    def rope(self, c):  # write c.outputs[0] from c.inputs[0]; row s uses table row s
        t, out, n, h = c.inputs[0], c.outputs[0], c.nope_dim, c.emb_dim // 2
        if t.size == 0:
            return
        sg = np.float32(-1.0 if c.inverse else 1.0)
        cos = c.cos.reshape(c.cos.shape[0], -1)[: t.shape[0], None, None]
        sin = c.sin.reshape(c.sin.shape[0], -1)[: t.shape[0], None, None]
        u, v = t[..., n : n + h], t[..., n + h :]
        out[..., :n] = t[..., :n]
        out[..., n : n + h] = u * cos[..., :h] - v * sg * sin[..., :h]
        out[..., n + h :] = v * cos[..., h:] + u * sg * sin[..., h:]


if __name__ == "__main__":
    result = mlarope.fuzz(
        MyRope(), ops=["rope"], cases=20000
    )  # raises mlarope.FuzzFailure on a bug
