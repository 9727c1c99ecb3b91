#!/usr/bin/env python3
"""Mutation testing of mlarope's kernel and launch sources.

A mutant is one single-token change to a kernel or launch source: `+` for `-`, `<` for `<=`,
`&&` for `||`, a dropped `!`, a constant 2 for 1, `true` for `false`. The tool applies one
mutant at a time to a scratch copy of the tree, rebuilds incrementally, runs the project's own
checks (test binaries, then a short `mlarope fuzz` on the host backend) and says whether a
check noticed (killed) or not (survived). A surviving mutant is a gap in the checks, or an
equivalent mutant: a change no input can observe, listed with its reason in
ci/mutants-equivalent.txt.

  python3 ci/mutate.py --list-sites                  every mutation site, counts per file and operator
  python3 ci/mutate.py --count 100 --seed 1          100 mutants sampled with seed 1, into mutate-out/
  python3 ci/mutate.py --sites FILE:LINE:COL,...     these sites only (as --list-sites prints them)
  python3 ci/mutate.py merge DIR... --out DIR        one summary of several runs or shards

See docs/mutation.md.
"""
import argparse
import collections
import contextlib
import difflib
import glob
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

ROOT_DEFAULT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---- What is mutated --------------------------------------------------------------------------

# Files scanned for sites (globs relative to the repository root), in this order.
SOURCE_GLOBS = ["cuda/kernels/*.h", "cuda/launch/launch_builder.cpp", "cuda/launch/dispatch.cpp",
                "cuda/launch/footprint.cpp"]

# Binary operators, matched only with a space on each side (the project's style for them), so
# that template brackets, pointers, `->`, `++`, `<<` and unary minus are never taken for them.
BINARY_MUTATIONS = {
    "+": ("arith", "-"), "-": ("arith", "+"), "*": ("arith", "/"), "/": ("arith", "*"),
    "<": ("compare", "<="), "<=": ("compare", "<"), ">": ("compare", ">="), ">=": ("compare", ">"),
    "==": ("compare", "!="), "!=": ("compare", "=="),
    "&&": ("logic", "||"), "||": ("logic", "&&"),
}
OPERATOR_CLASSES = ["arith", "compare", "logic", "negation", "int", "float", "bool"]
OPERATOR_ABOUT = {
    "arith": "' + ' <-> ' - ', ' * ' <-> ' / '",
    "compare": "' < ' -> ' <= ', ' <= ' -> ' < ', ' > ' -> ' >= ', ' >= ' -> ' > ', ' == ' <-> ' != '",
    "logic": "' && ' <-> ' || '",
    "negation": "'!' before an identifier or '(' removed",
    "int": "integer literal: 0 -> 1, 1 -> 0, 2 -> 1, n -> n + 1 (suffix and hex kept)",
    "float": "floating literal: x -> 2x (0 -> 1)",
    "bool": "true <-> false",
}

# Macros whose value the host build knows, for telling code that only nvcc compiles: sites
# under `#if defined(__CUDA_ARCH__)` (or the #else of `#if !defined(__CUDA_ARCH__)`) are
# device-only; no host check can reach them, so they are listed but not sampled by default.
HOST_UNDEFINED_MACROS = {"__CUDA_ARCH__", "__CUDACC__"}

IDENT = re.compile(r"[A-Za-z0-9_]")


class Site:
    """One mutation: the token at text[start:end] of `file` becomes another. `orig` and `repl`
    are shown (and keyed) with a space each side for binary operators (' < ' -> ' <= '), as
    the bare token otherwise ('!' -> '', '2' -> '1')."""

    __slots__ = ("file", "line", "col", "start", "end", "op", "orig", "repl", "text", "occurrence",
                 "device_only")

    def __init__(self, file, line, col, start, end, op, orig, repl, text, device_only=False):
        self.file, self.line, self.col, self.start, self.end = file, line, col, start, end
        self.op, self.orig, self.repl, self.text = op, orig, repl, text
        self.occurrence = 0
        self.device_only = device_only

    @property
    def id(self):
        return f"{self.file}:{self.line}:{self.col}"

    def change(self):
        return f"{self.orig!r} -> {self.repl!r}"

    def key(self):
        return equivalence_key(self.file, self.text, self.orig, self.repl, self.occurrence)

    def as_dict(self):
        return {"id": self.id, "file": self.file, "line": self.line, "col": self.col, "op": self.op,
                "orig": self.orig, "repl": self.repl, "text": self.text, "occurrence": self.occurrence,
                "device_only": self.device_only}


def equivalence_key(file, text, orig, repl, occurrence):
    """What identifies a mutant across edits elsewhere in the file: no line number."""
    return (file, text.strip(), orig, repl, int(occurrence))


def _mask(code, start, end):
    for i in range(max(start, 0), min(end, len(code))):
        if code[i] != "\n":
            code[i] = "\0"


def _preprocessor_end(text, i):
    """End of the preprocessor line starting at i (backslash continuations joined)."""
    while True:
        e = text.find("\n", i)
        if e == -1:
            return len(text)
        if e > 0 and text[e - 1] == "\\":
            i = e + 1
            continue
        return e


def _eval_condition(directive, expression):
    """True / False where the host build's value of an #if is known, None otherwise."""
    expression = re.sub(r"/\*.*?\*/|//.*", "", expression).strip()
    if directive == "ifdef":
        return False if expression in HOST_UNDEFINED_MACROS else None
    if directive == "ifndef":
        return True if expression in HOST_UNDEFINED_MACROS else None
    value = True
    for term in re.split(r"\s*&&\s*", expression):
        m = re.fullmatch(r"(!?)\s*defined\s*\(?\s*(\w+)\s*\)?", term)
        if not m or m.group(2) not in HOST_UNDEFINED_MACROS:
            value = None  # not a macro whose host value we know: this term is unknown
            continue
        if m.group(1) != "!":
            return False  # defined(__CUDA_ARCH__) && ...: false on the host, whatever the rest
    return value


def code_mask(text):
    """(code, device_only): code is `text` with comments, string and char literals, preprocessor
    lines, static_assert(...) and template argument lists replaced by NUL characters (newlines
    kept); device_only[i] is True where the host build does not compile character i."""
    code = list(text)
    device_only = [False] * len(text)
    n = len(text)
    i = 0
    at_line_start = True
    # Per open #if: [is the current branch compiled, was an earlier or this branch compiled],
    # each True, False or None (unknown: the macro is not one whose host value we know).
    conditions = []
    region_start, region_device = 0, False

    def in_device_region():
        return any(c[0] is False for c in conditions)

    def set_region(pos):
        nonlocal region_start, region_device
        if region_device:
            for k in range(region_start, pos):
                device_only[k] = True
        region_start, region_device = pos, in_device_region()

    while i < n:
        c = text[i]
        if at_line_start:
            j = i
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] == "#":
                e = _preprocessor_end(text, j)
                line = text[j + 1:e].replace("\\\n", " ").strip()
                m = re.match(r"(if|ifdef|ifndef|elif|else|endif)\b(.*)", line, re.S)
                if m:
                    directive, expression = m.group(1), m.group(2)
                    if directive in ("if", "ifdef", "ifndef"):
                        value = _eval_condition(directive, expression)
                        conditions.append([value, value])
                    elif directive == "elif" and conditions:
                        top = conditions[-1]
                        value = _eval_condition("if", expression)
                        top[0] = False if top[1] is True else (None if top[1] is None and value is not False else value)
                        top[1] = True if top[1] is True or value is True else (None if top[1] is None or value is None else False)
                    elif directive == "else" and conditions:
                        top = conditions[-1]
                        top[0] = False if top[1] is True else (None if top[1] is None else True)
                    elif directive == "endif" and conditions:
                        conditions.pop()
                    set_region(e)
                _mask(code, i, e)
                i = e
                at_line_start = False
                continue
            at_line_start = False
        if c == "\n":
            at_line_start = True
            i += 1
        elif text.startswith("//", i):
            e = text.find("\n", i)
            e = n if e == -1 else e
            _mask(code, i, e)
            i = e
        elif text.startswith("/*", i):
            e = text.find("*/", i + 2)
            e = n if e == -1 else e + 2
            _mask(code, i, e)
            i = e
        elif c == '"':
            raw = re.search(r"(?:^|[^A-Za-z0-9_])(?:u8|u|U|L)?R$", text[max(0, i - 3):i])
            if raw:
                m = re.compile(r'"([^(\s]*)\(').match(text, i)
                end_marker = ")" + (m.group(1) if m else "") + '"'
                e = text.find(end_marker, i + 1)
                e = n if e == -1 else e + len(end_marker)
            else:
                e = i + 1
                while e < n and text[e] != '"' and text[e] != "\n":
                    e += 2 if text[e] == "\\" else 1
                e = min(e + 1, n)
            _mask(code, i, e)
            i = e
        elif c == "'":
            if i + 1 < n and text[i + 1].isalnum() and \
                    re.search(r"(?<![A-Za-z0-9_])[0-9][0-9A-Za-z']*$", text[max(0, i - 40):i]):
                i += 1  # a digit separator (1'000'000), not a char literal
                continue
            e = i + 1
            while e < n and text[e] != "'" and text[e] != "\n":
                e += 2 if text[e] == "\\" else 1
            e = min(e + 1, n)
            _mask(code, i, e)
            i = e
        else:
            i += 1
    set_region(n)
    joined = "".join(code)
    _mask_static_asserts(joined, code)
    joined = "".join(code)
    _mask_template_arguments(joined, code)
    return "".join(code), device_only


def _matching_paren(code, open_index):
    depth = 0
    for k in range(open_index, len(code)):
        if code[k] == "(":
            depth += 1
        elif code[k] == ")":
            depth -= 1
            if depth == 0:
                return k
    return len(code) - 1


def _mask_static_asserts(joined, code):
    for m in re.finditer(r"\bstatic_assert\s*\(", joined):
        end = _matching_paren(joined, m.end() - 1)
        _mask(code, m.start(), end + 1)


def _template_close(code, lt):
    """Index of the `>` closing the template argument list opened at `lt`, or None."""
    angle, paren = 1, 0
    k = lt + 1
    limit = min(len(code), lt + 400)
    while k < limit:
        ch = code[k]
        if ch in "([":
            paren += 1
        elif ch in ")]":
            if paren == 0:
                return None
            paren -= 1
        elif paren == 0 and ch in ";{}":
            return None
        elif paren == 0 and code.startswith(("&&", "||"), k):
            return None
        elif ch == "<" and paren == 0 and k > 0 and IDENT.match(code[k - 1]) and code[k + 1:k + 2] not in ("<", "="):
            angle += 1
        elif ch == ">" and paren == 0 and code[k - 1] != "-":
            angle -= 1
            if angle == 0:
                return k
        k += 1
    return None


def _mask_template_arguments(joined, code):
    """Template parameter and argument lists (`template <class T>`, `f<T, 2 * K>`): a changed
    constant or operator there changes types (and rarely compiles), so none is a site."""
    for m in re.finditer(r"(?:\btemplate\s*|(?<=[A-Za-z0-9_]))<(?![<=])", joined):
        lt = m.end() - 1
        if code[lt] != "<":
            continue  # inside a list masked already
        gt = _template_close(joined, lt)
        if gt is not None:
            _mask(code, lt, gt + 1)


_NUMBER = re.compile(r"(?<![A-Za-z0-9_.'])(?:0[xX][0-9A-Fa-f']+|\d[\d']*\.?[\d']*(?:[eE][+-]?\d+)?|\.\d[\d']*(?:[eE][+-]?\d+)?)"
                     r"[A-Za-z]*(?![A-Za-z0-9_.'])")


def mutate_number(token):
    """The mutated spelling of a numeric literal, or None (not one we mutate)."""
    m = re.fullmatch(r"(0[xX])([0-9A-Fa-f']+)([uUlL]*)", token)
    if m:
        value = int(m.group(2).replace("'", ""), 16)
        new = 1 if value == 0 else 0 if value == 1 else 1 if value == 2 else value + 1
        digits = format(new, "X" if m.group(2).isupper() else "x")
        return "int", m.group(1) + digits + m.group(3)
    m = re.fullmatch(r"(\d[\d']*)([uUlL]*)", token)
    if m:
        if len(m.group(1)) > 1 and m.group(1).startswith("0"):
            return None  # octal: not used in these sources
        value = int(m.group(1).replace("'", ""))
        new = 1 if value == 0 else 0 if value == 1 else 1 if value == 2 else value + 1
        return "int", str(new) + m.group(2)
    m = re.fullmatch(r"((?:\d[\d']*)?\.?[\d']*(?:[eE][+-]?\d+)?)([fFlL]?)", token)
    if m and re.search(r"[.eE]", m.group(1)):
        value = float(m.group(1).replace("'", ""))
        new = value * 2 if value != 0 else 1.0
        text = repr(new)
        if "inf" in text or "nan" in text:
            return None
        return "float", text + m.group(2)
    return None


def find_sites(file, text):
    """Every mutation site of `text` (the contents of repository path `file`), in text order."""
    code, device_only = code_mask(text)
    line_starts = [0] + [k + 1 for k, ch in enumerate(text) if ch == "\n"]
    lines = text.split("\n")

    def position(offset):
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - line_starts[lo] + 1

    found = []

    def add(start, end, at, op, orig, repl):
        line, col = position(at)
        found.append(Site(file, line, col, start, end, op, orig, repl, lines[line - 1],
                          device_only[at]))

    for m in re.finditer(r"(?<=\s)(\+|-|\*|/|<=|<|>=|>|==|!=|&&|\|\|)(?=\s)", code):
        token = m.group(1)
        # A binary operator follows an operand: an identifier or literal, `)`, `]`, or a masked
        # string, char literal, comment or template argument list (looking back over blanks and
        # line ends). After `=`, `(`, `,`, `?` or another operator, ` - x` is a unary sign and
        # ` * p` a dereference: not binary sites.
        k = m.start() - 1
        while k >= 0 and code[k] in " \t\n":
            k -= 1
        before = code[k] if k >= 0 else ""
        if not (IDENT.match(before) or before in (")", "]", "\0")):
            continue
        op, repl = BINARY_MUTATIONS[token]
        add(m.start(), m.end(), m.start(), op, f" {token} ", f" {repl} ")
    for m in re.finditer(r"!(?=[A-Za-z_(])", code):
        add(m.start(), m.end(), m.start(), "negation", "!", "")
    for m in re.finditer(r"\b(true|false)\b", code):
        add(m.start(), m.end(), m.start(), "bool", m.group(1), "false" if m.group(1) == "true" else "true")
    for m in _NUMBER.finditer(code):
        mutated = mutate_number(m.group(0))
        if mutated:
            add(m.start(), m.end(), m.start(), mutated[0], m.group(0), mutated[1])
    found.sort(key=lambda s: s.start)
    seen = collections.Counter()
    for s in found:
        k = (s.line, s.orig, s.repl)
        s.occurrence = seen[k]
        seen[k] += 1
    return found


def source_files(root, globs):
    files = []
    for pattern in globs:
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            rel = os.path.relpath(path, root)
            if os.path.isfile(path) and rel not in files:
                files.append(rel)
    return files


def all_sites(root, globs):
    sites = []
    for rel in source_files(root, globs):
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            sites.extend(find_sites(rel, f.read()))
    return sites


def apply_site(text, site):
    """`text` with the mutant: the token at [start, end) (orig without its display spaces)
    replaced."""
    if text[site.start:site.end] != site.orig.strip():
        raise RuntimeError(f"{site.id}: expected {site.orig.strip()!r}, found {text[site.start:site.end]!r}")
    return text[:site.start] + site.repl.strip() + text[site.end:]


def unified_diff(file, before, after, context=2):
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                        "a/" + file, "b/" + file, n=context))


# ---- Sampling -----------------------------------------------------------------------------------

def sample_sites(sites, count, seed):
    """`count` distinct sites drawn uniformly with `seed` (all of them when count >= len),
    in the order drawn: the same sites and order for the same seed and site list."""
    if count is None or count >= len(sites):
        order = list(range(len(sites)))
        random.Random(seed).shuffle(order)
    else:
        order = random.Random(seed).sample(range(len(sites)), count)
    return [sites[k] for k in order]


def shard_of(sample, index, count):
    """Mutants index, index + count, ... of the sample, with their 1-based numbers in it."""
    return [(k + 1, s) for k, s in enumerate(sample) if k % count == index]


def shard_from_env(args):
    """(index, count) from the flags, a SLURM job array or a Kubernetes Indexed Job."""
    env = os.environ
    index, count = args.shard_index, args.shard_count
    if index is None:
        if env.get("SLURM_ARRAY_TASK_ID"):
            index = int(env["SLURM_ARRAY_TASK_ID"]) - int(env.get("SLURM_ARRAY_TASK_MIN", "0") or 0)
            count = count or int(env.get("SLURM_ARRAY_TASK_COUNT", "1"))
        elif env.get("JOB_COMPLETION_INDEX"):
            index = int(env["JOB_COMPLETION_INDEX"])
            count = count or int(env.get("MLAROPE_SHARD_COUNT", "0") or 0) or None
            if count is None:
                raise UsageError("JOB_COMPLETION_INDEX is set: give --shard-count or MLAROPE_SHARD_COUNT")
    index = 0 if index is None else index
    count = 1 if count is None else count
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"shard {index} of {count}: need 0 <= index < count")
    return index, count


# ---- Equivalent mutants -------------------------------------------------------------------------

class UsageError(Exception):
    pass


def parse_equivalents(path):
    """Entries of the equivalent-mutant file: dicts with file, line, orig, repl, occurrence,
    reason, key and where (PATH:LINE of the entry)."""
    entries = []
    if not path or not os.path.exists(path):
        return entries
    current, first = {}, None

    def finish():
        nonlocal current, first
        if not current:
            return
        missing = [k for k in ("file", "line", "mutant", "reason") if k not in current]
        if missing:
            raise UsageError(f"{path}:{first}: entry without {', '.join(missing)}")
        m = re.fullmatch(r"'(.*)'\s*->\s*'(.*)'", current["mutant"])
        if not m:
            raise UsageError(f"{path}:{first}: mutant must read 'ORIG' -> 'REPL', not {current['mutant']!r}")
        occurrence = int(current.get("occurrence", "0"))
        entries.append({"file": current["file"], "line": current["line"], "orig": m.group(1),
                        "repl": m.group(2), "occurrence": occurrence, "reason": current["reason"],
                        "where": f"{os.path.relpath(path)}:{first}",
                        "key": equivalence_key(current["file"], current["line"], m.group(1), m.group(2),
                                               occurrence)})
        current, first = {}, None

    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line.lstrip().startswith("#"):
                continue
            if not line.strip():
                finish()
                continue
            m = re.match(r"(file|line|mutant|occurrence|reason):\s?(.*)$", line)
            if not m:
                raise UsageError(f"{path}:{number}: expected 'file:', 'line:', 'mutant:', 'occurrence:' "
                                 f"or 'reason:', not {line!r}")
            if m.group(1) in current:
                raise UsageError(f"{path}:{number}: a second {m.group(1)}: in one entry "
                                 "(entries are separated by a blank line)")
            if first is None:
                first = number
            current[m.group(1)] = m.group(2).strip()
    finish()
    return entries


def equivalents_by_key(entries):
    return {e["key"]: e for e in entries}


def equivalence_entry_text(mutant):
    lines = [f"file: {mutant['file']}", f"line: {mutant['text'].strip()}",
             f"mutant: {mutant['orig']!r} -> {mutant['repl']!r}"]
    if mutant.get("occurrence", 0):
        lines.append(f"occurrence: {mutant['occurrence']}")
    lines.append("reason: WHY NO INPUT CAN TELL IT FROM THE ORIGINAL")
    return "\n".join(lines)


# ---- Kill-rate arithmetic and the summary -------------------------------------------------------

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
            warnings.append(f"{m['id']} {m['orig']!r} -> {m['repl']!r} is listed as equivalent "
                            f"({entry['where']}) but {m['check']} killed it: the entry is wrong")
    return warnings


def _rate_text(rate):
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
        rows.append([f"`{name}`", len(ms), c["killed"], c["timeout"], c["survived"], c["equivalent"],
                     c["did-not-build"], _rate_text(kill_rate(c))])
    return rows


def summary_markdown(results, warnings=()):
    mutants = sorted((m for m in results["mutants"] if m["status"] in STATUSES), key=lambda m: m.get("n", 0))
    counts = tally(mutants)
    rate = kill_rate(counts)
    cfg = results.get("config", {})
    out = ["# Mutation testing summary", ""]
    if cfg.get("command"):
        out += [f"Command: `{cfg['command']}`", ""]
    out += [f"**Kill rate: {_rate_text(rate)}** (killed + timeout over killed + timeout + survived; "
            "equivalent and did-not-build mutants do not count)", ""]
    out += [_table([[counts[s] for s in STATUSES] + [len(mutants)]], STATUSES + ["total"]), ""]
    not_run = [m for m in results["mutants"] if m["status"] not in STATUSES]
    if not_run:
        out += [f"{len(not_run)} mutants without a result (not-run): their equivalent entry is gone; "
                "rerun them with --sites.", ""]
    for w in warnings:
        out += [f"- WARNING: {w}"]
    if warnings:
        out += [""]
    base = results.get("baseline")
    timed = [m for m in mutants if m["status"] != "equivalent" and m.get("seconds")]
    if base or timed:
        out += ["## Time", ""]
        if base:
            out += [f"- Baseline: checks {base.get('check_seconds', 0):.1f} s "
                    + "(" + ", ".join(f"{c['name']} {c['seconds']:.1f} s" for c in base.get("checks", [])) + ")"]
        if timed:
            secs = sorted(m["seconds"] for m in timed)
            builds = sorted(m.get("build_seconds", 0) for m in timed)
            out += [f"- Per mutant (rebuild + checks to the first failure): median {secs[len(secs) // 2]:.1f} s, "
                    f"mean {sum(secs) / len(secs):.1f} s, max {secs[-1]:.1f} s; rebuild median "
                    f"{builds[len(builds) // 2]:.1f} s; {sum(secs) / 60:.1f} min in all"]
        out += [""]
    header = ["", "mutants", "killed", "timeout", "survived", "equivalent", "did-not-build", "kill rate"]
    out += ["## Per file", "", _table(_group_rows(mutants, lambda m: m["file"]), header), ""]
    out += ["## Per operator", "", _table(_group_rows(mutants, lambda m: m["op"]), header), ""]
    out += ["## Per change", "", _table(_group_rows(mutants, lambda m: f"{m['orig'].strip()} -> {m['repl'].strip()}"
                                                    if m["op"] not in ("int", "float") else m["op"]), header), ""]
    by_check = collections.Counter(m["check"] for m in mutants if m["status"] in ("killed", "timeout"))
    if by_check:
        out += ["## Killed by (the first check that failed)", "",
                _table(sorted(([f"`{k}`", v] for k, v in by_check.items()), key=lambda r: -r[1]),
                       ["check", "mutants"]), ""]
    survivors = [m for m in mutants if m["status"] == "survived"]
    out += [f"## Survivors ({len(survivors)})", ""]
    if not survivors:
        out += ["None.", ""]
    for m in survivors:
        out += [f"### {m['n']:03d} `{m['id']}` {m['orig']!r} -> {m['repl']!r}", ""]
        if m.get("skipped_checks"):
            out += [f"Checks not run for it: {'; '.join(m['skipped_checks'])}", ""]
        out += ["```diff", m["diff"].rstrip("\n"), "```", "",
                "Once analysed, if no input can tell it from the original, its entry for "
                "ci/mutants-equivalent.txt:", "", "```text", equivalence_entry_text(m), "```", ""]
    for status, title in (("timeout", "Timeouts (counted as killed)"), ("did-not-build", "Did not build"),
                          ("equivalent", "Equivalent (listed in ci/mutants-equivalent.txt)")):
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
    return "\n".join(out)


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
    _write_json(os.path.join(out_dir, "results.json"), results)
    with open(os.path.join(out_dir, "summary.md"), "w") as f:
        f.write(summary_markdown(results, warnings) + "\n")
    return warnings


def _write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def verdict(mutants, min_kill_rate, require_explained):
    """(exit status, reasons): 0 when the kill rate reaches min_kill_rate and, with
    require_explained, no survivor is left; 1 otherwise."""
    counts = tally([m for m in mutants if m["status"] in STATUSES])
    rate = kill_rate(counts)
    reasons = []
    if rate is not None and rate < min_kill_rate:
        reasons.append(f"kill rate {_rate_text(rate)} < --min-kill-rate {_rate_text(min_kill_rate)}")
    if require_explained and counts["survived"]:
        reasons.append(f"{counts['survived']} survivors not listed in the equivalent-mutant file")
    return (1 if reasons else 0), reasons


# ---- The scratch copy and its build ---------------------------------------------------------------

def log(message):
    print(message, flush=True)


def tree_files(root, exclude):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "-z"],
                             check=True, capture_output=True).stdout.decode()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        raise UsageError(f"{root} is not a git checkout (git ls-files failed: {e}); the scratch copy "
                         "is made of its tracked and untracked, not ignored files")
    files = []
    for rel in sorted(set(p for p in out.split("\0") if p)):
        path = os.path.join(root, rel)
        if any(rel == x or rel.startswith(x.rstrip("/") + "/") for x in exclude):
            continue
        if os.path.islink(path) or os.path.isfile(path):
            files.append(rel)
    return files


def sync_tree(root, dest, files, manifest_path):
    """Copy `files` of root into dest, writing only files whose content differs (so mtimes
    change only there); delete files copied before that are gone. (changed count, tree hash)"""
    digest = hashlib.sha256()
    changed = 0
    for rel in files:
        src, dst = os.path.join(root, rel), os.path.join(dest, rel)
        if os.path.islink(src):
            target = os.readlink(src)
            digest.update(f"{rel}\0link\0{target}\0".encode())
            if not (os.path.islink(dst) and os.readlink(dst) == target):
                if os.path.lexists(dst):
                    os.remove(dst)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.symlink(target, dst)
                changed += 1
            continue
        with open(src, "rb") as f:
            data = f.read()
        digest.update(f"{rel}\0{len(data)}\0".encode())
        digest.update(data)
        same = False
        if os.path.isfile(dst) and not os.path.islink(dst):
            with open(dst, "rb") as f:
                same = f.read() == data
        if not same:
            if os.path.lexists(dst):
                os.remove(dst)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, "wb") as f:
                f.write(data)
            changed += 1
        mode = os.stat(src).st_mode & 0o777
        if os.stat(dst).st_mode & 0o777 != mode:
            os.chmod(dst, mode)
    old = []
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            old = json.load(f)
    keep = set(files)
    for rel in old:
        if rel not in keep and os.path.lexists(os.path.join(dest, rel)):
            os.remove(os.path.join(dest, rel))
            changed += 1
    _write_json(manifest_path, files)
    return changed, digest.hexdigest()


def nice_prefix(level):
    return ["nice", "-n", str(level)] if level and shutil.which("nice") else []


def run_logged(argv, cwd=None, env=None, timeout=None):
    """(returncode or None on timeout, combined output, seconds); the process group is killed on
    timeout."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return code, out.decode(errors="replace"), time.monotonic() - t0


def first_error_lines(output, count=12):
    lines = output.splitlines()
    for k, line in enumerate(lines):
        if re.search(r"\berror\b|FAILED:", line):
            start = k
            if line.startswith("FAILED:"):
                nxt = [j for j in range(k + 1, len(lines)) if re.search(r"\berror\b", lines[j])]
                start = nxt[0] if nxt else k
            return "\n".join(lines[start:start + count])
    return "\n".join(lines[-count:])


# UBSan's array-bounds checks, fatal at the first finding.
BOUNDS_FLAGS = "-fsanitize=bounds -fno-sanitize-recover=bounds"


class Build:
    def __init__(self, scratch, args):
        self.root = scratch
        self.src = os.path.join(scratch, "src")
        self.dir = os.path.join(scratch, "build")
        self.args = args
        self.paths = {}

    def configure(self, cases_dir, sources_changed=True):
        flags = ["-G", "Ninja", f"-DCMAKE_BUILD_TYPE={self.args.build_type}", "-DMLAROPE_CUDA=OFF",
                 "-DMLAROPE_BENCH=OFF", "-DMLAROPE_PYTHON=OFF", "-DMLAROPE_TESTS=ON",
                 "-DMLAROPE_SANITIZE=OFF", f"-DMLAROPE_CASES_DIR={cases_dir}",
                 # Bounds checks of fixed-size arrays (cheap, unlike ASan): a loop one past a
                 # kernel's local array is a failing check, not a survivor.
                 f"-DCMAKE_CXX_FLAGS={BOUNDS_FLAGS}"] + list(self.args.cmake_arg)
        stamp = os.path.join(self.root, "configure.json")
        previous = None
        if os.path.exists(stamp):
            with open(stamp) as f:
                previous = json.load(f)
        if previous == flags and os.path.exists(os.path.join(self.dir, "build.ninja")):
            if not sources_changed:
                return 0.0
            # Regenerate: a changed CMakeLists.txt may add targets that `ninja -t query` must see.
            code, out, secs = run_logged(["cmake", self.dir])
            if code != 0:
                raise ToolError(f"cmake failed to regenerate the scratch build:\n{out[-3000:]}")
            return secs
        if os.path.isdir(self.dir):
            shutil.rmtree(self.dir)
        os.makedirs(self.dir)
        log(f"configure: cmake -S {self.src} -B {self.dir} {' '.join(flags)}")
        code, out, secs = run_logged(["cmake", "-S", self.src, "-B", self.dir] + flags)
        if code != 0:
            raise ToolError(f"cmake failed to configure the scratch copy:\n{out[-3000:]}")
        _write_json(stamp, flags)
        return secs

    def has_target(self, name):
        code, out, _ = run_logged(["ninja", "-C", self.dir, "-t", "query", name])
        return code == 0

    def target_file(self, name):
        """The file a phony target (an executable's name) builds, absolute."""
        if name in self.paths:
            return self.paths[name]
        code, out, _ = run_logged(["ninja", "-C", self.dir, "-t", "query", name])
        if code != 0:
            raise ToolError(f"the scratch build has no target {name!r}")
        lines = out.splitlines()
        path = name
        for k, line in enumerate(lines):
            if line.strip() == "input: phony" and k + 1 < len(lines):
                path = lines[k + 1].strip()
                break
        self.paths[name] = os.path.join(self.dir, path)
        return self.paths[name]

    def build(self, targets):
        argv = nice_prefix(self.args.nice) + ["ninja", "-C", self.dir, f"-j{self.args.jobs}"] + sorted(set(targets))
        return run_logged(argv, timeout=self.args.build_timeout)


class ToolError(Exception):
    pass


# ---- Checks -------------------------------------------------------------------------------------

class Check:
    """A check: build `targets`, run `argv` (`@target` is that target's file; {run}, {fuzz_seconds},
    {fuzz_seed}, {jobs} are filled in) with `env`; a non-zero exit status kills the mutant."""

    def __init__(self, name, targets, argv, about, env=None, needs_faults=False, optional=False):
        self.name, self.targets, self.argv, self.about = name, targets, argv, about
        self.env = env or {}
        self.needs_faults, self.optional = needs_faults, optional
        self.baseline_seconds = None

    def command(self, build, values):
        out = []
        for a in self.argv:
            if a.startswith("@"):
                out.append(build.target_file(a[1:]))
            else:
                out.append(a.format(**values))
        return out


PROPS = [("props_rope", "rope_props"), ("props_rope_backward", "rope_backward_props"),
         ("props_kv_split", "kv_split_props"), ("props_kv_split_backward", "kv_split_backward_props"),
         ("props_identities", "identities_props"), ("props_yarn", "yarn_props")]
OPTIONAL_PROPS = {"props_yarn"}  # newer than the tool: skipped where the build has no such target


def check_registry():
    checks = [
        Check("dispatch", ["dispatch_test"], ["@dispatch_test"],
              "dispatcher and launch builder decisions (cuda/launch/dispatch_test.cpp)"),
        Check("canonical_launch", ["canonical_launch_test"], ["@canonical_launch_test"],
              "variant, grid and work of the canonical DeepSeek-V3 calls (cuda/tests/canonical_launch_test.cpp); "
              "skipped where the build has no such target", optional=True),
        Check("launch_alignment", ["launch_alignment_test"], ["@launch_alignment_test"],
              "each vector-path condition of the launch builder with one operand false, under the GPU "
              "model (cuda/tests/launch_alignment_test.cpp)"),
        Check("portability", ["portability_test"], ["@portability_test"],
              "element conversions, vector loads and stores, SSE2 bf16 paths (cuda/tests/portability_test.cpp)"),
        Check("kv_sum_order", ["kv_sum_order_test"], ["@kv_sum_order_test"],
              "kv_split_backward's head-sum order and groups (cuda/tests/kv_sum_order_test.cpp)"),
        Check("thd_gate", ["thd_gate_test"], ["@thd_gate_test"],
              "the cu_seqlens gate and the THD grid cap (cuda/tests/thd_gate_test.cpp)"),
        Check("oversized_grid", ["oversized_grid_test"], ["@oversized_grid_test"],
              "grids with more blocks than rows and more threads than the gate's slots, under the GPU "
              "model (cuda/tests/oversized_grid_test.cpp); skipped where the build has no such target",
              optional=True),
        Check("host_backend", ["host_backend_test"], ["@host_backend_test", "--gtest_filter=-*/cuda"],
              "every op on the host backend against the reference: dtypes, layouts, THD, CP, metadata, "
              "graphs, YaRN, Megatron ops, order (cuda/tests/*_backend_test.cpp and the rest of host_backend_test)"),
        Check("megatron_cases", ["megatron_cases_test"], ["@megatron_cases_test", "--gtest_filter=*/host"],
              "the bundled Megatron-LM cases on the host backend (harness/checks/megatron_cases_test.cpp)"),
    ]
    for name, target in PROPS:
        checks.append(Check(name, [target], ["@" + target],
                            f"RapidCheck properties properties/{target}.cpp on the host backend "
                            "(MLAROPE_PROPERTY_SCALE = --property-scale)"
                            + ("; skipped where the build has no such target" if name in OPTIONAL_PROPS else ""),
                            env={"MLAROPE_BACKEND": "host", "MLAROPE_PROPERTY_SCALE": "{property_scale}",
                                 "MLAROPE_FAILURE_DIR": "{run}/property-failures"},
                            optional=name in OPTIONAL_PROPS))
    checks.append(Check("fuzz", ["mlarope"],
                        ["@mlarope", "fuzz", "--backend", "host", "--seconds", "{fuzz_seconds}", "--jobs",
                         "{fuzz_jobs}", "--seed", "{fuzz_seed}", "--out", "{run}/fuzz-out", "--shard-index", "0",
                         "--shard-count", "1", "--max-failure-dirs", "1"],
                        "`mlarope fuzz --backend host` for --fuzz-seconds with --fuzz-seed (exit status 1: a failing case)"))
    # The host's fast mode runs other code than the GPU model (whole rows per thread, memcpy
    # copies, SIMD conversions): a share of the budget on it.
    checks.append(Check("fuzz_fast", ["mlarope"],
                        ["@mlarope", "fuzz", "--backend", "host-fast", "--seconds", "{fuzz_fast_seconds}", "--jobs",
                         "{fuzz_jobs}", "--seed", "{fuzz_seed}", "--out", "{run}/fuzz-fast-out", "--shard-index", "0",
                         "--shard-count", "1", "--max-failure-dirs", "1"],
                        "`mlarope fuzz --backend host-fast` (the fast mode's own code paths) for half of --fuzz-seconds"))
    return collections.OrderedDict((c.name, c) for c in checks)


DEFAULT_CHECKS = ["dispatch", "canonical_launch", "launch_alignment", "portability", "kv_sum_order", "thd_gate",
                  "oversized_grid", "host_backend", "megatron_cases"] + [n for n, _ in PROPS] + ["fuzz", "fuzz_fast"]


def parse_checks(spec):
    """Checks named in --checks: registry names, gtest:TARGET[:FILTER] or ctest:REGEX@T1+T2."""
    registry = check_registry()
    checks = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        if item in registry:
            checks.append(registry[item])
        elif item.startswith("gtest:"):
            target, _, flt = item[len("gtest:"):].partition(":")
            argv = ["@" + target] + ([f"--gtest_filter={flt}"] if flt else [])
            checks.append(Check(item, [target], argv, f"GoogleTest binary {target}" + (f", filter {flt}" if flt else "")))
        elif item.startswith("ctest:"):
            regex, _, targets = item[len("ctest:"):].partition("@")
            if not targets:
                raise UsageError(f"{item}: name the targets its tests need, ctest:REGEX@TARGET1+TARGET2")
            checks.append(Check(item, targets.split("+"),
                                ["ctest", "--test-dir", "{build}", "-R", regex, "--timeout", "{ctest_timeout}",
                                 "--output-on-failure"], f"ctest -R {regex}"))
        else:
            raise UsageError(f"--checks: unknown check {item!r} (see --list-checks)")
    if not checks:
        raise UsageError("--checks: no check")
    return checks


def check_environment(extra, values):
    env = dict(os.environ)
    # The checks must not shard themselves from the variables that shard this run.
    for var in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_COUNT",
                "JOB_COMPLETION_INDEX", "MLAROPE_SHARD_COUNT", "GTEST_SHARD_INDEX", "GTEST_TOTAL_SHARDS",
                "GTEST_FILTER", "RC_PARAMS", "MLAROPE_BACKEND", "MLAROPE_PROPERTY_SCALE"):
        env.pop(var, None)
    env["MLAROPE_CASES_DIR"] = values["cases"]
    for k, v in extra.items():
        env[k] = v.format(**values)
    return env


def fault_anchor_spans(src_root):
    """{cuda-relative file: [(start, end), ...]}: where the anchors of testing/kernel_faults.txt
    sit in the scratch sources (a mutant there breaks the fault variants' generated sources)."""
    path = os.path.join(src_root, "cuda", "testing", "kernel_faults.txt")
    spans = collections.defaultdict(list)
    if not os.path.exists(path):
        return spans
    current = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"(file|expression|before|after):\s?(.*?)\s*$", line)
            if not m:
                continue
            if m.group(1) == "file":
                current = "cuda/" + m.group(2)
                continue
            if current is None or not os.path.exists(os.path.join(src_root, current)):
                continue
            with open(os.path.join(src_root, current), encoding="utf-8") as s:
                text = s.read()
            anchor, k = m.group(2), 0
            while anchor:
                k = text.find(anchor, k)
                if k == -1:
                    break
                spans[current].append((k, k + len(anchor)))
                k += 1
    return spans


def touches_anchor(site, spans):
    return any(site.start < end and start < site.end for start, end in spans.get(site.file, []))


# ---- One run ------------------------------------------------------------------------------------

def mutant_record(n, site, diff):
    record = site.as_dict()
    record.update({"n": n, "diff": diff, "status": None, "check": None, "seconds": 0.0, "build_seconds": 0.0,
                   "check_seconds": {}, "detail": "", "skipped_checks": []})
    return record


def select_sites(args, sites):
    """The sample of this run (all shards), from --sites, --only, --count / --all."""
    pool = sites
    if not args.device_sites:
        pool = [s for s in pool if not s.device_only]
    if args.only:
        rx = re.compile(args.only)
        pool = [s for s in pool if rx.search(f"{s.id} {s.op} {s.text.strip()}")]
    if args.sites:  # exactly these, in this order (device-only ones too: they were asked for)
        by_id = {s.id: s for s in sites}
        chosen = []
        for item in [x.strip() for x in args.sites.split(",") if x.strip()]:
            if item not in by_id:
                raise UsageError(f"--sites: no site {item} (see --list-sites; the column is the operator's)")
            if by_id[item] not in chosen:
                chosen.append(by_id[item])
        if args.only:
            rx = re.compile(args.only)
            chosen = [s for s in chosen if rx.search(f"{s.id} {s.op} {s.text.strip()}")]
        return chosen
    if args.count is None and not args.all and not args.only:
        raise UsageError("say which mutants: --count N (with --seed), --all, --only REGEX or --sites LIST")
    return sample_sites(pool, None if args.all else args.count, args.seed)


def run_campaign(args, sites, sample, equivalents, out_dir):
    root = os.path.abspath(args.root)
    scratch = os.path.abspath(args.scratch)
    os.makedirs(scratch, exist_ok=True)
    lock = open(os.path.join(scratch, "lock"), "w")
    try:
        import fcntl
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise ToolError(f"another ci/mutate.py is using {scratch}: give each run its own --scratch")
    except ImportError:
        pass

    shard_index, shard_count = shard_from_env(args)
    mine = shard_of(sample, shard_index, shard_count)
    checks = parse_checks(args.checks)
    by_key = equivalents_by_key(equivalents)
    cases_dir = os.path.abspath(args.cases_dir)
    run_dir = os.path.join(scratch, "run")
    values = {"run": run_dir, "fuzz_seconds": f"{args.fuzz_seconds:g}", "fuzz_fast_seconds": f"{args.fuzz_seconds / 2:g}", "fuzz_seed": str(args.fuzz_seed),
              "fuzz_jobs": str(args.fuzz_jobs), "property_scale": f"{args.property_scale:g}",
              "cases": cases_dir, "ctest_timeout": str(int(args.check_timeout))}

    results_path = os.path.join(out_dir, "results.json")
    done = {}
    if args.resume and os.path.exists(results_path):
        with open(results_path) as f:
            for m in json.load(f).get("mutants", []):
                if m.get("status") in STATUSES and m["status"] != "equivalent":
                    done[(m["id"], m["orig"], m["repl"], m["text"])] = m
    command = "python3 ci/mutate.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    results = {"tool": "ci/mutate.py", "version": 1,
               "config": {"command": command, "seed": args.seed, "count": args.count, "sample": len(sample),
                          "shard_index": shard_index, "shard_count": shard_count, "checks": [c.name for c in checks],
                          "fuzz_seconds": args.fuzz_seconds, "fuzz_seed": args.fuzz_seed,
                          "property_scale": args.property_scale, "build_type": args.build_type,
                          "files": sorted({s.file for s in sites})},
               "baseline": None, "mutants": []}

    # The scratch copy, configured and built, and the baseline checks.
    t0 = time.monotonic()
    src = os.path.join(scratch, "src")
    excluded = [os.path.relpath(p, root) for p in (out_dir, scratch) if os.path.abspath(p).startswith(root + os.sep)]
    files = tree_files(root, excluded)
    changed, tree_hash = sync_tree(root, src, files, os.path.join(scratch, "manifest.json"))
    log(f"scratch: {len(files)} files in {src} ({changed} written)")
    copied = [(s.id, s.orig, s.repl, s.text) for s in all_sites(src, args.globs)]
    if copied != [(s.id, s.orig, s.repl, s.text) for s in sites]:
        raise ToolError("the sources changed between the scan and the copy (someone is editing them?): run again")
    build = Build(scratch, args)
    build.configure(cases_dir, sources_changed=changed > 0)
    present = []
    for c in checks:
        missing = [t for t in c.targets if not build.has_target(t)]
        if missing and c.optional:
            log(f"check {c.name}: skipped, the build has no target {', '.join(missing)}")
            continue
        if missing:
            raise ToolError(f"check {c.name}: the scratch build has no target {', '.join(missing)}")
        present.append(c)
    checks = present
    results["config"]["checks"] = [c.name for c in checks]
    targets = sorted({t for c in checks for t in c.targets})
    log(f"baseline build: ninja {' '.join(targets)}")
    code, out, build_secs = build.build(targets)
    if code != 0:
        raise ToolError("the tree itself does not build (scratch copy, before any mutant):\n" + first_error_lines(out, 30))
    log(f"baseline build: {build_secs:.1f} s")

    stamp_path = os.path.join(scratch, "baseline.json")
    stamp_key = {"tree": tree_hash, "checks": [c.name for c in checks], "values": values}
    baseline = None
    if os.path.exists(stamp_path) and not args.rerun_baseline:
        with open(stamp_path) as f:
            old = json.load(f)
        if old.get("key") == stamp_key:
            baseline = old["baseline"]
            log(f"baseline checks: passed before on these sources ({baseline['check_seconds']:.1f} s), not rerun "
                "(--rerun-baseline reruns them)")
    if baseline is None:
        baseline = {"checks": [], "build_seconds": build_secs}
        for c in checks:
            shutil.rmtree(run_dir, ignore_errors=True)
            os.makedirs(run_dir)
            code, out, secs = run_logged(c.command(build, {**values, "build": build.dir}), cwd=run_dir,
                                         env=check_environment(c.env, values), timeout=args.baseline_timeout)
            if code != 0:
                why = "timed out" if code is None else f"exit status {code}"
                raise ToolError(f"the tree itself fails check {c.name} ({why}), before any mutant:\n{out[-4000:]}\n"
                                f"(above: the end of {c.name}'s output; the tree must pass its checks first)")
            note = ""
            passed = re.search(r"\[  PASSED  \] (\d+) test", out)
            skipped = re.search(r"\[  SKIPPED \] (\d+) test", out)
            if passed and int(passed.group(1)) == 0:
                note = "WARNING: it passes no test, so it cannot kill a mutant"
            elif skipped:
                note = f"{skipped.group(1)} tests skipped"
            baseline["checks"].append({"name": c.name, "seconds": round(secs, 2), "note": note})
            log(f"baseline check {c.name}: passed, {secs:.1f} s" + (f" ({note})" if note else ""))
        baseline["check_seconds"] = round(sum(x["seconds"] for x in baseline["checks"]), 2)
        _write_json(stamp_path, {"key": stamp_key, "baseline": baseline})
    results["baseline"] = baseline
    seconds_of = {x["name"]: x["seconds"] for x in baseline["checks"]}
    for c in checks:
        c.baseline_seconds = seconds_of.get(c.name, 0.0)
    checks.sort(key=lambda c: c.baseline_seconds)  # cheapest first: most mutants die there
    log("checks in order: " + ", ".join(f"{c.name} ({c.baseline_seconds:.1f} s)" for c in checks))
    log(f"setup: {time.monotonic() - t0:.1f} s; {len(mine)} mutants (shard {shard_index} of {shard_count}, "
        f"sample of {len(sample)})")

    spans = fault_anchor_spans(src)
    texts = {}
    # In file order: restoring a file and mutating the same file again costs one rebuild of what
    # depends on it, not two (the numbers stay those of the sample).
    mine = sorted(mine, key=lambda item: (item[1].file, item[1].start))
    os.makedirs(out_dir, exist_ok=True)
    shard_n = len(mine)
    for k, (n, site) in enumerate(mine, 1):
        path = os.path.join(src, site.file)
        if site.file not in texts:
            with open(path, encoding="utf-8") as f:
                texts[site.file] = f.read()
        original = texts[site.file]
        mutated = apply_site(original, site)
        record = mutant_record(n, site, unified_diff(site.file, original, mutated))
        prior = done.get((site.id, site.orig, site.repl, site.text))
        entry = by_key.get(site.key())
        if prior is not None:
            prior["n"] = n
            results["mutants"].append(prior)
            log(f"[{k}/{shard_n}] {site.id} {site.change()}: {prior['status']} (from the previous results, --resume)")
            continue
        if entry is not None and not args.run_equivalent:
            record.update(status="equivalent", reason=entry["reason"])
            results["mutants"].append(record)
            log(f"[{k}/{shard_n}] {site.id} {site.change()}: equivalent, not run ({entry['where']})")
            _write_json(results_path, results)
            continue
        t_mutant = time.monotonic()
        active = checks
        if touches_anchor(site, spans):
            active = [c for c in checks if not c.needs_faults]
            record["skipped_checks"] = [f"{c.name} (the mutant edits an anchor of cuda/testing/kernel_faults.txt)"
                                        for c in checks if c.needs_faults]
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(mutated)
            code, out, secs = build.build({t for c in active for t in c.targets})
            record["build_seconds"] = round(secs, 2)
            if code is None:
                record.update(status="did-not-build", detail=f"the build ran past {args.build_timeout} s")
            elif code != 0:
                record.update(status="did-not-build", detail=first_error_lines(out))
            else:
                record["status"] = "survived"
                for c in active:
                    shutil.rmtree(run_dir, ignore_errors=True)
                    os.makedirs(run_dir)
                    limit = max(args.check_timeout, args.timeout_factor * c.baseline_seconds)
                    code, out, secs = run_logged(c.command(build, {**values, "build": build.dir}), cwd=run_dir,
                                                 env=check_environment(c.env, values), timeout=limit)
                    record["check_seconds"][c.name] = round(secs, 2)
                    if code is None:
                        record.update(status="timeout", check=c.name,
                                      detail=f"ran past {limit:.0f} s (counted as killed)\n" + out[-1500:])
                        break
                    if code != 0:
                        signal_note = f" (signal {-code})" if code < 0 else ""
                        record.update(status="killed", check=c.name,
                                      detail=f"exit status {code}{signal_note}\n" + _failure_excerpt(out))
                        break
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
        record["seconds"] = round(time.monotonic() - t_mutant, 2)
        if entry is not None and record["status"] in ("killed", "timeout"):
            record["note"] = f"listed as equivalent ({entry['where']}) but killed: the entry is wrong"
        results["mutants"].append(record)
        by = f" {'in' if record['status'] == 'timeout' else 'by'} {record['check']}" if record["check"] else ""
        log(f"[{k}/{shard_n}] {site.id} {site.change()}: {record['status']}{by} ({record['seconds']:.1f} s)")
        _write_json(results_path, results)
    return results


def _failure_excerpt(out, limit=1500):
    lines = out.splitlines()
    keep = [l for l in lines if re.search(r"Failure|FAILED|failing case|Expected|Which is|Value of|Actual:|exception|"
                                          r"error\(s\)|error:|wrong|mismatch|Sanitizer|Assertion", l)]
    text = "\n".join(keep[:20]) if keep else "\n".join(lines[-20:])
    return text[-limit:]


# ---- Merge --------------------------------------------------------------------------------------

def load_results(paths):
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
    merged = {"tool": "ci/mutate.py", "version": 1, "config": {"merged": files}, "baseline": None, "mutants": []}
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


# ---- Command line -------------------------------------------------------------------------------

HELP_EPILOG = """\
sites:
  Files: {files}
  (globs; --files replaces them; portability.h and host_simd.h are included: they hold the
  f16/bf16 conversions and the SSE2 bf16 paths). The scan skips comments, string and char
  literals, preprocessor lines, static_assert(...) and template parameter/argument lists
  (`f<T, 2 * K>`: a change there changes types and rarely compiles). Operators:
{operators}
  Binary operators count only with a space on each side (the project's style), so `<` of a
  template, `->`, `++`, `<<` and unary minus are never sites. Sites in code that only nvcc
  compiles (`#if defined(__CUDA_ARCH__)` branches of portability.h) are listed as device-only
  and not sampled unless --device-sites: no host check can reach them.

the run:
  The tree (git ls-files -co --exclude-standard: tracked and untracked, not ignored files) is
  copied into SCRATCH/src, writing only files whose content changed, and configured once into
  SCRATCH/build (CMake + Ninja, host backend only: MLAROPE_CUDA=OFF, MLAROPE_BENCH=OFF,
  MLAROPE_PYTHON=OFF). The targets the checks need are built and the checks run on the
  unmutated copy: all must pass, or the tool stops (exit status 3: the tree itself fails).
  The next invocation reuses the build (incremental) and, on unchanged sources and checks,
  the baseline verdict. Then each mutant in turn, grouped by file (restoring a file and
  mutating it again costs one rebuild, not two): the edit in SCRATCH/src, an incremental
  build of those targets (nice'd), the checks cheapest first (by their baseline time) up to
  the first failure, the original text restored. Status: killed (with the check), survived,
  timeout (a check ran past max(--check-timeout, --timeout-factor x its baseline time):
  counted as killed), did-not-build (first compiler error kept), equivalent (listed in
  --equivalents: not run unless --run-equivalent). A mutant that edits an anchor of
  cuda/testing/kernel_faults.txt skips the checks whose binary links the fault variants
  (launch_alignment), recorded in the mutant's skipped_checks. The checks' environment is
  cleared of the shard variables (SLURM_ARRAY_*, JOB_COMPLETION_INDEX, GTEST_SHARD_*) and of
  RC_PARAMS, MLAROPE_BACKEND, MLAROPE_PROPERTY_SCALE; MLAROPE_CASES_DIR is --cases-dir.

checks (--checks, comma separated; --list-checks describes them):
  NAME                   one of the registry: {registry}
  gtest:TARGET[:FILTER]  a GoogleTest binary of the build, with an optional --gtest_filter
  ctest:REGEX@T1+T2      ctest -R REGEX, after building targets T1, T2

output (--out DIR):
  results.json     every mutant: site, diff, status, check, seconds (written after each one)
  summary.md       counts, kill rate = (killed + timeout) / (killed + timeout + survived),
                   tables per file, operator, change and killing check, then every survivor
                   with its diff and a ready-to-fill equivalent entry
  survivors/NNN.diff   NNN: the mutant's number in the sample
  With --shard-count N > 1 the output goes to DIR/shard-NNNN/.

sharding (a SLURM array, a Kubernetes Indexed Job): shard I of N runs mutants I, I+N, I+2N, ...
  of the one sample that --count/--seed (or --all) draws. Without the flags the shard comes from
  SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT, or JOB_COMPLETION_INDEX
  of --shard-count / MLAROPE_SHARD_COUNT. Give every task its own --scratch (a lock refuses two
  runs in one scratch folder).

merge: python3 ci/mutate.py merge [--out DIR] [--min-kill-rate R] [--require-explained]
       [--equivalents FILE] PATH...
  PATH: a results.json, a folder with one, or a folder of shard-*/results.json. Writes one
  results.json, summary.md and survivors/ for all of them; the equivalent-mutant file is
  applied again (a survivor listed since the run counts as equivalent). Also the way to
  redo a summary after editing ci/mutants-equivalent.txt: merge the one output folder.

exit status: 0 when the kill rate is at least --min-kill-rate (a run with nothing to count
  passes) and, with --require-explained, every survivor is listed as equivalent; 1 otherwise;
  2 bad usage; 3 the tool could not run (the tree fails its checks before any mutant, the
  build cannot be configured, the scratch folder is locked).

See docs/mutation.md.
"""


def build_parser(root_default):
    registry = check_registry()
    epilog = HELP_EPILOG.format(
        files=", ".join(SOURCE_GLOBS),
        operators="\n".join(f"    {k:9s} {v}" for k, v in OPERATOR_ABOUT.items()),
        registry=", ".join(registry))
    p = argparse.ArgumentParser(
        prog="ci/mutate.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Mutation testing of the kernel and launch sources: sample single-token mutants, "
                    "build each in a scratch copy, run the project's checks, report killed / survived / "
                    "did-not-build / timeout / equivalent with the survivors' diffs. The second form, "
                    "`ci/mutate.py merge PATH... --out DIR`, merges results (see 'merge' below). "
                    "docs/mutation.md has the campaign commands.",
        epilog=epilog)
    g = p.add_argument_group("sites and sample")
    g.add_argument("--list-sites", action="store_true", help="print every site (FILE:LINE:COL op 'orig' -> 'repl' | line), "
                   "then the counts per file and per operator, and exit")
    g.add_argument("--count", type=int, help="sample N distinct sites uniformly (with --seed)")
    g.add_argument("--all", action="store_true", help="every site (in the order --seed shuffles them)")
    g.add_argument("--seed", type=int, default=1, help="seed of the sample (default 1)")
    g.add_argument("--sites", help="these sites only: FILE:LINE:COL,... as --list-sites prints them")
    g.add_argument("--only", help="only sites whose 'FILE:LINE:COL OP LINE-TEXT' matches this regex "
                   "(OP: " + ", ".join(OPERATOR_CLASSES) + ")")
    g.add_argument("--files", help="comma-separated globs of the files to mutate (default: " + ", ".join(SOURCE_GLOBS) + ")")
    g.add_argument("--device-sites", action="store_true", help="also sample device-only sites (code only nvcc compiles)")
    g.add_argument("--dry-run", action="store_true", help="print the mutants this run (or shard) would try, numbered as "
                   "in the sample, and exit: no copy, no build")
    g.add_argument("--shard-index", type=int, help="this shard's index, 0-based (default: from the job array)")
    g.add_argument("--shard-count", type=int, help="number of shards (default: from the job array, else 1)")
    g = p.add_argument_group("checks")
    g.add_argument("--checks", default=",".join(DEFAULT_CHECKS), help="comma-separated checks (default: all of the registry)")
    g.add_argument("--list-checks", action="store_true", help="describe the checks and exit")
    g.add_argument("--fuzz-seconds", type=float, default=10.0, help="budget of the fuzz check (default 10)")
    g.add_argument("--fuzz-seed", type=int, default=1, help="seed of the fuzz check (default 1)")
    g.add_argument("--fuzz-jobs", type=int, default=2, help="worker threads of the fuzz check (default 2)")
    g.add_argument("--property-scale", type=float, default=0.25,
                   help="MLAROPE_PROPERTY_SCALE of the property checks (default 0.25)")
    g.add_argument("--check-timeout", type=float, default=60.0, help="least seconds a check may run (default 60)")
    g.add_argument("--timeout-factor", type=float, default=5.0,
                   help="a check may run this many times its baseline time, if longer (default 5)")
    g.add_argument("--baseline-timeout", type=float, default=900.0, help="seconds a baseline check may run (default 900)")
    g.add_argument("--cases-dir", help="Megatron cases (default: $MLAROPE_CASES_DIR, else ROOT/data/megatron)")
    g = p.add_argument_group("build")
    g.add_argument("--root", default=root_default, help="the checkout to mutate (default: the one holding this script)")
    g.add_argument("--scratch", default="/tmp/mlarope-mutate", help="scratch folder: SCRATCH/src, SCRATCH/build "
                   "(default /tmp/mlarope-mutate)")
    g.add_argument("--build-type", default="Release", help="CMAKE_BUILD_TYPE of the scratch build (default Release)")
    g.add_argument("--cmake-arg", action="append", default=[], help="extra cmake argument (repeatable)")
    g.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="ninja -j (default: the CPU count)")
    g.add_argument("--nice", type=int, default=10, help="niceness of builds (default 10; 0: not nice'd)")
    g.add_argument("--build-timeout", type=float, default=1800.0, help="seconds one build may take (default 1800)")
    g.add_argument("--rerun-baseline", action="store_true", help="run the baseline checks even if they passed on these sources")
    g = p.add_argument_group("results")
    g.add_argument("--out", default="mutate-out", help="output folder (default mutate-out)")
    g.add_argument("--resume", action="store_true", help="mutants of this selection that OUT/results.json has a result "
                   "for keep it and are not run again (an interrupted run continues)")
    g.add_argument("--equivalents", help="equivalent-mutant file (default ROOT/ci/mutants-equivalent.txt)")
    g.add_argument("--run-equivalent", action="store_true", help="run listed equivalent mutants too (a killed one "
                   "is reported: its entry is wrong)")
    g.add_argument("--min-kill-rate", type=float, default=0.0, help="exit status 1 below this kill rate, 0..1 (default 0)")
    g.add_argument("--require-explained", action="store_true", help="exit status 1 if a survivor is not listed as equivalent")
    return p


def merge_main(argv, root_default):
    p = argparse.ArgumentParser(prog="ci/mutate.py merge", description="Merge results.json files into one summary.")
    p.add_argument("paths", nargs="+", help="results.json files, or folders holding results.json or shard-*/results.json")
    p.add_argument("--out", default="mutate-out", help="output folder (default mutate-out)")
    p.add_argument("--equivalents", default=os.path.join(root_default, "ci", "mutants-equivalent.txt"))
    p.add_argument("--min-kill-rate", type=float, default=0.0)
    p.add_argument("--require-explained", action="store_true")
    args = p.parse_args(argv)
    merged = load_results(args.paths)
    warnings = write_outputs(args.out, merged, parse_equivalents(args.equivalents))
    return report_end(merged, args, warnings)


def report_end(results, args, warnings):
    counts = tally([m for m in results["mutants"] if m["status"] in STATUSES])
    log(" ".join(f"{k}: {v}" for k, v in counts.items()) + f"; kill rate {_rate_text(kill_rate(counts))}")
    for w in warnings:
        log("WARNING: " + w)
    log(f"summary: {os.path.join(args.out, 'summary.md')}")
    status, reasons = verdict(results["mutants"], args.min_kill_rate, args.require_explained)
    for r in reasons:
        log("FAIL: " + r)
    return status


def list_sites(sites, equivalents):
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
    log(f"total: {len(sites)} sites ({device} device-only, not sampled without --device-sites); "
        f"{sum(1 for e in equivalents if matched[e['key']])} of {len(equivalents)} equivalent entries match a site")
    for e in equivalents:
        if not matched[e["key"]]:
            log(f"WARNING: {e['where']}: the entry matches no site (stale? the line changed)")
        elif len(matched[e["key"]]) > 1:
            log(f"note: {e['where']}: the entry covers {len(matched[e['key']])} sites of identical lines "
                f"({', '.join(matched[e['key']])}): its reason must hold for each")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    root_default = ROOT_DEFAULT
    try:
        if argv[:1] == ["merge"]:
            return merge_main(argv[1:], root_default)
        parser = build_parser(root_default)
        args = parser.parse_args(argv)
        if args.list_checks:
            for c in check_registry().values():
                mark = "*" if c.name in DEFAULT_CHECKS else " "
                log(f"{mark} {c.name:24s} {c.about}")
            log("(* default; gtest:TARGET[:FILTER] and ctest:REGEX@TARGETS add others)")
            return 0
        root = os.path.abspath(args.root)
        globs = [g.strip() for g in args.files.split(",")] if args.files else SOURCE_GLOBS
        args.globs = globs
        sites = all_sites(root, globs)
        if not sites:
            raise UsageError(f"no mutation site in {', '.join(globs)} under {root}")
        equivalents = parse_equivalents(args.equivalents or os.path.join(root, "ci", "mutants-equivalent.txt"))
        if args.list_sites:
            list_sites(sites, equivalents)
            return 0
        if args.count is not None and args.count < 1:
            raise UsageError("--count must be at least 1 (--all takes every site)")
        if not 0 <= args.min_kill_rate <= 1:
            raise UsageError("--min-kill-rate is a fraction, 0..1")
        parse_checks(args.checks)  # a bad --checks fails now, not after the baseline build
        sample = select_sites(args, sites)
        index, count = shard_from_env(args)
        if args.dry_run:
            listed = equivalents_by_key(equivalents)
            for n, s in shard_of(sample, index, count):
                flag = " [equivalent: not run]" if s.key() in listed and not args.run_equivalent else ""
                log(f"{n:03d} {s.id} {s.op} {s.change()}{flag} | {s.text.strip()}")
            return 0
        if args.cases_dir is None:
            args.cases_dir = os.environ.get("MLAROPE_CASES_DIR") or os.path.join(root, "data", "megatron")
        out_dir = os.path.abspath(args.out)
        if count > 1:
            out_dir = os.path.join(out_dir, f"shard-{index:04d}")
        args.out = out_dir
        results = run_campaign(args, sites, sample, equivalents, out_dir)
        warnings = write_outputs(out_dir, results, equivalents)
        return report_end(results, args, warnings)
    except UsageError as e:
        print(f"ci/mutate.py: {e}", file=sys.stderr)
        return 2
    except ToolError as e:
        print(f"ci/mutate.py: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("ci/mutate.py: interrupted (the mutated file was restored; --resume continues)", file=sys.stderr)
        return 130


def _terminate(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    try:
        sys.exit(main())
    except BrokenPipeError:  # `--list-sites | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
