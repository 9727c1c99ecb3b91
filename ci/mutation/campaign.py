# SPDX-License-Identifier: Apache-2.0
"""One run of the tool: the scratch copy synced and built, the checks run on it unmutated (the
baseline: all must pass), then each mutant of this shard in turn written into the copy,
rebuilt, put through the checks cheapest first up to the first failure, and the original text
restored. results.json is rewritten after every mutant, so an interrupted run can --resume."""

import json
import os
import re
import shlex
import shutil
import sys
import time

from .build import Build, first_error_lines, run_logged
from .checks import (
    check_environment,
    failure_excerpt,
    fault_anchor_spans,
    parse_checks,
    touches_anchor,
)
from .common import ToolError, log, write_json
from .equivalents import equivalents_by_key
from .report import STATUSES
from .sampling import shard_from_env, shard_of
from .sites import all_sites, apply_site, unified_diff
from .tree import sync_tree, tree_files


def mutant_record(n, site, diff):
    record = site.as_dict()
    record.update(
        {
            "n": n,
            "diff": diff,
            "status": None,
            "check": None,
            "seconds": 0.0,
            "build_seconds": 0.0,
            "check_seconds": {},
            "detail": "",
            "skipped_checks": [],
        }
    )
    return record


def run_campaign(args, sites, sample, equivalents, out_dir):
    """Runs this shard's mutants of `sample`; the results (also written to OUT/results.json)."""
    campaign = Campaign(args, sites, sample, equivalents, out_dir)
    campaign.lock_scratch()
    mine = campaign.plan()
    t0 = time.monotonic()
    changed, tree_hash = campaign.copy_tree()
    build_secs = campaign.build_baseline(changed)
    campaign.order_checks(campaign.baseline(tree_hash, build_secs))
    log(
        f"setup: {time.monotonic() - t0:.1f} s; {len(mine)} mutants (shard {campaign.shard[0]} "
        f"of {campaign.shard[1]}, sample of {len(sample)})"
    )
    campaign.run_mutants(mine)
    return campaign.results


class Campaign:
    """The state of one run: the scratch folder and its build, the checks (in the order they
    run), the values their commands are filled in with, and the results so far."""

    def __init__(self, args, sites, sample, equivalents, out_dir):
        self.args, self.sites, self.sample, self.out_dir = args, sites, sample, out_dir
        self.root = os.path.abspath(args.root)
        self.scratch = os.path.abspath(args.scratch)
        self.src = os.path.join(self.scratch, "src")
        self.run_dir = os.path.join(self.scratch, "run")
        self.results_path = os.path.join(out_dir, "results.json")
        self.by_key = equivalents_by_key(equivalents)
        self.lock = None
        self.shard = (0, 1)
        self.checks = []
        self.values = {}
        self.done = {}
        self.results = {"mutants": []}
        self.cases_dir = None
        self.build = None
        self.texts = {}

    def lock_scratch(self):
        """Takes the scratch folder's lock (held while this object lives): two runs in one
        scratch folder would write each other's mutants."""
        os.makedirs(self.scratch, exist_ok=True)
        self.lock = open(os.path.join(self.scratch, "lock"), "w")
        try:
            import fcntl

            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise ToolError(
                f"another ci/mutate.py is using {self.scratch}: give each run its own --scratch"
            ) from None
        except ImportError:
            pass

    def plan(self):
        """This shard's (number, site) pairs; sets the checks, the values of their commands,
        the results of a previous run (--resume) and the results' header."""
        args = self.args
        self.shard = shard_from_env(args)
        mine = shard_of(self.sample, *self.shard)
        self.checks = parse_checks(args.checks)
        self.cases_dir = os.path.abspath(args.cases_dir)
        self.values = {
            "run": self.run_dir,
            "fuzz_seconds": f"{args.fuzz_seconds:g}",
            "fuzz_fast_seconds": f"{args.fuzz_seconds / 2:g}",
            "fuzz_seed": str(args.fuzz_seed),
            "fuzz_jobs": str(args.fuzz_jobs),
            "property_scale": f"{args.property_scale:g}",
            "cases": self.cases_dir,
            "ctest_timeout": str(int(args.check_timeout)),
        }
        if args.resume and os.path.exists(self.results_path):
            self.done = self.previous_results()
        self.results = self.results_header()
        return mine

    def previous_results(self):
        """The results of OUT/results.json that --resume keeps, by mutant."""
        done = {}
        with open(self.results_path) as f:
            for m in json.load(f).get("mutants", []):
                if m.get("status") in STATUSES and m["status"] != "equivalent":
                    done[(m["id"], m["orig"], m["repl"], m["text"])] = m
        return done

    def results_header(self):
        args = self.args
        command = "python3 ci/mutate.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        return {
            "tool": "ci/mutate.py",
            "version": 1,
            "config": {
                "command": command,
                "seed": args.seed,
                "count": args.count,
                "sample": len(self.sample),
                "shard_index": self.shard[0],
                "shard_count": self.shard[1],
                "checks": [c.name for c in self.checks],
                "fuzz_seconds": args.fuzz_seconds,
                "fuzz_seed": args.fuzz_seed,
                "property_scale": args.property_scale,
                "build_type": args.build_type,
                "files": sorted({s.file for s in self.sites}),
            },
            "baseline": None,
            "mutants": [],
        }

    def copy_tree(self):
        """Syncs the tree into SCRATCH/src (the output and scratch folders left out) and makes
        sure the copy has the sites that were sampled; (files written, tree hash)."""
        excluded = [
            os.path.relpath(p, self.root)
            for p in (self.out_dir, self.scratch)
            if os.path.abspath(p).startswith(self.root + os.sep)
        ]
        files = tree_files(self.root, excluded)
        changed, tree_hash = sync_tree(
            self.root, self.src, files, os.path.join(self.scratch, "manifest.json")
        )
        log(f"scratch: {len(files)} files in {self.src} ({changed} written)")
        copied = [(s.id, s.orig, s.repl, s.text) for s in all_sites(self.src, self.args.globs)]
        if copied != [(s.id, s.orig, s.repl, s.text) for s in self.sites]:
            raise ToolError(
                "the sources changed between the scan and the copy (someone is "
                "editing them?): run again"
            )
        return changed, tree_hash

    def build_baseline(self, sources_changed):
        """Configures the scratch build, keeps the checks it has targets for and builds their
        targets; the build's seconds."""
        self.build = Build(self.scratch, self.args)
        self.build.configure(self.cases_dir, sources_changed=sources_changed > 0)
        self.checks = self.present_checks()
        self.results["config"]["checks"] = [c.name for c in self.checks]
        targets = sorted({t for c in self.checks for t in c.targets})
        log(f"baseline build: ninja {' '.join(targets)}")
        code, out, build_secs = self.build.build(targets)
        if code != 0:
            raise ToolError(
                "the tree itself does not build (scratch copy, before any mutant):\n"
                + first_error_lines(out, 30)
            )
        log(f"baseline build: {build_secs:.1f} s")
        return build_secs

    def present_checks(self):
        """The checks whose targets the build has; an optional one without them is skipped."""
        present = []
        for c in self.checks:
            missing = [t for t in c.targets if not self.build.has_target(t)]
            if missing and c.optional:
                log(f"check {c.name}: skipped, the build has no target {', '.join(missing)}")
                continue
            if missing:
                raise ToolError(
                    f"check {c.name}: the scratch build has no target {', '.join(missing)}"
                )
            present.append(c)
        return present

    def baseline(self, tree_hash, build_secs):
        """The baseline: the checks' verdict and seconds on the unmutated copy, run here or
        stored by an earlier run on the same sources, checks and values."""
        stamp_path = os.path.join(self.scratch, "baseline.json")
        stamp_key = {
            "tree": tree_hash,
            "checks": [c.name for c in self.checks],
            "values": self.values,
        }
        baseline = None
        if os.path.exists(stamp_path) and not self.args.rerun_baseline:
            baseline = self.stored_baseline(stamp_path, stamp_key)
        if baseline is None:
            baseline = self.run_baseline_checks(build_secs)
            write_json(stamp_path, {"key": stamp_key, "baseline": baseline})
        self.results["baseline"] = baseline
        return baseline

    @staticmethod
    def stored_baseline(stamp_path, stamp_key):
        with open(stamp_path) as f:
            old = json.load(f)
        if old.get("key") != stamp_key:
            return None
        baseline = old["baseline"]
        log(
            f"baseline checks: passed before on these sources ({baseline['check_seconds']:.1f} s), "
            "not rerun (--rerun-baseline reruns them)"
        )
        return baseline

    def run_baseline_checks(self, build_secs):
        """Runs every check on the unmutated copy; a failing one stops the tool."""
        baseline = {"checks": [], "build_seconds": build_secs}
        for c in self.checks:
            code, out, secs = self.run_check(c, self.args.baseline_timeout)
            if code != 0:
                why = "timed out" if code is None else f"exit status {code}"
                raise ToolError(
                    f"the tree itself fails check {c.name} ({why}), before any "
                    f"mutant:\n{out[-4000:]}\n(above: the end of {c.name}'s output; "
                    "the tree must pass its checks first)"
                )
            note = _baseline_note(out)
            baseline["checks"].append({"name": c.name, "seconds": round(secs, 2), "note": note})
            log(f"baseline check {c.name}: passed, {secs:.1f} s" + (f" ({note})" if note else ""))
        baseline["check_seconds"] = round(sum(x["seconds"] for x in baseline["checks"]), 2)
        return baseline

    def order_checks(self, baseline):
        """Cheapest first (by baseline seconds): most mutants die in the first checks."""
        seconds_of = {x["name"]: x["seconds"] for x in baseline["checks"]}
        for c in self.checks:
            c.baseline_seconds = seconds_of.get(c.name, 0.0)
        self.checks.sort(key=lambda c: c.baseline_seconds)
        log(
            "checks in order: "
            + ", ".join(f"{c.name} ({c.baseline_seconds:.1f} s)" for c in self.checks)
        )

    def run_check(self, check, timeout):
        """(exit status or None on timeout, output, seconds) of `check`, run in a fresh
        SCRATCH/run."""
        shutil.rmtree(self.run_dir, ignore_errors=True)
        os.makedirs(self.run_dir)
        return run_logged(
            check.command(self.build, {**self.values, "build": self.build.dir}),
            cwd=self.run_dir,
            env=check_environment(check.env, self.values),
            timeout=timeout,
        )

    # ---- The mutants ----------------------------------------------------------------------------

    def run_mutants(self, mine):
        """Each (number, site) of `mine`, grouped by file: restoring a file and mutating the same
        file again costs one rebuild of what depends on it, not two (the numbers stay those of
        the sample)."""
        spans = fault_anchor_spans(self.src)
        mine = sorted(mine, key=lambda item: (item[1].file, item[1].start))
        os.makedirs(self.out_dir, exist_ok=True)
        for k, (n, site) in enumerate(mine, 1):
            self.run_mutant(f"[{k}/{len(mine)}]", n, site, spans)

    def run_mutant(self, progress, n, site, spans):
        """Mutant `n` (the sample's number) of `site`: kept from the previous results
        (--resume), skipped as equivalent, or built and checked; its record is added to the
        results. `progress` starts its log line."""
        path = os.path.join(self.src, site.file)
        if site.file not in self.texts:
            with open(path, encoding="utf-8") as f:
                self.texts[site.file] = f.read()
        original = self.texts[site.file]
        mutated = apply_site(original, site)
        record = mutant_record(n, site, unified_diff(site.file, original, mutated))
        prior = self.done.get((site.id, site.orig, site.repl, site.text))
        entry = self.by_key.get(site.key())
        if prior is not None:
            prior["n"] = n
            self.results["mutants"].append(prior)
            log(
                f"{progress} {site.id} {site.change()}: {prior['status']} "
                "(from the previous results, --resume)"
            )
            return
        if entry is not None and not self.args.run_equivalent:
            record.update(status="equivalent", reason=entry["reason"])
            self.results["mutants"].append(record)
            log(f"{progress} {site.id} {site.change()}: equivalent, not run ({entry['where']})")
            write_json(self.results_path, self.results)
            return
        t_mutant = time.monotonic()
        self.try_mutant(record, site, spans, path, original, mutated)
        record["seconds"] = round(time.monotonic() - t_mutant, 2)
        if entry is not None and record["status"] in ("killed", "timeout"):
            record["note"] = (
                f"listed as equivalent ({entry['where']}) but killed: the entry is wrong"
            )
        self.results["mutants"].append(record)
        by = (
            f" {'in' if record['status'] == 'timeout' else 'by'} {record['check']}"
            if record["check"]
            else ""
        )
        log(
            f"{progress} {site.id} {site.change()}: {record['status']}{by} "
            f"({record['seconds']:.1f} s)"
        )
        write_json(self.results_path, self.results)

    def try_mutant(self, record, site, spans, path, original, mutated):
        """Writes the mutant to `path`, builds it and runs the checks into `record`; the
        original text is written back whatever happens."""
        active = self.checks
        if touches_anchor(site, spans):
            active = [c for c in self.checks if not c.needs_faults]
            record["skipped_checks"] = [
                f"{c.name} (the mutant edits an anchor of cuda/test_support/kernel_faults.txt)"
                for c in self.checks
                if c.needs_faults
            ]
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(mutated)
            code, out, secs = self.build.build({t for c in active for t in c.targets})
            record["build_seconds"] = round(secs, 2)
            if code is None:
                record.update(
                    status="did-not-build", detail=f"the build ran past {self.args.build_timeout} s"
                )
            elif code != 0:
                record.update(status="did-not-build", detail=first_error_lines(out))
            else:
                self.check_mutant(record, active)
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)

    def check_mutant(self, record, active):
        """Runs the `active` checks on the built mutant up to the first that fails."""
        record["status"] = "survived"
        for c in active:
            limit = max(self.args.check_timeout, self.args.timeout_factor * c.baseline_seconds)
            code, out, secs = self.run_check(c, limit)
            record["check_seconds"][c.name] = round(secs, 2)
            if code is None:
                record.update(
                    status="timeout",
                    check=c.name,
                    detail=f"ran past {limit:.0f} s (counted as killed)\n" + out[-1500:],
                )
                return
            if code != 0:
                signal_note = f" (signal {-code})" if code < 0 else ""
                record.update(
                    status="killed",
                    check=c.name,
                    detail=f"exit status {code}{signal_note}\n" + failure_excerpt(out),
                )
                return


def _baseline_note(out):
    """What a passing baseline check's output says worth a note: no test passed (so it cannot
    kill a mutant), or some were skipped."""
    passed = re.search(r"\[  PASSED  \] (\d+) test", out)
    skipped = re.search(r"\[  SKIPPED \] (\d+) test", out)
    if passed and int(passed.group(1)) == 0:
        return "WARNING: it passes no test, so it cannot kill a mutant"
    if skipped:
        return f"{skipped.group(1)} tests skipped"
    return ""
