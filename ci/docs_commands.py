#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The docs test (CTest `docs_commands`): every command in a ```sh block of README.md and
docs/*.md is run, shortened where it would take minutes, or listed below as run elsewhere
(with where) or as needing what this machine lacks (with why). A command that fails, or one
that is neither run nor listed, fails the test; so the docs cannot rot silently.

    python3 ci/docs_commands.py --source REPO --build BUILD_DIR [--list]

Commands run in a scratch folder that links every top-level entry of the repository (and
`build` to BUILD_DIR), so what they write (fuzz-out, report, yarn, ...) goes there.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Commands run elsewhere, or not here: (pattern, why). Matched with re.search.
NOT_RUN_HERE = [
    (r"^bash ci/test\.sh", "the test job itself: .ci/run runs it"),
    (
        r"^bash ci/main\.sh",
        "the main job: its steps (cases, fuzz, benchmarks, report) are the ones "
        "ci/ci-extra.sh runs in the test job; ci/main.sh runs them for a user",
    ),
    (r"--backend cuda", "needs a GPU: ci/gpu-check.sh runs the CUDA backend where one is lent"),
    (r"mlarope_bench --full", "the full benchmark set takes tens of minutes; the smoke set runs"),
    (
        r"ci/bench-compare\.sh",
        "builds the base and the change (minutes each): the test job runs it when "
        "MLAROPE_BENCH_BASE names a base; its statistics are tested by stats_test and "
        "slowed_kernel_gate_test, its command by output_formats (mlarope compare)",
    ),
    (
        r"/tmp/tvenv",
        "triton-viz's own environment (Triton 3.6.0, z3-solver, flask; minutes to set up): "
        "its comparison is run by hand and its results are in docs/triton.md's table",
    ),
    (
        r"fuzz_megatron\.py|pip install",
        "needs the Python package and megatron-core in a virtual environment: "
        "ci/python-test.sh installs them and runs the same fuzz (test_megatron.py)",
    ),
]

# Shortened so the test takes seconds: (pattern, replacement).
SHORTER = [
    (r"--seconds \d+", "--seconds 2"),
    (r"--cases \d+", "--cases 50"),
    (r"(\./build/mlarope_bench)( |$)", r"\1 --benchmark_min_time=0.01\2"),
    # The fit searches nine carveouts (13 s); one shows the same output. Its --write would
    # rewrite the carried profile in the source tree: the test prints the fit instead.
    (r"(fit_timing_model(?: --hold \S+)*)(?: --write)?$", r"\1 --carveout 164"),
]

# Placeholders of the docs: what the test gives them.
PLACEHOLDERS = {
    "CASE_DIR": "examples/mla_rope_sbhd_f16",
    "OUT_DIR": "out/run",
}

# Exit statuses that count as working: a comparison of a backend with itself says SLOWER (1)
# only when this machine's noise at the shortened benchmark time makes it.
ALLOWED_STATUS = [
    (r"mlarope_bench --compare", {0, 1}),
    # The timing model's table exits 1 while a row misses its target: the table is the output.
    (r"mlarope_bench .*--model-table", {0, 1}),
]


def commands(path):
    """(line number, command) of each ```sh / ```bash block line, continuations joined."""
    text = open(path).read()
    found = []
    for block in re.finditer(r"```(?:sh|bash)\n(.*?)```", text, re.S):
        first = text[: block.start()].count("\n") + 2
        pending, start = "", None
        for offset, line in enumerate(block.group(1).split("\n")):
            code = re.sub(r"\s+#.*$", "", line).rstrip()
            if not code.strip():
                continue
            start = first + offset if start is None else start
            if code.endswith("\\"):
                pending += code[:-1] + " "
                continue
            found.append((start, (pending + code).strip()))
            pending, start = "", None
    return found


def prepare(command, scratch):
    """The command as the test runs it, or (None, why) when it runs elsewhere."""
    for pattern, why in NOT_RUN_HERE:
        if re.search(pattern, command):
            return None, why
    for pattern, replacement in SHORTER:
        command = re.sub(pattern, replacement, command)
    for name, value in PLACEHOLDERS.items():
        command = re.sub(rf"\b{name}\b", value, command)
    if "fuzz-out/failures/case_" in command:  # the replay commands need a failure to replay
        failures = sorted(glob.glob(os.path.join(scratch, "fuzz-out-broken/failures/case_*")))
        command = re.sub(
            r"fuzz-out/failures/case_\d+", os.path.relpath(failures[0], scratch), command
        )
    return command, None


def scratch_folder(source, build):
    scratch = tempfile.mkdtemp(prefix="mlarope_docs_")
    for entry in os.listdir(source):
        if entry.startswith(".") or entry.startswith("build"):
            continue
        os.symlink(os.path.join(os.path.abspath(source), entry), os.path.join(scratch, entry))
    os.symlink(os.path.abspath(build), os.path.join(scratch, "build"))
    # A failing case for the replay commands: the fuzz against a backend that drops inverse.
    subprocess.run(
        [
            "./build/mlarope",
            "fuzz",
            "--cases",
            "200",
            "--backend",
            "broken:dropped_inverse",
            "--out",
            "fuzz-out-broken",
        ],
        cwd=scratch,
        stdout=subprocess.DEVNULL,
    )
    return scratch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument(
        "--list", action="store_true", help="list the commands and what is done with each"
    )
    args = parser.parse_args()
    pages = [os.path.join(args.source, "README.md")] + sorted(
        glob.glob(os.path.join(args.source, "docs", "*.md"))
    )
    scratch = scratch_folder(args.source, args.build)
    ran, elsewhere, failed = 0, 0, []
    try:
        for page in pages:
            for line, documented in commands(page):
                where = f"{os.path.relpath(page, args.source)}:{line}"
                command, why = prepare(documented, scratch)
                if command is None:
                    elsewhere += 1
                    print(f"not run here  {where}  {documented}\n              ({why})")
                    continue
                if args.list:
                    print(f"would run     {where}  {command}")
                    continue
                result = subprocess.run(
                    ["bash", "-c", command],
                    cwd=scratch,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                allowed = next(
                    (codes for pattern, codes in ALLOWED_STATUS if re.search(pattern, command)), {0}
                )
                ran += 1
                if result.returncode in allowed:
                    print(f"ran           {where}  {command}")
                else:
                    failed.append(where)
                    print(
                        f"FAILED ({result.returncode})  {where}  {command}\n"
                        f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
                    )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"docs commands: {ran} run, {elsewhere} run elsewhere or not here (reasons above), "
        f"{len(failed)} failed"
    )
    if ran == 0 and not args.list:
        print("no command ran: the extraction is broken")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
