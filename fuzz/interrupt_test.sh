#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest: SIGTERM, SIGINT and SIGHUP end a fuzz run with fuzz.json and junit.xml written and exit
# status 128 + the signal; the same command resumes it, and the resumed run's cases and failing
# cases are those of a run never interrupted; other arguments are refused (exit 2) until
# --fresh; an isolated backend's worker in a call that never returns does not hold the end up,
# and a run killed outright takes its workers along.
# Usage: interrupt_test.sh MLAROPE_BINARY HANG_PLUGIN
set -uo pipefail
mlarope=$1
hang_plugin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A backend that fails many cases, so that failing cases are part of what must resume exactly.
base=(fuzz --backend broken:dropped_inverse --jobs 2)
args=("${base[@]}" --cases 2000 --seed 3)
failures() {  # the failing cases' indices, and the case count, of a fuzz.json
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["cases"], sorted(f["index"] for f in j["failures"]))' "$1"
}

start=$(date +%s%N)
"$mlarope" "${args[@]}" --out "$work/whole" >/dev/null 2>&1
[ $? -eq 1 ] || fail "the uninterrupted run did not fail its broken backend"
# A quarter of the whole run's time (slower builds, a loaded machine: later), as seconds.
after=$(python3 -c "print(($(date +%s%N) - $start) / 4e9)")

# start_and_signal OUT SIGNAL [FLAGS]: start the run, signal it a quarter way, its exit status.
start_and_signal() {
  local out=$1 sig=$2
  shift 2
  "$mlarope" "${args[@]}" --out "$out" "$@" >"$out.log" 2>&1 &
  local pid=$!
  sleep "$after"
  kill "-$sig" "$pid"
  wait "$pid"
}

for sig in TERM INT HUP; do
  start_and_signal "$work/$sig" "$sig"
  status=$?
  want=$((128 + $(kill -l "$sig")))
  [ "$status" -eq "$want" ] || fail "SIG$sig: exit status $status, expected $want: $(tail -3 "$work/$sig.log")"
  grep -q "interrupted by SIG$sig after [0-9]* cases" "$work/$sig.log" || fail "SIG$sig: not said"
  [ -f "$work/$sig/junit.xml" ] || fail "SIG$sig: no junit.xml"
  python3 - "$work/$sig/fuzz.json" "SIG$sig" <<'PY' || fail "SIG$sig: fuzz.json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["interrupted"] == sys.argv[2], j.get("interrupted")
assert 0 < j["cases"] < 2000, f"{j['cases']} cases: the signal came before or after the run"
assert j["failing_cases"] == len(j["failures"]) > 0
PY
done

# The same command resumes: together, exactly the cases and failures of the whole run.
"$mlarope" "${args[@]}" --out "$work/TERM" >"$work/resumed.log" 2>&1
[ $? -eq 1 ] || fail "the resumed run: $(tail -3 "$work/resumed.log")"
grep -q "resuming the run interrupted by SIGTERM" "$work/resumed.log" || fail "the resume is not said"
[ "$(failures "$work/TERM/fuzz.json")" = "$(failures "$work/whole/fuzz.json")" ] ||
  fail "resumed: $(failures "$work/TERM/fuzz.json" | head -c 200) against $(failures "$work/whole/fuzz.json" | head -c 200)"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["resumed"]==1 and "interrupted" not in j' \
  "$work/TERM/fuzz.json" || fail "the resumed fuzz.json"

# Other arguments on an interrupted run: refused, until --fresh.
"$mlarope" "${base[@]}" --cases 2000 --seed 4 --out "$work/INT" >"$work/other.log" 2>&1
[ $? -eq 2 ] || fail "other arguments: not refused"
grep -q "holds a run interrupted by SIGINT with other arguments" "$work/other.log" || fail "other arguments: not said"
"$mlarope" "${base[@]}" --seed 4 --cases 50 --fresh --out "$work/INT" >/dev/null 2>&1
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["cases"]==50 and "resumed" not in j' \
  "$work/INT/fuzz.json" || fail "--fresh did not start afresh"

# A worker process in a call that never returns, and the signal sent to the whole process group
# as SLURM and a terminal send it: the worker is not counted as crashed, and the run still ends
# within the grace (5 s).
start=$SECONDS
set -m  # the run in a process group of its own
hang=(fuzz --backend "plugin:$hang_plugin" --cases 2 --jobs 1 --out "$work/hang")
"$mlarope" "${hang[@]}" --call-timeout 60 >"$work/hang.log" 2>&1 &
pid=$!
set +m
sleep 1
kill -TERM -- "-$pid"
wait "$pid"
status=$?
[ "$status" -eq 143 ] || fail "hanging worker: exit status $status: $(tail -3 "$work/hang.log")"
[ $((SECONDS - start)) -le 10 ] || fail "hanging worker: the run took $((SECONDS - start)) s to end"
python3 - "$work/hang/fuzz.json" <<'PY' || fail "hanging worker: fuzz.json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["interrupted"] == "SIGTERM" and j["failing_cases"] == 0, j["failures"]
assert j["resume"]["pending"] == [0], "the case under way is not left to the resume"
PY
# Resumed (a call limit is no argument of the run), the case under way runs first.
"$mlarope" "${hang[@]}" --call-timeout 0.5 >"$work/hang-resumed.log" 2>&1
python3 - "$work/hang/fuzz.json" <<'PY' || fail "hanging worker, resumed: $(tail -3 "$work/hang-resumed.log")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["cases"] == 2 and [f["index"] for f in j["failures"]] == [0, 1], j["failures"]
assert all(f["checks"][0]["check"] == "timeout" for f in j["failures"])
PY
# A run killed outright (SIGKILL: no handler runs) takes its worker processes along.
"$mlarope" "${hang[@]}" --fresh --call-timeout 60 >/dev/null 2>&1 &
pid=$!
sleep 1
workers=$(pgrep -P "$pid")
[ -n "$workers" ] || fail "SIGKILL: the run has no worker process to orphan"
kill -KILL "$pid"
wait "$pid" 2>/dev/null
sleep 0.5
for worker in $workers; do  # gone, or a zombie its new parent has not reaped yet
  state=$(ps -o stat= -p "$worker" 2>/dev/null)
  [ -z "$state" ] || [[ $state == Z* ]] || fail "SIGKILL: worker $worker outlived its run ($state)"
done
echo "interrupt_test.sh: signals end, resume and refuse as expected"
