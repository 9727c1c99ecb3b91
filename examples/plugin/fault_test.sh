#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A plugin that crashes, hangs or aborts on its Nth call: the fuzz runs it in worker processes,
# so the campaign runs to its budget, exits 1, writes fuzz.json and a failing case per event, and
# `mlarope check` on a failing case's directory reproduces the event.
#   fault_test.sh MLAROPE PLUGIN CHECK PATTERN OUT [FLAG...]
# CHECK is crash or timeout, PATTERN what the worker's death says (an extended regex), FLAGs go
# to both commands (--call-timeout 1); FAULT_TEST_CASES is the budget (60).
set -uo pipefail
mlarope=$1 plugin=$2 check=$3 pattern=$4 out=$5
shift 5
cases=${FAULT_TEST_CASES:-60}
rm -rf "$out" && mkdir -p "$(dirname "$out")"
"$mlarope" fuzz --cases "$cases" --jobs 2 --seed 7 --backend "plugin:$plugin" --out "$out" "$@" \
  >"$out.log" 2>&1
status=$?
cat "$out.log"
[ "$status" -eq 1 ] || { echo "fault_test.sh: fuzz exit status $status, expected 1"; exit 1; }
# The record: every case of the budget, several events (the campaign went on after the first),
# each a failing case of CHECK with its directory.
first=$(python3 - "$out/fuzz.json" "$cases" "$check" "$pattern" <<'PY'
import json, re, sys
path, cases, check, pattern = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
j = json.load(open(path))
assert j["cases"] == cases, f"{j['cases']} cases, expected the budget's {cases}"
events = [f for f in j["failures"] if any(c["check"] == check for c in f["checks"])]
assert len(events) >= 2, f"{len(events)} {check} cases: the campaign stopped at the first?"
assert j["failing_cases"] == len(j["failures"]), "a failing case without its record"
for f in events:
    message = next(c["message"] for c in f["checks"] if c["check"] == check)
    assert re.search(pattern, message), f"case {f['index']}: {message!r} does not say {pattern}"
assert j["checks"][check]["fail"] == len(events), "the check's count is not the events'"
print(events[0]["dir"])
PY
) || { echo "fault_test.sh: fuzz.json does not hold the events"; exit 1; }
dir="$out/$first"
[ -f "$dir/case.json" ] && [ -f "$dir/report.txt" ] || { echo "fault_test.sh: $dir is not a case"; exit 1; }
grep -q "replay: .* check $dir --backend plugin:$plugin" "$dir/report.txt" ||
  { echo "fault_test.sh: $dir/report.txt has no replay command"; exit 1; }
# What the plugin wrote to stderr before the event, kept beside the case.
grep -q "the planted fault" "$dir/worker_stderr.txt" ||
  { echo "fault_test.sh: $dir/worker_stderr.txt does not hold the worker's stderr"; exit 1; }
# The replay, in a worker process too: the same event, a failed check, exit status 1.
replay=$("$mlarope" check "$dir" --backend "plugin:$plugin" "$@" 2>&1)
status=$?
printf '%s\n' "$replay"
[ "$status" -eq 1 ] || { echo "fault_test.sh: replay exit status $status, expected 1"; exit 1; }
grep -Eq -- "$check: the backend's worker process .*$pattern" <<<"$replay" ||
  { echo "fault_test.sh: the replay does not report the $check"; exit 1; }
echo "fault_test.sh: $check reproduced, as expected"
