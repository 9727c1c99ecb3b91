#!/usr/bin/env bash
# Run HERE (a machine with Debian's package mirror): download the Debian packages the build
# needs into .gpu-deps/debs, for a GPU machine that has the CUDA toolkit but no network.
# ci/gpu-check.sh unpacks them there into a private prefix. .gpu-deps is git-ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .gpu-deps/debs
cd .gpu-deps/debs
apt-get update -qq || true
apt-get download libeigen3-dev librapidcheck-dev libgtest-dev libgmock-dev libbenchmark-dev \
  libbenchmark1debian libcli11-dev nlohmann-json3-dev
ls -1 "$PWD"
