#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Line and branch coverage of the kernel and launch code, merged over template instantiations.

gcov counts each instantiation of a template apart: a branch that the f32 rope kernel never
takes counts as uncovered even where the bf16 kernel takes it, so a per-instantiation figure
says little about the source (40-50% here, with every source line run). This tool reads
`gcov --json-format` for every object of the instrumented library and merges, per source line,
the instantiations that compile the line to the same branches (the same count of branch
outcomes): a branch outcome is covered when some instantiation took it. A line whose compiled
forms differ (a condition one instantiation makes constant) keeps one set of outcomes per form,
each to be covered. Exception edges (gcov's "throw" branches) are not counted.

Exclusions are marked in the source, with the reason on the marker (the markers of gcovr, so
that its reports would agree): `GCOVR_EXCL_LINE: reason`, `GCOVR_EXCL_BR_LINE: reason` (the
line's branches only), `GCOVR_EXCL_START: reason` ... `GCOVR_EXCL_STOP` and
`GCOVR_EXCL_BR_START: reason` ... `GCOVR_EXCL_BR_STOP`. A marker without a reason is an error;
every excluded line is listed in the report with its reason.

  python3 ci/coverage.py OBJECT_DIR OUT_DIR [--record] [--baseline FILE]

Writes OUT_DIR/coverage.json (per file: lines and branches, covered and total, and the
uncovered lines and branch outcomes) and OUT_DIR/coverage.txt (the table, the uncovered items,
the exclusions); prints the table; exits 1 when a file is below the baseline (half a point of
slack) or an exclusion has no reason, 2 on bad input. --record writes the baseline instead.
"""

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASURED = ("cuda/kernels/", "cuda/launch/")
SLACK = 0.5  # points; see below_baseline
MARKER = re.compile(r"GCOVR_EXCL_(LINE|BR_LINE|START|STOP|BR_START|BR_STOP)\b:?\s*(.*)")


def measured(path):
    rel = os.path.relpath(path, ROOT)
    return rel if rel.startswith(MEASURED) and not rel.endswith("_test.cpp") else None


def gcov_json(gcda):
    """gcov's JSON for one object's counts (the current directory does not matter: --stdout)."""
    out = subprocess.run(
        [
            "gcov",
            "--json-format",
            "--stdout",
            "--branch-probabilities",
            "--object-directory",
            os.path.dirname(gcda),
            gcda,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"coverage: gcov failed on {gcda}: {out.stderr.strip()}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def collect(object_dir):
    """{file: {line: {"count": n, "forms": {outcomes: [counts]}}}} merged over every object."""
    gcdas = [
        os.path.join(d, f) for d, _, fs in os.walk(object_dir) for f in fs if f.endswith(".gcda")
    ]
    if not gcdas:
        raise SystemExit(
            f"coverage: no .gcda files under {object_dir} (configure with "
            "-DMLAROPE_COVERAGE=ON and run the tests first)"
        )
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        return merge(doc for docs in pool.map(gcov_json, sorted(gcdas)) for doc in docs)


def merge(docs):
    """The measured files' lines of gcov JSON documents, merged (see collect)."""
    files = defaultdict(lambda: defaultdict(lambda: {"count": 0, "forms": {}}))
    for doc in docs:
        for f in doc["files"]:
            rel = measured(os.path.join(doc.get("current_working_directory", ROOT), f["file"]))
            if rel is None:
                continue
            for line in f["lines"]:
                entry = files[rel][line["line_number"]]
                entry["count"] += line["count"]
                counts = [b["count"] for b in line["branches"] if not b["throw"]]
                for part in per_function(line, counts, f["functions"]):
                    form = entry["forms"].setdefault(len(part), [0] * len(part))
                    for i, c in enumerate(part):
                        form[i] += c
    return files


def per_function(line, counts, functions):
    """A line's branch counts split by function. gcov writes a line once per instantiation
    (with its function_name), except a line of a lambda in a template: once, the branches of
    every instantiation's lambda one after the other (the innermost functions around it)."""
    if not counts or "function_name" in line:
        return [counts] if counts else []
    number = line["line_number"]
    around = [fn for fn in functions if fn["start_line"] <= number <= fn["end_line"]]
    innermost = max((fn["start_line"] for fn in around), default=None)
    n = sum(fn["start_line"] == innermost for fn in around)
    if n <= 1 or len(counts) % n:
        return [counts]
    size = len(counts) // n
    return [counts[i : i + size] for i in range(0, len(counts), size)]


def read_source(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as src:
        return src.read().splitlines()


def exclusions(rel, source):
    """({line: ("line" | "branches", reason)}, [errors]) from the markers in one file's lines."""
    excluded, errors, block = {}, [], None  # block: (kind, reason, first line) while open
    for number, text in enumerate(source, 1):
        m = MARKER.search(text)
        kind, reason = (m.group(1), m.group(2).strip()) if m else (None, "")
        if kind and kind not in ("STOP", "BR_STOP") and not reason:
            errors.append(f"{rel}:{number}: GCOVR_EXCL_{kind} without a reason")
        if kind in ("START", "BR_START"):
            block = ("line" if kind == "START" else "branches", reason, number)
        if block:
            excluded[number] = block[:2]
        elif kind in ("LINE", "BR_LINE"):
            excluded[number] = ("line" if kind == "LINE" else "branches", reason)
        if kind in ("STOP", "BR_STOP"):
            block = None
    if block:
        errors.append(f"{rel}:{block[2]}: an exclusion block without its STOP")
    return excluded, errors


def summarize(files, source=read_source):
    rows, errors, listed = {}, [], []
    for rel in sorted(files):
        excluded, errs = exclusions(rel, source(rel))
        errors += errs
        lc = lt = bc = bt = 0
        missed_lines, missed_branches = [], []
        grouped = defaultdict(list)  # (kind, reason) -> the excluded lines that have code
        for number, entry in sorted(files[rel].items()):
            kind = excluded.get(number, (None,))[0]
            if kind and (kind == "line" or entry["forms"]):
                grouped[excluded[number]].append(number)
            if kind == "line":
                continue
            lt += 1
            lc += entry["count"] > 0
            if entry["count"] == 0:
                missed_lines.append(number)
            if kind == "branches":
                continue
            for n, counts in sorted(entry["forms"].items()):
                bt += n
                bc += sum(c > 0 for c in counts)
                missed = [i for i, c in enumerate(counts) if c == 0]
                if missed:
                    missed_branches.append(
                        f"{number}: outcomes {','.join(map(str, missed))} of {n} never taken "
                        f"(counts {counts})"
                    )
        for (kind, reason), numbers in grouped.items():
            what = "lines and their branches" if kind == "line" else "branches"
            listed.append(f"{rel}:{','.join(map(str, numbers))}: {what} excluded: {reason}")
        rows[rel] = {
            "lines_covered": lc,
            "lines_total": lt,
            "branches_covered": bc,
            "branches_total": bt,
            "uncovered_lines": missed_lines,
            "uncovered_branches": missed_branches,
        }
    return rows, errors, listed


def below_baseline(figures, baseline):
    """What fails the gate: a file of the baseline below it by more than SLACK points (tests
    with a time budget, the plugin fuzzes, run a varying number of cases), without data, or a
    measured file the baseline does not have (record it)."""
    drops = [
        f"{rel}: not in the baseline (run with --record once it is covered)"
        for rel in sorted(set(figures) - set(baseline))
    ]
    for rel, want in sorted(baseline.items()):
        if rel not in figures:
            drops.append(f"{rel}: no coverage data (not compiled or not run)")
            continue
        for metric in ("lines", "branches"):
            if figures[rel][metric] + SLACK < want[metric]:
                drops.append(
                    f"{rel}: {metric} {figures[rel][metric]:.1f}% < {want[metric]:.1f}% "
                    "of the baseline"
                )
    return drops


def pct(covered, total):
    return 100.0 * covered / total if total else 100.0


def table(rows):
    out = [
        f"coverage of the kernel and launch code ({len(rows)} files; branches merged over template "
        "instantiations, ci/coverage.py):",
        f"  {'file':<34} {'lines':>17} {'branches':>17}",
    ]
    tot = [0, 0, 0, 0]
    for rel, r in rows.items():
        vals = (r["lines_covered"], r["lines_total"], r["branches_covered"], r["branches_total"])
        tot = [a + b for a, b in zip(tot, vals)]
        out.append(
            f"  {rel:<34} {pct(vals[0], vals[1]):6.1f}% {vals[0]:4}/{vals[1]:<5} "
            f"{pct(vals[2], vals[3]):6.1f}% {vals[2]:4}/{vals[3]:<5}"
        )
    out.append(
        f"  {'total':<34} {pct(tot[0], tot[1]):6.1f}% {tot[0]:4}/{tot[1]:<5} "
        f"{pct(tot[2], tot[3]):6.1f}% {tot[2]:4}/{tot[3]:<5}"
    )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("object_dir", help="the instrumented library's object directory")
    ap.add_argument("out_dir")
    ap.add_argument(
        "--record", action="store_true", help="write the measured figures as the baseline"
    )
    ap.add_argument("--baseline", default=os.path.join(ROOT, "ci/coverage-baseline.json"))
    args = ap.parse_args()
    if not os.path.isdir(args.object_dir):
        print(f"coverage: {args.object_dir} is not a directory", file=sys.stderr)
        return 2
    rows, errors, listed = summarize(collect(args.object_dir))
    lines = table(rows)
    uncovered = []
    for rel, r in rows.items():
        source = read_source(rel)
        uncovered += [
            f"  {rel}:{n}: line never run: {source[n - 1].strip()}" for n in r["uncovered_lines"]
        ]
        for item in r["uncovered_branches"]:
            n = int(item.split(":")[0])
            uncovered.append(f"  {rel}:{item}: {source[n - 1].strip()}")
    lines += ["uncovered:"] + (uncovered or ["  nothing"])
    lines += [f"exclusions ({len(listed)}, each with its reason in the source):"] + [
        "  " + x for x in listed
    ]
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "coverage.json"), "w") as f:
        json.dump({"files": rows, "exclusions": listed}, f, indent=1, sort_keys=True)
    with open(os.path.join(args.out_dir, "coverage.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if errors:
        print("coverage: exclusions without a reason:\n  " + "\n  ".join(errors))
        return 1
    figures = {
        rel: {
            "lines": round(pct(r["lines_covered"], r["lines_total"]), 1),
            "branches": round(pct(r["branches_covered"], r["branches_total"]), 1),
        }
        for rel, r in rows.items()
    }
    if args.record:
        with open(args.baseline, "w") as f:
            json.dump(figures, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"coverage: recorded as the baseline in {os.path.relpath(args.baseline, ROOT)}")
        return 0
    drops = below_baseline(figures, json.load(open(args.baseline)))
    if drops:
        print(
            f"coverage: below the baseline ({os.path.relpath(args.baseline, ROOT)}):\n  "
            + "\n  ".join(drops)
        )
        return 1
    print(f"coverage: every file at or above the baseline ({os.path.relpath(args.baseline, ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
