# SPDX-License-Identifier: Apache-2.0
"""liger-kernel's Triton RoPE through mlarope on the host, under Triton's interpreter: the
adapter fuzzed through mlarope.triton.TritonBackend, with the counts of what ran through Liger,
a wrong mapping that the fuzz must catch, and the finding kept by its repro.

Each fuzz runs in a subprocess (``python test_liger.py fuzz ...``): a kernel that stores past a
guard corrupts the memory of the process it runs in, and then only that test fails.

Needs the mlarope package (with mlarope.triton), Debian's python3-torch, and the wheels of
requirements.txt (triton and liger-kernel, installed with --no-deps).
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FINDINGS = os.path.join(HERE, "findings")
sys.path.append(os.path.dirname(HERE))  # after site-packages: adapters/megatron is no package
from adapter_testing import budget as _budget  # noqa: E402
from adapter_testing import fuzz_main, ran, show, subprocess_json  # noqa: E402
from adapter_testing import missing as _missing  # noqa: E402


def budget(cases: int) -> int:  # about 10, 5 and 2 s here at scale 1
    return _budget(cases, "MLAROPE_LIGER_SCALE")


def run_fuzz(adapter_flags: dict, kernel: str = "rope", **fuzz_args) -> dict:
    """mlarope.fuzz of TritonBackend(LigerRope()) (``kernel`` "llama4": LigerLlama4Rope()),
    ``adapter_flags`` set on it, in a subprocess, its draws even (steer=False): the budgets and
    the census here were sized for even draws."""
    fuzz_args.setdefault("steer", False)
    flags = json.dumps(adapter_flags)
    return subprocess_json(__file__, "fuzz", kernel, flags, json.dumps(fuzz_args))


def missing() -> str | None:
    """Why these tests cannot run here, or None (liger_kernel's __init__ needs torch >= 2: the
    adapter loads its rope file alone)."""
    return _missing(("torch", "liger_kernel", "triton", "mlarope.triton"))


if __name__ != "__main__":
    import pytest

    why = missing()
    if why:
        pytest.skip(why, allow_module_level=True)


def test_liger_fuzz_is_clean_where_it_maps(tmp_path, capsys):
    # Narrowed to what Liger's rope can take (half pairs), so most of the budget runs.
    result = run_fuzz(
        {},
        cases=budget(500),
        seed=1,
        out=str(tmp_path),
        size=12,
        layouts="half/half/*",
    )
    show(capsys, "liger-kernel rope under Triton's interpreter, half pairs", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert ran(result["summary"]) >= budget(200), "too few cases ran through Liger"


def test_liger_census_names_every_decline(tmp_path, capsys):
    # The whole space: what Liger cannot take is counted with its reason, and nothing fails.
    result = run_fuzz({}, cases=budget(1500), seed=2, out=str(tmp_path), size=8)
    show(capsys, "liger rope: every op, dtype and flag", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert "half -> half only" in result["summary"]
    assert ran(result["summary"]) >= budget(80)


def test_liger_in_bf16_is_clean_where_it_maps(tmp_path, capsys):
    # bf16 activations and tables, computed as an sm_90 GPU computes them (mlarope.triton):
    # the tables widened to f32 as a model's f32 cache, so Liger computes in f32.
    result = run_fuzz(
        {},
        cases=budget(300),
        seed=4,
        out=str(tmp_path),
        size=12,
        dtypes=["bf16"],
        table_dtypes=["bf16"],
        layouts="half/half/*",
    )
    show(capsys, "liger-kernel rope in bf16", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert ran(result["summary"]) >= budget(120), "too few bf16 cases ran through Liger"


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


def _planted_source(tmp_path, old: str, new: str) -> str:
    """A copy of the installed ops/rope.py with ``old`` (found once) replaced by ``new``: a
    planted bug."""
    sys.path.insert(0, HERE)
    from liger_rope import _ops_file

    with open(_ops_file(), encoding="utf-8") as f:
        text = f.read()
    assert text.count(old) == 1, old
    path = tmp_path / "rope.py"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return str(path)


def test_a_leading_rotary_slice_is_checked(tmp_path):
    # Where nope_dim > 0 ("partial" in fuzz.json's rotary counts) Liger gets whole heads whose
    # leading rotary_dim = emb_dim < head_dim elements it rotates. A kernel that steps between
    # q's heads by rotary_dim, not head_dim, must fail; given the rope slice alone, it passes.
    old = "first_half_q_offsets = tl.arange(0, pad_n_qh)[:, None] * hd"
    source = _planted_source(tmp_path, old, old[:-2] + "rd")
    args = dict(
        cases=budget(60),
        seed=5,
        size=8,
        dtypes=["f32"],
        layouts="half/half/*",
        ops=["rope", "rope_backward"],
    )
    wrong = run_fuzz({"source": source}, out=str(tmp_path / "wrong"), **args)
    with open(tmp_path / "wrong" / "fuzz.json", encoding="utf-8") as f:
        counts = json.load(f)["counts"]
    assert counts["rotary_reached"].get("partial", 0) >= 10, counts["rotary"]
    assert wrong["failing_cases"] > 0, wrong["summary"]
    flags = {"source": source, "leading_slice": False}
    hidden = run_fuzz(flags, out=str(tmp_path / "slice"), **args)
    assert hidden["failing_cases"] == 0, hidden["summary"]


def test_llama4_fuzz_is_clean_where_it_maps(tmp_path, capsys):
    # ops/llama4_rope.py: interleaved pairs, one table row per position for every batch entry.
    result = run_fuzz(
        {},
        "llama4",
        cases=budget(150),
        seed=5,
        out=str(tmp_path),
        size=12,
        layouts="interleaved/interleaved/*",
    )
    show(capsys, "liger-kernel llama4_rope under Triton's interpreter, interleaved pairs", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert ran(result["summary"]) >= budget(50), "too few cases ran through llama4_rope"


def test_llama4_census_names_every_decline(tmp_path, capsys):
    result = run_fuzz({}, "llama4", cases=budget(600), seed=6, out=str(tmp_path), size=8)
    show(capsys, "liger llama4_rope: every op, dtype and flag", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert "interleaved only" in result["summary"]
    assert ran(result["summary"]) >= budget(30)


def test_llama4_wrong_mapping_fails_the_fuzz(tmp_path):
    # sin negated on every call: the fuzz must fail.
    result = run_fuzz(
        {"flip_sin": True},
        "llama4",
        cases=budget(30),
        seed=3,
        out=str(tmp_path),
        size=8,
        layouts="interleaved/interleaved/*",
    )
    assert result["failing_cases"] > 0, result["summary"]


def test_finding_seq1_row_stride():
    # One token per sequence, B > 1, q contiguous as [B, H, 1, D]: Liger rotates the wrong rows
    # (the repro exits 1 when it reproduces). The adapter restrides such views (its docstring).
    repro = os.path.join(FINDINGS, "seq1_row_stride", "repro.py")
    done = subprocess.run(
        [sys.executable, repro], capture_output=True, text=True, timeout=300, cwd=HERE
    )
    assert done.returncode == 1 and "reproduced" in done.stdout, done.stdout + done.stderr


def test_rows_past_2_31_elements_are_rotated_in_a_few_pages():
    # rope.py computes row offsets from pid.to(tl.int64): q and k of 9 rows of one head of
    # 2^28 elements (rotary_dim 64 of them), over lazily mapped reservations, row 8 at 2^31.
    result = subprocess_json(__file__, "large-offset")
    assert result["rotated"] == list(range(9)), result
    assert result["resident_growth_mb"] < 64, result


def _large_offset_main() -> int:
    import mmap

    from mlarope import triton as mt

    mt.interpreter()
    import torch

    sys.path.insert(0, HERE)
    from liger_rope import LigerRope

    liger = LigerRope().liger  # ops/rope.py, loaded as the adapter loads it

    rows, head_dim, rot = 9, 1 << 28, 64

    def reservation():  # [B, H, S, D] = [9, 1, 1, 2^28]: row b starts at b * 2^28
        return mt.reserved((rows, 1, 1, head_dim))

    def resident() -> int:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * mmap.PAGESIZE

    before = resident()
    q, k = reservation(), reservation()
    q[..., :rot] = 1.0
    cos, sin = torch.zeros(1, rot), torch.ones(1, rot)  # a quarter turn: (1, 1) -> (-1, 1)
    q_out, _, _, _ = liger.rope_forward(q, k, cos, sin)
    want = torch.cat([torch.full((rot // 2,), -1.0), torch.full((rot // 2,), 1.0)])
    rotated = [b for b in range(rows) if torch.equal(q_out[b, 0, 0, :rot], want)]
    growth = (resident() - before) / 2**20
    print(json.dumps({"rotated": rotated, "resident_growth_mb": round(growth, 1)}))
    return 0


def _fuzz_main(kernel: str, adapter_flags: str, fuzz_args: str) -> int:
    sys.path.insert(0, HERE)
    from liger_llama4_rope import LigerLlama4Rope
    from liger_rope import LigerRope

    flags = json.loads(adapter_flags)  # "source": another rope.py (a planted bug)
    source = flags.pop("source", None)
    adapter = LigerRope(source) if kernel == "rope" else LigerLlama4Rope()
    return fuzz_main(adapter, json.dumps(flags), fuzz_args)


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "fuzz":
    sys.exit(_fuzz_main(*sys.argv[2:]))
if __name__ == "__main__" and sys.argv[1:] == ["large-offset"]:
    sys.exit(_large_offset_main())
