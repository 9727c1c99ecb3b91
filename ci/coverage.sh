#!/usr/bin/env bash
# Line and branch coverage of the kernel and launch code (cuda/kernels, cuda/launch), per file,
# from a build configured with -DMLAROPE_COVERAGE=ON after its tests and fuzz ran (ci/test.sh
# does this with the sanitizer build: CTest's property tests at scale 0.25 and a fuzz slice of
# a fixed case count). Writes OUT/coverage.json (gcovr's summary), OUT/coverage.txt and
# OUT/index.html, prints a table, and fails when a file's line or branch coverage is below
# ci/coverage-baseline.json (or a file of it is missing). Device-only code (#if __CUDA_ARCH__)
# is not compiled on the host and is not counted; the fault-variant copies of the kernels
# (build/.../faulty) are left out.
#
#   bash ci/coverage.sh BUILD_DIR [OUT_DIR]       report and compare
#   bash ci/coverage.sh BUILD_DIR OUT --record    write the measured figures as the baseline
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: bash ci/coverage.sh BUILD_DIR [OUT_DIR] [--record]}
out=${2:-out/coverage}
record=${3:-}
baseline=ci/coverage-baseline.json
command -v gcovr >/dev/null || { echo "coverage: gcovr is missing (bash ci/setup.sh installs it)" >&2; exit 2; }
find "$build/cuda/CMakeFiles/mlarope_host.dir" -name '*.gcda' 2>/dev/null | grep -q . ||
  { echo "coverage: no .gcda files in $build (configure with -DMLAROPE_COVERAGE=ON and run the tests first)" >&2; exit 2; }
mkdir -p "$out"
# Only the production host library's objects: the kernels compiled into it, and the launch code.
gcovr --root . --object-directory "$build/cuda/CMakeFiles/mlarope_host.dir" \
  --filter 'cuda/kernels/' --filter 'cuda/launch/' --exclude '.*_test\.cpp' \
  --exclude-unreachable-branches --exclude-throw-branches \
  --json-summary-pretty --json-summary "$out/coverage.json" --txt "$out/coverage.txt" \
  --html-details "$out/index.html" -j "$(nproc)" >/dev/null
python3 - "$out/coverage.json" "$baseline" "$record" <<'PY'
import json, sys
summary, baseline_path, record = sys.argv[1], sys.argv[2], sys.argv[3] == "--record"
files = {f["filename"]: f for f in json.load(open(summary))["files"]}
def pct(covered, total):
    return 100.0 * covered / total if total else 100.0
rows = {name: (pct(f["line_covered"], f["line_total"]), f["line_covered"], f["line_total"],
               pct(f["branch_covered"], f["branch_total"]), f["branch_covered"], f["branch_total"])
        for name, f in sorted(files.items())}
print(f"coverage of the kernel and launch code ({len(rows)} files; lines and branches the host build compiles):")
print(f"  {'file':<34} {'lines':>17} {'branches':>17}")
for name, (lp, lc, lt, bp, bc, bt) in rows.items():
    print(f"  {name:<34} {lp:6.1f}% {lc:4}/{lt:<5} {bp:6.1f}% {bc:4}/{bt:<5}")
lc = sum(r[1] for r in rows.values()); lt = sum(r[2] for r in rows.values())
bc = sum(r[4] for r in rows.values()); bt = sum(r[5] for r in rows.values())
print(f"  {'total':<34} {pct(lc, lt):6.1f}% {lc:4}/{lt:<5} {pct(bc, bt):6.1f}% {bc:4}/{bt:<5}")
if record:
    json.dump({name: {"lines": round(r[0], 1), "branches": round(r[3], 1)} for name, r in rows.items()},
              open(baseline_path, "w"), indent=1, sort_keys=True)
    print(f"coverage: recorded as the baseline in {baseline_path}")
    sys.exit(0)
# Half a point of slack: tests with a time budget (the plugin fuzzes) run a varying number of
# cases, which moves a file's branch count by a few tenths of a point from run to run.
SLACK = 0.5
baseline = json.load(open(baseline_path))
drops = []
for name, want in sorted(baseline.items()):
    if name not in rows:
        drops.append(f"{name}: no coverage data (not compiled or not run)")
        continue
    got = rows[name]
    for metric, value in (("lines", got[0]), ("branches", got[3])):
        if value + SLACK < want[metric]:
            drops.append(f"{name}: {metric} {value:.1f}% < {want[metric]:.1f}% of the baseline")
if drops:
    print("coverage: below the baseline (" + baseline_path + "):")
    for d in drops:
        print("  " + d)
    sys.exit(1)
print(f"coverage: every file at or above the baseline ({baseline_path})")
PY
