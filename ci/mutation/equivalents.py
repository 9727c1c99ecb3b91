# SPDX-License-Identifier: Apache-2.0
"""The equivalent-mutant file (ci/mutants-equivalent.txt): mutants that no input can tell from
the original, each with the reason. A run does not run a mutant listed there, and a summary
counts a listed survivor as equivalent. An entry is keyed by the file, the line's text, the
change and its occurrence on the line, not by the line number, so edits elsewhere in the
file leave it valid."""

import os
import re

from .common import UsageError

FIELDS = ("file", "line", "mutant", "reason")


def equivalence_key(file, text, orig, repl, occurrence):
    """What identifies a mutant across edits elsewhere in the file: no line number."""
    return (file, text.strip(), orig, repl, int(occurrence))


def parse_equivalents(path):
    """Entries of the equivalent-mutant file: dicts with file, line, orig, repl, occurrence,
    reason, key and where (PATH:LINE of the entry)."""
    entries = []
    if not path or not os.path.exists(path):
        return entries
    current, first = {}, None
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line.lstrip().startswith("#"):
                continue
            if not line.strip():
                if current:
                    entries.append(_entry(path, first, current))
                current, first = {}, None
                continue
            field, value = _field(path, number, line, current)
            if first is None:
                first = number
            current[field] = value
    if current:
        entries.append(_entry(path, first, current))
    return entries


def _field(path, number, line, current):
    """(name, value) of an entry's line `number`."""
    m = re.match(r"(file|line|mutant|occurrence|reason):\s?(.*)$", line)
    if not m:
        raise UsageError(
            f"{path}:{number}: expected 'file:', 'line:', 'mutant:', 'occurrence:' "
            f"or 'reason:', not {line!r}"
        )
    if m.group(1) in current:
        raise UsageError(
            f"{path}:{number}: a second {m.group(1)}: in one entry "
            "(entries are separated by a blank line)"
        )
    return m.group(1), m.group(2).strip()


def _entry(path, first, current):
    """The entry of the fields `current`, which starts at line `first` of `path`."""
    missing = [k for k in FIELDS if k not in current]
    if missing:
        raise UsageError(f"{path}:{first}: entry without {', '.join(missing)}")
    m = re.fullmatch(r"'(.*)'\s*->\s*'(.*)'", current["mutant"])
    if not m:
        raise UsageError(
            f"{path}:{first}: mutant must read 'ORIG' -> 'REPL', not {current['mutant']!r}"
        )
    occurrence = int(current.get("occurrence", "0"))
    return {
        "file": current["file"],
        "line": current["line"],
        "orig": m.group(1),
        "repl": m.group(2),
        "occurrence": occurrence,
        "reason": current["reason"],
        "where": f"{os.path.relpath(path)}:{first}",
        "key": equivalence_key(
            current["file"], current["line"], m.group(1), m.group(2), occurrence
        ),
    }


def equivalents_by_key(entries):
    return {e["key"]: e for e in entries}


def equivalence_entry_text(mutant):
    """The entry that would list `mutant` (a result record), its reason left to fill in."""
    lines = [
        f"file: {mutant['file']}",
        f"line: {mutant['text'].strip()}",
        f"mutant: {mutant['orig']!r} -> {mutant['repl']!r}",
    ]
    if mutant.get("occurrence", 0):
        lines.append(f"occurrence: {mutant['occurrence']}")
    lines.append("reason: WHY NO INPUT CAN TELL IT FROM THE ORIGINAL")
    return "\n".join(lines)


def classify_with_equivalents(mutants, equivalents):
    """Apply the equivalent-mutant file to results (it may be newer than the run): a survivor
    it lists becomes `equivalent`; a killed mutant it lists is a wrong entry (warning)."""
    by_key = equivalents_by_key(equivalents)
    warnings = []
    for m in mutants:
        key = equivalence_key(m["file"], m["text"], m["orig"], m["repl"], m.get("occurrence", 0))
        entry = by_key.get(key)
        if entry is None:
            if m["status"] == "equivalent":  # not run because of an entry that is gone now
                m["status"], m["note"] = "not-run", "listed as equivalent when run; no entry now"
            continue
        m["reason"] = entry["reason"]
        if m["status"] == "survived":
            m["status"] = "equivalent"
            m["note"] = "ran and survived; listed as equivalent"
        elif m["status"] in ("killed", "timeout"):
            warnings.append(
                f"{m['id']} {m['orig']!r} -> {m['repl']!r} is listed as equivalent "
                f"({entry['where']}) but {m['check']} killed it: the entry is wrong"
            )
    return warnings
