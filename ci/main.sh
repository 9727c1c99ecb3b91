#!/usr/bin/env bash
# The main job: set up, build, and run the bundled example cases on the reference,
# printing for each output its error against Megatron-LM's float64 answer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh
status=0
for case_dir in examples/*/; do
  ./build/mlarope run "$case_dir" --backend reference --out "out/$(basename "$case_dir")" || status=$?
done
echo "main: outputs written under out/"
exit $status
