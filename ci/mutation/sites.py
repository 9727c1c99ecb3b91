# SPDX-License-Identifier: Apache-2.0
"""The mutation operators and the sites they apply to.

A site is one token of a kernel or launch source and the token it becomes: `+` for `-`, `<`
for `<=`, `&&` for `||`, a dropped `!`, a constant 2 for 1, `true` for `false`. Each is
chosen so that nearly every mutant compiles, and found only in code (see mask.py).
"""

import collections
import difflib
import glob
import os
import re

from .equivalents import equivalence_key
from .mask import IDENT, code_mask

# Files scanned for sites (globs relative to the repository root), in this order.
SOURCE_GLOBS = [
    "cuda/kernels/*.h",
    "cuda/launch/launch_builder.cpp",
    "cuda/launch/dispatch.cpp",
    "cuda/launch/footprint.cpp",
]

# Binary operators, matched only with a space on each side (the project's style for them), so
# that template brackets, pointers, `->`, `++`, `<<` and unary minus are never taken for them.
BINARY_MUTATIONS = {
    "+": ("arith", "-"),
    "-": ("arith", "+"),
    "*": ("arith", "/"),
    "/": ("arith", "*"),
    "<": ("compare", "<="),
    "<=": ("compare", "<"),
    ">": ("compare", ">="),
    ">=": ("compare", ">"),
    "==": ("compare", "!="),
    "!=": ("compare", "=="),
    "&&": ("logic", "||"),
    "||": ("logic", "&&"),
}
OPERATOR_CLASSES = ["arith", "compare", "logic", "negation", "int", "float", "bool"]
OPERATOR_ABOUT = {
    "arith": "' + ' <-> ' - ', ' * ' <-> ' / '",
    "compare": "' < ' -> ' <= ', ' <= ' -> ' < ', ' > ' -> ' >= ', ' >= ' -> ' > ', "
    "' == ' <-> ' != '",
    "logic": "' && ' <-> ' || '",
    "negation": "'!' before an identifier or '(' removed",
    "int": "integer literal: 0 -> 1, 1 -> 0, 2 -> 1, n -> n + 1 (suffix and hex kept)",
    "float": "floating literal: x -> 2x (0 -> 1)",
    "bool": "true <-> false",
}

_BINARY = re.compile(r"(?<=\s)(\+|-|\*|/|<=|<|>=|>|==|!=|&&|\|\|)(?=\s)")
_NUMBER = re.compile(
    r"(?<![A-Za-z0-9_.'])(?:0[xX][0-9A-Fa-f']+|\d[\d']*\.?[\d']*"
    r"(?:[eE][+-]?\d+)?|\.\d[\d']*(?:[eE][+-]?\d+)?)"
    r"[A-Za-z]*(?![A-Za-z0-9_.'])"
)


class Site:
    """One mutation: the token at text[start:end] of `file` becomes another. `orig` and `repl`
    are shown (and keyed) with a space each side for binary operators (' < ' -> ' <= '), as
    the bare token otherwise ('!' -> '', '2' -> '1')."""

    __slots__ = (
        "file",
        "line",
        "col",
        "start",
        "end",
        "op",
        "orig",
        "repl",
        "text",
        "occurrence",
        "device_only",
    )

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
        return {
            "id": self.id,
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "op": self.op,
            "orig": self.orig,
            "repl": self.repl,
            "text": self.text,
            "occurrence": self.occurrence,
            "device_only": self.device_only,
        }


def _mutated_int(value):
    return 1 if value == 0 else 0 if value == 1 else 1 if value == 2 else value + 1


def mutate_number(token):
    """The mutated spelling of a numeric literal, or None (not one we mutate)."""
    m = re.fullmatch(r"(0[xX])([0-9A-Fa-f']+)([uUlL]*)", token)
    if m:
        new = _mutated_int(int(m.group(2).replace("'", ""), 16))
        digits = format(new, "X" if m.group(2).isupper() else "x")
        return "int", m.group(1) + digits + m.group(3)
    m = re.fullmatch(r"(\d[\d']*)([uUlL]*)", token)
    if m:
        if len(m.group(1)) > 1 and m.group(1).startswith("0"):
            return None  # octal: not used in these sources
        return "int", str(_mutated_int(int(m.group(1).replace("'", "")))) + m.group(2)
    m = re.fullmatch(r"((?:\d[\d']*)?\.?[\d']*(?:[eE][+-]?\d+)?)([fFlL]?)", token)
    if m and re.search(r"[.eE]", m.group(1)):
        value = float(m.group(1).replace("'", ""))
        new = value * 2 if value != 0 else 1.0
        text = repr(new)
        if "inf" in text or "nan" in text:
            return None
        return "float", text + m.group(2)
    return None


def _candidates(code):
    """(start, end, op, orig, repl) of every mutation in `code` (a masked source), grouped by
    operator kind: binary operators, negations, booleans, numbers."""
    for m in _BINARY.finditer(code):
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
        yield m.start(), m.end(), op, f" {token} ", f" {repl} "
    for m in re.finditer(r"!(?=[A-Za-z_(])", code):
        yield m.start(), m.end(), "negation", "!", ""
    for m in re.finditer(r"\b(true|false)\b", code):
        yield m.start(), m.end(), "bool", m.group(1), "false" if m.group(1) == "true" else "true"
    for m in _NUMBER.finditer(code):
        mutated = mutate_number(m.group(0))
        if mutated:
            yield m.start(), m.end(), mutated[0], m.group(0), mutated[1]


def _line_and_column(text):
    """A function from an offset of `text` to its (line, column), both 1-based."""
    line_starts = [0] + [k + 1 for k, ch in enumerate(text) if ch == "\n"]

    def position(offset):
        lo, hi = 0, len(line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - line_starts[lo] + 1

    return position


def find_sites(file, text):
    """Every mutation site of `text` (the contents of repository path `file`), in text order."""
    code, device_only = code_mask(text)
    position = _line_and_column(text)
    lines = text.split("\n")
    found = []
    for start, end, op, orig, repl in _candidates(code):
        line, col = position(start)
        found.append(
            Site(file, line, col, start, end, op, orig, repl, lines[line - 1], device_only[start])
        )
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
    if text[site.start : site.end] != site.orig.strip():
        raise RuntimeError(
            f"{site.id}: expected {site.orig.strip()!r}, found {text[site.start : site.end]!r}"
        )
    return text[: site.start] + site.repl.strip() + text[site.end :]


def unified_diff(file, before, after, context=2):
    return "".join(
        difflib.unified_diff(
            before.splitlines(True), after.splitlines(True), "a/" + file, "b/" + file, n=context
        )
    )
