#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The JUnit XML schema CI systems read, for the output-format test (ci/output_formats_test.py):
# Jenkins' junit-10.xsd (MIT), as pytest's source distribution ships it
# (testing/example_scripts/junit-10.xsd, against which pytest's own tests validate its JUnit
# output). pytest 8.3.4's sdist, pinned by hash, is downloaded once and the schema kept in
# the cache; prints the schema's path.
#   MLAROPE_SCHEMA_CACHE  where it is kept (default ${XDG_CACHE_HOME:-~/.cache}/mlarope)
set -euo pipefail
cache=${MLAROPE_SCHEMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mlarope}
dest=$cache/junit-10.xsd
if [ ! -s "$dest" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "pytest==8.3.4 --hash=sha256:965370d062bce11e73868e0335abac31b4d3de0e82f4007408d242b4f8610761" >"$tmp/req.txt"
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: --require-hashes \
    -r "$tmp/req.txt" -d "$tmp" >&2
  tar -xzf "$tmp/pytest-8.3.4.tar.gz" -C "$tmp" pytest-8.3.4/testing/example_scripts/junit-10.xsd
  mv "$tmp/pytest-8.3.4/testing/example_scripts/junit-10.xsd" "$dest.partial" && mv "$dest.partial" "$dest"
fi
echo "$dest"
