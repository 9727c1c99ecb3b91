#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The files CI systems and dashboards read, validated against their formats (CTest
`output_formats`): the JUnit XML of CTest, `mlarope fuzz`, `mlarope report` and
`mlarope compare` against Jenkins' junit-10.xsd (ci/fetch-junit-schema.sh); `bmf.json` against
Bencher's Metric Format and `benchmark-action.json` against github-action-benchmark's input
(ci/schemas/); the summary appended to $GITHUB_STEP_SUMMARY; and the history: a chart over
three recorded commits, a missing folder created, a corrupt entry named and skipped.

    /usr/bin/python3 ci/output_formats_test.py --build BUILD_DIR [--ctest CTEST]

Needs Debian's python3-lxml and python3-jsonschema (ci/setup.sh). Each validator is first
shown a document it must refuse, so a validator that accepts everything fails the test.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import jsonschema
from lxml import etree

HERE = os.path.dirname(os.path.abspath(__file__))
FAILURES = []


def check(condition, what):
    print(("ok      " if condition else "FAILED  ") + what)
    if not condition:
        FAILURES.append(what)


def run(args, **kwargs):
    """Runs a command; returns (exit status, stdout + stderr)."""
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    return done.returncode, done.stdout + done.stderr


def junit_schema():
    code, out = run(["bash", os.path.join(HERE, "fetch-junit-schema.sh")])
    if code != 0:
        print(out)
        sys.exit("cannot get the JUnit schema (ci/fetch-junit-schema.sh needs PyPI once)")
    return etree.XMLSchema(etree.parse(out.strip().splitlines()[-1]))


def validate_junit(schema, path, what, failures_expected=None):
    try:
        doc = etree.parse(path)
    except (OSError, etree.XMLSyntaxError) as e:
        check(False, f"{what}: {path} is readable XML ({e})")
        return
    valid = schema.validate(doc)
    check(
        valid,
        f"{what}: {os.path.basename(path)} is valid JUnit"
        + ("" if valid else f" ({schema.error_log.last_error})"),
    )
    if failures_expected is not None:
        failures = len(doc.findall(".//testcase/failure"))
        check(
            (failures > 0) == failures_expected,
            f"{what}: {'has' if failures_expected else 'has no'} failed test case "
            f"({failures} found)",
        )


def validate_json(schema_file, path, what):
    schema = json.load(open(os.path.join(HERE, "schemas", schema_file)))
    try:
        jsonschema.validate(json.load(open(path)), schema)
        check(True, f"{what}: {os.path.basename(path)} matches {schema_file}")
    except (OSError, ValueError, jsonschema.ValidationError) as e:
        check(
            False,
            f"{what}: {os.path.basename(path)} matches {schema_file} ({str(e).splitlines()[0]})",
        )


def validators_refuse_bad_documents(schema):
    bad_junit = etree.fromstring(
        b"<testsuites><testsuite tests='1' failures='0' errors='0'>"
        b"<testcase name='x'/></testsuite></testsuites>"
    )  # a suite without a name
    check(not schema.validate(bad_junit), "the JUnit schema refuses a suite without a name")
    for schema_file, bad in [
        ("bencher-bmf.schema.json", {"k": {"latency": {"lower_value": 1}}}),
        ("benchmark-action.schema.json", [{"name": "k", "value": "fast"}]),
    ]:
        try:
            jsonschema.validate(bad, json.load(open(os.path.join(HERE, "schemas", schema_file))))
            check(False, f"{schema_file} refuses {json.dumps(bad)}")
        except jsonschema.ValidationError:
            check(True, f"{schema_file} refuses {json.dumps(bad)}")


def bmf_ranges_hold(path):
    bmf = json.load(open(path))
    bad = [
        f"{key}/{measure}"
        for key, measures in bmf.items()
        for measure, m in measures.items()
        if "lower_value" in m and not m["lower_value"] <= m["value"] <= m["upper_value"]
    ]
    check(
        not bad and len(bmf) > 0,
        f"bmf.json: lower_value <= value <= upper_value for {len(bmf)} keys {bad[:3]}",
    )


def history(mlarope, bench, work):
    folder = os.path.join(work, "history", "nested")  # missing: the report creates it
    for i, commit in enumerate(["c0ffee1", "c0ffee2", "c0ffee3"]):
        code, out = run(
            [
                mlarope,
                "report",
                bench,
                "--out",
                os.path.join(work, f"hist-report-{i}"),
                "--history",
                folder,
                "--commit",
                commit,
            ]
        )
        check(code == 0, f"history: report of commit {commit} exits 0 ({code})")
    entries = sorted(glob.glob(os.path.join(folder, "*.json")))
    check(
        [os.path.basename(e) for e in entries] == ["c0ffee1.json", "c0ffee2.json", "c0ffee3.json"],
        "history: one JSON per commit in a created folder "
        f"({[os.path.basename(e) for e in entries]})",
    )
    with open(os.path.join(folder, "broken.json"), "w") as f:
        f.write("{not json")
    code, out = run(
        [
            mlarope,
            "report",
            bench,
            "--out",
            os.path.join(work, "hist-report"),
            "--history",
            folder,
            "--commit",
            "c0ffee4",
        ]
    )
    check(code == 0, "history: a corrupt entry does not stop the report")
    check(
        "skipped broken.json: not valid JSON" in out,
        "history: the corrupt entry is named and skipped",
    )
    # A run the gate finds SLOWER (the host keys at a quarter of their floor fraction):
    # flagged points. A quarter, not a half: with other tests loading the machine, one run's
    # repetitions can differ by 2x, and the history's flags, not the gate's power (stats_test,
    # slowed_kernel_gate_test), are what this checks.
    slow = json.load(open(bench))
    for b in slow["benchmarks"]:
        if "/host/" in b["name"] and "floor_fraction" in b:
            b["floor_fraction"] *= 0.25
    json.dump(slow, open(os.path.join(work, "slow.json"), "w"))
    code, out = run(
        [
            mlarope,
            "report",
            os.path.join(work, "slow.json"),
            "--baseline",
            bench,
            "--out",
            os.path.join(work, "hist-report"),
            "--history",
            folder,
            "--commit",
            "c0ffee5",
        ]
    )
    check(code == 1, f"history: the gate fails the slowed run ({code})")
    flagged = json.load(open(os.path.join(folder, "c0ffee5.json")))["flagged"]
    check(
        len(flagged) > 0 and all("/host/" in k for k in flagged),
        f"history: the entry names the keys flagged {flagged}",
    )
    page = open(os.path.join(work, "hist-report", "report.html")).read()
    check("5 commits recorded" in page, "history: the page counts the 5 commits recorded")
    rings = re.findall(r"<title>host/[^<]* at c0ffee5[^<]*flagged by the gate\)</title>", page)
    check(
        len(rings) == len(flagged),
        f"history: each flagged key's point is ringed ({len(rings)} of {len(flagged)})",
    )
    charts = re.findall(r"<svg[^>]*>.*?floor fraction over the commits.*?</svg>", page, re.S)
    check(
        len(charts) == 2,
        f"history: a trend chart per op benchmarked, rope and kv_split ({len(charts)})",
    )
    rope = next((c for c in charts if "rope: floor fraction" in c), "")
    # Each line of the rope chart has a point per commit (4 commits).
    line_points = re.findall(r"<title>host/small/sbhd/T1024/bf16 at ", rope)
    check(
        len(line_points) == 5,
        f"history: the rope chart's host/small/bf16 line has a point at each commit "
        f"({len(line_points)})",
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True)
    parser.add_argument("--ctest", default="ctest")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    mlarope, bench_bin = os.path.join(build, "mlarope"), os.path.join(build, "mlarope_bench")
    schema = junit_schema()
    validators_refuse_bad_documents(schema)
    with tempfile.TemporaryDirectory(prefix="mlarope_formats_") as work:
        os.chdir(work)
        # CTest's own JUnit report of a small test binary of the build, as ci/test.sh keeps it.
        # The CTest run has a test folder of its own: in the build's, it would write the build's
        # Testing/ logs while the CTest run that started this test writes them too.
        os.makedirs("ctest")
        with open(os.path.join("ctest", "CTestTestfile.cmake"), "w") as f:
            npy_test = os.path.join(build, "harness", "npy_test")
            f.write(f'add_test(Npy "{npy_test}" "--gtest_filter=Npy*")\n')
            f.write(f'add_test(NpyWrite "{npy_test}" "--gtest_filter=*Write*")\n')
        code, _ = run(
            [args.ctest, "--test-dir", "ctest", "--output-junit", os.path.join(work, "raw.xml")]
        )
        check(code == 0, "ctest --output-junit ran")
        code, out = run(
            [sys.executable, os.path.join(HERE, "junit_for_ci.py"), "raw.xml", "ctest.xml"]
        )
        check(code == 0, f"ci/junit_for_ci.py ran {out}")
        validate_junit(schema, "ctest.xml", "ctest", failures_expected=False)
        check(
            len(etree.parse("ctest.xml").findall(".//testcase"))
            == len(etree.parse("raw.xml").findall(".//testcase")),
            "ctest: every test case of CTest's report kept",
        )
        # mlarope fuzz: clean, and against a broken backend (failed checks with their replay).
        run([mlarope, "fuzz", "--cases", "40", "--backend", "host", "--out", "fuzz"])
        validate_junit(schema, "fuzz/junit.xml", "fuzz (clean)", failures_expected=False)
        run(
            [
                mlarope,
                "fuzz",
                "--cases",
                "200",
                "--backend",
                "broken:dropped_inverse",
                "--out",
                "fuzz-broken",
            ]
        )
        validate_junit(
            schema, "fuzz-broken/junit.xml", "fuzz (broken backend)", failures_expected=True
        )
        text = open("fuzz-broken/junit.xml").read()
        check(
            "replay: mlarope check fuzz-broken/failures/case_" in text,
            "fuzz: a failure carries its replay command",
        )
        # Benchmarks with every repetition; the report, gated against the same run (a baseline
        # of this machine), writes JUnit, BMF, the action's JSON and the step summary.
        code, out = run(
            [
                bench_bin,
                "--benchmark_filter=(rope|kv_split)/(host|reference)/small",
                "--benchmark_repetitions=9",
                "--benchmark_min_time=0.005",
                "--benchmark_out=bench.json",
                "--benchmark_out_format=json",
            ]
        )
        check(code == 0, "mlarope_bench with 9 repetitions ran")
        summary = os.path.join(work, "step-summary.md")
        code, out = run(
            [
                mlarope,
                "report",
                "fuzz-broken",
                "bench.json",
                "--out",
                "report",
                "--baseline",
                "bench.json",
            ],
            env=dict(os.environ, GITHUB_STEP_SUMMARY=summary),
        )
        check(code == 0, f"report gated against its own run passes ({code})")
        validate_junit(schema, "report/junit.xml", "report", failures_expected=True)
        check(
            len(etree.parse("report/junit.xml").findall(".//testsuite")) == 2,
            "report: a suite for the fuzz run and one for the gate",
        )
        validate_json("bencher-bmf.schema.json", "report/bmf.json", "report")
        bmf_ranges_hold("report/bmf.json")
        validate_json("benchmark-action.schema.json", "report/benchmark-action.json", "report")
        check(
            os.path.exists(summary) and "# mlarope report" in open(summary).read(),
            "report: the summary is appended to $GITHUB_STEP_SUMMARY",
        )
        # mlarope compare: the same file both sides (SAME), JUnit of every key.
        code, out = run(
            [
                mlarope,
                "compare",
                "--base",
                "bench.json",
                "--change",
                "bench.json",
                "--out",
                "compare",
            ]
        )
        check(code == 0, f"compare of a run with itself passes ({code})")
        validate_junit(schema, "compare/junit.xml", "compare", failures_expected=False)
        history(mlarope, "bench.json", work)
    print(f"output formats: {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
