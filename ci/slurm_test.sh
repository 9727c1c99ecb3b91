#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest (label slurm): the shipped docs/cluster/fuzz.sbatch on a real single-node SLURM cluster,
# started here from Debian's packages (slurmctld, slurmd, slurm-client, munge; ci/setup.sh
# installs them) in a scratch folder, as a two-task array whose one-minute time limit cuts
# shards of 300 s: each shard must end on the scheduler's SIGTERM with its fuzz.json written
# (interrupted by SIGTERM, cases counted) and `mlarope report` must merge both. The daemons it
# started are stopped on exit. Exit status 77 (a skip) where the packages or root are missing.
# Usage: slurm_test.sh MLAROPE_BINARY SOURCE_DIR
set -uo pipefail
mlarope=$1
source_dir=$2
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in munged slurmctld slurmd sbatch squeue scontrol; do
  command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin command -v "$tool" >/dev/null ||
    skip "no $tool here (Debian's slurmctld, slurmd, slurm-client and munge: ci/setup.sh)"
done
PATH=$PATH:/usr/sbin
[ "$(id -u)" -eq 0 ] || skip "slurmd runs jobs as root here, and this user is not"

work=$(mktemp -d /tmp/mlarope-slurm.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  [ -f "$work/slurm.conf" ] && SLURM_CONF=$work/slurm.conf scancel --quiet --user root 2>/dev/null
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  [ -f "$work/munged.pid" ] && kill "$(cat "$work/munged.pid")" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
show_logs() { tail -n 20 "$work"/*.log >&2; }

# munge: a fresh key and its own socket, so nothing of the machine's is used or changed.
mkdir -p "$work/munge" && chmod 700 "$work/munge"
head -c 1024 /dev/urandom >"$work/munge/munge.key" && chmod 400 "$work/munge/munge.key"
munged --force --key-file="$work/munge/munge.key" --socket="$work/munge/socket" \
  --pid-file="$work/munged.pid" --log-file="$work/munged.log" --seed-file="$work/munge/seed" ||
  fail "munged did not start: $(tail -5 "$work/munged.log")"

# Free ports for the two daemons.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
ports = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s.getsockname()[1]); s.close()
print(*ports)')
mkdir -p "$work/state" "$work/spool" "$work/campaign"
cat >"$work/slurm.conf" <<CONF
ClusterName=mlarope-test
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
KillWait=15
OverTimeLimit=0
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=localhost CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -D -c -f "$SLURM_CONF" >"$work/slurmctld.out.log" 2>&1 &
pids+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >"$work/slurmd.out.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  sinfo -h -o %T 2>/dev/null | grep -Eq '^idle' && break
  sleep 0.2
done
sinfo -h -o %T 2>/dev/null | grep -Eq '^idle' || { show_logs; fail "the node did not come up"; }

# Two shards of 300 s under a one-minute limit: SLURM sends SIGTERM at the limit.
job=$(sbatch --parsable --array=0-1 --time=00:01:00 --cpus-per-task=1 --chdir="$work" \
  --output="$work/task-%a.log" \
  --export=ALL,MLAROPE="$mlarope",CAMPAIGN="$work/campaign",SECONDS_PER_SHARD=300,BACKEND=host \
  "$source_dir/docs/cluster/fuzz.sbatch") || { show_logs; fail "sbatch refused the job"; }
echo "slurm_test.sh: job array $job submitted"
for _ in $(seq 360); do
  [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
  sleep 0.5
done
[ -z "$(squeue -h -j "$job" 2>/dev/null)" ] || { squeue; show_logs; fail "the array did not end"; }
for task in 0 1; do
  state=$(scontrol show job "${job}_$task" 2>/dev/null | grep -o 'JobState=[A-Z_]*')
  echo "slurm_test.sh: task $task: $state; $(tail -1 "$work/task-$task.log")"
  [ "$state" = JobState=TIMEOUT ] || { cat "$work/task-$task.log"; fail "task $task: $state, expected TIMEOUT"; }
  shard=$(printf '%s/campaign/shard-%04d' "$work" "$task")
  python3 - "$shard/fuzz.json" <<'PY' || { cat "$work/task-$task.log"; fail "task $task: $shard/fuzz.json"; }
import json, sys
j = json.load(open(sys.argv[1]))
assert j["interrupted"] == "SIGTERM", j.get("interrupted")
assert j["cases"] > 0 and j["failing_cases"] == 0, (j["cases"], j["failing_cases"])
assert j["shard"]["count"] == 2 and j["shard"]["source"] == "SLURM_ARRAY_TASK_ID", j["shard"]
print("  ", sys.argv[1], j["cases"], "cases in", round(j["seconds"], 1), "s")
PY
  [ -f "$shard/junit.xml" ] || fail "task $task: no junit.xml"
done
"$mlarope" report "$work/campaign" --out "$work/report" >"$work/report.log" 2>&1 ||
  { cat "$work/report.log"; fail "mlarope report did not merge the shards"; }
grep -E "2 shards|shards: 2" "$work/report.log" || { cat "$work/report.log"; fail "the report is not of the two shards"; }
echo "slurm_test.sh: both shards cut by the time limit, written, and merged"
