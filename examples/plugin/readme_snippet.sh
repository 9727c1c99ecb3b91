#!/usr/bin/env bash
# Pass when the code block after the line "<!-- NAME -->" in README equals FILE:
# readme_snippet.sh README NAME FILE (NAME: the file's base name, e.g. minimal_plugin.cpp).
set -euo pipefail
readme=$1 name=$2 file=$3
snippet=$(awk -v marker="<!-- $name -->" '$0 == marker {on = 1; next}
               on && /^```[a-z]+$/ {inside = 1; next} inside && /^```$/ {exit} inside {print}' "$readme")
if [ -z "$snippet" ]; then echo "no <!-- $name --> block in $readme"; exit 1; fi
if ! diff <(printf '%s\n' "$snippet") "$file"; then echo "README's copy differs from $file"; exit 1; fi
echo "README's copy equals $file"
