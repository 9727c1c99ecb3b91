# SPDX-License-Identifier: Apache-2.0
"""flash-attn's Triton rotary kernel through mlarope on the host, under Triton's interpreter:
the adapter fuzzed through mlarope.triton.TritonBackend, with the counts of what ran through
flash-attn, and a wrong mapping that the fuzz must catch.

Each fuzz runs in a subprocess (``python test_flash_attn.py fuzz ...``): a kernel that stores
past a guard corrupts the memory of the process it runs in, and then only that test fails.

Needs the mlarope package (with mlarope.triton), Debian's python3-torch, triton (installed with
--no-deps) and flash-attn's sdist (adapters/releases.py downloads it once into its cache, or
finds it there): without them the tests skip.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import flash_rotary  # noqa: E402 (imports neither torch nor triton)

sys.path.append(os.path.dirname(HERE))  # after site-packages: adapters/megatron is no package
from adapter_testing import (  # noqa: E402
    apply_patch,  # noqa: E402
    fuzz_main,
    missing_triton_release,  # noqa: E402
    ran,
    show,
    subprocess_json,
)
from adapter_testing import budget as _budget  # noqa: E402


def budget(cases: int) -> int:  # about 10, 5 and 2 s here at scale 1
    return _budget(cases, "MLAROPE_FLASH_ATTN_SCALE")


def run_fuzz(adapter_flags: dict, **fuzz_args) -> dict:
    """mlarope.fuzz of TritonBackend(FlashRotary(**adapter_flags)) in a subprocess, its draws
    even (steer=False): the budgets and the census here were sized for even draws."""
    fuzz_args.setdefault("steer", False)
    return subprocess_json(__file__, "fuzz", json.dumps(adapter_flags), json.dumps(fuzz_args))


def missing() -> str | None:
    return missing_triton_release("flash_attn", flash_rotary.VERSION)


if __name__ != "__main__":
    import pytest

    why = missing()
    if why:
        pytest.skip(why, allow_module_level=True)


def test_flash_fuzz_is_clean_where_it_maps(tmp_path, capsys):
    # Narrowed to each pair layout flash-attn has, so most of the budget runs; every dtype.
    for seed, pairs in ((1, "half/half/*"), (4, "interleaved/interleaved/*")):
        result = run_fuzz(
            {},
            cases=budget(250),
            seed=seed,
            out=str(tmp_path / pairs.split("/")[0]),
            size=12,
            layouts=pairs,
        )
        show(capsys, f"flash-attn {flash_rotary.VERSION} rotary, interpreted, {pairs}", result)
        assert result["failing_cases"] == 0, result["summary"]
        assert ran(result["summary"]) >= budget(50), "too few cases ran through flash-attn"


def test_flash_census_names_every_decline(tmp_path, capsys):
    # The whole space: what flash-attn cannot take is counted with its reason, and nothing fails.
    result = run_fuzz({}, cases=budget(1500), seed=2, out=str(tmp_path), size=8)
    show(capsys, "flash-attn rotary: every op, dtype and flag", result)
    assert result["failing_cases"] == 0, result["summary"]
    for reason in (
        "writes pairs where it reads them",
        "context parallelism",
    ):
        assert reason in result["summary"]
    assert ran(result["summary"]) >= budget(80)


def test_a_wrong_mapping_fails_the_fuzz(tmp_path):
    # conjugate toggled on every call (the rotation the other way): the fuzz must fail.
    result = run_fuzz(
        {"flip_conjugate": True},
        cases=budget(30),
        seed=3,
        out=str(tmp_path),
        size=8,
        dtypes=["f32"],
        layouts="half/half/*",
    )
    assert result["failing_cases"] > 0, result["summary"]


def test_finding_batch_offsets_wrap_past_2_31_elements_and_int64_ends_it(tmp_path):
    # Batch entry 8 of a view with a batch stride of 2^28 elements starts at 2^31: the
    # kernel's i32 pid_batch * stride_x_batch wraps and its load lands 8 GiB before x, which
    # mlarope.triton stops. With int64.patch every entry is rotated.
    import subprocess

    folder = os.path.join(HERE, "findings", "int32_batch_offset")
    repro = os.path.join(folder, "repro.py")

    def run_repro(*args):
        return subprocess.run(
            [sys.executable, repro, *args], capture_output=True, text=True, timeout=600
        )

    done = run_repro(flash_rotary.release_root())
    out = done.stdout + done.stderr
    assert done.returncode == 1 and "reproduced" in done.stdout, out
    assert "kernel rotary_kernel loads at" in out and "8589934592 bytes before" in out, out
    with open(flash_rotary.source(), encoding="utf-8") as f:
        patched = apply_patch(f.read(), os.path.join(folder, "int64.patch"))
    fixed_source = tmp_path / flash_rotary.KERNEL
    fixed_source.parent.mkdir(parents=True)
    fixed_source.write_text(patched, encoding="utf-8")
    fixed = run_repro(str(tmp_path))
    assert fixed.returncode == 0 and "all 9 batch entries rotated" in fixed.stdout, (
        fixed.stdout + fixed.stderr
    )


def _fuzz_main(adapter_flags: str, fuzz_args: str) -> int:
    return fuzz_main(flash_rotary.FlashRotary(), adapter_flags, fuzz_args)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "fuzz":
    sys.exit(_fuzz_main(sys.argv[2], sys.argv[3]))
