# SPDX-License-Identifier: Apache-2.0
"""Unsloth's Triton RoPE through mlarope on the host, under Triton's interpreter: the adapter
fuzzed through mlarope.triton.TritonBackend, with the counts of what ran through Unsloth, a
wrong mapping that the fuzz must catch, and Llama-like shapes that the fuzz never draws (several
programs per token's heads, GQA, per-batch position ids, autograd) against the reference.

Each fuzz runs in a subprocess (``python test_unsloth.py fuzz ...``): a kernel that stores past
a guard corrupts the memory of the process it runs in, and then only that test fails.

Needs the mlarope package (with mlarope.triton), Debian's python3-torch, triton (installed with
--no-deps) and unsloth's wheel (adapters/releases.py downloads it once into its cache, or finds
it there): without them the tests skip.
"""

import json
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(HERE))  # after site-packages: adapters/megatron is no package
from adapter_testing import budget as _budget  # noqa: E402
from adapter_testing import (  # noqa: E402
    fuzz_main,
    missing_triton_release,  # noqa: E402
    ran,
    show,
    subprocess_json,
)


def budget(cases: int) -> int:  # about 20, 11, 12 and 4 s here at scale 1
    return _budget(cases, "MLAROPE_UNSLOTH_SCALE")


def run_fuzz(adapter_flags: dict, **fuzz_args) -> dict:
    """mlarope.fuzz of TritonBackend(UnslothRope()), ``adapter_flags`` set on it, in a
    subprocess, its draws even (steer=False): the budgets and the census here were sized for
    even draws."""
    fuzz_args.setdefault("steer", False)
    return subprocess_json(__file__, "fuzz", json.dumps(adapter_flags), json.dumps(fuzz_args))


def missing() -> str | None:
    # unsloth's __init__ needs a GPU: the adapter loads its rope file alone
    return missing_triton_release("unsloth")


if __name__ != "__main__":
    import pytest

    why = missing()
    if why:
        pytest.skip(why, allow_module_level=True)


def test_unsloth_fuzz_is_clean_where_it_maps(tmp_path, capsys):
    # Narrowed to what Unsloth's rope can take (half pairs), so most of the budget runs.
    result = run_fuzz(
        {},
        cases=budget(300),
        seed=1,
        out=str(tmp_path),
        size=12,
        layouts="half/half/*",
    )
    show(capsys, "unsloth fast_rope_embedding under Triton's interpreter, half pairs", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert ran(result["summary"]) >= budget(120), "too few cases ran through Unsloth"


def test_unsloth_census_names_every_decline(tmp_path, capsys):
    # The whole space: what Unsloth cannot take is counted with its reason, and nothing fails.
    result = run_fuzz({}, cases=budget(1000), seed=2, out=str(tmp_path), size=8)
    show(capsys, "unsloth rope: every op, dtype and flag", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert "half -> half only" in result["summary"]
    assert "two entries of a pair differ" in result["summary"]
    assert ran(result["summary"]) >= budget(60)


def test_unsloth_in_bf16_is_clean_where_it_maps(tmp_path, capsys):
    # bf16 activations and tables, computed as an sm_90 GPU computes them (mlarope.triton):
    # the tables widened to f32 as a model's f32 cache, so Unsloth computes in f32.
    result = run_fuzz(
        {},
        cases=budget(150),
        seed=4,
        out=str(tmp_path),
        size=12,
        dtypes=["bf16"],
        table_dtypes=["bf16"],
        layouts="half/half/*",
    )
    show(capsys, "unsloth fast_rope_embedding in bf16", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert ran(result["summary"]) >= budget(60), "too few bf16 cases ran through Unsloth"


def test_a_wrong_mapping_fails_the_fuzz(tmp_path):
    # sin negated on every call (the rotation the other way): the fuzz must fail.
    result = run_fuzz(
        {"flip_sin": True},
        cases=budget(30),
        seed=3,
        out=str(tmp_path),
        size=8,
        dtypes=["f32"],
        layouts="half/half/*",
    )
    assert result["failing_cases"] > 0, result["summary"]


def test_rows_that_differ_per_batch_entry_are_drawn_and_checked(tmp_path):
    # Hugging Face's position_ids are [B, S], each batch entry its own rows: SBHD entries
    # offset apart, counted as "per_entry" in fuzz.json. Entry 0's rows for all must fail.
    args = dict(cases=budget(120), seed=7, size=8, dtypes=["f32"], layouts="half/half/*")
    clean = run_fuzz({}, out=str(tmp_path / "clean"), **args)
    assert clean["failing_cases"] == 0, clean["summary"]
    with open(tmp_path / "clean" / "fuzz.json", encoding="utf-8") as f:
        counts = json.load(f)["counts"]
    assert counts["rows_reached"].get("per_entry", 0) >= 3, counts["rows"]
    wrong = run_fuzz({"first_entry_rows": True}, out=str(tmp_path / "wrong"), **args)
    assert wrong["failing_cases"] > 0, wrong["summary"]


def _planted_root(tmp_path, old: str, new: str) -> str:
    """A copy of the release's tree whose kernel has ``old`` (found once) replaced by ``new``:
    a planted bug."""
    sys.path.insert(0, HERE)
    from unsloth_rope import KERNEL, release_root

    root = tmp_path / "planted"
    shutil.copytree(release_root(), root)
    path = root / KERNEL
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")
    return str(root)


def _failing_lanes(out) -> list:
    """Heads x emb_dim / 2 of each failing case a fuzz wrote into ``out``."""
    with open(out / "fuzz.json", encoding="utf-8") as f:
        failures = json.load(f)["failures"]
    found = [re.search(r"\bH=(\d+) .*\bemb=(\d+)", f["case"]) for f in failures]
    return [int(m.group(1)) * (int(m.group(2)) // 2) for m in found]


def test_heads_in_several_programs_are_drawn_and_checked(tmp_path):
    # More heads than one program takes (next_pow2(H) x next_pow2(emb_dim / 2) > 1024 lanes):
    # the generators draw H x emb_dim / 2 over 1024 at every size ("over 32" heads in
    # fuzz.json), here every head given to Q, the draws steered to what Unsloth takes. A
    # kernel that starts program g at head g, not at g x HEADS_Q, must fail, and only there.
    root = _planted_root(tmp_path, "group * HEADS_Q,\n", "group,\n")
    result = run_fuzz(
        {"grouped_query": False, "root": root},
        cases=budget(300),
        seed=8,
        out=str(tmp_path / "out"),
        size=8,
        dtypes=["f32"],
        layouts="half/half/*",
        ops=["rope", "rope_backward"],
        steer=True,
    )
    with open(tmp_path / "out" / "fuzz.json", encoding="utf-8") as f:
        counts = json.load(f)["counts"]
    assert counts["heads_reached"].get("over 32", 0) >= 5, counts["heads"]
    assert result["failing_cases"] > 0, result["summary"]
    assert min(_failing_lanes(tmp_path / "out")) > 1024


def test_grouped_query_heads_in_one_launch_are_checked(tmp_path):
    # A rope call's heads go to Unsloth's Q and K, of different counts, in one launch. A kernel
    # that masks K's heads with Q's count must fail; given every head as Q it would pass.
    old = "(group - n_groups_Q) * HEADS_K,\n            n_heads_K,\n"
    root = _planted_root(tmp_path, old, old.replace("n_heads_K,", "n_heads_Q,"))
    args = dict(cases=budget(120), seed=9, size=8, dtypes=["f32"], layouts="half/half/*")
    wrong = run_fuzz({"root": root}, out=str(tmp_path / "wrong"), **args)
    assert wrong["failing_cases"] > 0, wrong["summary"]
    hidden = run_fuzz({"root": root, "grouped_query": False}, out=str(tmp_path / "q"), **args)
    assert hidden["failing_cases"] == 0, hidden["summary"]


def test_llama_shapes_match_the_reference():
    # What the generators never draw: Llama-like heads (Q 24 x 128 in two programs of 16 heads,
    # the second half masked; K 6 heads, GQA), per-batch position ids, and autograd's own
    # backward, each batch entry checked against the reference (THD with its position ids).
    result = subprocess_json(__file__, "llama")
    for path in ("position_ids", "no position_ids"):
        assert result[path]["q_programs_per_row"] == 2, result
        assert result[path]["forward"] == "ok" and result[path]["backward"] == "ok", result


def _within_tolerance(y, ref, x, cos, sin) -> bool:
    """|y - ref| <= ulp(ref) + 4 eps_f32 (|u c| + |v s|) per element, the harness's f32 model
    (with one angle per pair the adjoint's terms are the same): y, ref, x [S, H, D] (x the
    input), cos and sin the rows of the S tokens, [S, D]."""
    import numpy as np

    h = x.shape[-1] // 2
    u, v = x[..., :h].astype(np.float64), x[..., h:].astype(np.float64)
    c, s = cos[:, None, :h].astype(np.float64), sin[:, None, :h].astype(np.float64)
    terms = np.concatenate([abs(u * c) + abs(v * s), abs(v * c) + abs(u * s)], axis=-1)
    bound = np.spacing(np.abs(ref)) + 4 * 2.0**-24 * terms
    return bool((np.abs(y.astype(np.float64) - ref) <= bound).all())


def _llama_main() -> int:
    sys.path.insert(0, HERE)
    from unsloth_rope import load

    unsloth = load()
    import numpy as np
    import torch

    import mlarope

    B, S, D, R, heads = 2, 6, 128, 64, {"q": 24, "k": 6}
    torch.manual_seed(5)
    rng = np.random.default_rng(5)
    angles = np.arange(R)[:, None] * 10000.0 ** (-np.arange(D // 2) / (D // 2))
    angles = np.concatenate([angles, angles], axis=1)  # Hugging Face's cat(freqs, freqs)
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    report = {}
    for path in ("position_ids", "no position_ids"):
        if path == "position_ids":
            rows = rng.integers(0, R, (B, S))
            ids = torch.from_numpy(rows)
        else:
            rows, ids = np.tile(np.arange(S), (B, 1)), None
        # As LlamaAttention_fast_forward: projections [B, S, H * D] (not leaves) viewed as
        # [B, H, S, D]; x, y, dx and grad below are [B, S, H, D].
        leaf = {n: torch.randn(B, S, h * D, requires_grad=True) for n, h in heads.items()}
        views = [(leaf[n] * 1).view(B, S, h, D).transpose(1, 2) for n, h in heads.items()]
        tables = torch.from_numpy(cos), torch.from_numpy(sin)
        outs = dict(zip(heads, unsloth.fast_rope_embedding(*views, *tables, ids)))
        grad = {n: torch.randn(B, S, h, D) for n, h in heads.items()}
        loss = sum((outs[n] * grad[n].transpose(1, 2)).sum() for n in heads)
        loss.backward()
        forward = backward = "ok"
        for n, h in heads.items():
            x = leaf[n].detach().view(B, S, h, D).numpy()
            y = outs[n].detach().transpose(1, 2).numpy()
            dx = leaf[n].grad.view(B, S, h, D).numpy()
            g = grad[n].numpy()
            for b in range(B):
                kwargs = dict(
                    nope_dim=0,
                    emb_dim=D,
                    in_layout="half",
                    out_layout="half",
                    layout="thd",
                    cu_seqlens=np.array([0, S], np.int32),
                    max_seqlen=S,
                    position_ids=rows[b].astype(np.int64),
                )
                c, s = cos[rows[b]], sin[rows[b]]
                ref, _ = mlarope.rope(x[b], cos, sin, **kwargs)
                if not _within_tolerance(y[b], ref, x[b], c, s):
                    forward = f"{n}[{b}] differs"
                ref, _ = mlarope.rope_backward(g[b], cos, sin, **kwargs)
                if not _within_tolerance(dx[b], ref, g[b], c, s):
                    backward = f"{n}[{b}] differs"
        per_program = unsloth._heads_per_program(heads["q"], unsloth.next_power_of_2(D // 2))
        report[path] = {
            "q_programs_per_row": -(-heads["q"] // per_program),
            "forward": forward,
            "backward": backward,
        }
    print(json.dumps(report))
    return 0


def _fuzz_main(adapter_flags: str, fuzz_args: str) -> int:
    sys.path.insert(0, HERE)
    from unsloth_rope import UnslothRope

    flags = json.loads(adapter_flags)  # "root": another tree than the release's (a planted bug)
    adapter = UnslothRope(flags.pop("root", None))
    return fuzz_main(adapter, json.dumps(flags), fuzz_args)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "fuzz":
    sys.exit(_fuzz_main(*sys.argv[2:]))
if __name__ == "__main__" and sys.argv[1:] == ["llama"]:
    sys.exit(_llama_main())
