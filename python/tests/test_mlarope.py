# SPDX-License-Identifier: Apache-2.0
"""The Python package, as a kernel developer uses it (run by ci/python-test.sh after
`pip install .`): the reference on NumPy arrays, and mlarope.fuzz on kernels written in NumPy."""

import json
import os
import re

import numpy as np
import pytest

import mlarope
from docs_example import MyRope
from numpy_backend import NumpyRope


def rotate_half(t, cos, sin, nope, inverse=False):
    """rope (docs/semantics.md §3) for half/half/half layouts, row s on table row s, in float64."""
    half = (t.shape[-1] - nope) // 2
    sg = -1.0 if inverse else 1.0
    c, s = cos[:, None, None, :].astype(np.float64), sin[:, None, None, :].astype(np.float64)
    x = t.astype(np.float64)
    u, v = x[..., nope : nope + half], x[..., nope + half :]
    return np.concatenate(
        [
            x[..., :nope],
            u * c[..., :half] - sg * v * s[..., :half],
            v * c[..., half:] + sg * u * s[..., half:],
        ],
        axis=-1,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("inverse", [False, True])
def test_reference_rope_on_numpy_arrays(dtype, inverse):
    rng = np.random.default_rng(1)
    t = rng.standard_normal((5, 2, 3, 24)).astype(dtype)
    cos, sin = (
        rng.standard_normal((5, 16)).astype(np.float32),
        rng.standard_normal((5, 16)).astype(np.float32),
    )
    out, status = mlarope.rope(
        t, cos, sin, nope_dim=8, emb_dim=16, in_layout="half", inverse=inverse
    )
    assert status == 0 and out.dtype == dtype and out.shape == t.shape
    expected = rotate_half(t, cos, sin, 8, inverse).astype(
        dtype
    )  # rounded once, as the semantics say
    assert np.array_equal(out[..., :8], t[..., :8])  # the nope part is copied bit for bit
    np.testing.assert_allclose(
        out.astype(np.float64),
        expected.astype(np.float64),
        rtol=0,
        atol=float(np.finfo(dtype).eps) * 8,
    )


def test_reference_reads_strided_views_without_copying():
    rng = np.random.default_rng(2)
    wide = rng.standard_normal((4, 1, 2, 40)).astype(np.float32)
    t = wide[..., 4:28]  # a view with a gap after each head
    cos, sin = np.ones((4, 16), np.float32), np.zeros((4, 16), np.float32)
    out, _ = mlarope.rope(t, cos, sin, nope_dim=8, emb_dim=16, in_layout="half")
    assert np.array_equal(out, t)  # the identity table: every element as it was


def test_kv_split_and_its_backward_on_the_reference():
    rng = np.random.default_rng(3)
    kv = rng.standard_normal((3, 1, 4, 12)).astype(np.float32)
    k_pe = rng.standard_normal((3, 1, 1, 8)).astype(np.float32)
    cos, sin = np.ones((3, 8), np.float32), np.zeros((3, 8), np.float32)
    key, value, status = mlarope.kv_split(kv, k_pe, cos, sin, k_dim=5, v_dim=7, emb_dim=8)
    assert status == 0 and key.shape == (3, 1, 4, 13) and value.shape == (3, 1, 4, 7)
    assert np.array_equal(key[..., :5], kv[..., :5]) and np.array_equal(value, kv[..., 5:])
    deinterleaved = np.concatenate(
        [k_pe[..., 0::2], k_pe[..., 1::2]], axis=-1
    )  # interleaved in, half out
    assert np.array_equal(key[..., 5:], np.broadcast_to(deinterleaved, (3, 1, 4, 8)))
    grad_kv, grad_k_pe, _ = mlarope.kv_split_backward(
        key, value, cos, sin, k_dim=5, v_dim=7, emb_dim=8, in_layout="half"
    )
    assert grad_kv.shape == (3, 1, 4, 12) and grad_k_pe.shape == (3, 1, 1, 8)
    np.testing.assert_allclose(grad_k_pe[:, :, 0], key[..., 5:].sum(axis=2), rtol=1e-6)


def test_yarn_tables_rows_layouts_and_dtypes():
    params = dict(
        scaling_factor=40.0, original_max_position_embeddings=64, mscale=1.0, mscale_all_dim=0.0
    )
    cos, sin = mlarope.yarn_tables(6, 8, offset=3, **params)
    assert cos.dtype == np.float32 and cos.shape == (6, 8)
    assert np.array_equal(cos[:, :4], cos[:, 4:]) and np.array_equal(
        sin[:, :4], sin[:, 4:]
    )  # [f, f]
    later, _ = mlarope.yarn_tables(1, 8, offset=5, **params)
    assert np.array_equal(later[0], cos[2])  # row r holds position offset + r
    m = 0.1 * np.log(40.0) + 1.0  # Megatron's mscale(40, 1) / mscale(40, 0): the concentration
    np.testing.assert_allclose(np.hypot(cos, sin), m, rtol=1e-6)
    icos, _ = mlarope.yarn_tables(6, 8, offset=3, table_layout="interleaved", **params)
    assert np.array_equal(icos[:, 0::2], cos[:, :4]) and np.array_equal(icos[:, 1::2], cos[:, :4])
    bits, _ = mlarope.yarn_tables(6, 8, offset=3, dtype="bf16", **params)
    widened = (bits.astype(np.uint32) << 16).view(np.float32)
    assert bits.dtype == np.uint16 and np.abs(widened - cos).max() <= np.abs(cos).max() * 2.0**-8
    with pytest.raises(mlarope.Error, match="emb_dim"):
        mlarope.yarn_tables(2, 7)


class DeclinesAll:
    def supports(self, call):
        return False, "declines every call"

    def rope(self, call):
        raise AssertionError("a declined call must not run")


def test_check_replays_a_repro_on_any_backend(tmp_path):
    with pytest.raises(mlarope.FuzzFailure) as failure:
        mlarope.fuzz(
            NumpyRope(drop_inverse=True),
            cases=1000,
            ops=["rope"],
            seed=7,
            out=str(tmp_path),
            quiet=True,
        )
    repro = failure.value.result["failures"][0]["dir"]
    broken = mlarope.check(NumpyRope(drop_inverse=True), repro)
    assert not broken["ok"] and any(outcome == "fail" for _, outcome, _ in broken["results"])
    fixed = mlarope.check(NumpyRope(), repro)
    assert fixed["ok"] and fixed["unsupported"] is None
    declined = mlarope.check(DeclinesAll(), repro)  # no check runs on a declined case
    assert "declines every call" in declined["unsupported"] and declined["results"] == []


def test_fuzz_narrowed_to_what_a_backend_provides(tmp_path):
    # The flags alone (steer=False): what they keep out is not drawn at all.
    wide = mlarope.fuzz(
        NumpyRope(),
        cases=3000,
        ops=["rope"],
        seed=5,
        out=str(tmp_path / "wide"),
        quiet=True,
        steer=False,
    )
    narrow = mlarope.fuzz(
        NumpyRope(),
        cases=3000,
        ops=["rope"],
        seed=5,
        steer=False,
        dtypes=["f32"],
        table_dtypes=["f32"],
        in_place=False,
        out=str(tmp_path / "narrow"),
        quiet=True,
    )
    with open(tmp_path / "narrow" / "fuzz.json") as f:
        counts = json.load(f)["counts"]
    assert set(counts["dtype"]) == {"f32"} and set(counts["table_dtype"]) == {"f32"}
    assert set(counts["in_place"]) == {"false"}

    def ran(result):
        return int(re.search(r"\((\d+) of \d+ cases ran\)", result["summary"]).group(1))

    assert ran(narrow) > 3 * ran(wide)  # far more of the budget reaches the kernel
    with pytest.raises(mlarope.Error, match="dtypes"):
        mlarope.fuzz(NumpyRope(), cases=1, dtypes=["f64"], out=str(tmp_path / "bad"), quiet=True)


def test_bad_input_is_a_named_error():
    t = np.zeros((2, 1, 1, 8), np.float32)
    with pytest.raises(mlarope.Error, match="emb_dim"):
        mlarope.rope(
            t, np.ones((2, 7), np.float32), np.ones((2, 7), np.float32), nope_dim=1, emb_dim=7
        )


def test_a_numpy_kernel_fuzzes_clean_and_the_declined_calls_are_counted(tmp_path):
    result = mlarope.fuzz(
        NumpyRope(), cases=1000, ops=["rope"], seed=7, out=str(tmp_path), quiet=True
    )
    assert result["failing_cases"] == 0
    assert "not supported (declined cases" in result["summary"]
    assert "rope: only SBHD f32 rope" in result["summary"]
    assert os.path.exists(tmp_path / "fuzz.json")


def test_a_kernel_that_drops_inverse_fails_with_a_loadable_repro(tmp_path):
    with pytest.raises(mlarope.FuzzFailure) as failure:
        mlarope.fuzz(
            NumpyRope(drop_inverse=True),
            cases=1000,
            ops=["rope"],
            seed=7,
            out=str(tmp_path),
            quiet=True,
        )
    first = failure.value.result["failures"][0]
    assert "repro: " + first["dir"] in str(failure.value)
    config, arrays = mlarope.load_case(first["dir"])
    assert config["op"] == "rope" and {"t", "cos", "sin"} <= set(
        arrays
    )  # inverse, or its round trip


def test_a_python_exception_is_a_failing_case_with_its_traceback(tmp_path):
    with pytest.raises(mlarope.FuzzFailure, match="broken on purpose") as failure:
        mlarope.fuzz(
            NumpyRope(raise_on_call=True),
            cases=1000,
            ops=["rope"],
            seed=7,
            out=str(tmp_path),
            quiet=True,
        )
    assert "Traceback (most recent call last)" in str(failure.value)


class WritesItsInput(NumpyRope):
    def rope(self, call):
        call.inputs[0][...] = 0  # inputs are read-only views: NumPy refuses


def test_a_kernel_writing_its_input_fails(tmp_path):
    with pytest.raises(mlarope.FuzzFailure, match="read-only"):
        mlarope.fuzz(
            WritesItsInput(), cases=1000, ops=["rope"], seed=7, out=str(tmp_path), quiet=True
        )


def test_the_docs_example_fuzzes_clean(tmp_path):
    result = mlarope.fuzz(MyRope(), ops=["rope"], cases=1000, out=str(tmp_path), quiet=True)
    assert result["failing_cases"] == 0 and "rope: not my kernel's case" in result["summary"]


def test_the_pytest_fixture_fuzzes_into_tmp_path(mlarope_fuzz, tmp_path):
    result = mlarope_fuzz(MyRope(), ops=["rope"], cases=500)
    assert result["failing_cases"] == 0 and result["out"].startswith(str(tmp_path))
    with pytest.raises(mlarope.FuzzFailure, match="repro: " + str(tmp_path)):
        mlarope_fuzz(NumpyRope(drop_inverse=True), ops=["rope"], cases=1000)


class VariantRope(NumpyRope):
    """NumpyRope with two variants, the second dropping inverse: a kernel whose configs differ."""

    def __init__(self):
        super().__init__()
        self.selected = []

    def variants(self):
        return ["exact", "drops_inverse"]

    def select_variant(self, name):
        self.selected.append(name)
        self.drop_inverse = name == "drops_inverse"

    def environment(self):
        return {"kernel": "numpy", "version": "1"}


def test_each_case_runs_once_per_variant_and_a_failure_names_its_variant(tmp_path):
    backend = VariantRope()
    with pytest.raises(mlarope.FuzzFailure) as failure:
        mlarope.fuzz(backend, cases=500, ops=["rope"], seed=7, out=str(tmp_path), quiet=True)
    result = failure.value.result
    assert result["cases"] == 1000  # every case in both variants
    exact, dropped = (
        re.search(rf"{name} 500/(\d+)", result["summary"]) for name in ("exact", "drops_inverse")
    )
    assert exact and exact.group(1) == "0", result["summary"]
    assert dropped and int(dropped.group(1)) == result["failing_cases"] > 0, result["summary"]
    assert {f["variant"] for f in result["failures"]} == {"drops_inverse"}
    with open(tmp_path / "fuzz.json") as f:
        written = json.load(f)
    assert written["variants"] == ["exact", "drops_inverse"]
    assert written["environment"] == {"kernel": "numpy", "version": "1"}
    assert written["counts"]["variant_failing"] == {"drops_inverse": result["failing_cases"]}
    first = result["failures"][0]
    assert (
        first["dir"].endswith("-drops_inverse") and "variant drops_inverse" in first["description"]
    )
    # The replay selects the failing variant, whatever the backend was left in (in this
    # process, where the test sees what was selected).
    backend.select_variant("exact")
    assert not mlarope.check(backend, first["dir"], isolate=False)["ok"]
    assert backend.selected[-1] == "drops_inverse"
    with pytest.raises(mlarope.Error, match="no select_variant"):
        mlarope.check(NumpyRope(), first["dir"])


class Drawn:
    """Declines every call, recording which of the narrowing options' promises it broke."""

    def __init__(self):
        self.broken = set()

    def supports(self, call):
        half = call.emb_dim // 2
        if half & (half - 1):
            self.broken.add("power_of_two_dims")
        if call.position_ids is not None:
            self.broken.add("position_ids")
        if call.seq_offsets is not None:
            self.broken.add("seq_offsets")
        if call.layout == "thd" and call.freq_mode == "packed":
            self.broken.add("packed")
        return False, "recording only"

    def rope(self, call):
        raise AssertionError("declined calls are never run")


def test_narrowing_draws_only_what_a_triton_kernel_can_take(tmp_path):
    narrow = dict(position_ids=False, seq_offsets=False, packed=False, power_of_two_dims=True)

    def drawn_under(**options):
        # In this process (isolate=False), where the test reads what Drawn recorded; the flags
        # alone (steer=False: steering would only probe these same draws).
        drawn = Drawn()
        mlarope.fuzz(
            drawn,
            cases=2000,
            ops=["rope"],
            seed=3,
            out=str(tmp_path),
            quiet=True,
            isolate=False,
            steer=False,
            **options,
        )
        return drawn.broken

    assert drawn_under(**narrow) == set()
    with open(tmp_path / "fuzz.json") as f:
        written = json.load(f)
    assert {k: written[k] for k in narrow} == narrow
    # Each option flipped back draws what it kept out (so each is what kept it out).
    for option, value in narrow.items():
        assert drawn_under(**dict(narrow, **{option: not value})) == {option}, option
