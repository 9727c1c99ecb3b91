#!/usr/bin/env bash
# Pass when the code block after "<!-- minimal_plugin.cpp -->" in README equals FILE:
# readme_snippet.sh README FILE.
set -euo pipefail
readme=$1 file=$2
snippet=$(awk '/<!-- minimal_plugin.cpp -->/ {on = 1; next} on && /^```cpp$/ {inside = 1; next}
               inside && /^```$/ {exit} inside {print}' "$readme")
if [ -z "$snippet" ]; then echo "no <!-- minimal_plugin.cpp --> block in $readme"; exit 1; fi
if ! diff <(printf '%s\n' "$snippet") "$file"; then echo "README's copy differs from $file"; exit 1; fi
echo "README's copy equals $file"
