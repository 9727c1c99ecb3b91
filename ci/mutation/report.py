# SPDX-License-Identifier: Apache-2.0
"""What a run reports: the kill rate, summary.md (counts, tables, every survivor with its diff
and a ready-to-fill equivalent entry), results.json, survivors/NNN.diff, the verdict (exit
status), the --list-sites listing, and the merge of several runs or shards into one."""

import collections
import glob
import json
import os

from .common import UsageError, log, write_json
from .equivalents import classify_with_equivalents, equivalence_entry_text, equivalents_by_key
from .sites import OPERATOR_CLASSES

STATUSES = ["killed", "timeout", "survived", "equivalent", "did-not-build"]


def tally(mutants):
    counts = collections.Counter(m["status"] for m in mutants)
    return {s: counts.get(s, 0) for s in STATUSES}


def kill_rate(counts):
    """Detected / (detected + survived), detected = killed + timeout (a hang is noticed).
    Equivalent and did-not-build mutants do not count. None when nothing counts."""
    detected = counts.get("killed", 0) + counts.get("timeout", 0)
    total = detected + counts.get("survived", 0)
    return None if total == 0 else detected / total


def rate_text(rate):
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def _table(rows, header):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _group_rows(mutants, key):
    groups = collections.OrderedDict()
    for m in sorted(mutants, key=key):
        groups.setdefault(key(m), []).append(m)
    rows = []
    for name, ms in groups.items():
        c = tally(ms)
        rows.append(
            [
                f"`{name}`",
                len(ms),
                c["killed"],
                c["timeout"],
                c["survived"],
                c["equivalent"],
                c["did-not-build"],
                rate_text(kill_rate(c)),
            ]
        )
    return rows


# ---- summary.md ---------------------------------------------------------------------------------


def summary_markdown(results, warnings=()):
    mutants = sorted(
        (m for m in results["mutants"] if m["status"] in STATUSES), key=lambda m: m.get("n", 0)
    )
    out = _summary_head(results, mutants, warnings)
    out += _time_section(results.get("baseline"), mutants)
    out += _group_sections(mutants)
    out += _survivor_section(mutants)
    out += _status_sections(mutants)
    return "\n".join(out)


def _summary_head(results, mutants, warnings):
    """The command, the kill rate, the counts, the mutants without a result, the warnings."""
    counts = tally(mutants)
    cfg = results.get("config", {})
    out = ["# Mutation testing summary", ""]
    if cfg.get("command"):
        out += [f"Command: `{cfg['command']}`", ""]
    out += [
        f"**Kill rate: {rate_text(kill_rate(counts))}** (killed + timeout over killed + "
        "timeout + survived; equivalent and did-not-build mutants do not count)",
        "",
    ]
    out += [_table([[counts[s] for s in STATUSES] + [len(mutants)]], STATUSES + ["total"]), ""]
    not_run = [m for m in results["mutants"] if m["status"] not in STATUSES]
    if not_run:
        out += [
            f"{len(not_run)} mutants without a result (not-run): their equivalent entry is "
            "gone; rerun them with --sites.",
            "",
        ]
    for w in warnings:
        out += [f"- WARNING: {w}"]
    if warnings:
        out += [""]
    return out


def _time_section(base, mutants):
    """## Time: the baseline checks' and the mutants' seconds."""
    timed = [m for m in mutants if m["status"] != "equivalent" and m.get("seconds")]
    if not (base or timed):
        return []
    out = ["## Time", ""]
    if base:
        out += [
            f"- Baseline: checks {base.get('check_seconds', 0):.1f} s "
            + "("
            + ", ".join(f"{c['name']} {c['seconds']:.1f} s" for c in base.get("checks", []))
            + ")"
        ]
    if timed:
        secs = sorted(m["seconds"] for m in timed)
        builds = sorted(m.get("build_seconds", 0) for m in timed)
        out += [
            f"- Per mutant (rebuild + checks to the first failure): median "
            f"{secs[len(secs) // 2]:.1f} s, mean {sum(secs) / len(secs):.1f} s, max "
            f"{secs[-1]:.1f} s; rebuild median {builds[len(builds) // 2]:.1f} s; "
            f"{sum(secs) / 60:.1f} min in all"
        ]
    return out + [""]


def _change_name(m):
    return (
        f"{m['orig'].strip()} -> {m['repl'].strip()}"
        if m["op"] not in ("int", "float")
        else m["op"]
    )


def _group_sections(mutants):
    """The tables per file, per operator, per change and per killing check."""
    header = [
        "",
        "mutants",
        "killed",
        "timeout",
        "survived",
        "equivalent",
        "did-not-build",
        "kill rate",
    ]
    out = ["## Per file", "", _table(_group_rows(mutants, lambda m: m["file"]), header), ""]
    out += ["## Per operator", "", _table(_group_rows(mutants, lambda m: m["op"]), header), ""]
    out += ["## Per change", "", _table(_group_rows(mutants, _change_name), header), ""]
    by_check = collections.Counter(
        m["check"] for m in mutants if m["status"] in ("killed", "timeout")
    )
    if by_check:
        out += [
            "## Killed by (the first check that failed)",
            "",
            _table(
                sorted(([f"`{k}`", v] for k, v in by_check.items()), key=lambda r: -r[1]),
                ["check", "mutants"],
            ),
            "",
        ]
    return out


def _survivor_section(mutants):
    """Every survivor with its diff and its entry for the equivalent-mutant file."""
    survivors = [m for m in mutants if m["status"] == "survived"]
    out = [f"## Survivors ({len(survivors)})", ""]
    if not survivors:
        out += ["None.", ""]
    for m in survivors:
        out += [f"### {m['n']:03d} `{m['id']}` {m['orig']!r} -> {m['repl']!r}", ""]
        if m.get("skipped_checks"):
            out += [f"Checks not run for it: {'; '.join(m['skipped_checks'])}", ""]
        out += [
            "```diff",
            m["diff"].rstrip("\n"),
            "```",
            "",
            "Once analysed, if no input can tell it from the original, its entry for "
            "ci/mutants-equivalent.txt:",
            "",
            "```text",
            equivalence_entry_text(m),
            "```",
            "",
        ]
    return out


def _status_sections(mutants):
    """The timeouts, the did-not-build and the equivalent mutants, one line each."""
    out = []
    for status, title in (
        ("timeout", "Timeouts (counted as killed)"),
        ("did-not-build", "Did not build"),
        ("equivalent", "Equivalent (listed in ci/mutants-equivalent.txt)"),
    ):
        ms = [m for m in mutants if m["status"] == status]
        if not ms:
            continue
        out += [f"## {title} ({len(ms)})", ""]
        for m in ms:
            detail = (m.get("detail") or "").strip().splitlines()
            if status == "timeout":
                what = f"{m.get('check')}: {detail[0] if detail else ''}"
            elif status == "did-not-build":
                what = detail[0] if detail else ""
            else:
                what = m.get("reason", "")
            out += [f"- {m['n']:03d} `{m['id']}` {m['orig']!r} -> {m['repl']!r}: {what}"]
        out += [""]
    return out


# ---- The output folder and the verdict ----------------------------------------------------------


def write_outputs(out_dir, results, equivalents):
    mutants = results["mutants"]
    warnings = classify_with_equivalents(mutants, equivalents)
    os.makedirs(out_dir, exist_ok=True)
    survivors_dir = os.path.join(out_dir, "survivors")
    if os.path.isdir(survivors_dir):
        for old in glob.glob(os.path.join(survivors_dir, "*.diff")):
            os.remove(old)
    os.makedirs(survivors_dir, exist_ok=True)
    for m in mutants:
        if m["status"] == "survived":
            with open(os.path.join(survivors_dir, f"{m['n']:03d}.diff"), "w") as f:
                f.write(m["diff"])
    write_json(os.path.join(out_dir, "results.json"), results)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(summary_markdown(results, warnings) + "\n")
    return warnings


def verdict(mutants, min_kill_rate, require_explained):
    """(exit status, reasons): 0 when the kill rate reaches min_kill_rate and, with
    require_explained, no survivor is left; 1 otherwise."""
    counts = tally([m for m in mutants if m["status"] in STATUSES])
    rate = kill_rate(counts)
    reasons = []
    if rate is not None and rate < min_kill_rate:
        reasons.append(f"kill rate {rate_text(rate)} < --min-kill-rate {rate_text(min_kill_rate)}")
    if require_explained and counts["survived"]:
        reasons.append(f"{counts['survived']} survivors not listed in the equivalent-mutant file")
    return (1 if reasons else 0), reasons


def report_end(results, args, warnings):
    """Logs the counts, the warnings and the verdict; the exit status."""
    counts = tally([m for m in results["mutants"] if m["status"] in STATUSES])
    log(
        " ".join(f"{k}: {v}" for k, v in counts.items())
        + f"; kill rate {rate_text(kill_rate(counts))}"
    )
    for w in warnings:
        log("WARNING: " + w)
    log(f"summary: {os.path.join(args.out, 'summary.md')}")
    status, reasons = verdict(results["mutants"], args.min_kill_rate, args.require_explained)
    for r in reasons:
        log("FAIL: " + r)
    return status


# ---- Merge --------------------------------------------------------------------------------------


def results_files(paths):
    """The results.json files of `paths`: files, folders holding one, or folders of
    shard-*/results.json."""
    files = []
    for p in paths:
        if os.path.isfile(p):
            files.append(p)
        elif os.path.isfile(os.path.join(p, "results.json")):
            files.append(os.path.join(p, "results.json"))
        else:
            found = sorted(glob.glob(os.path.join(p, "shard-*", "results.json")))
            if not found:
                raise UsageError(f"{p}: no results.json (nor shard-*/results.json)")
            files.extend(found)
    return files


def load_results(paths):
    """One result set of several runs or shards: a mutant present twice counts once, the later
    file winning; mutants of different samples are numbered afresh."""
    files = results_files(paths)
    merged = {
        "tool": "ci/mutate.py",
        "version": 1,
        "config": {"merged": files},
        "baseline": None,
        "mutants": [],
    }
    seen = {}
    for path in files:
        with open(path) as f:
            data = json.load(f)
        if merged["baseline"] is None:
            merged["baseline"] = data.get("baseline")
        for m in data.get("mutants", []):
            key = (m["id"], m["orig"], m["repl"], m["text"])
            if key in seen:
                merged["mutants"][seen[key]] = m  # a later file (a rerun) wins
            else:
                seen[key] = len(merged["mutants"])
                merged["mutants"].append(m)
    merged["mutants"].sort(key=lambda m: m.get("n", 0))
    numbers = [m.get("n") for m in merged["mutants"]]
    if len(set(numbers)) != len(numbers):  # runs of different samples: number them afresh
        for k, m in enumerate(merged["mutants"], 1):
            m["n"] = k
    return merged


# ---- --list-sites -------------------------------------------------------------------------------


def list_sites(sites, equivalents):
    """Prints every site, the counts per file and operator, and the equivalent entries that
    match no site (stale) or several; entries of files not listed are left out."""
    by_key = equivalents_by_key(equivalents)
    matched = collections.defaultdict(list)
    for s in sites:
        flag = " [device-only]" if s.device_only else ""
        entry = by_key.get(s.key())
        if entry:
            matched[entry["key"]].append(s.id)
            flag += " [equivalent]"
        log(f"{s.id} {s.op} {s.change()}{flag} | {s.text.strip()}")
    log("")
    log("sites per file:")
    for f, n in collections.Counter(s.file for s in sites).items():
        log(f"  {n:5d}  {f}")
    log("sites per operator:")
    per_op = collections.Counter(s.op for s in sites)
    for op in OPERATOR_CLASSES:
        log(f"  {per_op.get(op, 0):5d}  {op}")
    device = sum(s.device_only for s in sites)
    scanned = {s.file for s in sites}  # entries of other files are neither matched nor stale here
    listed = [e for e in equivalents if e["key"][0] in scanned]
    log(
        f"total: {len(sites)} sites ({device} device-only, not sampled without --device-sites); "
        f"{sum(1 for e in listed if matched[e['key']])} of {len(listed)} equivalent "
        "entries of these files match a site"
    )
    for e in listed:
        if not matched[e["key"]]:
            log(f"WARNING: {e['where']}: the entry matches no site (stale? the line changed)")
        elif len(matched[e["key"]]) > 1:
            log(
                f"note: {e['where']}: the entry covers {len(matched[e['key']])} sites of "
                f"identical lines ({', '.join(matched[e['key']])}): its reason must hold for each"
            )
