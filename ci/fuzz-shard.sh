#!/usr/bin/env bash
# A longer fuzz sharded over processes or machines by disjoint seeds, for CI farms.
#
#   ci/fuzz-shard.sh [--shards N] [--seconds S] [--backend B] [--base-seed X] [--out DIR] [--build DIR]
#
# On one machine it starts N shard processes (default: the number of cores). On a farm, give
# each machine GTEST_TOTAL_SHARDS and GTEST_SHARD_INDEX (GoogleTest's sharding variables): it
# then runs only that shard. Shard i fuzzes with seed X + i (case seeds are hashed from the run
# seed, so shards draw disjoint streams) into DIR/shard-i/, and runs the property suite with
# RapidCheck seed X + i, ten times the default cases (MLAROPE_PROPERTY_SCALE) and GoogleTest
# sharding of the property binaries. Exit status is non-zero if any shard failed; the last
# line names the report that merges all shards.
set -uo pipefail
cd "$(dirname "$0")/.."
shards=$(nproc); seconds=600; backend=host; base=1000; out=out/shards; build=build
while (($#)); do
  case $1 in
    --shards) shards=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --base-seed) base=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "fuzz-shard: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

run_shard() {  # INDEX TOTAL
  local i=$1 total=$2 dir="$out/shard-$1" status=0
  mkdir -p "$dir"
  "$build/mlarope" fuzz --seconds "$seconds" --backend "$backend" --seed $((base + i)) \
    --out "$dir" >"$dir/fuzz.log" 2>&1 || status=1
  for binary in "$build"/properties/*_props; do
    GTEST_TOTAL_SHARDS=$total GTEST_SHARD_INDEX=$i RC_PARAMS="seed=$((base + i))" \
      MLAROPE_PROPERTY_SCALE=10 MLAROPE_BACKEND=$backend MLAROPE_FAILURE_DIR="$dir/property-failures" \
      "$binary" >>"$dir/properties.log" 2>&1 || status=1
  done
  echo "shard $i/$total: $(grep "mlarope fuzz:" "$dir/fuzz.log" | cut -c1-90) $( ((status)) && echo FAILED || echo ok)"
  return $status
}

mkdir -p "$out"
status=0
if [ -n "${GTEST_TOTAL_SHARDS:-}" ]; then
  run_shard "${GTEST_SHARD_INDEX:-0}" "$GTEST_TOTAL_SHARDS" || status=1
else
  pids=()
  for ((i = 0; i < shards; i++)); do run_shard "$i" "$shards" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
fi
"$build/mlarope" report "$out"/shard-*/fuzz.json --out "$out/report" >"$out/report.log" 2>&1 || status=1
echo "fuzz-shard: report $out/report/report.html; $( ((status)) && echo FAILED || echo all shards passed)"
exit $status
