#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CTest: the fuzz of our kernels reaches every kernel path. A fixed set of cases (the seed and the count
# decide them, whatever the speed of the machine) on the host backend under the GPU model; in
# fuzz.json's kernel_paths every op's least-run path must have at least a tenth of the launches
# of its busiest (the vector paths need aligned strides, Megatron's layout modes and, for the
# staged path, MLA's in-place layout change: a generator that stops drawing them fails here),
# and the summary must say so.
# Usage: kernel_paths_test.sh MLAROPE_BINARY
set -uo pipefail
mlarope=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$mlarope" fuzz --backend host --cases 3000 --seed 11 --jobs 2 --out "$work/run" >"$work/log" 2>&1
status=$?
cat "$work/log"
[ "$status" -eq 0 ] || fail "the fuzz run exited with $status"
grep -q "kernel paths, the least-run of each op" "$work/log" || fail "the summary has no kernel-path line"
python3 - "$work/run/fuzz.json" <<'EOF' || exit 1
import json, sys
paths = json.load(open(sys.argv[1])).get("kernel_paths", {})
ops = {"rope", "rope_backward", "kv_split", "kv_split_backward"}
if set(paths) != ops:
    sys.exit(f"FAIL: kernel_paths has ops {sorted(paths)}, expected {sorted(ops)}")
bad = []
for op, p in sorted(paths.items()):
    launches = p["launches"]
    # Every variant in all three activation dtypes: 4 rope variants, 2 of kv_split.
    expected = 12 if op.startswith("rope") else 6
    if len(launches) != expected:
        bad.append(f"{op}: {len(launches)} paths, expected {expected}")
    most = max(launches.values())
    for path, n in sorted(launches.items()):
        if 10 * n < most:
            bad.append(f"{path}: {n} launches, under a tenth of the busiest {most}")
    print(f"{op}: least share {p['least_share']:.2f}")
if bad:
    sys.exit("FAIL: " + "; ".join(bad))
EOF
echo "every kernel path got at least a tenth of its op's busiest path's launches"
