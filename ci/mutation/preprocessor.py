# SPDX-License-Identifier: Apache-2.0
"""The host build's view of preprocessor conditionals: which `#if` branches it compiles.

Sites in code that only nvcc compiles (under `#if defined(__CUDA_ARCH__)`, or the `#else` of
`#if !defined(__CUDA_ARCH__)`) are device-only: no host check can reach them, so they are
listed but not sampled by default. A condition on any other macro is unknown (None), and so
is never taken for device-only code.
"""

import re

# Macros whose value the host build knows: neither is defined there.
HOST_UNDEFINED_MACROS = {"__CUDA_ARCH__", "__CUDACC__"}

_CONDITIONAL = re.compile(r"(if|ifdef|ifndef|elif|else|endif)\b(.*)", re.S)


def preprocessor_end(text, i):
    """End of the preprocessor line starting at i (backslash continuations joined)."""
    while True:
        e = text.find("\n", i)
        if e == -1:
            return len(text)
        if e > 0 and text[e - 1] == "\\":
            i = e + 1
            continue
        return e


def eval_condition(directive, expression):
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


class Conditions:
    """The open #if blocks at a point of a source. Per block: [is the current branch
    compiled, was an earlier or this branch compiled], each True, False or None (unknown: the
    macro is not one whose host value we know)."""

    def __init__(self):
        self.stack = []

    def apply(self, line):
        """Takes the directive `line` (its text after `#`, continuations joined); True when it
        is a conditional (#if, #ifdef, #ifndef, #elif, #else, #endif)."""
        m = _CONDITIONAL.match(line)
        if not m:
            return False
        directive, expression = m.group(1), m.group(2)
        if directive in ("if", "ifdef", "ifndef"):
            value = eval_condition(directive, expression)
            self.stack.append([value, value])
        elif directive == "elif" and self.stack:
            top = self.stack[-1]
            value = eval_condition("if", expression)
            top[0] = (
                False
                if top[1] is True
                else (None if top[1] is None and value is not False else value)
            )
            top[1] = (
                True
                if top[1] is True or value is True
                else (None if top[1] is None or value is None else False)
            )
        elif directive == "else" and self.stack:
            top = self.stack[-1]
            top[0] = False if top[1] is True else (None if top[1] is None else True)
        elif directive == "endif" and self.stack:
            self.stack.pop()
        return True

    def device_only(self):
        """Whether the host build skips the code here (some open branch is known false)."""
        return any(c[0] is False for c in self.stack)
