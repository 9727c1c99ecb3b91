# SPDX-License-Identifier: Apache-2.0
# Sourced by ci/gpu-check.sh: the step runner and the steps. A step is a function run in a
# child bash under `timeout` (so one hang cannot eat the budget); its output is its log, and
# it ends with one line that says what it found (the summary's last column).
# Uses the variables of gpu-check.sh: build, out, logs, jobs, dry_run, budget, fuzz_seconds.

# ---- The runner ---------------------------------------------------------------------------------

# One line of summary.txt: NAME STATUS SECONDS LAST-LINE.
record() {
  printf '%-15s %-18s %5ss  %s\n' "$1" "$2" "$3" "$4" >>"$out/summary.txt"
}

# The last non-empty line of a log (the updating line of a progress display included), shortened.
last_line() {
  tr '\r' '\n' <"$1" | grep -v '^[[:space:]]*$' | tail -n 1 | cut -c1-110
}

# The logs, JSON and report so far, as $out/gpu-check.tar.gz (after every step, so that a run
# cut short still brings back what it did). At most ten fuzz failure directories go in.
bundle() {
  tar -czf "$out/gpu-check.tar.gz.part" -C "$(dirname "$logs")" \
      --exclude='failures/case_0000[1-9]?' --exclude='failures/case_000[1-9]??*' "$(basename "$logs")" &&
    mv "$out/gpu-check.tar.gz.part" "$out/gpu-check.tar.gz"
}

# run_step NAME LIMIT FUNCTION [ARGS]: FUNCTION under `timeout`, at most LIMIT seconds and at
# most what is left of the budget; output in $logs/NAME.log; one summary line. Returns its status.
run_step() {
  local name=$1 limit=$2; shift 2
  local start=$SECONDS left=$((budget - SECONDS)) rc status
  if [ -n "${GPU_CHECK_STEPS:-}" ] && [[ " configure build $GPU_CHECK_STEPS " != *" $name "* ]]; then
    record "$name" "skipped" 0 "not in GPU_CHECK_STEPS"
    return 0
  fi
  ((limit > left)) && limit=$left
  if ((limit < 10)); then
    record "$name" "NOT RUN" 0 "no time left of GPU_CHECK_BUDGET=${budget}s"
    failed=1
    return 1
  fi
  echo "gpu-check: $name (at most ${limit}s)"
  timeout -k 10 "$limit" bash -c '"$@"' "$name" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124 | 137) status="TIMEOUT ${limit}s"; failed=1 ;;
    *) status="FAILED rc=$rc"; failed=1 ;;
  esac
  record "$name" "$status" $((SECONDS - start)) "$(last_line "$logs/$name.log")"
  bundle
  return $rc
}

# device_step NAME LIMIT FUNCTION [ARGS]: run_step on the GPU machine; skipped in a dry run.
device_step() {
  if ((dry_run)); then
    record "$1" "skipped (dry run)" 0 "needs a CUDA device"
    return 0
  fi
  run_step "$@"
}

# The summary on the terminal and the final tarball.
finish() {
  record total "$( ((failed)) && echo FAILED || echo ok)" "$SECONDS" \
    "$( ((dry_run)) && echo "dry run, " )${jobs} cores; logs, JSON and report in gpu-check.tar.gz"
  bundle
  echo
  echo "gpu-check: $out/summary.txt and $out/gpu-check.tar.gz"
  cat "$out/summary.txt"
}

# ---- Helpers for the steps ----------------------------------------------------------------------

# Fail the step with a message.
fail() { echo "$*"; return 1; }

# The number N of "[  LABEL ] N test" in a GoogleTest log, 0 when absent.
gtest_count() {
  local n
  n=$(grep -oE "^\[  $2 *\] [0-9]+ test" "$1" | grep -oE '[0-9]+' | tail -n 1)
  echo "${n:-0}"
}

# A GoogleTest binary whose tests must all run and pass: BINARY LOG [ARGS]. Skips are failures.
all_must_pass() {
  local binary=$1 log=$2; shift 2
  "$binary" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} passed skipped
  passed=$(gtest_count "$log" PASSED) skipped=$(gtest_count "$log" SKIPPED)
  ((rc == 0)) || fail "$(basename "$binary"): failed (rc $rc)" || return 1
  ((skipped == 0)) || fail "$(basename "$binary"): $skipped tests skipped (a skip is not a pass)" || return 1
  ((passed > 0)) || fail "$(basename "$binary"): no test ran" || return 1
  echo "$(basename "$binary"): $passed tests passed"
}

# The cases run under compute-sanitizer: the two examples and the first Megatron case of each
# op and layout (sbhd/thd): every kernel family on small inputs.
sanitizer_cases() {
  local c key seen=" "
  for c in examples/*/ "$MLAROPE_CASES_DIR"/case_*/; do
    [ -f "$c/case.json" ] || continue
    key=$(grep -oE '"(op|layout)": *"[a-z_]+"' "$c/case.json" | tr -d ' "' | sort | paste -sd,)
    case $c in examples/*) ;; *) [[ $seen == *" $key "* ]] && continue ;; esac
    seen+="$key "
    echo "${c%/}"
  done
}

# The production kernel sources that use shared memory or block barriers.
phased_kernel_sources() {
  grep -lE 'run_phases<|__syncthreads|__shared__' cuda/device/*.cu cuda/device/*.cuh 2>/dev/null
}

# ---- The steps ----------------------------------------------------------------------------------

# Configure for sm_90 with the prefix-only search of gpu-prefix.sh, then prove that each
# package's config file came from the prefix.
step_configure() {
  source ci/gpu-prefix.sh
  local nvcc dirs
  nvcc=$(find_tool nvcc) || fail "no nvcc on PATH, in /usr/local/cuda/bin or in \$CUDA_HOME/bin" || return 1
  # librt: part of the C library; with the system paths off FindCUDAToolkit cannot find it.
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAROPE_CUDA=ON -DMLAROPE_TESTS=ON \
        -DMLAROPE_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc" \
        -DCUDAToolkit_rt_LIBRARY=rt "${prefix_only[@]}" || return 1
  dirs=$(grep -E '^(Eigen3|nlohmann_json|CLI11|GTest|rapidcheck|benchmark)_DIR:PATH=' "$build/CMakeCache.txt")
  echo "$dirs"
  [ "$(grep -c . <<<"$dirs")" -eq 6 ] || fail "configure: not every package was found" || return 1
  ! grep -v "=$gpu_prefix/" <<<"$dirs" || fail "configure: packages found outside $gpu_prefix" || return 1
  echo "configure: 6 packages from .gpu-deps/prefix; $("$nvcc" --version | grep -oE 'release [0-9.]+'), sm_90"
}

# Build everything; keep ptxas's register, spill and local-memory lines.
step_build() {
  cmake --build "$build" -j "$jobs" || return 1
  cp "$build/ptxas.txt" "$logs/ptxas.txt" || fail "build: no $build/ptxas.txt (cmake/collect_ptxas.cmake)" || return 1
  local kernels spilling
  kernels=$(grep -c 'Compiling entry function' "$logs/ptxas.txt")
  spilling=$(grep -cE '[1-9][0-9]* bytes spill (stores|loads)' "$logs/ptxas.txt")
  echo "build: ok, $kernels sm_90 kernel entries compiled, $spilling with spills (ptxas.txt)"
}

# The GPU: nvidia-smi's view of it, and one case on the CUDA backend.
step_device() {
  local smi
  smi=$(find_tool nvidia-smi) && "$smi"
  "$build/mlarope" run examples/mla_rope_sbhd_f16 --backend cuda --out "$build/device-probe" || return 1
  echo "device: ${smi:+$("$smi" -L | head -n 1 | cut -c1-70); }the CUDA backend runs an example case"
}

# Every CTest test. The CUDA instances say "no CUDA device" when they skip: on the GPU that
# must never happen, in a dry run it must.
step_ctest() {
  # The tests of tensors past 2^31 elements take tens of GB of device memory each: they run
  # alone, after the others (run among 16 others on an H200, other tests' cudaMalloc failed).
  local rc=0 total=0 n skipped no_device
  ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 150 -E LargeBackendTest \
    --output-junit "$logs/ctest.xml" || rc=1
  ctest --test-dir "$build" --output-on-failure --timeout 300 -R LargeBackendTest \
    --output-junit "$logs/ctest-large.xml" || rc=1
  for n in $(grep -oE 'tests failed out of [0-9]+' "$logs/ctest.log" | grep -oE '[0-9]+$'); do total=$((total + n)); done
  skipped=$(grep -c '(Skipped)' "$logs/ctest.log")
  no_device=$(cat "$logs/ctest.xml" "$logs/ctest-large.xml" 2>/dev/null | grep -c 'no CUDA device')
  ((rc == 0)) || fail "ctest: failed, see ctest.log" || return 1
  if ((dry_run)); then
    ((no_device > 0)) || fail "ctest: no CUDA instance skipped with its message" || return 1
  else
    ((no_device == 0)) || fail "ctest: $no_device CUDA instances skipped for want of a device" || return 1
  fi
  echo "ctest: $total tests, $skipped skipped, of them $no_device for want of a CUDA device"
}

# The property binaries with MLAROPE_BACKEND=cuda, in parallel (host and a quarter of the
# cases in a dry run: the CTest run above already had them all on the host).
step_properties() {
  local backend=cuda scale=${MLAROPE_PROPERTY_SCALE:-1} bin status=0 passed=0 skipped=0
  ((dry_run)) && { backend=host; scale=${MLAROPE_PROPERTY_SCALE:-0.25}; }
  for bin in "$build"/properties/*_props; do
    MLAROPE_BACKEND=$backend MLAROPE_PROPERTY_SCALE=$scale MLAROPE_FAILURE_DIR="$logs/property-failures" \
      "$bin" >"$logs/$(basename "$bin").log" 2>&1 &
  done
  for bin in "$build"/properties/*_props; do wait -n || status=1; done
  for bin in "$build"/properties/*_props; do
    local log=$logs/$(basename "$bin").log
    echo "== $(basename "$bin") (MLAROPE_BACKEND=$backend): $(gtest_count "$log" PASSED) passed, $(gtest_count "$log" SKIPPED) skipped"
    grep -E '^\[  (FAILED|SKIPPED) ' "$log"
    passed=$((passed + $(gtest_count "$log" PASSED))) skipped=$((skipped + $(gtest_count "$log" SKIPPED)))
  done
  ((status == 0)) || fail "properties ($backend): failures, see *_props.log" || return 1
  echo "properties (MLAROPE_BACKEND=$backend, scale $scale): $passed passed, $skipped skipped"
}

# A fuzz slice: every check of docs/architecture.md on random cases.
step_fuzz() {
  local backend=cuda
  ((dry_run)) && backend=host
  "$build/mlarope" fuzz --seconds "$fuzz_seconds" --backend $backend --jobs "$jobs" --seed 2024 \
    --out "$logs/fuzz" | tee "$logs/fuzz.out"
  local rc=${PIPESTATUS[0]} ran
  ran=$(grep -oE 'mlarope fuzz: [0-9]+ cases in [0-9.]+ s' "$logs/fuzz.out") ||
    fail "fuzz ($backend): did not run (rc $rc)" || return 1
  echo "$ran on $backend, $(grep -oE 'failing cases: [0-9]+' "$logs/fuzz.out")"
  return "$rc"
}

# megatron-core's fused MLA Triton kernels through adapters/megatron: the Python module built
# for the device's python3 (pybind11 from the prefix, no CUDA in it), Megatron's sources from
# .gpu-deps/python, torch and triton from the device. Failing cases are findings: their repro
# directories come back in the tarball (megatron-fused/failures).
step_megatron_fused() {
  source ci/gpu-prefix.sh  # gpu_deps, prefix_only (arrays do not pass through run_step's bash -c)
  local python rc
  python=$(command -v python3) || fail "megatron-fused: no python3" || return 1
  "$python" -c "import torch, triton; assert torch.cuda.is_available()" ||
    fail "megatron-fused: python3 lacks torch with CUDA, or triton" || return 1
  cmake -S . -B build-gpu-python -G Ninja -DCMAKE_BUILD_TYPE=Release -DMLAROPE_PYTHON=ON -DMLAROPE_CUDA=OFF \
        -DMLAROPE_TESTS=OFF -DMLAROPE_BENCH=OFF -DPython3_EXECUTABLE="$python" "${prefix_only[@]}" || return 1
  cmake --build build-gpu-python -j "$jobs" --target _mlarope || return 1
  # The fused kernels' findings, and case directories carried in .gpu-deps/replay, each in a
  # fresh process (a finding fails here; it is the record that it still holds).
  local replays=() case
  for case in adapters/megatron/findings/fused_*/{,*/}case.json; do
    [[ -e $case ]] && replays+=("$(dirname "$case")/")
  done
  compgen -G "$gpu_deps/replay/*/case.json" >/dev/null && replays+=("$gpu_deps"/replay/*/)
  CUDA_LAUNCH_BLOCKING=1 PYTHONPATH=$PWD/build-gpu-python/python:$gpu_deps/python "$python" \
    adapters/megatron/replay_fused.py "${replays[@]}" >"$logs/megatron-replay.out" 2>&1
  echo "megatron-fused: replayed ${#replays[@]} case directories (megatron-replay.out)"
  # Blocking launches: a kernel's fault is raised by its own call, whose case is the finding.
  CUDA_LAUNCH_BLOCKING=1 PYTHONPATH=$PWD/build-gpu-python/python:$gpu_deps/python "$python" \
    adapters/megatron/fuzz_megatron.py --backend fused --seconds "$fuzz_seconds" \
    --out "$logs/megatron-fused" | tee "$logs/megatron-fused.out"
  rc=${PIPESTATUS[0]}
  grep -oE 'mlarope fuzz: [0-9]+ cases in [0-9.]+ s' "$logs/megatron-fused.out" ||
    fail "megatron-fused: the fuzz did not run (rc $rc)" || return 1
  echo "megatron-fused: $(grep -oE 'supported: .* cases ran\)' "$logs/megatron-fused.out"), $(grep -oE 'failing cases: [0-9]+' "$logs/megatron-fused.out")"
  return "$rc"
}

# The Megatron cases (float64 answers) on every backend, from MLAROPE_CASES_DIR.
step_megatron_cases() {
  local filter='*' backends=3 read_from
  ((dry_run)) && { filter='*/reference:*/host'; backends=2; }
  all_must_pass "$build/harness/megatron_cases_test" "$logs/megatron-cases.out" --gtest_filter="$filter" || return 1
  read_from=$(grep -c "Megatron cases from $MLAROPE_CASES_DIR\$" "$logs/megatron-cases.out")
  ((read_from == backends)) || fail "megatron-cases: the cases were not read from $MLAROPE_CASES_DIR" || return 1
  echo "megatron-cases: $(grep -m1 -oE '[0-9]+ Megatron cases from .*' "$logs/megatron-cases.out"), $backends backends"
}

# CUDA graph capture and replay with new metadata and inputs, on the device.
step_graph_replay() {
  all_must_pass "$build/cuda/host_backend_test" "$logs/graph-replay.out" --gtest_filter='Backends/GraphBackendTest.*/cuda'
}

# compute-sanitizer TOOL over `mlarope run` of sanitizer_cases (memcheck with padding between
# allocations); memcheck also over the CUDA backend tests of rope and kv_split.
step_sanitize() {
  local tool=$1 sanitizer runs=0 bad=0 c args=()
  sanitizer=$(find_tool compute-sanitizer) ||
    fail "compute-sanitizer not on PATH, in /usr/local/cuda/bin or in \$CUDA_HOME/bin" || return 1
  [ "$tool" = memcheck ] && args=(--padding 32)
  for c in $(sanitizer_cases); do
    echo "== $tool: mlarope run $c --backend cuda"
    "$sanitizer" --tool "$tool" "${args[@]}" --error-exitcode 9 \
      "$build/mlarope" run "$c" --backend cuda --out "$build/sanitizer-out/$(basename "$c")" || bad=$((bad + 1))
    runs=$((runs + 1))
  done
  if [ "$tool" = memcheck ]; then
    echo "== memcheck: host_backend_test (rope and kv_split on cuda)"
    "$sanitizer" --tool memcheck "${args[@]}" --error-exitcode 9 "$build/cuda/host_backend_test" \
      --gtest_filter='Backends/Rope*.*/cuda:Backends/KvSplit*.*/cuda' || bad=$((bad + 1))
    runs=$((runs + 1))
  fi
  ((runs > 1)) || fail "$tool: no case found" || return 1
  ((bad == 0)) || fail "$tool: $bad of $runs runs with errors" || return 1
  echo "$tool: $runs runs, $(grep -c 'ERROR SUMMARY: 0 errors' "$logs/$tool.log") with 0 errors"
}

# racecheck / synccheck (TOOL) where there is shared memory or a block barrier: the phased test
# kernel (block_sum_cuda_test), and the cases where a production kernel has them (staged rope).
step_shared_memory() {
  local tool=$1 sanitizer phased c
  sanitizer=$(find_tool compute-sanitizer) ||
    fail "compute-sanitizer not on PATH, in /usr/local/cuda/bin or in \$CUDA_HOME/bin" || return 1
  phased=$(phased_kernel_sources | paste -sd' ')
  echo "production kernels with shared memory or barriers: ${phased:-none}"
  all_must_pass "$sanitizer" "$logs/$tool-block-sum.out" --tool "$tool" --error-exitcode 9 \
    "$build/cuda/block_sum_cuda_test" || return 1
  if [ -n "$phased" ]; then
    for c in $(sanitizer_cases); do
      "$sanitizer" --tool "$tool" --error-exitcode 9 "$build/mlarope" run "$c" --backend cuda \
        --out "$build/sanitizer-out/$(basename "$c")" || fail "$tool: errors in $c" || return 1
    done
  fi
  echo "$tool: 0 errors in block_sum_cuda_test (the phased test kernel)${phased:+ and the cases}; production kernels with shared memory or barriers: ${phased:-none}"
}

# The CUDA benchmarks, each measurement one CUDA graph replay, short; the copy-floor counters.
step_cuda_bench() {
  # One iteration is a measurement of many calls but reports the time of one (SetIterationTime),
  # so the minimum time is that of one call's share: 0.05 s here took 2-3 s per benchmark.
  "$build/cuda_bench" --graph --benchmark_min_time=0.002 \
    --benchmark_out="$logs/cuda_bench.json" --benchmark_out_format=json || return 1
  local fractions
  fractions=$(grep -oE '"floor_fraction": [0-9.e+-]+' "$logs/cuda_bench.json" | grep -oE '[0-9.e+-]+$' | sort -g)
  [ -n "$fractions" ] || fail "cuda-bench: no floor_fraction counter in cuda_bench.json" || return 1
  echo "cuda-bench (graph): $(grep -c . <<<"$fractions") ops, floor_fraction $(head -n 1 <<<"$fractions")..$(tail -n 1 <<<"$fractions")"
}

# The timing model's memory sweep (bench/memory_sweep.cpp: occupancy x loads in flight x the
# copy and in-place patterns), then the fit of the profile's constants to the calibration rows
# and the sweep together (printed, not written: cuda/host/devices/h200.json changes by hand,
# with `fit_timing_model --sweep sweep.json --write`).
step_sweep() {
  "$build/memory_sweep" --out "$logs/sweep.json" || return 1
  [ -s "$logs/sweep.json" ] || fail "sweep: memory_sweep wrote no sweep.json" || return 1
  "$build/bench/fit_timing_model" --sweep "$logs/sweep.json" || return 1
}

# Nsight Compute, one launch each: the slowest op (in-place rope) and out-of-place rope,
# DeepSeek-V3 bf16 T = 1K (achieved occupancy, DRAM throughput, the warps' stall reasons), and
# kv_split_backward at 16 heads, whose first warp splits into lanes that sum the heads and
# lanes that copy (the timing model does not see a warp's diverged paths: SourceCounters has
# the divergent branches).
step_ncu() {
  local ncu op shape kernel log
  ncu=$(find_tool ncu) || fail "ncu not on PATH, in /usr/local/cuda/bin or in \$CUDA_HOME/bin" || return 1
  while read -r op shape kernel; do
    log="$logs/ncu-$op-${shape//\//-}.txt"
    "$ncu" --kernel-name "regex:$kernel" --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --section SourceCounters \
      "$build/cuda_bench" --benchmark_filter="^$op/cuda/$shape" \
      --benchmark_min_time=0.001 >"$log" 2>&1 ||
      fail "ncu on $op $shape failed: $(tail -n 3 "$log")" || return 1
    echo "$op $shape:"
    grep -E 'DRAM Throughput|Achieved Occupancy|Duration|Divergent' "$log" | head -n 4
  done <<'EOF'
rope_inplace dsv3/sbhd/T1024/bf16 rope_kernel
rope dsv3/sbhd/T1024/bf16 rope_kernel
kv_split_backward small/sbhd/T1024/bf16 kv_split_backward_kernel
EOF
  echo "ncu: ncu-OP-SHAPE.txt (occupancy, DRAM throughput, stall reasons, divergent branches)"
}

# The Markdown and HTML report over the fuzz and benchmark JSON this run wrote.
step_report() {
  local inputs=()
  [ -f "$logs/fuzz/fuzz.json" ] && inputs+=("$logs/fuzz/fuzz.json")
  [ -f "$logs/cuda_bench.json" ] && inputs+=("$logs/cuda_bench.json")
  [ -f "$logs/megatron-fused/fuzz.json" ] && inputs+=("$logs/megatron-fused/fuzz.json")
  ((${#inputs[@]})) || fail "report: no fuzz.json or cuda_bench.json to report on" || return 1
  [ -s "$logs/ptxas.txt" ] && inputs+=("$logs/ptxas.txt")
  "$build/mlarope" report "${inputs[@]}" --out "$logs/report" || return 1
  echo "report: report/report.html and report/summary.md from ${#inputs[@]} JSON files"
}

export -f find_tool fail gtest_count all_must_pass sanitizer_cases phased_kernel_sources step_configure \
  step_build step_device step_ctest step_properties step_fuzz step_megatron_cases step_graph_replay \
  step_sanitize step_shared_memory step_cuda_bench step_megatron_fused step_report step_sweep \
  step_ncu
export build out logs jobs dry_run fuzz_seconds MLAROPE_CASES_DIR
