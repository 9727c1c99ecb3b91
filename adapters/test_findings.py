# SPDX-License-Identifier: Apache-2.0
"""The finding folders (adapters/findings.py): each complete, docs/findings.md generated from
them, and the recorded release matrix still what the repros give, on the newest release of
each project and one older one that rotates by date (the full matrix is
``python adapters/findings.py matrix --all``)."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import releases  # noqa: E402
from adapter_testing import missing  # noqa: E402

import findings  # noqa: E402


def test_every_finding_folder_is_complete():
    found = findings.all_findings()
    assert found, "no finding folders"
    for f in found:
        for name in ("repro.py", "draft-report.md", "releases.json"):
            assert os.path.isfile(os.path.join(f.folder, name)), f"{f.key}: no {name}"
        with open(os.path.join(f.folder, "draft-report.md"), encoding="utf-8") as report:
            lines = report.read().strip().splitlines()
        assert 10 <= len(lines) <= 20, f"{f.key}: draft-report.md has {len(lines)} lines"
        recorded = f.recorded()
        unrecorded = [v for v in releases.versions(f.project) if v not in recorded]
        assert not unrecorded, f"{f.key}: no outcome recorded for {unrecorded}"
        outcomes = {v: recorded[v]["outcome"] for v in releases.versions(f.project)}
        assert "fails" in outcomes.values(), f"{f.key}: fails on no release: {outcomes}"
        if f.meta.get("fix"):
            assert os.path.isfile(os.path.join(f.folder, f.meta["fix"])), f.key
            label = findings.fix_label(f, releases.newest(f.project))
            assert recorded.get(label, {}).get("outcome") == "passes", f"{f.key}: {label}"


def test_the_findings_page_is_generated_from_the_folders():
    with open(findings.PAGE, encoding="utf-8") as f:
        assert f.read() == findings.page(findings.all_findings()), (
            "docs/findings.md differs from the folders: python adapters/findings.py page"
        )


def test_the_sampled_releases_give_the_recorded_outcomes():
    why = missing(("torch", "triton", "mlarope.triton"))
    if why:
        import pytest

        pytest.skip(why)
    done = subprocess.run(
        # one at a time: CI runs another lane of tests beside this one
        [sys.executable, os.path.join(HERE, "findings.py"), "matrix", "--sample", "--jobs", "1"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    print(done.stdout[-4000:])
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-4000:]
