# SPDX-License-Identifier: Apache-2.0
"""The findings in other projects' kernels: which releases each one affects, and their page.

A finding is a folder ``adapters/<project>/findings/<name>/`` holding:

- ``finding.toml``: ``title``, ``kernel``, ``needs`` (the kernel file, a path inside a release's
  tree), ``contract``, ``reach`` (who reaches it in real use), ``tracker`` (the search done),
  ``upstream`` (its status there), and ``fix`` (a patch of ``needs`` that ends it) when we
  have one;
- ``repro.py``: ``python repro.py [ROOT]``, one cause, on CPU under Triton's interpreter and
  unchanged on a GPU; it exits 1 when the release at ROOT (a release's tree as
  adapters/releases.py unpacks it) has the bug, 0 when it computes right, 3 when it lacks
  what the repro calls;
- ``draft-report.md``: the report to send, in the project's issue style;
- ``releases.json``: the outcome on every release, as the matrix below recorded it.

    python findings.py matrix [--all | --sample] [--record] [--jobs N] [PROJECT ...]
    python findings.py page [--check]

``matrix`` runs every finding's repro on each release (``--all``: every release in the
projects' releases.toml; ``--sample``, the default: the newest and one older release per
project, the older one rotating by date) and, where the finding has a ``fix``, on the newest
release with it applied; prints the table; with ``--record`` writes each finding's
``releases.json`` (only ``--all`` may), otherwise fails when an outcome differs from the
recorded one. ``page`` writes ``docs/findings.md`` from the folders (``--check``: fails when
the page differs).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import releases  # noqa: E402
from adapter_testing import apply_patch  # noqa: E402

PAGE = os.path.join(os.path.dirname(HERE), "docs", "findings.md")
#: What finding.toml must say, in the order the page shows it.
FIELDS = ("title", "kernel", "needs", "contract", "reach", "tracker", "upstream")
#: A repro's exit status, as the matrix names it.
OUTCOMES = {1: "fails", 0: "passes", 3: "not reached"}
TIMEOUT = 600  # seconds per repro run


class Finding:
    def __init__(self, project: str, name: str):
        self.project, self.name = project, name
        self.folder = os.path.join(HERE, project, "findings", name)
        with open(os.path.join(self.folder, "finding.toml"), "rb") as f:
            self.meta = tomllib.load(f)
        missing = [k for k in FIELDS if not self.meta.get(k)]
        if missing:
            raise ValueError(f"{self.folder}/finding.toml: no {', '.join(missing)}")

    @property
    def key(self) -> str:
        return f"{self.project}/{self.name}"

    def recorded(self) -> dict:
        path = os.path.join(self.folder, "releases.json")
        if not os.path.isfile(path):
            return {}
        with open(path, encoding="utf-8") as f:
            return json.load(f)


def all_findings(projects=releases.FOLDERS) -> list[Finding]:
    found = []
    for project in projects:
        base = os.path.join(HERE, project, "findings")
        for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            if os.path.isfile(os.path.join(base, name, "finding.toml")):
                found.append(Finding(project, name))
    return found


def sample(project: str, day: int | None = None) -> list[str]:
    """The newest release and one older one, which moves to the next each day."""
    versions = releases.versions(project)
    if len(versions) == 1:
        return versions
    day = datetime.date.today().toordinal() if day is None else day
    return [versions[day % (len(versions) - 1)], versions[-1]]


def patched_root(finding: Finding, version: str) -> str:
    """A copy of the release's tree with the finding's fix applied to its kernel file."""
    source = releases.root(finding.project, version)
    target = tempfile.mkdtemp(prefix=f"{finding.name}-{version}-fixed.")
    shutil.copytree(source, target, dirs_exist_ok=True)
    kernel = os.path.join(target, finding.meta["needs"])
    with open(kernel, encoding="utf-8") as f:
        text = apply_patch(f.read(), os.path.join(finding.folder, finding.meta["fix"]))
    with open(kernel, "w", encoding="utf-8") as f:
        f.write(text)
    return target


def run_repro(finding: Finding, version: str, fixed: bool = False) -> dict:
    """The repro on one release (with the fix applied when ``fixed``): its outcome, its last
    line, seconds."""
    root = releases.root(finding.project, version)
    if not releases.has(root, finding.meta["needs"]):
        return {"outcome": "not reached", "line": f"no {finding.meta['needs']}", "seconds": 0.0}
    if fixed:
        root = patched_root(finding, version)
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "repro.py", root],
            cwd=finding.folder,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        lines = (done.stdout + done.stderr).strip().splitlines() or [""]
        outcome = OUTCOMES.get(done.returncode, f"error (exit status {done.returncode})")
        line = re.sub(r"0x[0-9a-f]+", "0x...", lines[-1])[:300]  # the same in every run
    except subprocess.TimeoutExpired:
        outcome, line = "error (timed out)", f"no result within {TIMEOUT} s"
    finally:
        if fixed:
            shutil.rmtree(root, ignore_errors=True)
    return {"outcome": outcome, "line": line, "seconds": round(time.monotonic() - start, 1)}


def fix_label(finding: Finding, version: str) -> str:
    return f"{version} + {finding.meta['fix']}"


def matrix(findings: list[Finding], chosen: dict, jobs: int) -> dict:
    """{finding key: {release label: result}}, run ``jobs`` at a time."""
    runs = []
    for finding in findings:
        for version in chosen[finding.project]:
            runs.append((finding, version, False))
        if finding.meta.get("fix"):
            runs.append((finding, releases.newest(finding.project), True))
    results = {f.key: {} for f in findings}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(run_repro, *run): run for run in runs}
        for future in concurrent.futures.as_completed(futures):
            finding, version, fixed = futures[future]
            result = future.result()
            label = fix_label(finding, version) if fixed else version
            results[finding.key][label] = result
            print(
                f"{finding.key} {label}: {result['outcome']} ({result['seconds']} s) "
                f"{result['line'][:160]}",
                flush=True,
            )
    return results


def affected(finding: Finding, outcomes: dict) -> str:
    """The first and last release that fails, and how many of those that have the code do."""
    versions = [v for v in releases.versions(finding.project) if v in outcomes]
    failing = [v for v in versions if outcomes[v] == "fails"]
    if not failing:
        return "none recorded"
    span = failing[0] if len(failing) == 1 else f"{failing[0]} to {failing[-1]}"
    reached = [v for v in versions if outcomes[v] != "not reached"]
    lacking = len(versions) - len(reached)
    return f"{span} ({len(failing)} of {len(reached)} run" + (
        f"; {lacking} older without it)" if lacking else ")"
    )


def fixed_in(finding: Finding, outcomes: dict) -> str:
    """The first release after a failing one that passes, if any."""
    versions = [v for v in releases.versions(finding.project) if v in outcomes]
    seen_failing = False
    for version in versions:
        if outcomes[version] == "fails":
            seen_failing = True
        elif seen_failing and outcomes[version] == "passes":
            return version
    return "no release"


SYMBOL = {"fails": "fails", "passes": "passes", "not reached": "-"}


def runs(findings: list[Finding], all_releases: bool) -> int:
    """How many repro runs the matrix makes: every release or the sample, and the fixes."""
    count = 0
    for f in findings:
        count += len(releases.versions(f.project) if all_releases else sample(f.project))
        count += 1 if f.meta.get("fix") else 0
    return count


def page(findings: list[Finding]) -> str:
    """docs/findings.md: one table of every finding, then each project's release matrix."""
    out = [
        "# Findings in other projects' kernels",
        "",
        "Generated by `python adapters/findings.py page` from the finding folders",
        "(`adapters/<project>/findings/<name>/`: `finding.toml`, `repro.py`, `draft-report.md`,",
        "`releases.json`); `adapters/test_findings.py` fails when this page differs from them.",
        "The releases come from `python adapters/findings.py matrix --all --record`, which runs",
        "each repro on every release of the project's `releases.toml` (fetched by",
        "`adapters/releases.py`, pinned by hash) under Triton's interpreter on the CPU.",
        '"fails": the repro shows the bug; "passes": it does not; "-": the release lacks the',
        "kernel or the function the repro calls.",
        "",
        f"The full matrix is {runs(findings, all_releases=True)} runs. CI runs its share,",
        "`python adapters/findings.py matrix --sample` (`adapters/test_findings.py`): each",
        "repro on the newest release of its project and on one older release that moves to the",
        "next each day, and each fix on the newest, against the outcomes recorded here",
        f"({runs(findings, all_releases=False)} runs; its time: [ci.md](ci.md)).",
        "",
        "| Project | Finding | Kernel | Affected releases | Fixed in | Upstream | Folder |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in findings:
        outcomes = {k: v["outcome"] for k, v in f.recorded().items()}
        project = releases.manifest(f.project)["project"]
        fix = ""
        if f.meta.get("fix"):
            patched = outcomes.get(fix_label(f, releases.newest(f.project)), "not run")
            fix = f"; with `{f.meta['fix']}`: {patched}"
        out.append(
            f"| {project} | {f.meta['title']} | {f.meta['kernel']} | {affected(f, outcomes)} "
            f"| {fixed_in(f, outcomes)}{fix} | {f.meta['upstream']} "
            f"| [{f.name}](../adapters/{f.project}/findings/{f.name}/) |"
        )
    for project in releases.FOLDERS:
        mine = [f for f in findings if f.project == project]
        if not mine:
            continue
        name = releases.manifest(project)["project"]
        out += ["", f"## {name}", "", "| Release | " + " | ".join(f.name for f in mine) + " |"]
        out.append("|---|" + "---|" * len(mine))
        recorded = [f.recorded() for f in mine]
        for version in reversed(releases.versions(project)):
            cells = [SYMBOL.get(r.get(version, {}).get("outcome"), "not run") for r in recorded]
            out.append(f"| {version} | " + " | ".join(cells) + " |")
        for f in mine:
            out += ["", f"**{f.name}**: {f.meta['title']}.", ""]
            for field, label in (
                ("contract", "Contract"),
                ("reach", "Who reaches it"),
                ("tracker", "Tracker searched"),
            ):
                out.append(f"- {label}: {f.meta[field]}")
    return "\n".join(out) + "\n"


def record(findings: list[Finding], results: dict) -> None:
    for f in findings:
        outcomes = {label: results[f.key][label] for label in sorted(results[f.key])}
        with open(os.path.join(f.folder, "releases.json"), "w", encoding="utf-8") as out:
            kept = {k: {"outcome": v["outcome"], "line": v["line"]} for k, v in outcomes.items()}
            json.dump(kept, out, indent=1, sort_keys=True)
            out.write("\n")


def differences(findings: list[Finding], results: dict) -> list[str]:
    wrong = []
    for f in findings:
        recorded = f.recorded()
        for label, result in sorted(results[f.key].items()):
            want = recorded.get(label, {}).get("outcome", "not recorded")
            if result["outcome"] != want:
                wrong.append(f"{f.key} {label}: {result['outcome']}, recorded {want}")
    return wrong


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("matrix", "page"))
    parser.add_argument("projects", nargs="*", default=list(releases.FOLDERS))
    parser.add_argument("--all", action="store_true", help="every release (default: a sample)")
    parser.add_argument("--sample", action="store_true", help="the newest and one older")
    parser.add_argument("--record", action="store_true", help="write releases.json (--all)")
    parser.add_argument("--check", action="store_true", help="page: fail if it differs")
    parser.add_argument("--jobs", type=int, default=2, help="repros run at once")
    args = parser.parse_intermixed_args(argv)
    findings = all_findings(args.projects)
    if args.command == "page":
        text = page(all_findings())
        if args.check:
            with open(PAGE, encoding="utf-8") as f:
                if f.read() != text:
                    print(f"{PAGE} differs from the folders: python adapters/findings.py page")
                    return 1
            return 0
        with open(PAGE, "w", encoding="utf-8") as f:
            f.write(text)
        return 0
    if args.record and not args.all:
        parser.error("--record needs --all: a recording covers every release")
    chosen = {p: releases.versions(p) if args.all else sample(p) for p in args.projects}
    start = time.monotonic()
    results = matrix(findings, chosen, args.jobs)
    runs = sum(len(r) for r in results.values())
    print(f"{runs} runs of {len(findings)} findings in {time.monotonic() - start:.0f} s")
    if args.record:
        record(findings, results)
        return 0
    wrong = differences(findings, results)
    for line in wrong:
        print(f"DIFFERS {line}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
