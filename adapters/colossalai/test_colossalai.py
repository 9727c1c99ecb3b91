# SPDX-License-Identifier: Apache-2.0
"""ColossalAI's Triton rotary kernels through mlarope on the host, under Triton's interpreter:
each entry point's adapter (colossalai_rotary.py) fuzzed through mlarope.triton.TritonBackend,
with the counts of what ran through ColossalAI, a census of what it declines, a wrong mapping
that the fuzz must catch, and two of the kernels' faults that the adapter works around, shown
by giving the kernels the inputs as a caller would.

Each fuzz runs in a subprocess (``python test_colossalai.py fuzz ...``): a kernel that stores
past a guard corrupts the memory of the process it runs in, and then only that test fails.

Needs the mlarope package (with mlarope.triton), Debian's python3-torch, triton (installed with
--no-deps) and ColossalAI's sdist (adapters/releases.py downloads it once into its cache, or
finds it there): without them the tests skip.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(HERE))  # after site-packages: adapters/megatron is no package
from adapter_testing import budget as _budget  # noqa: E402
from adapter_testing import (  # noqa: E402
    fuzz_result,
    missing_triton_release,  # noqa: E402
    ran,
    show,
    subprocess_json,
)

VERSION = "0.5.0"  # colossalai_rotary.VERSION (that module imports mlarope)


def budget(cases: int) -> int:  # the file takes about 50 s here at scale 1
    return _budget(cases, "MLAROPE_COLOSSALAI_SCALE")


def run_fuzzes(*runs) -> list:
    """mlarope.fuzz of TritonBackend(<kernel's class>(**flags)) for each (kernel, flags,
    fuzz_args) of ``runs``, one after the other in one subprocess, the draws even (steer=False):
    the budgets and the census here were sized for even draws."""
    runs = [(kernel, flags, {"steer": False, **args}) for kernel, flags, args in runs]
    return subprocess_json(__file__, "fuzz", json.dumps(runs))


def run_fuzz(kernel: str, adapter_flags: dict, **fuzz_args) -> dict:
    return run_fuzzes((kernel, adapter_flags, fuzz_args))[0]


def missing() -> str | None:
    return missing_triton_release("colossalai", VERSION)


if __name__ != "__main__":
    import pytest

    why = missing()
    if why:
        pytest.skip(why, allow_module_level=True)

#: What the kernels can take: half pairs, emb_dim / 2 a power of two (tl.arange).
NARROW = dict(layouts="half/half/*", power_of_two_dims=True)
#: What fused_rotary_embedding can take besides: rows that are positions within sequences.
POSITIONS = dict(position_ids=False, seq_offsets=False, packed=False)


def test_rotary_embedding_fuzz_is_clean_where_it_maps(tmp_path, capsys):
    result = run_fuzz("rotary", {}, cases=budget(80), seed=1, out=str(tmp_path), size=10, **NARROW)
    show(capsys, f"colossalai {VERSION} rotary_embedding, interpreted, half pairs", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert ran(result["summary"]) >= budget(50), "too few cases ran through rotary_embedding"


def test_decoding_fused_rotary_embedding_fuzz_is_clean_where_it_maps(tmp_path, capsys):
    # Both key cache layouts; kv_split reads the rotated k_pe back from the cache.
    layouts = (False, True)
    args = dict(cases=budget(30), seed=2, size=8, **NARROW)
    results = run_fuzzes(
        *(
            ("decoding", {"new_kcache_layout": new}, dict(args, out=str(tmp_path / str(new))))
            for new in layouts
        )
    )
    for new_layout, result in zip(layouts, results):
        title = f"decoding_fused_rotary_embedding, use_new_kcache_layout={new_layout}"
        show(capsys, title, result)
        assert result["failing_cases"] == 0, result["summary"]
        assert ran(result["summary"]) >= budget(15), "too few cases ran through decoding"


def test_rotary_embedding_with_k_cache_fuzz_is_clean_where_it_maps(tmp_path, capsys):
    result = run_fuzz("kcache", {}, cases=budget(25), seed=4, out=str(tmp_path), size=8, **NARROW)
    show(capsys, "rotary_embedding(k_cache=...), the deprecated fused path", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert ran(result["summary"]) >= budget(15), "too few cases ran through the k_cache path"


def test_fused_rotary_embedding_fuzz_is_clean_where_it_maps(tmp_path, capsys):
    result = run_fuzz(
        "fused", {}, cases=budget(30), seed=5, out=str(tmp_path), size=8, **NARROW, **POSITIONS
    )
    show(capsys, "fused_rotary_embedding (q given as k too)", result)
    assert result["failing_cases"] == 0, result["summary"]
    assert ran(result["summary"]) >= budget(15), "too few cases ran through fused_rotary_embedding"


def test_census_names_every_decline(tmp_path, capsys):
    # The whole space: what ColossalAI cannot take is counted with its reason, nothing fails.
    result = run_fuzz("rotary", {}, cases=budget(200), seed=6, out=str(tmp_path), size=8)
    show(capsys, "colossalai rotary_embedding: every op, dtype and flag", result)
    assert result["failing_cases"] == 0, result["summary"]
    for reason in ("half -> half only", "not a power of two", "entries of a pair differ"):
        assert reason in result["summary"], reason
    assert ran(result["summary"]) >= budget(15)


def test_a_wrong_mapping_fails_the_fuzz(tmp_path):
    # sin negated on every call (the rotation the other way): the fuzz must fail.
    kernels = ("rotary", "decoding", "fused")
    args = dict(cases=budget(10), seed=7, size=8, dtypes=["f32"], **NARROW, **POSITIONS)
    results = run_fuzzes(
        *((k, {"flip_sin": True}, dict(args, out=str(tmp_path / k))) for k in kernels)
    )
    for kernel, result in zip(kernels, results):
        assert result["failing_cases"] > 0, (kernel, result["summary"])


def test_fused_rotary_emb_crosses_q_and_k(tmp_path):
    # Given a k of its own, q's second half is computed from k (out_q1 = k_0 * sin + k_1 *
    # cos): the fuzz fails. The adapter passes q as k too (colossalai_rotary.py).
    result = run_fuzz(
        "fused",
        {"alias_k": False},
        cases=budget(12),
        seed=8,
        out=str(tmp_path),
        size=8,
        dtypes=["f32"],
        ops=["rope"],
        **NARROW,
        **POSITIONS,
    )
    assert result["failing_cases"] > 0, result["summary"]


def test_get_xine_cache_of_a_strided_cache_writes_past_its_outputs(tmp_path):
    # get_xine_cache writes its outputs with the strides of the cache it reads: the half view
    # of a table (ColossalAI's own test passes cos_cache[:, : head_dim // 2]) writes past them
    # (wrong tables, or a crash of the worker whose heap it overwrote).
    result = run_fuzz(
        "rotary",
        {"strided_cache": True},
        cases=budget(10),
        seed=9,
        out=str(tmp_path),
        size=8,
        dtypes=["f32"],
        table_dtypes=["f32"],
        ops=["rope"],
        **NARROW,
    )
    assert result["failing_cases"] > 0, result["summary"]


def _fuzz_main(runs: str) -> int:
    sys.path.insert(0, HERE)
    import colossalai_rotary as cr

    import mlarope
    from mlarope import triton as mt

    classes = {
        "rotary": cr.ColossalRotary,
        "decoding": cr.ColossalDecodingRotary,
        "kcache": cr.ColossalRotaryKCache,
        "fused": cr.ColossalFusedRotary,
    }
    results = []
    for kernel, flags, fuzz_args in json.loads(runs):
        flip_sin = flags.pop("flip_sin", False)
        adapter = classes[kernel](**flags)
        adapter.flip_sin = flip_sin
        try:
            result = mlarope.fuzz(mt.TritonBackend(adapter), quiet=True, **fuzz_args)
        except mlarope.FuzzFailure as failure:
            result = failure.result
        results.append(fuzz_result(result))
    print(json.dumps(results))
    return 0


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "fuzz":
    sys.exit(_fuzz_main(sys.argv[2]))
