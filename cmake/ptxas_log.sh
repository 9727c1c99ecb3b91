#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The CUDA compiler launcher of mlarope_cuda (unless MLAROPE_PTXAS_VERBOSE): runs the nvcc
# command it is given and moves ptxas's -v lines (registers, spills, stack, shared memory of
# each kernel) out of the build log into OBJECT.ptxas.txt; every other line, and the exit
# status, pass through.
object=""
previous=""
for arg in "$@"; do
  [ "$previous" = "-o" ] && object=$arg
  previous=$arg
done
output=$(mktemp)
"$@" >"$output" 2>&1
status=$?
pattern='^ptxas info|bytes stack frame'
if [ -n "$object" ]; then
  grep -E "$pattern" "$output" >"$object.ptxas.txt" || true
fi
grep -vE "$pattern" "$output" >&2 || true
rm -f "$output"
exit $status
