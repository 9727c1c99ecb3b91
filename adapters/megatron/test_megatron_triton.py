# SPDX-License-Identifier: Apache-2.0
"""Megatron's fused MLA Triton kernels on the host, under Triton's interpreter
(``mlarope.triton``): the fuzz over every autotune config (BLOCK_H 1..128) of 0.16.1
(installed) and of the newest release (its RoPE files read out of its sdist by
adapters/releases.py), and the findings of these kernels replayed, each with one cause
(finding 5, the q kernels' in-place race, with the race check on, and again with
barrier.patch applied to a copy of the release's files).

Each run is a subprocess (``python test_megatron_triton.py fuzz|check ...``): a kernel that
stores past a guard corrupts the memory of the process it runs in, and then only that test
fails. Where that sdist can be neither found in the cache nor downloaded, those tests skip,
saying so.
"""

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FINDINGS = os.path.join(HERE, "findings")
sys.path.append(os.path.dirname(HERE))  # after site-packages: adapters/megatron is no package
from adapter_testing import (  # noqa: E402
    apply_patch,  # noqa: E402
    fuzz_result,
    ran,
    show,
    subprocess_json,
)
from adapter_testing import budget as _budget  # noqa: E402
from adapter_testing import missing as _missing  # noqa: E402

BLOCK_H = [1, 2, 4, 8, 16, 32, 64, 128]  # the kernels' autotune configs, in both releases


def budget(cases: int) -> int:
    return _budget(cases, "MLAROPE_MEGATRON_SCALE")


def run(*args: str, root: str | None = None) -> dict:
    """This file run with ``args`` in a subprocess, another release's files when ``root``."""
    return subprocess_json(__file__, *args, env={"MLAROPE_MEGATRON_ROOT": root} if root else None)


if __name__ != "__main__":
    import pytest

    sys.path.insert(0, HERE)
    why = _missing(("torch", "triton", "megatron", "mlarope.triton"))
    if why:
        pytest.skip(why, allow_module_level=True)

    @pytest.fixture(scope="module")
    def release_root(request):
        """None for the installed 0.16.1; a folder with the newest release's files."""
        if request.param == megatron_sources.VERSION:
            yield None
            return
        import releases

        try:
            root = releases.root("megatron", request.param)
        except OSError as e:  # not in the cache, and no network
            pytest.skip(f"megatron-core {request.param}'s sdist is not at hand: {e}")
        yield root

    import megatron_sources

    both_releases = pytest.mark.parametrize(
        "release_root", [megatron_sources.VERSION, megatron_sources.NEWEST], indirect=True
    )

    @both_releases
    def test_fused_fuzz_is_clean_on_every_config(release_root, tmp_path, capsys):
        # Every case once per BLOCK_H; the two findings are declined by name (tested below).
        from megatron_fused import FUZZ_NARROWING  # what the kernels can take

        # steer=False: the budget here was sized for even draws
        args = dict(
            cases=budget(90), seed=1, out=str(tmp_path), size=30, steer=False, **FUZZ_NARROWING
        )
        result = run("fuzz", json.dumps(args), root=release_root)
        show(capsys, f"megatron-core {result['version']} fused MLA kernels, interpreter", result)
        assert result["failing_cases"] == 0, result["summary"]
        for block_h in BLOCK_H:  # every config ran every case
            assert f"BLOCK_H={block_h} {budget(90)}/0" in result["summary"], result["summary"]
        assert ran(result["summary"]) >= budget(90) * len(BLOCK_H) // 8, "too few cases ran"

    @both_releases
    def test_finding_3_head_mask_fails_on_exactly_the_configs_it_predicts(release_root):
        # 5 heads: a config whose BLOCK_H is below the head count and does not divide it leaves
        # the last block of a token covering heads past the last, which the mask lets through
        # (its offsets are from the block's first head); BLOCK_H 1 divides 5, 8 and above make
        # one block per token, whose first head is head 0.
        case = os.path.join(FINDINGS, "fused_head_mask_f32")
        heads = 5
        reports = run("check", case, root=release_root)
        assert sorted(reports) == sorted(f"BLOCK_H={b}" for b in BLOCK_H), sorted(reports)
        for block_h in BLOCK_H:
            report = reports[f"BLOCK_H={block_h}"]
            spoiled = block_h < heads and heads % block_h != 0
            lines = "\n".join(report["lines"])
            assert report["ok"] != spoiled, f"BLOCK_H={block_h}:\n{lines}"
            if spoiled:  # the heads past the last: the next token's, and past the end of t
                value = next(line for line in report["lines"] if line.startswith("value"))
                assert "fail" in value, lines

    @both_releases
    def test_finding_4_padding_rows_fail_on_every_config(release_root):
        # 2 heads (no config of finding 3 touches them): a THD row past cu_seqlens[-1] keeps
        # position -1, so the kernel reads the table row before the table (a NaN guard here)
        # and rotates the row, which the semantics pass through.
        case = os.path.join(FINDINGS, "fused_q_thd_padding_rows_2_heads")
        reports = run("check", case, root=release_root)
        assert sorted(reports) == sorted(f"BLOCK_H={b}" for b in BLOCK_H), sorted(reports)
        for report in reports.values():
            value = next(line for line in report["lines"] if line.startswith("value"))
            assert not report["ok"] and "fail" in value and "got nan" in value, value

    @both_releases
    def test_finding_6_token_offsets_wrap_past_2_31_elements_and_int64_ends_it(release_root):
        # Token 8 of a THD q with 2^28 elements per token starts at 2^31 elements: the q
        # kernel's i32 pid_m * stride_x_seq wraps and its load lands 7 GiB before q, which
        # mlarope.triton stops. With int64.patch (pid_m cast to int64) every token is rotated.
        folder = os.path.join(FINDINGS, "fused_int32_token_offset")
        repro = os.path.join(folder, "repro.py")
        done = run_repro(repro, release_root)
        out = done.stdout + done.stderr
        assert done.returncode == 1 and "reproduced" in done.stdout, out
        assert "kernel rotary_fwd_q_kernel loads at" in out, out
        assert "7516193024 bytes before the storage of its argument 'Q'" in out, out
        patched = run("patched-root", os.path.join(folder, "int64.patch"), root=release_root)
        fixed = run_repro(repro, patched["root"])
        assert fixed.returncode == 0, fixed.stdout + fixed.stderr
        assert "all 9 tokens rotated" in fixed.stdout, fixed.stdout

    @both_releases
    @pytest.mark.parametrize("direction", ["forward", "backward"])
    def test_finding_5_q_kernels_race_in_place_and_a_barrier_ends_it(release_root, direction):
        # The q kernels load the rope slice (interleaved pairs forward, halves backward) and
        # store the other layout over the same bytes with no barrier between: element i's
        # store lands on bytes element i / 2 loaded. The race check names both lines; with
        # barrier.patch (a tl.debug_barrier() before the stores) every check passes.
        case = os.path.join(FINDINGS, "fused_q_in_place_race", direction)
        # rope_backward runs the forward kernel first (autograd): its barrier alone, so that
        # the backward kernel is reached.
        first = "forward-barrier" if direction == "backward" else "as-released"
        report = run("check-races", case, first, root=release_root)
        kernel = "rotary_fwd_q_kernel" if direction == "forward" else "rotary_bwd_q_kernel"
        races = next(line for line in report["lines"] if line.startswith("races"))
        assert not report["ok"] and f"races: kernel {kernel}, within program" in races, races
        at = "fused_mla_yarn_rope_apply.py:"
        assert any(f"stores it at {at}{n}" in races for n in report["store_lines"]), races
        assert any(f"loads it at {at}{n}" in races for n in report["load_lines"]), races
        others = [line for line in report["lines"] if not line.startswith("races")]
        assert all(line.split()[1] != "fail" for line in others), "\n".join(others)
        patched = run("check-races", case, "barrier", root=release_root)
        assert patched["ok"], "\n".join(patched["lines"])


def run_repro(repro: str, root: str | None):
    """A finding's repro.py in a subprocess, on the release at ``root`` (None: the installed)."""
    import subprocess

    env = {**os.environ, **({"MLAROPE_MEGATRON_ROOT": root} if root else {})}
    return subprocess.run(
        [sys.executable, repro], capture_output=True, text=True, timeout=600, env=env
    )


def _backend(findings: bool, races: bool = False):
    """TritonBackend over the fused adapter: the known findings declined by name, or not;
    the races check offered or not (finding 5: every call of the q kernels races, so the fuzz
    leaves the check out and the finding's replay runs it). With the findings run, each
    config is checked on its own (finding 3 makes configs disagree by design of its replay)."""
    from megatron_fused import MegatronFusedMLA
    from mlarope import triton as mt

    mt.interpreter()
    adapter = MegatronFusedMLA(
        device="cpu", decline_padding=not findings, decline_head_mask=not findings
    )
    return mt.TritonBackend(adapter, races=races, config_bitwise=not findings)


def _patched_root_main(patch: str) -> int:
    """A root with ``patch`` applied to the loaded release, in a folder left for the caller."""
    print(json.dumps({"root": _patched_root(patch, tempfile.mkdtemp())}))
    return 0


def _patched_root(patch: str, folder: str, hunks: int | None = None) -> str:
    """A root for ``MLAROPE_MEGATRON_ROOT``: the loaded release's RoPE files and version with
    ``patch`` (a unified diff of fused_mla_yarn_rope_apply.py) applied, hunk by hunk (its first
    ``hunks`` only, when given), each of whose context must be found exactly once."""
    import shutil

    import megatron_sources

    core = megatron_sources._find_root()
    version = megatron_sources._version()
    for sub in ("models/common/embeddings", "fusions"):
        shutil.copytree(os.path.join(core, sub), os.path.join(folder, "megatron/core", sub))
    info = os.path.join(folder, f"megatron_core-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(f"Name: megatron-core\nVersion: {version}\n")
    target = os.path.join(folder, "megatron/core/fusions/fused_mla_yarn_rope_apply.py")
    with open(target, encoding="utf-8") as f:
        text = apply_patch(f.read(), patch, hunks)
    with open(target, "w", encoding="utf-8") as f:
        f.write(text)
    return folder


def _check_races_main(case_dir: str, files: str) -> int:
    """Every check of the case with races checked, in one config (BLOCK_H=4), on the loaded
    release's files ``as-released``, with barrier.patch (``barrier``) or with its forward hunk
    only (``forward-barrier``); and the source lines of the q kernels' stores and loads that
    the race report should name."""
    import mlarope

    if files != "as-released":
        folder = tempfile.mkdtemp()
        patch = os.path.join(FINDINGS, "fused_q_in_place_race", "barrier.patch")
        hunks = {"barrier": None, "forward-barrier": 1}[files]
        os.environ["MLAROPE_MEGATRON_ROOT"] = _patched_root(patch, folder, hunks)
    import megatron_sources

    backend = _backend(findings=True, races=True)
    backend.select_variant("BLOCK_H=4")
    report = mlarope.check(backend, case_dir)
    with open(megatron_sources.load_fused().__file__, encoding="utf-8") as f:
        lines = f.read().split("\n")
    forward = "backward" not in os.path.basename(os.path.normpath(case_dir))
    tensor, loaded = ("Q", ("x_1", "x_2")) if forward else ("DO", ("x_left", "x_right"))
    stored = ("x_left_off", "x_right_off") if forward else ("x_1_off", "x_2_off")

    def numbers(starts):  # 1-based numbers of the kernel's first lines that start so
        return [
            1 + next(i for i, line in enumerate(lines) if line.strip().startswith(start))
            for start in starts
        ]

    store_lines = numbers(f"tl.store({tensor} + {x}," for x in stored)
    load_lines = numbers(f"{x} = tl.load({tensor} +" for x in loaded)
    print(
        json.dumps(
            {
                "ok": report["ok"],
                "lines": [line for _, _, line in report["results"]],
                "store_lines": store_lines,
                "load_lines": load_lines,
            }
        )
    )
    return 0


def _fuzz_main(fuzz_args: str) -> int:
    import megatron_sources
    import mlarope

    try:
        result = mlarope.fuzz(_backend(findings=False), quiet=True, **json.loads(fuzz_args))
    except mlarope.FuzzFailure as failure:
        result = failure.result
    print(json.dumps({"version": megatron_sources.load().version, **fuzz_result(result)}))
    return 0


def _check_main(case_dir: str) -> int:
    """Every check of the case in every variant: {variant: {"ok", "lines"}}."""
    import mlarope

    backend = _backend(findings=True)
    reports = {}
    for variant in backend.variants():
        backend.select_variant(variant)
        report = mlarope.check(backend, case_dir)
        lines = [line for _, _, line in report["results"]]
        reports[variant] = {"ok": report["ok"], "lines": lines}
    print(json.dumps(reports))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    if len(sys.argv) == 3 and sys.argv[1] == "fuzz":
        sys.exit(_fuzz_main(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(_check_main(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "patched-root":
        sys.exit(_patched_root_main(sys.argv[2]))
    if len(sys.argv) == 4 and sys.argv[1] == "check-races":
        sys.exit(_check_races_main(sys.argv[2], sys.argv[3]))
    print(__doc__)
    sys.exit(2)
