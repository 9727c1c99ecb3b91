# SPDX-License-Identifier: Apache-2.0
"""megatron-core's fused MLA YaRN RoPE (fusions/fused_mla_yarn_rope_apply.py: Triton, GPU only)
as an mlarope backend: ``mlarope.fuzz(MegatronFusedMLA())`` on a machine with CUDA and Triton.

Megatron's two entry points and how our calls (docs/semantics.md) map onto them:

- ``fused_apply_mla_rope_for_q(t, cos, sin, qk_head_dim, emb_dim, cu_seqlens, cp_rank, cp_size)``
  rotates the trailing ``emb_dim`` of every head in place, reading interleaved pairs and writing
  half ones: our rope with (interleaved -> half). Out of place, the adapter copies t into a
  device tensor with the same strides and lets Megatron rotate that; rope_backward is autograd
  through it (Megatron's backward kernel);
- ``fused_apply_mla_rope_for_kv(kv, k_pos_emb, cos, sin, emb_dim, k_dim, v_dim, cu_seqlens, ...)``
  returns key = [k_nope, rope(k_pe)] and value: our kv_split; kv_split_backward is autograd;
- tables: Megatron reads ``cos[row * emb_dim + j]``, halves [f, f] (the half table layout).
  An interleaved table is permuted into that layout (exact), ``inverse`` negates sin
  (docs/semantics.md §3, exact), and the rows are SBHD's ``s`` or THD's position within its
  sequence;
- SBHD context parallelism: Megatron slices the table on the host for each rank
  (``get_pos_emb_on_this_cp_rank``); the adapter calls that function, as Megatron's model does;
- declined, with the reason: other pair layouts, position ids, sequence offsets, the packed
  frequency mode (the kernels index the table by the position within a sequence), invalid
  cu_seqlens, ``emb_dim`` (and for kv ``k_dim``, ``v_dim``) that Triton's ``tl.arange`` cannot
  take (a power of two; ``emb_dim`` a multiple of 4, Megatron's assert), SBHD views that
  Megatron's ``view(-1, H, D)`` cannot take, and rope_backward in place (autograd's backward
  is out of place). THD padding rows are not declined: the semantics pass them through, and the
  fuzz shows what Megatron does with them.

On a GPU the harness's buffers are host NumPy views: the adapter copies inputs to the GPU
(keeping their strides) and results back, so the input-immutability check sees the host copies
only. On the host (``device="cpu"``: Triton's interpreter through ``mlarope.triton``, or the
tests' stand-ins) the kernels get tensors over the harness's own buffers: rope rotates the
output view (out of place, after copying t into it; rope_backward likewise, in place too, as
Megatron's backward kernel rotates the gradient it is given), so a store past a view lands in
the harness's guards; the tables sit in guarded scratch, so a read before or after them shows
as NaN; the kv outputs are Megatron's own allocations, guarded while the call runs.
"""

from __future__ import annotations

import numpy as np
import torch

import megatron_sources
from megatron_unfused import _Group, to_torch, write
from mlarope import triton as mlarope_triton

#: mlarope.fuzz's narrowing to what the kernels can take: interleaved pairs in, half out;
#: per-sequence tables; no position ids or offsets; emb_dim / 2, k_dim and v_dim powers of two
#: (Triton's tl.arange); every dtype.
FUZZ_NARROWING = dict(
    layouts="interleaved/half/*",
    position_ids=False,
    seq_offsets=False,
    packed=False,
    power_of_two_dims=True,
)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _device_copy(a: np.ndarray, dtype: str, device: str, contiguous: bool = False) -> torch.Tensor:
    """A device tensor with the host view's shape, strides and values (contiguous when the view
    broadcasts, since the in-place kernel writes the copy, or when asked)."""
    host = to_torch(a, dtype)
    if contiguous or 0 in host.stride():
        return host.to(device).clone(memory_format=torch.contiguous_format)  # a copy, always
    out = torch.empty_strided(host.shape, host.stride(), dtype=host.dtype, device=device)
    out.copy_(host)
    return out


class MegatronFusedMLA:
    """The backend: ``rope`` (rope, rope_backward), ``kv_split`` and ``kv_split_backward``."""

    def __init__(
        self,
        device: str = "cuda",
        q_fn=None,
        kv_fn=None,
        decline_padding: bool | None = None,
        contiguous: bool = False,
        fused=None,
        decline_head_mask: bool = True,
    ):
        self.device = device
        self.views = device == "cpu"  # the kernels work in the harness's buffers (see above)
        # THD rows past cu_seqlens[-1]: Megatron's q kernel looks their sequence up past the end
        # of cu_seqlens and reads its table out of bounds (an illegal memory access on an H200,
        # findings/fused_q_thd_padding_rows_2_heads/gpu_case_20_heads); declined on CUDA by
        # default.
        self.decline_padding = device != "cpu" if decline_padding is None else decline_padding
        self.contiguous = contiguous  # device copies in C order rather than with the view's strides
        if q_fn is None or kv_fn is None:
            fused = fused or megatron_sources.load_fused()
            q_fn, kv_fn = fused.fused_apply_mla_rope_for_q, fused.fused_apply_mla_rope_for_kv
        self.fused = fused
        self.q_fn, self.kv_fn = q_fn, kv_fn
        self.block_h = None  # the BLOCK_H every kernel runs (mlarope.triton's variant), if set
        # Finding 3 per BLOCK_H (below): declined unless a replay of that finding asks to run it.
        self.decline_head_mask = decline_head_mask
        self.rope_utils = megatron_sources.load().rope_utils
        # An illegal memory access leaves the CUDA context unusable: every later call raises the
        # same error. The first such call fails (run with CUDA_LAUNCH_BLOCKING=1, it is the
        # faulting one); the calls after it are declined, named as lost, not counted as failures.
        self.lost = None

    def kernels(self):
        """The Triton kernels the ops launch (their autotune configs are mlarope.triton's
        variants)."""
        return [] if self.fused is None else mlarope_triton.kernels_of(self.fused)

    def select_config(self, name: str, meta: dict) -> None:
        self.block_h = meta.get("BLOCK_H") if self.decline_head_mask else None

    def environment(self) -> dict:
        return {"megatron-core": megatron_sources.load().version}

    # ---- what maps ----------------------------------------------------------------------------

    def supports(self, call):
        why = self._decline(call)
        return (False, why) if why else (True, "")

    def _decline(self, call) -> str | None:
        if self.lost:
            return (
                "not run: the CUDA context was lost to an illegal memory access in an earlier call "
                f"({self.lost})"
            )
        if (call.in_layout, call.out_layout) != ("interleaved", "half"):
            return "Megatron's fused MLA kernels read interleaved pairs and write half ones only"
        if call.position_ids is not None or call.seq_offsets is not None:
            return "Megatron's fused MLA kernels take no position ids or sequence offsets"
        if call.dtype in ("f16", "bf16") and call.table_dtype in ("f16", "bf16"):
            # Triton computes two 16-bit floats in f16 if either is f16, else in bf16.
            work = "f16" if "f16" in (call.dtype, call.table_dtype) else "bf16"
            return (
                f"{call.dtype} activations with {call.table_dtype} tables: the kernels round "
                f"each product to {work} before the sum, outside the f32 tolerance model "
                "(docs/megatron.md, precision)"
            )
        if call.op == "kv_split_backward" and call.dtype in ("f16", "bf16"):
            return (
                f"{call.dtype} kv_split_backward: the kernel rounds the heads' sum of grad_k_pe to "
                f"{call.dtype} before rotating it, outside the f32 tolerance model "
                "(docs/megatron.md, precision)"
            )
        if call.layout == "thd" and call.freq_mode == "packed":
            return (
                "packed frequency mode: the fused kernels index the table by the position in a "
                "sequence"
            )
        if not _power_of_two(call.emb_dim // 2) or call.emb_dim % 4:
            return (
                "emb_dim / 2 not a power of two, or emb_dim % 4 != 0 "
                "(Triton's tl.arange; Megatron's assert)"
            )
        kv = call.op in ("kv_split", "kv_split_backward")
        if kv and not (_power_of_two(call.k_dim) and _power_of_two(call.v_dim)):
            return "k_dim or v_dim not a power of two (Triton's tl.arange)"
        if call.op == "kv_split_backward" and call.inputs[0].shape[-2] == 0:
            return (
                "no heads: Megatron's kv backward launches no programs and leaves grad_k_pe "
                "as allocated (uninitialised)"
            )
        if kv and call.inputs[0].shape[-2] == 0 and call.layout == "sbhd":
            return (
                "no heads: Megatron's SBHD kv path views kv as [-1, H, D], which H = 0 cannot take"
            )
        heads = call.inputs[0].shape[-2]
        if self.block_h is not None and self.block_h < heads and heads % self.block_h:
            return (
                f"BLOCK_H={self.block_h} with {heads} heads: the last block of a token covers "
                "heads past the last, which the head mask lets through (a finding)"
            )
        if (
            self.block_h is None
            and self.device != "cpu"
            and heads > 1
            and not (heads <= 128 and heads & (heads - 1) == 0)
            and heads % 128
        ):
            return (
                "head count neither a power of two up to 128 nor a multiple of 128: "
                "the kernels' head mask ignores the block's first head (a finding)"
            )
        if call.op == "rope_backward" and call.in_place and not self.views:
            return "Megatron's backward runs through autograd, out of place on the device copy"
        if call.layout == "thd":
            lengths = np.diff(call.cu_seqlens.astype(np.int64))
            step = 2 * call.cp_size if call.cp_size > 1 else 1
            if (
                (lengths < 0).any()
                or (lengths % step).any()
                or (lengths // call.cp_size).sum() > call.inputs[0].shape[0]
            ):
                return "invalid cu_seqlens: Megatron does not check them"
            if self.decline_padding and (lengths // call.cp_size).sum() < call.inputs[0].shape[0]:
                return (
                    "THD padding rows: Megatron's q kernel reads the table out of bounds for them "
                    "(a finding)"
                )
        else:
            x = call.inputs[0]
            if x.ndim == 4 and x.shape[1] > 1 and x.strides[0] != x.shape[1] * x.strides[1]:
                return "SBHD rows not evenly spaced: Megatron views the input as [S * B, H, D]"
            if call.cp_size > 1 and self.device == "cpu":
                return (
                    "SBHD context parallelism on the host: "
                    "Megatron's get_pos_emb_on_this_cp_rank needs CUDA"
                )
            if call.cp_size > 1 and call.cos.shape[0] < x.shape[0] * call.cp_size:
                return (
                    "SBHD context parallelism with fewer table rows than S x cp_size: "
                    "Megatron slices the global table"
                )
        return None

    # ---- the ops -------------------------------------------------------------------------------

    def _guarded(self, op, call):
        """Run `op`, synchronizing so that a kernel's fault is raised by its own call."""
        try:
            op(call)
            if self.device != "cpu":
                torch.cuda.synchronize()
        except Exception as e:
            if "illegal memory access" in str(e) or "CUDA error" in str(e):
                x = call.inputs[0]
                self.lost = (
                    f"{call.op} {call.layout} {call.dtype} {'in place ' if call.in_place else ''}"
                    f"shape {tuple(x.shape)} strides {tuple(x.strides)}"
                )
            raise

    def _tables(self, call):
        """cos, sin on the device, [R, 1, 1, emb_dim] contiguous, half layout, SBHD CP-sliced."""
        d = call.emb_dim
        tables = []
        for a, sign in ((call.cos, 1.0), (call.sin, -1.0 if call.inverse else 1.0)):
            t = to_torch(np.ascontiguousarray(a.reshape(a.shape[0], d)), call.table_dtype).to(
                self.device
            )
            if call.table_layout == "interleaved":
                t = torch.cat([t[:, 0::2], t[:, 1::2]], dim=-1)
            t = (t * sign if sign < 0 else t).contiguous()[:, None, None, :]
            if call.layout == "sbhd":
                s = call.inputs[0].shape[0]
                if call.cp_size > 1:  # Megatron's model slices the global table per rank
                    t = self.rope_utils.get_pos_emb_on_this_cp_rank(
                        t[: s * call.cp_size], 0, _Group(call.cp_size, call.cp_rank)
                    )
                t = t[:s]
            t = t.contiguous()
            if self.views:  # a read before or after the table meets a NaN guard
                guarded = mlarope_triton.scratch(t.shape, t.dtype, "cos" if sign > 0 else "sin")
                guarded.copy_(t)
                t = guarded
            tables.append(t)
        return tables

    def _input(self, a: np.ndarray, dtype: str) -> torch.Tensor:
        """A tensor the kernel only reads: the harness's view itself on the host, or a guarded
        copy of a view that broadcasts (a stride 0, which no Megatron caller passes)."""
        if not self.views:
            return _device_copy(a, dtype, self.device)
        view = mlarope_triton.torch_view(a, dtype)
        if 0 not in view.stride():
            return view
        copy = mlarope_triton.scratch(view.shape, view.dtype, "input")
        copy.copy_(view)
        return copy

    def _cu(self, call):
        if call.layout == "sbhd":
            return None
        return torch.from_numpy(call.cu_seqlens.astype(np.int32)).to(self.device)

    def rope(self, call):
        return self._guarded(self._rope, call)

    def _rope(self, call):
        t, out, dtype = call.inputs[0], call.outputs[0], call.dtype
        if t.size == 0:
            return
        cos, sin = self._tables(call)
        cu = self._cu(call)

        def rotate(x):  # in place on x (Megatron's contract), returns it
            return self.q_fn(
                x, cos, sin, call.nope_dim, call.emb_dim, cu, call.cp_rank, call.cp_size
            )

        if self.views:  # the kernel rotates the output buffer itself
            if not call.in_place:
                write(out, mlarope_triton.torch_view(t, dtype), dtype)
            x = mlarope_triton.torch_view(out, dtype)
        else:
            x = _device_copy(t, dtype, self.device, self.contiguous)
        if call.op == "rope":
            y = rotate(x)
            if not self.views:
                write(out, y.cpu(), dtype)
            return
        leaf = torch.zeros(x.shape, dtype=x.dtype, device=self.device, requires_grad=True)
        if self.views:  # the forward kernel rotates this copy in place: between guards too
            inner = mlarope_triton.scratch(x.shape, x.dtype, "autograd's forward input")
            inner.copy_(leaf)  # recorded by autograd, as leaf.clone() is
        else:
            inner = leaf.clone()
        (grad,) = torch.autograd.grad(rotate(inner), leaf, grad_outputs=x)
        write(out, grad.cpu(), dtype)  # on the host, usually the buffer the kernel rotated

    def kv_split(self, call):
        return self._guarded(self._kv_split, call)

    def _kv_split(self, call):
        kv, k_pe = call.inputs
        key, value = call.outputs
        if key.size == 0 and value.size == 0:
            return
        result = self._kv(call, self._input(kv, call.dtype), self._input(k_pe, call.dtype))
        write(key, result[0].cpu().reshape(key.shape), call.dtype)
        write(value, result[1].cpu().reshape(value.shape), call.dtype)

    def _kv(self, call, kv: torch.Tensor, k_pe: torch.Tensor):
        """Megatron's kv entry point on (kv, k_pe): (key, value)."""
        cos, sin = self._tables(call)
        return self.kv_fn(
            kv,
            k_pe,
            cos,
            sin,
            call.emb_dim,
            call.k_dim,
            call.v_dim,
            self._cu(call),
            call.cp_rank,
            call.cp_size,
        )

    def kv_split_backward(self, call):
        return self._guarded(self._kv_split_backward, call)

    def _kv_split_backward(self, call):
        grad_key, grad_value = call.inputs
        grad_kv, grad_k_pe = call.outputs
        if (
            grad_kv.size == 0 and grad_k_pe.size == 0
        ):  # with no heads, grad_k_pe is still written (zeros)
            return
        kv = torch.zeros(
            grad_kv.shape,
            dtype=to_torch(grad_key, call.dtype).dtype,
            device=self.device,
            requires_grad=True,
        )
        k_pe = torch.zeros(grad_k_pe.shape, dtype=kv.dtype, device=self.device, requires_grad=True)
        key, value = self._kv(call, kv, k_pe)
        gk = self._input(grad_key, call.dtype).reshape(key.shape)
        gv = self._input(grad_value, call.dtype).reshape(value.shape)
        d_kv, d_k_pe = torch.autograd.grad((key, value), (kv, k_pe), grad_outputs=(gk, gv))
        write(grad_kv, d_kv.cpu().reshape(grad_kv.shape), call.dtype)
        write(grad_k_pe, d_k_pe.cpu().reshape(grad_k_pe.shape), call.dtype)
