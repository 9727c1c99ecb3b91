# SPDX-License-Identifier: Apache-2.0
"""The checks a mutant goes through: the project's test binaries, property tests and a short
`mlarope fuzz` on the host backend, each built from the scratch build. A check that exits
non-zero kills the mutant. Also what a check's environment holds, and which mutants edit an
anchor of the fault variants (cuda/test_support/kernel_faults.txt)."""

import collections
import os
import re

from .common import UsageError

PROPS = [
    ("props_rope", "rope_props"),
    ("props_rope_backward", "rope_backward_props"),
    ("props_kv_split", "kv_split_props"),
    ("props_kv_split_backward", "kv_split_backward_props"),
    ("props_identities", "identities_props"),
    ("props_yarn", "yarn_props"),
]
OPTIONAL_PROPS = {"props_yarn"}  # newer than the tool: skipped where the build has no such target

DEFAULT_CHECKS = (
    [
        "dispatch",
        "canonical_launch",
        "launch_alignment",
        "portability",
        "kv_sum_order",
        "thd_gate",
        "oversized_grid",
        "host_backend",
        "megatron_cases",
    ]
    + [n for n, _ in PROPS]
    + ["fuzz", "fuzz_fast"]
)

# Variables that shard this run (and the property and backend settings): the checks must not
# see them.
CLEARED_VARIABLES = (
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_COUNT",
    "JOB_COMPLETION_INDEX",
    "MLAROPE_SHARD_COUNT",
    "GTEST_SHARD_INDEX",
    "GTEST_TOTAL_SHARDS",
    "GTEST_FILTER",
    "RC_PARAMS",
    "MLAROPE_BACKEND",
    "MLAROPE_PROPERTY_SCALE",
)


class Check:
    """A check: build `targets`, run `argv` (`@target` is that target's file; {run},
    {fuzz_seconds}, {fuzz_seed}, {jobs} are filled in) with `env`; a non-zero exit status kills
    the mutant."""

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


def _test_checks():
    """The checks of the project's test binaries."""
    return [
        Check(
            "dispatch",
            ["dispatch_test"],
            ["@dispatch_test"],
            "dispatcher and launch builder decisions (cuda/launch/dispatch_test.cpp)",
        ),
        Check(
            "canonical_launch",
            ["canonical_launch_test"],
            ["@canonical_launch_test"],
            "variant, grid and work of the canonical DeepSeek-V3 calls "
            "(cuda/tests/canonical_launch_test.cpp); "
            "skipped where the build has no such target",
            optional=True,
        ),
        Check(
            "launch_alignment",
            ["launch_alignment_test"],
            ["@launch_alignment_test"],
            "each vector-path condition of the launch builder with one operand false, under "
            "the GPU model (cuda/tests/launch_alignment_test.cpp)",
        ),
        Check(
            "portability",
            ["portability_test"],
            ["@portability_test"],
            "element conversions, vector loads and stores, SSE2 bf16 paths "
            "(cuda/tests/portability_test.cpp)",
        ),
        Check(
            "kv_sum_order",
            ["kv_sum_order_test"],
            ["@kv_sum_order_test"],
            "kv_split_backward's head-sum order and groups (cuda/tests/kv_sum_order_test.cpp)",
        ),
        Check(
            "thd_gate",
            ["thd_gate_test"],
            ["@thd_gate_test"],
            "the cu_seqlens gate and the THD grid cap (cuda/tests/thd_gate_test.cpp)",
        ),
        Check(
            "oversized_grid",
            ["oversized_grid_test"],
            ["@oversized_grid_test"],
            "grids with more blocks than rows and more threads than the gate's slots, under "
            "the GPU model (cuda/tests/oversized_grid_test.cpp); skipped where the build has "
            "no such target",
            optional=True,
        ),
        Check(
            "host_backend",
            ["host_backend_test"],
            ["@host_backend_test", "--gtest_filter=-*/cuda"],
            "every op on the host backend against the reference: dtypes, layouts, THD, CP, "
            "metadata, graphs, YaRN, Megatron ops, order (cuda/tests/*_backend_test.cpp and "
            "the rest of host_backend_test)",
        ),
        Check(
            "megatron_cases",
            ["megatron_cases_test"],
            ["@megatron_cases_test", "--gtest_filter=*/host"],
            "the bundled Megatron-LM cases on the host backend "
            "(harness/checks/megatron_cases_test.cpp)",
        ),
    ]


def _property_checks():
    """The checks of the RapidCheck property binaries."""
    return [
        Check(
            name,
            [target],
            ["@" + target],
            f"RapidCheck properties properties/{target}.cpp on the host backend "
            "(MLAROPE_PROPERTY_SCALE = --property-scale)"
            + ("; skipped where the build has no such target" if name in OPTIONAL_PROPS else ""),
            env={
                "MLAROPE_BACKEND": "host",
                "MLAROPE_PROPERTY_SCALE": "{property_scale}",
                "MLAROPE_FAILURE_DIR": "{run}/property-failures",
            },
            optional=name in OPTIONAL_PROPS,
        )
        for name, target in PROPS
    ]


def _fuzz_check(name, backend, seconds, out, about):
    return Check(
        name,
        ["mlarope"],
        [
            "@mlarope",
            "fuzz",
            "--backend",
            backend,
            "--seconds",
            seconds,
            "--jobs",
            "{fuzz_jobs}",
            "--seed",
            "{fuzz_seed}",
            "--out",
            out,
            "--shard-index",
            "0",
            "--shard-count",
            "1",
            "--max-failure-dirs",
            "1",
        ],
        about,
    )


def check_registry():
    """Every check the tool knows, by name, in the default order."""
    checks = _test_checks() + _property_checks()
    checks.append(
        _fuzz_check(
            "fuzz",
            "host",
            "{fuzz_seconds}",
            "{run}/fuzz-out",
            "`mlarope fuzz --backend host` for --fuzz-seconds with --fuzz-seed "
            "(exit status 1: a failing case)",
        )
    )
    # The host's fast mode runs other code than the GPU model (whole rows per thread, memcpy
    # copies, SIMD conversions): a share of the budget on it.
    checks.append(
        _fuzz_check(
            "fuzz_fast",
            "host-fast",
            "{fuzz_fast_seconds}",
            "{run}/fuzz-fast-out",
            "`mlarope fuzz --backend host-fast` (the fast mode's own code paths) for half of "
            "--fuzz-seconds",
        )
    )
    return collections.OrderedDict((c.name, c) for c in checks)


def parse_checks(spec):
    """Checks named in --checks: registry names, gtest:TARGET[:FILTER] or ctest:REGEX@T1+T2."""
    registry = check_registry()
    checks = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        if item in registry:
            checks.append(registry[item])
        elif item.startswith("gtest:"):
            checks.append(_gtest_check(item))
        elif item.startswith("ctest:"):
            checks.append(_ctest_check(item))
        else:
            raise UsageError(f"--checks: unknown check {item!r} (see --list-checks)")
    if not checks:
        raise UsageError("--checks: no check")
    return checks


def _gtest_check(item):
    target, _, flt = item[len("gtest:") :].partition(":")
    argv = ["@" + target] + ([f"--gtest_filter={flt}"] if flt else [])
    return Check(
        item, [target], argv, f"GoogleTest binary {target}" + (f", filter {flt}" if flt else "")
    )


def _ctest_check(item):
    regex, _, targets = item[len("ctest:") :].partition("@")
    if not targets:
        raise UsageError(f"{item}: name the targets its tests need, ctest:REGEX@TARGET1+TARGET2")
    return Check(
        item,
        targets.split("+"),
        [
            "ctest",
            "--test-dir",
            "{build}",
            "-R",
            regex,
            "--timeout",
            "{ctest_timeout}",
            "--output-on-failure",
        ],
        f"ctest -R {regex}",
    )


def check_environment(extra, values):
    env = dict(os.environ)
    # The checks must not shard themselves from the variables that shard this run.
    for var in CLEARED_VARIABLES:
        env.pop(var, None)
    env["MLAROPE_CASES_DIR"] = values["cases"]
    for k, v in extra.items():
        env[k] = v.format(**values)
    return env


def failure_excerpt(out, limit=1500):
    """The lines of a failed check's output that say what failed (else its last lines)."""
    lines = out.splitlines()
    keep = [
        line
        for line in lines
        if re.search(
            r"Failure|FAILED|failing case|Expected|Which is|Value of|Actual:|"
            r"exception|error\(s\)|error:|wrong|mismatch|Sanitizer|Assertion",
            line,
        )
    ]
    text = "\n".join(keep[:20]) if keep else "\n".join(lines[-20:])
    return text[-limit:]


def fault_anchor_spans(src_root):
    """{cuda-relative file: [(start, end), ...]}: where the anchors of
    test_support/kernel_faults.txt sit in the scratch sources (a mutant there breaks the fault
    variants' generated sources)."""
    path = os.path.join(src_root, "cuda", "test_support", "kernel_faults.txt")
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
            found = _anchor_spans(os.path.join(src_root, current), m.group(2))
            if found:
                spans[current].extend(found)
    return spans


def _anchor_spans(path, anchor):
    """(start, end) of each place of the file `path` where the text `anchor` starts."""
    with open(path, encoding="utf-8") as s:
        text = s.read()
    found, k = [], 0
    while anchor:
        k = text.find(anchor, k)
        if k == -1:
            break
        found.append((k, k + len(anchor)))
        k += 1
    return found


def touches_anchor(site, spans):
    return any(site.start < end and start < site.end for start, end in spans.get(site.file, []))
