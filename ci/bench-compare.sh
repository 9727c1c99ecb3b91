#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A change measured against its base in one run, on this machine: the benchmark gate.
#
#   ci/bench-compare.sh BASE_REF [OUT_DIR]        e.g. ci/bench-compare.sh HEAD~1
#
# Builds BASE_REF (git archive, so the working tree is untouched) and the working tree side
# by side with the same settings (Release, no CUDA, no tests: build-compare/base and
# build-compare/change), then runs the two mlarope_bench binaries in BENCH_ROUNDS rounds, the
# two in a random order in each round, one repetition of every selected benchmark per
# process: each process's floor fractions are normalised by the copy bandwidth it measured
# itself, so the machine's drift over the run cancels. `mlarope compare` then prints, per
# benchmark, the medians, the change with its 95% interval, the exact one-sided Mann-Whitney
# p (Holm over the keys) and a verdict of SAME, FASTER, SLOWER or UNKNOWN. Keys found SLOWER
# are measured once more (BENCH_ROUNDS rounds of those keys alone); the gate fails only when
# they are SLOWER again.
#
# Environment: BENCH_FILTER (a Google Benchmark regex; default '/host/', our kernels on the
# host), BENCH_ROUNDS (9: repetitions a side), BENCH_MIN_TIME (0.05 s a repetition),
# COMPARE_ARGS (more flags for `mlarope compare`, e.g. --key-min-effect rope_inplace/=0.2),
# COMPARE_BUILD (build-compare).
# Output: OUT_DIR (default out/bench-compare) holds each process's JSON, compare/ (compare.json,
# summary.md, junit.xml) and slower.txt. Exit status: 0 pass, 1 a key SLOWER twice, 3 a key
# UNKNOWN (the gate cannot decide: never a pass), 2 a usage or build error.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  [[ $# -ge 1 ]] && exit 0 || exit 2
fi
base_ref=$1
out=${2:-out/bench-compare}
builds=${COMPARE_BUILD:-build-compare}
rounds=${BENCH_ROUNDS:-9}
filter=${BENCH_FILTER:-/host/}
min_time=${BENCH_MIN_TIME:-0.05}
SECONDS=0
base_commit=$(git rev-parse --verify --quiet "$base_ref^{commit}") ||
  { echo "bench-compare: '$base_ref' is not a commit of this repository" >&2; exit 2; }
bash ci/setup.sh >/dev/null

# Sources of the base: extracted again only when the base commit changed, so that a second
# comparison with the same base does not rebuild it.
if [[ "$(cat "$builds/base-src/.commit" 2>/dev/null)" != "$base_commit" ]]; then
  rm -rf "$builds/base-src" && mkdir -p "$builds/base-src"
  git archive "$base_commit" | tar -x -C "$builds/base-src"
  echo "$base_commit" >"$builds/base-src/.commit"
fi
build() {  # build SOURCE_DIR BUILD_DIR TARGETS...
  local src=$1 dir=$2; shift 2
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAROPE_CUDA=OFF -DMLAROPE_TESTS=OFF \
    -DMLAROPE_BENCH=ON >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log" >&2; exit 2; }
  cmake --build "$dir" -j "$(nproc)" --target "$@" >"$dir.build.log" 2>&1 || { tail -n 40 "$dir.build.log" >&2; exit 2; }
}
echo "bench-compare: building the base ($base_ref = ${base_commit:0:12}) and the working tree, at ${SECONDS} s"
build "$builds/base-src" "$builds/base" mlarope_bench
build . "$builds/change" mlarope_bench mlarope
bench_of() { [[ $1 == base ]] && echo "$builds/base/mlarope_bench" || echo "$builds/change/mlarope_bench"; }

# ROUNDS rounds of both sides in a random order; files PREFIX{base,change}-N.json.
measure() {  # measure PREFIX FILTER
  local prefix=$1 regex=$2 r side
  for ((r = 1; r <= rounds; r++)); do
    for side in $(shuf -e base change); do
      MLAROPE_BENCH_NO_MODEL=1 "$(bench_of "$side")" --benchmark_filter="$regex" --benchmark_repetitions=1 \
        --benchmark_min_time="$min_time" --benchmark_out="$out/$prefix$side-$r.json" \
        --benchmark_out_format=json >"$out/$prefix$side-$r.txt" 2>&1 ||
        { echo "bench-compare: $side's mlarope_bench failed (round $r):" >&2; tail -n 20 "$out/$prefix$side-$r.txt" >&2; exit 2; }
    done
    printf 'bench-compare: %sround %d of %d done, at %d s\n' "$prefix" "$r" "$rounds" "$SECONDS"
  done
}
rm -rf "$out" && mkdir -p "$out"
echo "bench-compare: $rounds rounds of '$filter', base and change interleaved, at ${SECONDS} s"
measure "" "$filter"
mlarope="$builds/change/mlarope"
status=0
# shellcheck disable=SC2086  # COMPARE_ARGS is a list of flags
"$mlarope" compare --base "$out"/base-*.json --change "$out"/change-*.json --out "$out/compare" \
  --slower-keys "$out/slower.txt" ${COMPARE_ARGS:-} || status=$?
if [[ $status == 1 ]]; then
  keys=$(paste -sd'|' "$out/slower.txt")
  echo "bench-compare: SLOWER: $(paste -sd' ' "$out/slower.txt"); measuring them once more, at ${SECONDS} s"
  measure repeat- "^($keys)/real_time\$"
  status=0
  # shellcheck disable=SC2086
  "$mlarope" compare --base "$out"/base-*.json --change "$out"/change-*.json \
    --repeat-base "$out"/repeat-base-*.json --repeat-change "$out"/repeat-change-*.json \
    --out "$out/compare" --slower-keys "$out/slower.txt" ${COMPARE_ARGS:-} || status=$?
fi
case $status in
  0) verdict="pass" ;;
  1) verdict="FAIL: SLOWER twice: $(paste -sd' ' "$out/slower.txt")" ;;
  3) verdict="UNDECIDED: a key is UNKNOWN (see the table)" ;;
  *) verdict="error (exit $status)" ;;
esac
echo "bench-compare: $verdict; ${base_ref} -> working tree, ${SECONDS} s; table in $out/compare/summary.md"
exit "$status"
