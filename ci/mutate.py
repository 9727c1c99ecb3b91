#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Mutation testing of mlarope's kernel and launch sources.

A mutant is one single-token change to a kernel or launch source: `+` for `-`, `<` for `<=`,
`&&` for `||`, a dropped `!`, a constant 2 for 1, `true` for `false`. The tool applies one
mutant at a time to a scratch copy of the tree, rebuilds incrementally, runs the project's own
checks (test binaries, then a short `mlarope fuzz` on the host backend) and says whether a
check noticed (killed) or not (survived). A surviving mutant is a gap in the checks, or an
equivalent mutant: a change no input can observe, listed with its reason in
ci/mutants-equivalent.txt.

  python3 ci/mutate.py --list-sites               every mutation site, counts per file and operator
  python3 ci/mutate.py --count 100 --seed 1       100 mutants sampled with seed 1, into mutate-out/
  python3 ci/mutate.py --sites FILE:LINE:COL,...  these sites only (as --list-sites prints them)
  python3 ci/mutate.py merge DIR... --out DIR     one summary of several runs or shards

This file is the command; the code is the package ci/mutation/ (its __init__ lists the
modules). See docs/mutation.md.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mutation.cli import main, run_command  # noqa: E402

__all__ = ["main"]

if __name__ == "__main__":
    run_command()
