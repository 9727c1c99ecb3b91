# SPDX-License-Identifier: Apache-2.0
"""The pytest plugin of mlarope (loaded by pytest when the package is installed): the fixture
``mlarope_fuzz`` and the options that size it from the command line.

    def test_my_kernel(mlarope_fuzz):
        mlarope_fuzz(MyRope(), ops=["rope"])  # fails the test with the repro directory

``pytest --mlarope-seconds 600 --mlarope-seed 7`` makes every such fuzz longer or different
without touching the tests; each fuzz writes into the test's own ``tmp_path`` (pytest keeps
the last runs' directories, so the repro is still there after the failure).
"""

from __future__ import annotations

import pytest

import mlarope


def pytest_addoption(parser):
    group = parser.getgroup("mlarope")
    group.addoption(
        "--mlarope-seconds",
        type=float,
        default=None,
        help="time budget of each mlarope_fuzz (default: the test's own, else 20 s)",
    )
    group.addoption(
        "--mlarope-seed", type=int, default=None, help="seed of each mlarope_fuzz (default 1)"
    )


@pytest.fixture
def mlarope_fuzz(request, tmp_path):
    """``mlarope_fuzz(backend, **options)``: mlarope.fuzz into tmp_path, sized by the options
    ``--mlarope-seconds`` and ``--mlarope-seed`` when given; returns fuzz's result, and a
    failing case fails the test (mlarope.FuzzFailure names the repro directory)."""
    seconds = request.config.getoption("--mlarope-seconds")
    seed = request.config.getoption("--mlarope-seed")
    runs = []

    def run(backend, **options):
        if seconds is not None:
            options["seconds"], options["cases"] = seconds, 0
        elif not options.get("seconds") and not options.get("cases"):
            options["seconds"] = 20.0
        if seed is not None:
            options["seed"] = seed
        options.setdefault("quiet", True)
        options.setdefault("out", str(tmp_path / f"fuzz-{len(runs)}"))
        runs.append(options["out"])
        return mlarope.fuzz(backend, **options)

    return run
