#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A plugin that computes a narrow part of the calls, fuzzed with no narrowing flag: steering
# (fuzz/steering.h) must bring at least SHARE of the cases to it (the issue's bar is half; 7 in
# 8 are steered, so a steering that keeps only what the plugin takes comes near 0.875), and
# the floor of unsteered draws must still offer it some it declines.
#   steering_test.sh MLAROPE PLUGIN SHARE OUT
set -uo pipefail
mlarope=$1 plugin=$2 share=$3 out=$4
rm -rf "$out" && mkdir -p "$(dirname "$out")"
"$mlarope" fuzz --cases 2000 --jobs 2 --seed 7 --backend "plugin:$plugin" --out "$out" >"$out.log" 2>&1
status=$?
tail -n 12 "$out.log"
[ "$status" -eq 0 ] || { echo "steering_test.sh: fuzz exit status $status, expected 0"; exit 1; }
python3 - "$out/fuzz.json" "$share" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
share = float(sys.argv[2])
reached = sum(j["counts"].get("reached", {}).values())
declined = j["support"]["declined_cases"]
print(f"steering_test.sh: {reached} of {j['cases']} cases reached the plugin, {declined} declined")
assert j["steering"]["active"], j["steering"]
assert reached >= share * j["cases"], f"steering brought fewer than {share} of the cases"
assert declined > 0, "no declined case: the floor of unsteered draws is gone"
assert reached + declined == j["cases"]
PY
