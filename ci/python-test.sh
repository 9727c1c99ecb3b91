#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package as a user installs it: `pip install .` into a virtual environment over
# Debian's Python (its NumPy and pytest; pybind11 from Debian, scikit-build-core from PyPI),
# then the package's tests (python/tests) from outside the source tree's package folder; then
# the adapters: megatron-core's RoPE, and the Triton kernels of Megatron, Liger, flash-attn,
# FlagGems, Unsloth and ColossalAI under Triton's interpreter (mlarope.triton, the newest Triton
# it knows; the package's Triton tests also under the oldest), each release pinned by hash
# (pip's cache and adapters/releases.py's keep the downloads); then the findings and a sample
# of their release matrix. PYTHON_VENV (default build-python/venv) is where the environment
# goes.
# MLAROPE_SKIP_MEGATRON=1 leaves out megatron-core, MLAROPE_SKIP_TRITON=1 the Triton kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0
venv=$(realpath -m "${PYTHON_VENV:-build-python/venv}")
pip_install() { "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }
pip_download() { "$venv/bin/python" -m pip download --quiet --disable-pip-version-check "$@"; }
/usr/bin/python3 -m venv --system-site-packages "$venv"
echo "python: pip install . into $venv"
# The extension's objects through the compiler cache, as in ci/build.sh (MLAROPE_CCACHE=0 to go
# without): a fixed build folder in the tree, so that the paths are the same from any clone.
if [ "${MLAROPE_CCACHE:-1}" = 1 ] && command -v ccache >/dev/null; then
  CCACHE_BASEDIR=$PWD CMAKE_CXX_COMPILER_LAUNCHER=ccache pip_install . --config-settings=build-dir=build-python/cmake
else
  pip_install .
fi
"$venv/bin/python" -c "import mlarope, sys; print('python: mlarope from', mlarope.__file__)"
megatron=1 triton=1
if [[ "${MLAROPE_SKIP_MEGATRON:-0}" == 1 ]]; then
  megatron=0
  echo "python: megatron adapters SKIPPED (MLAROPE_SKIP_MEGATRON=1)"
fi
if [[ "${MLAROPE_SKIP_TRITON:-0}" == 1 ]]; then
  triton=0
  echo "python: Triton kernels under the interpreter SKIPPED (MLAROPE_SKIP_TRITON=1)"
fi
if ((megatron || triton)); then
  "$venv/bin/python" -c "import torch" || { echo "python: torch is missing: run ci/setup.sh (python3-torch)" >&2; exit 1; }
fi
if ((triton)); then
  pip_install --no-deps --require-hashes -r python/requirements-triton.txt
  echo "python: triton $("$venv/bin/python" -c 'import triton; print(triton.__version__)') (its interpreter)"
fi
pytest_in() {  # pytest_in FOLDER FILE...: tests from their folder
  local folder=$1
  shift
  (cd "$folder" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@")
}
if ((megatron)); then
  pip_install --no-deps --require-hashes -r adapters/megatron/requirements.txt
fi
if ((triton)); then
  pip_install --no-deps --require-hashes -r adapters/liger/requirements.txt
fi
# Two lanes, one core each (every test process is single-threaded; the lanes take about the
# same time): Megatron's Triton kernels, flash-attn's, FlagGems', Unsloth's and the findings in
# the background, logged and shown when both are done; the package's tests, the unfused
# Megatron, Liger and ColossalAI in the foreground.
lane_log=$(mktemp)
(
  status=0
  if ((megatron && triton)); then
    echo "python: Megatron's fused MLA kernels under the interpreter (test_megatron_triton.py)"
    pytest_in adapters/megatron test_megatron_triton.py || status=1
  fi
  if ((triton)); then
    echo "python: flash-attn's Triton rotary under the interpreter"
    pytest_in adapters/flash_attn test_flash_attn.py || status=1
    echo "python: FlagGems' Triton rotary embedding under the interpreter"
    pytest_in adapters/flag_gems test_flag_gems.py || status=1
    echo "python: Unsloth's Triton RoPE under the interpreter"
    pytest_in adapters/unsloth test_unsloth.py || status=1
    echo "python: the findings (their folders, docs/findings.md, a sample of the release matrix)"
    pytest_in adapters test_findings.py || status=1
  fi
  exit "$status"
) >"$lane_log" 2>&1 &
lane_pid=$!
others_status=0
echo "python: the package's tests (python/tests)"
pytest_in python/tests || others_status=$?
if ((megatron)); then
  echo "python: megatron-core's RoPE (test_megatron.py)"
  pytest_in adapters/megatron test_megatron.py || others_status=$?
fi
if ((triton)); then
  echo "python: liger-kernel's Triton RoPE under the interpreter"
  pytest_in adapters/liger test_liger.py || others_status=$?
  echo "python: ColossalAI's Triton rotary kernels under the interpreter"
  pytest_in adapters/colossalai test_colossalai.py || others_status=$?
  # The oldest Triton the shims know, in a second environment that shares this one's package:
  # the package's Triton tests (the adapters ran under the newest above).
  old_venv=$venv-triton-3.6.0
  /usr/bin/python3 -m venv --system-site-packages "$old_venv"
  "$old_venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
    --require-hashes -r python/requirements-triton-3.6.0.txt
  site=$("$venv/bin/python" -c 'import mlarope, os; print(os.path.dirname(mlarope.__file__))')
  old_site=$("$old_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ln -sfn "$site" "$old_site/mlarope"
  echo "python: the package's Triton tests under triton $("$old_venv/bin/python" -c 'import triton; print(triton.__version__)')"
  (cd python/tests && "$old_venv/bin/python" -m pytest -q -p no:cacheprovider \
    test_triton.py test_races.py test_gpu_float.py) || others_status=$?
fi
lane_status=0
wait "$lane_pid" || lane_status=$?
cat "$lane_log"
rm -f "$lane_log"
echo "python: finished after ${SECONDS} s"
exit $((lane_status || others_status))
