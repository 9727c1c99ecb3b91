#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A longer fuzz sharded over processes or machines: one seed, its case stream split by shard.
#
#   ci/fuzz-shard.sh [--shards N] [--seconds S] [--backend B] [--seed X] [--out DIR] [--build DIR]
#
# On one machine it starts N shard processes (default: the number of cores). In a job array it
# runs only this task's shard: `mlarope fuzz` reads SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT,
# JOB_COMPLETION_INDEX (with MLAROPE_SHARD_COUNT) or GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS
# (docs/cluster-fuzzing.md). Shard i of N fuzzes cases i, i + N, ... of seed X into
# DIR/shard-000i/, and runs the property suite with RapidCheck seed X + i, ten times the default
# cases (MLAROPE_PROPERTY_SCALE) and GoogleTest sharding of the property binaries. Exit status
# is non-zero if a shard failed; the last line names the report that merges the shards found
# in DIR (`mlarope report DIR`).
set -uo pipefail
cd "$(dirname "$0")/.."
shards=$(nproc); seconds=600; backend=host; base=1000; out=out/shards; build=build
while (($#)); do
  case $1 in
    --shards) shards=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --seed | --base-seed) base=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "fuzz-shard: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

run_shard() {  # INDEX TOTAL
  local i=$1 total=$2 dir status=0
  dir="$out/$(printf 'shard-%04d' "$i")"
  mkdir -p "$dir"
  "$build/mlarope" fuzz --seconds "$seconds" --backend "$backend" --seed "$base" \
    --shard-index "$i" --shard-count "$total" --out "$out" >"$dir/fuzz.log" 2>&1 || status=1
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
read -r index count source < <("$build/mlarope" fuzz --shard-info) || { echo "fuzz-shard: bad shard variables" >&2; exit 2; }
if [ "$source" != none ]; then  # a task of a job array: this shard only
  echo "fuzz-shard: shard $index of $count (from $source)"
  run_shard "$index" "$count" || status=1
else
  pids=()
  for ((i = 0; i < shards; i++)); do run_shard "$i" "$shards" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
fi
"$build/mlarope" report "$out" --out "$out/report" >"$out/report.log" 2>&1 || status=1
echo "fuzz-shard: report $out/report/report.html; $( ((status)) && echo FAILED || echo all shards passed)"
exit $status
