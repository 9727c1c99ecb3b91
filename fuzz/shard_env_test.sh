#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest: a fuzz campaign of four shards through the job-array variables, merged by the report.
# Shards 0-3 of a SLURM array (--array=1-4: SLURM_ARRAY_TASK_MIN=1), then of a Kubernetes
# Indexed Job (JOB_COMPLETION_INDEX, MLAROPE_SHARD_COUNT); each writes OUT/shard-000K, and
# `mlarope report OUT` merges the four. Then the docs' job files: docs/cluster/fuzz.sbatch run
# as two array tasks, and the Indexed Job manifest's count against its completions.
# Usage: shard_env_test.sh MLAROPE_BINARY SOURCE_DIR
set -euo pipefail
mlarope=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for task in 1 2 3 4; do
  SLURM_ARRAY_TASK_ID=$task SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_COUNT=4 \
    "$mlarope" fuzz --cases 50 --seed 9 --out "$work/slurm" >"$work/slurm-$task.log"
  grep -q "shard $((task - 1)) of 4 (SLURM_ARRAY_TASK_ID)" "$work/slurm-$task.log" || fail "slurm task $task: $(head -1 "$work/slurm-$task.log")"
done
for index in 0 1 2 3; do
  JOB_COMPLETION_INDEX=$index MLAROPE_SHARD_COUNT=4 "$mlarope" fuzz --cases 50 --seed 9 --out "$work/k8s" >/dev/null
done
[ "$(ls "$work/slurm")" = "$(printf 'shard-%04d\n' 0 1 2 3)" ] || fail "slurm shard folders: $(ls "$work/slurm")"
[ "$(ls "$work/k8s")" = "$(ls "$work/slurm")" ] || fail "k8s shard folders: $(ls "$work/k8s")"
# The same shard from either engine runs the same cases: identical counts.
for shard in "$work"/slurm/shard-*; do
  cmp -s <(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['counts'])" "$shard/fuzz.json") \
         <(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['counts'])" "$work/k8s/$(basename "$shard")/fuzz.json") ||
    fail "$(basename "$shard"): SLURM and Kubernetes shards drew different cases"
done
"$mlarope" report "$work/slurm" --out "$work/report" >"$work/report.log"
grep -q "slurm/shard-\* (4 shards merged): 200 cases" "$work/report.log" || fail "merged report: $(cat "$work/report.log")"
grep -q "4 shards, cases/s per shard: min" "$work/report.log" || fail "no per-shard rates"
[ "$(grep -cE '^  - shard [0-3]: 50 cases' "$work/report.log")" = 4 ] || fail "per-shard lines missing"
# Two campaigns given together stay two: each merged on its own, then their total.
"$mlarope" report "$work/slurm" "$work/k8s" --out "$work/report2" >"$work/report2.log"
grep -q "all 2 runs: 400 cases, 0 failing" "$work/report2.log" || fail "two campaigns: $(grep 'all ' "$work/report2.log")"
# Explicit flags win over the environment.
SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=4 "$mlarope" fuzz --shard-index 2 --shard-count 3 --shard-info |
  grep -qx "2 3 flags" || fail "flags did not win over SLURM variables"
# docs/cluster/fuzz.sbatch as SLURM would run it (two tasks of --array=0-1), then merged.
for task in 0 1; do
  MLAROPE=$mlarope CAMPAIGN=$work/sbatch SLURM_ARRAY_TASK_ID=$task SLURM_ARRAY_TASK_COUNT=2 SLURM_CPUS_PER_TASK=1 \
    SECONDS_PER_SHARD=1 bash "$source_dir/docs/cluster/fuzz.sbatch" >/dev/null
done
"$mlarope" report "$work/sbatch" --out "$work/report3" | grep -q "(2 shards merged)" || fail "docs/cluster/fuzz.sbatch"
manifest=$source_dir/docs/cluster/fuzz-indexed-job.yaml
completions=$(grep -oE 'completions: [0-9]+' "$manifest" | grep -oE '[0-9]+')
grep -A1 'name: MLAROPE_SHARD_COUNT' "$manifest" | grep -q "value: \"$completions\"" ||
  fail "$manifest: MLAROPE_SHARD_COUNT is not its completions ($completions)"
echo "four shards through SLURM and Indexed Job variables, merged; the docs' job files: ok"
