# SPDX-License-Identifier: Apache-2.0
"""FlagGems' Triton rotary embedding through mlarope on the host, under Triton's interpreter:
the adapter fuzzed through mlarope.triton.TritonBackend, with the counts of what ran through
FlagGems, and a wrong mapping that the fuzz must catch.

Each fuzz runs in a subprocess (``python test_flag_gems.py fuzz ...``): a kernel that stores
past a guard corrupts the memory of the process it runs in, and then only that test fails.

Needs the mlarope package (with mlarope.triton), Debian's python3-torch, triton (installed with
--no-deps) and flag-gems' wheel (adapters/releases.py downloads it once into its cache, or finds
it there): without them the tests skip.
"""

import json
import os
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


def budget(cases: int) -> int:  # the file takes about 35 s here at scale 1
    return _budget(cases, "MLAROPE_FLAG_GEMS_SCALE")


def run_fuzz(adapter_flags: dict, **fuzz_args) -> dict:
    """mlarope.fuzz of TritonBackend(FlagGemsRotary()), ``adapter_flags`` set on it, in a
    subprocess, its draws even (steer=False): the budgets and the census here were sized for
    even draws."""
    fuzz_args.setdefault("steer", False)
    return subprocess_json(__file__, "fuzz", json.dumps(adapter_flags), json.dumps(fuzz_args))


def missing() -> str | None:
    # flag_gems' __init__ needs torch >= 2: the adapter loads its rotary file alone
    return missing_triton_release("flag_gems")


if __name__ != "__main__":
    import pytest

    why = missing()
    if why:
        pytest.skip(why, allow_module_level=True)


def test_flag_gems_fuzz_is_clean_where_it_maps(tmp_path, capsys):
    # Narrowed to each pair layout FlagGems has (any table layout), out of place (its in-place
    # kernel races: declined), so most of the budget runs.
    for seed, pairs in ((1, "half/half/*"), (4, "interleaved/interleaved/*")):
        result = run_fuzz(
            {},
            cases=budget(150),
            seed=seed,
            out=str(tmp_path / pairs.split("/")[0]),
            size=12,
            layouts=pairs,
            in_place=False,
        )
        show(capsys, f"flag-gems rotary_embedding, interpreted, {pairs}", result)
        assert result["failing_cases"] == 0, result["summary"]
        assert ran(result["summary"]) >= budget(70), "too few cases ran through FlagGems"


def test_flag_gems_census_names_every_decline(tmp_path, capsys):
    # The whole space: what FlagGems cannot take is counted with its reason, and nothing fails.
    result = run_fuzz({}, cases=budget(500), seed=2, out=str(tmp_path), size=8)
    show(capsys, "flag-gems rotary_embedding: every op, dtype and flag", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert "half or interleaved only" in result["summary"]
    assert ran(result["summary"]) >= budget(50)


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


def test_the_in_place_kernel_races(tmp_path):
    # In-place calls through apply_rotary_pos_emb_inplace_kernel (declined by default): each lane
    # stores the element another lane loads as its partner, with nothing ordering the two. The
    # races check fails such cases and no other check does (the interpreter's values agree).
    result = run_fuzz(
        {"decline_in_place": False},
        cases=budget(40),
        seed=5,
        out=str(tmp_path),
        size=8,
        ops=["rope"],
        dtypes=["f32"],
        layouts="half/half/*",
        position_ids=False,
        seq_offsets=False,
        packed=False,
    )
    assert result["failing_cases"] > 0, result["summary"]
    failing = result["summary"].split("failing cases:", 1)[1]
    assert "rope in place" in failing and "apply_rotary_pos_emb_inplace_kernel" in failing
    checks = result["summary"].split("checks:", 1)[1].split("\n", 1)[0].split()
    failed = {
        name for name, counts in zip(checks[::2], checks[1::2]) if counts.split("/")[1] != "0"
    }
    assert failed == {"races"}, result["summary"]


def _fuzz_main(adapter_flags: str, fuzz_args: str) -> int:
    sys.path.insert(0, HERE)
    from flag_gems_rotary import FlagGemsRotary

    return fuzz_main(FlagGemsRotary(), adapter_flags, fuzz_args)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "fuzz":
    sys.exit(_fuzz_main(*sys.argv[2:]))
