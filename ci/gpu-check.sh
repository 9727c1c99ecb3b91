#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU check, for a machine with an NVIDIA GPU and the CUDA toolkit but no network and none
# of our dependencies: they come from .gpu-deps (made here by ci/gpu-deps.sh and carried along).
# Run `bash ci/gpu-check.sh --help` for the steps, options and environment variables.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
Usage: bash ci/gpu-check.sh [--dry-run] [--help]

Builds mlarope for sm_90 with the CUDA backend and the benchmarks, finding its dependencies
only in .gpu-deps/prefix (bash ci/gpu-deps.sh makes it), then runs, each step under a timeout:
  device            nvidia-smi, and one example case on the CUDA backend
  ctest             every CTest test; the CUDA instances must run (none may skip for want of a device)
  cuda-bench        cuda_bench --graph (smoke set, short), with the copy-floor counters
  sweep             memory_sweep (occupancy x loads in flight x copy and in-place patterns) and
                    fit_timing_model --sweep: the timing model's constants refitted (printed)
  ncu               Nsight Compute on rope in and out of place (DeepSeek-V3 bf16, T = 1K) and
                    on kv_split_backward at 16 heads (bf16, T = 1K)
  megatron-fused    megatron-core's fused MLA Triton kernels fuzzed through adapters/megatron
                    (the Python module built for the device's python3; needs torch and triton)
  properties        the property binaries again with MLAROPE_BACKEND=cuda
  fuzz              mlarope fuzz --backend cuda for FUZZ_SECONDS
  megatron-cases    the Megatron cases (data/megatron) on the reference, host and cuda backends
  graph-replay      the CUDA graph capture and replay tests (GraphBackendTest.*/cuda)
  memcheck          compute-sanitizer memcheck --padding 32 over `mlarope run CASE --backend cuda`
                    (one case per op and layout) and the CUDA rope/kv_split backend tests
  initcheck         compute-sanitizer initcheck over the same cases
  racecheck         compute-sanitizer racecheck, and
  synccheck         synccheck, over block_sum_cuda_test and the cases: the kernels that use
                    shared memory or barriers (the staged in-place rope kernel)
  report            mlarope report over the fuzz and benchmark JSON
The measurements only a device gives (benchmarks, Megatron's Triton kernels) come right after
ctest, so that a run cut short by GPU_CHECK_BUDGET still has them.
Everything lands in OUT_DIR as two files: gpu-check.tar.gz (every log, the JSON, the report)
and summary.txt (one line per step: name, status, seconds, last line of its log). The exit
status is nonzero when a step failed or timed out. The whole run keeps to GPU_CHECK_BUDGET.

  --dry-run   for a machine without a GPU: configure and build the same binaries with the same
              prefix-only search, run what needs no device (ctest, where the CUDA instances must
              skip with a message; the property binaries on the host backend; a short host fuzz;
              the Megatron cases on reference and host; the report), and
              mark the device steps "skipped (dry run)"
  --help      this text

Environment:
  OUT_DIR           where the two files go (default: $OUT, else gpu-check-out)
  BUILD_DIR         the build folder (default: build-gpu; reused when present)
  FUZZ_SECONDS      seconds of fuzzing (default 20; 5 in a dry run)
  GPU_CHECK_STEPS   the steps to run, space separated (default: all; configure and build always run)
  GPU_CHECK_BUDGET  seconds for the whole run (default 460; 3600 in a dry run); a step gets at
                    most what is left, a step that would get under 10 s is not started
  MLAROPE_CASES_DIR the Megatron cases (default: data/megatron)
  MLAROPE_PROPERTY_SCALE  multiplies the property tests' case counts (default 1)
EOF
}

dry_run=0
for arg in "$@"; do
  case $arg in
    --dry-run) dry_run=1 ;;
    --help | -h) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

source ci/gpu-prefix.sh
[ -d "$gpu_prefix" ] || { echo "gpu-check: no $gpu_prefix: run bash ci/gpu-deps.sh first (and carry .gpu-deps)" >&2; exit 2; }
export MLAROPE_CASES_DIR=${MLAROPE_CASES_DIR:-$PWD/data/megatron}
build=${BUILD_DIR:-build-gpu}
out=${OUT_DIR:-${OUT:-gpu-check-out}}
logs=$PWD/$build/gpu-check          # the staging folder of the tarball
jobs=$(nproc)
if ((dry_run)); then budget=${GPU_CHECK_BUDGET:-3600}; fuzz_seconds=${FUZZ_SECONDS:-5}
else budget=${GPU_CHECK_BUDGET:-460}; fuzz_seconds=${FUZZ_SECONDS:-20}; fi
mkdir -p "$out" "$build" && out=$(cd "$out" && pwd)
rm -rf "$logs" "$out/summary.txt" "$out/gpu-check.tar.gz"
mkdir -p "$logs"
failed=0
source ci/gpu-steps.sh

# ---- Build ------------------------------------------------------------------------------------
# Configure: sm_90 only, benchmarks on, every package from the prefix (gpu-prefix.sh), and a
# check that each package's config file was taken from there.
run_step configure 120 step_configure || { finish; exit 1; }
# Build with every core; ptxas's register and spill lines go to ptxas.txt.
run_step build "$( ((dry_run)) && echo 2400 || echo 300)" step_build || { finish; exit 1; }

# ---- Tests ------------------------------------------------------------------------------------
# The device is there and the CUDA backend runs on it.
device_step device 60 step_device
# Every CTest test; on the GPU none may skip for want of a device, in a dry run they must.
run_step ctest 240 step_ctest
# What only a device measures come next, so that a short lease still gets them:
# The CUDA benchmarks, graph mode, smoke set.
device_step cuda-bench 120 step_cuda_bench
# The timing model's memory sweep and the refit it allows.
device_step sweep 90 step_sweep
# Nsight Compute on rope in and out of place, and on kv_split_backward at 16 heads.
device_step ncu 150 step_ncu
# Megatron's fused MLA Triton kernels, fuzzed through the adapter (findings: their repro dirs).
device_step megatron-fused $((fuzz_seconds + 150)) step_megatron_fused
# The property binaries with MLAROPE_BACKEND=cuda (host in a dry run, a quarter of the cases).
run_step properties 120 step_properties
# A fuzz slice on the CUDA backend (the host backend in a dry run).
run_step fuzz $((fuzz_seconds + 60)) step_fuzz
# The Megatron cases on every backend (reference and host in a dry run).
run_step megatron-cases 90 step_megatron_cases

# ---- Device-only steps ------------------------------------------------------------------------
# Real CUDA graph capture and replay.
device_step graph-replay 60 step_graph_replay
# compute-sanitizer memcheck and initcheck over a few cases and the CUDA backend tests.
device_step memcheck 120 step_sanitize memcheck
device_step initcheck 90 step_sanitize initcheck
# racecheck and synccheck where shared memory and barriers are.
device_step racecheck 60 step_shared_memory racecheck
device_step synccheck 60 step_shared_memory synccheck
# The report over what the steps wrote.
run_step report 60 step_report

finish
exit $((failed ? 1 : 0))
