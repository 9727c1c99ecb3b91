# SPDX-License-Identifier: Apache-2.0
"""Mutation testing of mlarope's kernel and launch sources: the code behind ci/mutate.py.

A mutant is one single-token change to a kernel or launch source. The command applies one
mutant at a time to a scratch copy of the tree, rebuilds it, runs the project's checks and
reports which mutants a check noticed (killed) and which it did not (survived). The modules,
by role:

  common        the error kinds, the progress log and the JSON writes every module shares
  preprocessor  the host build's value of `#if` conditions (which code only nvcc compiles)
  mask          which characters of a source are code a mutant may change
  sites         the mutation operators and the sites they apply to
  equivalents   the equivalent-mutant file (ci/mutants-equivalent.txt)
  sampling      the sample of sites a run draws and each shard's share of it
  tree          the scratch copy of the source tree
  build         configuring and building the scratch copy, running a command with a timeout
  checks        the checks a mutant goes through
  campaign      one run: the baseline, then each mutant built and checked
  report        results: counts, kill rate, summary.md, merging runs and shards
  cli           the command line
"""
