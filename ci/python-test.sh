#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python package as a user installs it: `pip install .` into a virtual environment over
# Debian's Python (its NumPy and pytest; pybind11 from Debian, scikit-build-core from PyPI),
# then the package's tests (python/tests) from outside the source tree's package folder.
# PYTHON_VENV (default build-python/venv) is where the environment goes.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0
venv=$(realpath -m "${PYTHON_VENV:-build-python/venv}")
/usr/bin/python3 -m venv --system-site-packages "$venv"
echo "python: pip install . into $venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check .
"$venv/bin/python" -c "import mlarope, sys; print('python: mlarope from', mlarope.__file__)"
(cd python/tests && "$venv/bin/python" -m pytest -q -p no:cacheprovider)
# megatron-core's RoPE through the adapters (adapters/megatron): needs Debian's python3-torch
# (ci/setup.sh) and the pinned wheel; MLAROPE_SKIP_MEGATRON=1 leaves them out, saying so.
if [[ "${MLAROPE_SKIP_MEGATRON:-0}" == 1 ]]; then
  echo "python: megatron adapters SKIPPED (MLAROPE_SKIP_MEGATRON=1)"
else
  "$venv/bin/python" -c "import torch" || { echo "python: torch is missing: run ci/setup.sh (python3-torch)" >&2; exit 1; }
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --require-hashes \
    -r adapters/megatron/requirements.txt
  (cd adapters/megatron && "$venv/bin/python" -m pytest -q -p no:cacheprovider test_megatron.py)
fi
echo "python: finished after ${SECONDS} s"
