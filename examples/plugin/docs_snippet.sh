#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Pass when the code block after the line "<!-- NAME -->" in PAGE equals FILE, so the example a
# page shows is the file CTest builds and fuzzes:
# docs_snippet.sh PAGE NAME FILE (NAME: the file's base name, e.g. minimal_plugin.cpp).
set -euo pipefail
page=$1 name=$2 file=$3
snippet=$(awk -v marker="<!-- $name -->" '$0 == marker {on = 1; next}
               on && /^```[a-z]+$/ {inside = 1; next} inside && /^```$/ {exit} inside {print}' "$page")
if [ -z "$snippet" ]; then echo "no <!-- $name --> block in $page"; exit 1; fi
if ! diff <(printf '%s\n' "$snippet") "$file"; then echo "the copy in $page differs from $file"; exit 1; fi
echo "the copy in $page equals $file"
