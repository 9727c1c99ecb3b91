#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run a command and pass when it exits with STATUS and its output (stdout and stderr) matches
# every PATTERN (extended regular expressions): expect.sh STATUS PATTERN... -- COMMAND...
set -uo pipefail
want=$1; shift
patterns=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do patterns+=("$1"); shift; done
shift
output=$("$@" 2>&1); status=$?
printf '%s\n' "$output"
if [ "$status" -ne "$want" ]; then echo "expect.sh: exit status $status, expected $want"; exit 1; fi
for p in "${patterns[@]}"; do
  if ! grep -Eq -- "$p" <<<"$output"; then echo "expect.sh: no line matches: $p"; exit 1; fi
done
echo "expect.sh: exit status $status and every pattern, as expected"
