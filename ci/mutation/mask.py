# SPDX-License-Identifier: Apache-2.0
"""Which characters of a C++ source are code a mutant may change.

The site finder looks for operators and literals in a copy of the source where everything
else is blanked out: comments, string and char literals, preprocessor lines,
static_assert(...) and template parameter and argument lists (a changed constant or operator
there changes types, and rarely compiles). Alongside, it learns which code only nvcc compiles.
"""

import re

from .preprocessor import Conditions, preprocessor_end

IDENT = re.compile(r"[A-Za-z0-9_]")


def code_mask(text):
    """(code, device_only): code is `text` with comments, string and char literals, preprocessor
    lines, static_assert(...) and template argument lists replaced by NUL characters (newlines
    kept); device_only[i] is True where the host build does not compile character i."""
    code = list(text)
    n = len(text)
    conditions = Conditions()
    regions = _DeviceRegions(n)
    i = 0
    at_line_start = True
    while i < n:
        if at_line_start:
            at_line_start = False
            e = _directive(text, i, conditions, regions)
            if e is not None:
                _mask(code, i, e)
                i = e
                continue
        if text[i] == "\n":
            at_line_start = True
            i += 1
            continue
        e = _skipped_end(text, i)
        if e is None:
            i += 1
        else:
            _mask(code, i, e)
            i = e
    regions.mark(n, False)
    joined = "".join(code)
    _mask_static_asserts(joined, code)
    joined = "".join(code)
    _mask_template_arguments(joined, code)
    return "".join(code), regions.flags


class _DeviceRegions:
    """device_only flags of a source's characters, set one region (between two conditionals)
    at a time."""

    def __init__(self, n):
        self.flags = [False] * n
        self.start, self.device = 0, False

    def mark(self, pos, device_next):
        """Ends the current region at pos (flagging it if it is device-only); the next one,
        device-only or not as `device_next` says, starts there."""
        if self.device:
            for k in range(self.start, pos):
                self.flags[k] = True
        self.start, self.device = pos, device_next


def _mask(code, start, end):
    for i in range(max(start, 0), min(end, len(code))):
        if code[i] != "\n":
            code[i] = "\0"


def _directive(text, i, conditions, regions):
    """End of the preprocessor line that the line starting at i is, after applying it to
    `conditions` (and `regions`); None where that line is no directive."""
    j = i
    while j < len(text) and text[j] in " \t":
        j += 1
    if j >= len(text) or text[j] != "#":
        return None
    e = preprocessor_end(text, j)
    if conditions.apply(text[j + 1 : e].replace("\\\n", " ").strip()):
        regions.mark(e, conditions.device_only())
    return e


def _skipped_end(text, i):
    """End of the comment, string or char literal starting at i; None where none starts."""
    n = len(text)
    if text.startswith("//", i):
        e = text.find("\n", i)
        return n if e == -1 else e
    if text.startswith("/*", i):
        e = text.find("*/", i + 2)
        return n if e == -1 else e + 2
    if text[i] == '"':
        return _string_end(text, i)
    if text[i] == "'":
        return _char_end(text, i)
    return None


def _string_end(text, i):
    raw = re.search(r"(?:^|[^A-Za-z0-9_])(?:u8|u|U|L)?R$", text[max(0, i - 3) : i])
    if not raw:
        return _quoted_end(text, i, '"')
    m = re.compile(r'"([^(\s]*)\(').match(text, i)
    end_marker = ")" + (m.group(1) if m else "") + '"'
    e = text.find(end_marker, i + 1)
    return len(text) if e == -1 else e + len(end_marker)


def _char_end(text, i):
    """End of the char literal at i; None where the `'` is a digit separator (1'000'000)."""
    if (
        i + 1 < len(text)
        and text[i + 1].isalnum()
        and re.search(r"(?<![A-Za-z0-9_])[0-9][0-9A-Za-z']*$", text[max(0, i - 40) : i])
    ):
        return None
    return _quoted_end(text, i, "'")


def _quoted_end(text, i, quote):
    """End of the literal opened by `quote` at i (escapes skipped; it stops at a line end)."""
    n = len(text)
    e = i + 1
    while e < n and text[e] != quote and text[e] != "\n":
        e += 2 if text[e] == "\\" else 1
    return min(e + 1, n)


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
        elif (
            ch == "<"
            and paren == 0
            and k > 0
            and IDENT.match(code[k - 1])
            and code[k + 1 : k + 2] not in ("<", "=")
        ):
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
