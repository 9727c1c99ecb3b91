#!/usr/bin/env bash
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
echo "python: finished after ${SECONDS} s"
