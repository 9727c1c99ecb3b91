# SPDX-License-Identifier: Apache-2.0
"""The command line of ci/mutate.py: its options and help, the `merge` sub-command, and what
each form does (--list-checks, --list-sites, --dry-run, a run). Exit statuses: 0 pass, 1 the
kill rate or an unexplained survivor fails the run, 2 bad usage, 3 the tool could not run,
130 interrupted."""

import argparse
import os
import signal
import sys

from .campaign import run_campaign
from .checks import DEFAULT_CHECKS, check_registry, parse_checks
from .common import ToolError, UsageError, log
from .equivalents import equivalents_by_key, parse_equivalents
from .report import list_sites, load_results, report_end, write_outputs
from .sampling import select_sites, shard_from_env, shard_of
from .sites import OPERATOR_ABOUT, OPERATOR_CLASSES, SOURCE_GLOBS, all_sites

# The checkout this package is in: ci/mutation/cli.py -> the repository root.
ROOT_DEFAULT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HELP_EPILOG = """\
sites:
  Files: {files}
  (globs; --files replaces them; float_convert.h, portability.h and host_simd.h are included:
  they hold the f16/bf16 conversions, their bit casts and the SSE2 bf16 paths). The scan skips
  comments, string and char literals, preprocessor lines, static_assert(...) and template
  parameter/argument lists
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
  cuda/test_support/kernel_faults.txt skips the checks whose binary links the fault variants
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
    epilog = HELP_EPILOG.format(
        files=", ".join(SOURCE_GLOBS),
        operators="\n".join(f"    {k:9s} {v}" for k, v in OPERATOR_ABOUT.items()),
        registry=", ".join(check_registry()),
    )
    p = argparse.ArgumentParser(
        prog="ci/mutate.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Mutation testing of the kernel and launch sources: sample single-token "
        "mutants, build each in a scratch copy, run the project's checks, report "
        "killed / survived / did-not-build / timeout / equivalent with the "
        "survivors' diffs. The second form, `ci/mutate.py merge PATH... --out DIR`, "
        "merges results (see 'merge' below). docs/mutation.md has the campaign "
        "commands.",
        epilog=epilog,
    )
    _add_site_options(p.add_argument_group("sites and sample"))
    _add_check_options(p.add_argument_group("checks"))
    _add_build_options(p.add_argument_group("build"), root_default)
    _add_result_options(p.add_argument_group("results"))
    return p


def _add_site_options(g):
    g.add_argument(
        "--list-sites",
        action="store_true",
        help="print every site (FILE:LINE:COL op 'orig' -> 'repl' | line), "
        "then the counts per file and per operator, and exit",
    )
    g.add_argument("--count", type=int, help="sample N distinct sites uniformly (with --seed)")
    g.add_argument(
        "--all", action="store_true", help="every site (in the order --seed shuffles them)"
    )
    g.add_argument("--seed", type=int, default=1, help="seed of the sample (default 1)")
    g.add_argument(
        "--sites", help="these sites only: FILE:LINE:COL,... as --list-sites prints them"
    )
    g.add_argument(
        "--only",
        help="only sites whose 'FILE:LINE:COL OP LINE-TEXT' matches this "
        "regex (OP: " + ", ".join(OPERATOR_CLASSES) + ")",
    )
    g.add_argument(
        "--files",
        help="comma-separated globs of the files to mutate (default: "
        + ", ".join(SOURCE_GLOBS)
        + ")",
    )
    g.add_argument(
        "--device-sites",
        action="store_true",
        help="also sample device-only sites (code only nvcc compiles)",
    )
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="print the mutants this run (or shard) would try, numbered as "
        "in the sample, and exit: no copy, no build",
    )
    g.add_argument(
        "--shard-index", type=int, help="this shard's index, 0-based (default: from the job array)"
    )
    g.add_argument(
        "--shard-count", type=int, help="number of shards (default: from the job array, else 1)"
    )


def _add_check_options(g):
    g.add_argument(
        "--checks",
        default=",".join(DEFAULT_CHECKS),
        help="comma-separated checks (default: all of the registry)",
    )
    g.add_argument("--list-checks", action="store_true", help="describe the checks and exit")
    g.add_argument(
        "--fuzz-seconds", type=float, default=10.0, help="budget of the fuzz check (default 10)"
    )
    g.add_argument("--fuzz-seed", type=int, default=1, help="seed of the fuzz check (default 1)")
    g.add_argument(
        "--fuzz-jobs", type=int, default=2, help="worker threads of the fuzz check (default 2)"
    )
    g.add_argument(
        "--property-scale",
        type=float,
        default=0.25,
        help="MLAROPE_PROPERTY_SCALE of the property checks (default 0.25)",
    )
    g.add_argument(
        "--check-timeout",
        type=float,
        default=60.0,
        help="least seconds a check may run (default 60)",
    )
    g.add_argument(
        "--timeout-factor",
        type=float,
        default=5.0,
        help="a check may run this many times its baseline time, if longer (default 5)",
    )
    g.add_argument(
        "--baseline-timeout",
        type=float,
        default=900.0,
        help="seconds a baseline check may run (default 900)",
    )
    g.add_argument(
        "--cases-dir", help="Megatron cases (default: $MLAROPE_CASES_DIR, else ROOT/data/megatron)"
    )


def _add_build_options(g, root_default):
    g.add_argument(
        "--root",
        default=root_default,
        help="the checkout to mutate (default: the one holding this script)",
    )
    g.add_argument(
        "--scratch",
        default="/tmp/mlarope-mutate",
        help="scratch folder: SCRATCH/src, SCRATCH/build (default /tmp/mlarope-mutate)",
    )
    g.add_argument(
        "--build-type",
        default="Release",
        help="CMAKE_BUILD_TYPE of the scratch build (default Release)",
    )
    g.add_argument(
        "--cmake-arg", action="append", default=[], help="extra cmake argument (repeatable)"
    )
    g.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 2, help="ninja -j (default: the CPU count)"
    )
    g.add_argument(
        "--nice", type=int, default=10, help="niceness of builds (default 10; 0: not nice'd)"
    )
    g.add_argument(
        "--build-timeout",
        type=float,
        default=1800.0,
        help="seconds one build may take (default 1800)",
    )
    g.add_argument(
        "--rerun-baseline",
        action="store_true",
        help="run the baseline checks even if they passed on these sources",
    )


def _add_result_options(g):
    g.add_argument("--out", default="mutate-out", help="output folder (default mutate-out)")
    g.add_argument(
        "--resume",
        action="store_true",
        help="mutants of this selection that OUT/results.json has a result "
        "for keep it and are not run again (an interrupted run continues)",
    )
    g.add_argument(
        "--equivalents", help="equivalent-mutant file (default ROOT/ci/mutants-equivalent.txt)"
    )
    g.add_argument(
        "--run-equivalent",
        action="store_true",
        help="run listed equivalent mutants too (a killed one is reported: its entry is wrong)",
    )
    g.add_argument(
        "--min-kill-rate",
        type=float,
        default=0.0,
        help="exit status 1 below this kill rate, 0..1 (default 0)",
    )
    g.add_argument(
        "--require-explained",
        action="store_true",
        help="exit status 1 if a survivor is not listed as equivalent",
    )


def merge_main(argv, root_default):
    p = argparse.ArgumentParser(
        prog="ci/mutate.py merge", description="Merge results.json files into one summary."
    )
    p.add_argument(
        "paths",
        nargs="+",
        help="results.json files, or folders holding results.json or shard-*/results.json",
    )
    p.add_argument("--out", default="mutate-out", help="output folder (default mutate-out)")
    p.add_argument(
        "--equivalents", default=os.path.join(root_default, "ci", "mutants-equivalent.txt")
    )
    p.add_argument("--min-kill-rate", type=float, default=0.0)
    p.add_argument("--require-explained", action="store_true")
    args = p.parse_args(argv)
    merged = load_results(args.paths)
    warnings = write_outputs(args.out, merged, parse_equivalents(args.equivalents))
    return report_end(merged, args, warnings)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["merge"]:
            return merge_main(argv[1:], ROOT_DEFAULT)
        return _run(build_parser(ROOT_DEFAULT).parse_args(argv))
    except UsageError as e:
        print(f"ci/mutate.py: {e}", file=sys.stderr)
        return 2
    except ToolError as e:
        print(f"ci/mutate.py: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print(
            "ci/mutate.py: interrupted (the mutated file was restored; --resume continues)",
            file=sys.stderr,
        )
        return 130


def _run(args):
    """What the options ask for: a listing, a dry run or a run; the exit status."""
    if args.list_checks:
        _list_checks()
        return 0
    root = os.path.abspath(args.root)
    args.globs = [g.strip() for g in args.files.split(",")] if args.files else SOURCE_GLOBS
    sites = all_sites(root, args.globs)
    if not sites:
        raise UsageError(f"no mutation site in {', '.join(args.globs)} under {root}")
    equivalents = parse_equivalents(
        args.equivalents or os.path.join(root, "ci", "mutants-equivalent.txt")
    )
    if args.list_sites:
        list_sites(sites, equivalents)
        return 0
    _check_run_options(args)
    sample = select_sites(args, sites)
    index, count = shard_from_env(args)
    if args.dry_run:
        _dry_run(args, sample, index, count, equivalents)
        return 0
    if args.cases_dir is None:
        args.cases_dir = os.environ.get("MLAROPE_CASES_DIR") or os.path.join(
            root, "data", "megatron"
        )
    out_dir = os.path.abspath(args.out)
    if count > 1:
        out_dir = os.path.join(out_dir, f"shard-{index:04d}")
    args.out = out_dir
    results = run_campaign(args, sites, sample, equivalents, out_dir)
    warnings = write_outputs(out_dir, results, equivalents)
    return report_end(results, args, warnings)


def _list_checks():
    for c in check_registry().values():
        mark = "*" if c.name in DEFAULT_CHECKS else " "
        log(f"{mark} {c.name:24s} {c.about}")
    log("(* default; gtest:TARGET[:FILTER] and ctest:REGEX@TARGETS add others)")


def _check_run_options(args):
    """Bad values of the options of a run fail now, not after the baseline build."""
    if args.count is not None and args.count < 1:
        raise UsageError("--count must be at least 1 (--all takes every site)")
    if not 0 <= args.min_kill_rate <= 1:
        raise UsageError("--min-kill-rate is a fraction, 0..1")
    parse_checks(args.checks)


def _dry_run(args, sample, index, count, equivalents):
    """Prints the mutants this run (or shard) would try, numbered as in the sample."""
    listed = equivalents_by_key(equivalents)
    for n, s in shard_of(sample, index, count):
        flag = " [equivalent: not run]" if s.key() in listed and not args.run_equivalent else ""
        log(f"{n:03d} {s.id} {s.op} {s.change()}{flag} | {s.text.strip()}")


def _terminate(signum, frame):
    raise KeyboardInterrupt


def run_command():
    """The process around main(): SIGTERM (a job's cancellation) stops a run as Ctrl-C does,
    restoring the mutated file; a closed pipe (`--list-sites | head`) is no error."""
    signal.signal(signal.SIGTERM, _terminate)
    try:
        sys.exit(main())
    except BrokenPipeError:  # `--list-sites | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
