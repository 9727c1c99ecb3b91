#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install the Debian packages mlarope builds with, if any is missing, and fetch the JUnit schema
# the output-format test validates against and the CUDA binary tools the SASS check reads the
# kernels with (once each, into a cache). Idempotent.
set -euo pipefail
packages=(cmake ninja-build g++ libeigen3-dev librapidcheck-dev libgtest-dev libgmock-dev
          libbenchmark-dev libcli11-dev nlohmann-json3-dev
          python3-dev python3-venv python3-pip python3-numpy python3-pytest pybind11-dev libdlpack-dev
          python3-torch python3-lxml python3-jsonschema clang-format clang-tidy ccache
          slurmctld slurmd slurm-client munge)  # a real single-node cluster: ci/slurm_test.sh
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
bash "$(dirname "$0")/fetch-junit-schema.sh" >/dev/null
bash "$(dirname "$0")/fetch-cuda-tools.sh" >/dev/null  # cuobjdump, nvdisasm: the SASS check
