#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# cuobjdump and nvdisasm, for the SASS check of the kernels' batches of loads
# (ci/sass_batches.py, CTest `sass_batches`): the CUDA toolkit's nvcc here comes without them.
# NVIDIA's PyPI wheels of the two, pinned by hash, are downloaded once and their binaries kept
# in the cache; prints the folder that holds them.
#   MLAROPE_SCHEMA_CACHE  the cache (default ${XDG_CACHE_HOME:-~/.cache}/mlarope), as
#                         ci/fetch-junit-schema.sh
set -euo pipefail
cache=${MLAROPE_SCHEMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mlarope}
bin=$cache/cuda-tools/bin
if [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
  mkdir -p "$bin"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cat >"$tmp/req.txt" <<'REQ'
nvidia-cuda-cuobjdump==13.2.51 --hash=sha256:95c69d3ddf0c2c1f535ec44c3433a66aeee19f588d9d22f73356e20b25f12b50
nvidia-cuda-nvdisasm==13.5.37 --hash=sha256:d3fdbdd49fa53e2e4aacd3db8259d052bd2b049ececdcb69e92e083c6728e7ca
REQ
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary :all: \
    --platform manylinux2014_x86_64 --require-hashes -r "$tmp/req.txt" -d "$tmp" >&2
  for wheel in "$tmp"/*.whl; do
    python3 -m zipfile -e "$wheel" "$tmp/unpacked"
  done
  for tool in cuobjdump nvdisasm; do
    install -m 755 "$tmp/unpacked/nvidia/cu13/bin/$tool" "$bin/$tool.partial"
    mv "$bin/$tool.partial" "$bin/$tool"
  done
fi
echo "$bin"
