# SPDX-License-Identifier: Apache-2.0
"""megatron-core 0.16.1 through mlarope on the host: its unfused PyTorch RoPE fuzzed through the
adapter, its YaRN tables against ours, and the findings kept by their repro directories.

Run by ci/python-test.sh (after `pip install .` and megatron-core); the fuzz summaries, with the
supported and unsupported counts, are printed into the CI log.
"""

import math
import os
import random
import re

import numpy as np
import torch

import megatron_sources
import mlarope
from megatron_unfused import MegatronUnfused, MegatronWithCosSin

HERE = os.path.dirname(os.path.abspath(__file__))
FINDINGS = os.path.join(HERE, "findings")
PRECISION = os.path.join(HERE, "precision")  # cases of a precision class, not findings
# Case budgets (not seconds), so that what runs is the same on a loaded machine: about 20, 5
# and 10 s here. MLAROPE_MEGATRON_SCALE multiplies them.
SCALE = float(os.environ.get("MLAROPE_MEGATRON_SCALE", "1"))


def budget(cases: int) -> int:
    return max(1, int(cases * SCALE))


def show(capsys, title: str, summary: str) -> None:
    with capsys.disabled():
        print(f"\n--- {title}\n{summary}")


def test_unfused_fuzz_is_clean_where_megatron_maps(tmp_path, capsys):
    # Narrowed to what the unfused path can take (f32, out of place), so most of the budget runs.
    result = mlarope.fuzz(
        MegatronUnfused(),
        cases=budget(18000),
        seed=1,
        steer=False,  # the budgets here were sized for even draws
        out=str(tmp_path),
        ops=["rope", "rope_backward"],
        dtypes=["f32"],
        table_dtypes=["f32"],
        in_place=False,
        quiet=True,
    )
    show(
        capsys,
        f"megatron-core {megatron_sources.load().version} unfused rope, f32",
        result["summary"],
    )
    assert result["failing_cases"] == 0
    ran = re.search(r"\((\d+) of \d+ cases ran\)", result["summary"])
    assert ran and int(ran.group(1)) >= budget(1000), (
        "too few cases ran through Megatron to mean anything"
    )


def test_unfused_census_over_every_op_and_dtype(tmp_path, capsys):
    # The whole space: what Megatron's unfused path cannot take is counted, with the reason.
    result = mlarope.fuzz(
        MegatronUnfused(),
        cases=budget(7000),
        seed=2,
        out=str(tmp_path),
        quiet=True,
        steer=False,  # a census of the whole space
    )
    show(capsys, "megatron unfused rope: every op, dtype and flag", result["summary"])
    assert result["failing_cases"] == 0
    for reason in (
        "kv_split is not provided",
        "no in-place form",
        "bf16 activations",
        "docs/megatron.md, finding 1",
    ):
        assert reason in result["summary"]


def yarn_params(rng: random.Random) -> dict:
    return dict(
        rotary_base=rng.choice([10000.0, 500000.0, rng.uniform(100, 1e6)]),
        scaling_factor=rng.choice([1.0, 4.0, 40.0, rng.uniform(0.5, 100)]),
        original_max_position_embeddings=rng.choice([64, 4096, rng.randint(16, 100000)]),
        beta_fast=rng.uniform(4, 64),
        beta_slow=rng.uniform(0.25, 4),
        mscale=rng.uniform(0.1, 2),
        mscale_all_dim=rng.choice([0.0, 1.0, rng.uniform(0, 2)]),
    )


class _OneRank:
    def size(self):
        return 1

    def rank(self):
        return 0


def test_yarn_tables_match_megatron():
    """mlarope.yarn_tables (double, rounded once) against Megatron's YarnRotaryEmbedding (float32).

    The tolerance is Megatron's float32 error, derived: its inverse frequencies
    1 / base**(2j/d) carry the exponent's rounding times ln(base) (0.5 eps * ln(base)) plus
    about 4 eps of pow, division, scaling and the ramp blend; the f32 product with the position
    adds 0.5 eps; so the angle theta is off by at most (ln(base)/2 + 4) eps |theta|, and cos/sin,
    the mscale product and our own rounding add 2 eps. Per element:
        |ours - megatron| <= m * eps_f32 * ((ln(base)/2 + 4) * |theta| + 2).
    Measured over these 150 parameter sets, the worst element uses 0.69 of it.
    """
    Y = megatron_sources.yarn_on_host(megatron_sources.load().yarn)
    rng = random.Random(7)
    eps = 2.0**-23
    worst = 0.0
    for _ in range(150):
        d, rows, offset = (
            2 * rng.randint(1, 128),
            rng.randint(1, 3000),
            rng.choice([0, rng.randint(0, 5000)]),
        )
        p = yarn_params(rng)
        embedding = Y.YarnRotaryEmbedding(d, use_cpu_initialization=True, cp_group=_OneRank(), **p)
        theirs = [
            x.reshape(rows, d).double().numpy()
            for x in embedding.get_cached_cos_sin(rows, offset=offset, dtype=torch.float32)
        ]
        ours = mlarope.yarn_tables(rows, d, offset=offset, **p)
        # The angles per pair, from our own table at position 1 (concentration 1).
        c1, s1 = mlarope.yarn_tables(2, d, concentration=1.0, **p)
        inv_freq = np.arctan2(s1[1].astype(np.float64), c1[1].astype(np.float64))
        theta = np.arange(offset, offset + rows)[:, None] * inv_freq[None, :]
        m = Y._yarn_get_concentration_factor(p["scaling_factor"], p["mscale"], p["mscale_all_dim"])
        allowed = abs(m) * eps * ((math.log(p["rotary_base"]) / 2 + 4) * np.abs(theta) + 2)
        for o, t in zip(ours, theirs):
            ratio = np.abs(o.astype(np.float64) - t) / allowed
            assert ratio.max() <= 1.0, (
                f"{p} d={d} rows={rows} offset={offset}: {ratio.max():.2f} of the tolerance"
            )
            worst = max(worst, float(ratio.max()))
    assert worst > 0.05, (
        "the comparison is not sensitive: Megatron and ours agree too exactly to trust"
    )


def finding(name: str) -> str:
    return os.path.join(FINDINGS, name)


def results(report: dict) -> dict:
    return {check: outcome for check, outcome, _ in report["results"]}


def test_precision_bf16_products_rounded():
    # Megatron's unfused path in bf16: t * cos and rotate_half(t) * sin each rounded to bf16. The
    # table is the one Megatron itself makes from the angles (the adapter checks it), so the
    # error is its arithmetic: value fails, while round trip and adjoint (bounded in the
    # activation dtype) pass.
    case = os.path.join(PRECISION, "bf16_unfused_rounding")
    report = mlarope.check(MegatronUnfused(low_precision=True), case)
    outcomes = results(report)
    assert (
        outcomes["value"] == "fail"
        and outcomes["round_trip"] == "pass"
        and outcomes["adjoint"] == "pass"
    )


def test_finding_2_with_cos_sin_takes_cos_of_cos():
    # apply_rotary_pos_emb_with_cos_sin without flash-attn stacks cos and sin as freqs and takes
    # cos() and sin() of them again; apply_rotary_pos_emb on the same case is right.
    case = finding("with_cos_sin_fallback")
    wrong = results(mlarope.check(MegatronWithCosSin(), case))
    assert wrong["value"] == "fail" and wrong["round_trip"] == "fail"
    assert mlarope.check(MegatronUnfused(), case)["ok"]


def test_adapter_declines_by_name():
    # A call the adapter has no mapping for is declined with its reason, never run wrongly.
    case = os.path.join(PRECISION, "bf16_unfused_rounding")
    report = mlarope.check(MegatronUnfused(), case)
    assert report["unsupported"] and "bf16 activations" in report["unsupported"]


# ---- The fused adapter's mapping, on the host ---------------------------------------------------
# Megatron's fused MLA kernels are Triton (GPU only: ci/gpu-check.sh fuzzes them). Here the
# adapter runs against stand-ins written from the kernels' source (rotary_fwd_q_kernel,
# rotary_fwd_kv_kernel: the row each program reads, interleaved in, half out, the key and value
# split), so that a wrong mapping in the adapter shows before a device is lent.


def _rows(total: int, cu, cp_rank: int, cp_size: int, batch: int):
    """The table row each program of Megatron's kernels reads (its _get_thd_token_idx)."""
    if cu is None:
        return torch.arange(total) // batch
    local = (cu.cpu().long() // cp_size).tolist()
    rows = []
    for pid in range(total):
        seq = next((i for i in range(len(local) - 1) if local[i + 1] > pid), None)
        if seq is None:
            rows.append(-1)  # a padding row: the kernels read table row -1
            continue
        idx, length = pid - local[seq], local[seq + 1] - local[seq]
        if cp_size > 1:
            idx = (
                idx + cp_rank * length // 2
                if idx < length // 2
                else (idx - length // 2) + (2 * cp_size - cp_rank - 1) * length // 2
            )
        rows.append(idx)
    return torch.tensor(rows, dtype=torch.long)


def _table_rows(cos, sin, rows, emb_dim, rank):
    """The table rows each program reads, float32, broadcastable against a rank-`rank` tensor."""
    c = cos.reshape(cos.shape[0], emb_dim).float()[rows]
    s = sin.reshape(sin.shape[0], emb_dim).float()[rows]
    while c.dim() < rank:
        c, s = c.unsqueeze(-2), s.unsqueeze(-2)
    return c, s


def _rotate(x, cos, sin, rows, emb_dim):
    """Interleaved pairs in, half out, in the kernels' float32 arithmetic (float32 result)."""
    c, s = _table_rows(cos, sin, rows, emb_dim, x.dim())
    h = emb_dim // 2
    x1, x2 = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.cat([x1 * c[..., :h] - x2 * s[..., :h], x2 * c[..., h:] + x1 * s[..., h:]], dim=-1)


def _adjoint(g, cos, sin, rows, emb_dim):
    """The transpose of _rotate: half in, interleaved out (Megatron's rotary_bwd_q_kernel)."""
    c, s = _table_rows(cos, sin, rows, emb_dim, g.dim())
    h = emb_dim // 2
    gu, gv = g[..., :h].float(), g[..., h:].float()
    return torch.stack(
        [gu * c[..., :h] + gv * s[..., h:], gv * c[..., h:] - gu * s[..., :h]], dim=-1
    ).flatten(-2)


class _StandInQ(torch.autograd.Function):
    """In place like ApplyMLARotaryEmbQ: forward rotates t's rope part, backward the gradient's."""

    @staticmethod
    def forward(ctx, t, cos, sin, qk_head_dim, emb_dim, cu, cp_rank, cp_size):
        flat = t.view(-1, t.shape[-2], t.shape[-1]) if cu is None else t
        rows = _rows(flat.shape[0], cu, cp_rank, cp_size, t.shape[1] if cu is None else 1)
        flat[..., qk_head_dim:] = _rotate(
            flat[..., qk_head_dim:].clone(), cos, sin, rows, emb_dim
        ).to(t.dtype)
        ctx.mark_dirty(t)
        ctx.save_for_backward(cos, sin)
        ctx.rows, ctx.qk_head_dim, ctx.emb_dim = rows, qk_head_dim, emb_dim
        return t

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        g = grad.contiguous().clone()
        flat = g.view(-1, g.shape[-2], g.shape[-1])
        n = ctx.qk_head_dim
        flat[..., n:] = _adjoint(flat[..., n:], cos, sin, ctx.rows, ctx.emb_dim).to(g.dtype)
        return g, None, None, None, None, None, None, None


def stand_in_q(t, cos, sin, qk_head_dim, emb_dim, cu, cp_rank, cp_size):
    return _StandInQ.apply(t, cos, sin, qk_head_dim, emb_dim, cu, cp_rank, cp_size)


class _StandInKV(torch.autograd.Function):
    """Like ApplyMLARotaryEmbKV: key = [k_nope, rope(k_pe)] for every head, value; its backward
    copies the nope and value gradients and rotates back the head sum of the rope gradients."""

    @staticmethod
    def forward(ctx, kv, k_pos_emb, cos, sin, emb_dim, k_dim, v_dim, cu, cp_rank, cp_size):
        lead, heads = kv.shape[:-2], kv.shape[-2]
        flat = kv.reshape(int(np.prod(lead)), heads, kv.shape[-1])
        pe = k_pos_emb.reshape(-1, emb_dim)
        rows = _rows(flat.shape[0], cu, cp_rank, cp_size, kv.shape[1] if cu is None else 1)
        rotated = (
            _rotate(pe, cos, sin, rows, emb_dim).to(kv.dtype)[:, None, :].expand(-1, heads, -1)
        )
        key = torch.cat([flat[..., :k_dim], rotated], dim=-1)
        ctx.save_for_backward(cos, sin)
        ctx.rows, ctx.k_dim, ctx.emb_dim, ctx.pe_shape = rows, k_dim, emb_dim, k_pos_emb.shape
        return key.reshape(*lead, heads, k_dim + emb_dim), flat[..., k_dim:].reshape(
            *lead, heads, v_dim
        )

    @staticmethod
    def backward(ctx, dk, dv):
        cos, sin = ctx.saved_tensors
        k = ctx.k_dim
        d_kv = torch.cat([dk[..., :k], dv], dim=-1)
        summed = dk[..., k:].float().sum(dim=-2).reshape(-1, ctx.emb_dim)  # float32 over the heads
        d_pe = _adjoint(summed, cos, sin, ctx.rows, ctx.emb_dim).to(dk.dtype).reshape(ctx.pe_shape)
        return d_kv, d_pe, None, None, None, None, None, None, None, None


def stand_in_kv(kv, k_pos_emb, cos, sin, emb_dim, k_dim, v_dim, cu, cp_rank, cp_size):
    return _StandInKV.apply(kv, k_pos_emb, cos, sin, emb_dim, k_dim, v_dim, cu, cp_rank, cp_size)


def test_fused_adapter_maps_every_op_onto_the_kernels_semantics(tmp_path, capsys):
    from megatron_fused import MegatronFusedMLA

    backend = MegatronFusedMLA(
        device="cpu", q_fn=stand_in_q, kv_fn=stand_in_kv, decline_padding=True
    )
    result = mlarope.fuzz(
        backend,
        cases=budget(14000),
        seed=3,
        steer=False,  # the budgets here were sized for even draws
        out=str(tmp_path),
        layouts="interleaved/half/*",
        quiet=True,
    )
    show(
        capsys,
        "megatron fused MLA adapter on host stand-ins of its Triton kernels",
        result["summary"],
    )
    assert result["failing_cases"] == 0
    ran = re.search(r"\((\d+) of \d+ cases ran\)", result["summary"])
    assert ran and int(ran.group(1)) >= budget(300)
