#!/usr/bin/env bash
# Lint the files changed since a base commit (or, with --all, every tracked file):
#   clang-format  --dry-run -Werror on C++/CUDA files (.h .cpp .cu .cuh), style .clang-format;
#   clang-tidy    on the changed .cpp files that build/compile_commands.json lists (.cu skipped:
#                 nvcc flags), checks .clang-tidy; in a header only the changed headers' findings
#                 count, and a changed header is checked through its own .cpp (foo.h: foo.cpp);
#   ruff check    on .py files, the pinned version below, configured in pyproject.toml;
#   whitespace    `git diff --check`: trailing whitespace and blank lines at end of file added
#                 since the base (Markdown left out: a trailing double space is a line break).
# Exit status: 0 clean, 1 a finding, 2 a usage error or a missing tool.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly RUFF_VERSION=0.17.5   # pinned: findings do not change under CI's feet
usage() {
  cat <<'EOF'
Usage: ci/lint.sh [--all] [--help]
       ci/lint.sh --ruff ARGS...   (run the pinned ruff, installing it first if needed)

Lints the files changed between a base commit and the working tree (untracked files that git
does not ignore included), or every tracked file with --all:
  clang-format --dry-run -Werror    .h .cpp .cu .cuh         (.clang-format)
  clang-tidy -p BUILD               changed .cpp in BUILD/compile_commands.json (.clang-tidy)
  ruff check                        .py                      (pyproject.toml [tool.ruff])
  git diff --check                  whitespace errors added since the base
Exits 1 on any finding, 2 on a usage error or a missing tool.

Environment:
  MLAROPE_LINT_BASE   base commit (default: the merge base with origin/main when the branch has
                      commits of its own, else HEAD~1: a clone of main checks its last commit)
  MLAROPE_LINT_BUILD  build folder with compile_commands.json (default: build)
  MLAROPE_LINT_VENV   where ruff is installed when it is not on PATH at the pinned version
                      (default: build-lint/venv, ignored by git like every build* folder)
  MLAROPE_LINT_JOBS   parallel clang-tidy runs (default: nproc)
  MLAROPE_LINT_SKIP   checks to leave out, comma-separated (e.g. clang-tidy)
  CLANG_FORMAT, CLANG_TIDY   the tools (default: clang-format, clang-tidy; version 14 is what
                      .clang-format was measured with, others may format differently)
Fix with: clang-format -i FILE; ci/lint.sh --ruff check --fix FILE; clang-tidy -p build FILE.
EOF
}

SECONDS=0
log() { echo "lint: $*"; }
die() { echo "lint: $*" >&2; exit 2; }

# The pinned ruff: on PATH if it is that version, else in a virtual environment over Debian's
# Python (as ci/python-test.sh installs packages), made once.
ruff_bin() {
  if [[ "$(ruff --version 2>/dev/null)" == "ruff $RUFF_VERSION" ]]; then command -v ruff; return; fi
  local venv
  venv=$(realpath -m "${MLAROPE_LINT_VENV:-build-lint/venv}")
  if [[ "$("$venv/bin/ruff" --version 2>/dev/null)" != "ruff $RUFF_VERSION" ]]; then
    local start=$SECONDS python=/usr/bin/python3
    [ -x "$python" ] || python=python3
    echo "lint: installing ruff==$RUFF_VERSION into $venv" >&2
    { "$python" -m venv "$venv" && "$venv/bin/python" -m pip install --quiet \
        --disable-pip-version-check "ruff==$RUFF_VERSION"; } >&2 ||
      die "could not install ruff==$RUFF_VERSION (pip needs PyPI; python3-venv from ci/setup.sh)"
    echo "lint: ruff installed in $((SECONDS - start)) s" >&2
  fi
  echo "$venv/bin/ruff"
}

all=0
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --all) all=1; shift ;;
  --ruff) shift; ruff=$(ruff_bin); exec "$ruff" "$@" ;;
esac
[ $# -eq 0 ] || { usage >&2; exit 2; }

clang_format=${CLANG_FORMAT:-clang-format}
clang_tidy=${CLANG_TIDY:-clang-tidy}
build=${MLAROPE_LINT_BUILD:-build}
jobs=${MLAROPE_LINT_JOBS:-$(nproc)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- Which files -------------------------------------------------------------------------------
empty_tree=$(git hash-object -t tree /dev/null)
if ((all)); then
  base=$empty_tree
  git ls-files >"$tmp/files"
  log "every tracked file ($(wc -l <"$tmp/files") files)"
else
  if [ -n "${MLAROPE_LINT_BASE:-}" ]; then
    base=$(git rev-parse --verify -q "$MLAROPE_LINT_BASE^{commit}") || die "no commit $MLAROPE_LINT_BASE"
  elif git rev-parse --verify -q origin/main >/dev/null &&
       [ "$(git merge-base HEAD origin/main)" != "$(git rev-parse HEAD)" ]; then
    base=$(git merge-base HEAD origin/main)
  elif git rev-parse --verify -q HEAD~1 >/dev/null; then
    base=$(git rev-parse HEAD~1)
  else
    base=$empty_tree
  fi
  { git diff --name-only --diff-filter=d "$base"; git ls-files --others --exclude-standard; } |
    sort -u >"$tmp/files"
  log "files changed since $(git rev-parse --short "$base" 2>/dev/null || echo "$base"): $(wc -l <"$tmp/files")"
fi
pick() { grep -E "$1" "$tmp/files" | while IFS= read -r f; do [ -f "$f" ] && echo "$f"; done || true; }
mapfile -t cxx < <(pick '\.(h|cpp|cu|cuh)$')
mapfile -t py < <(pick '\.py$')

declare -A result   # check -> "ok", "N findings", "skipped (why)"
failed=0
finding() { failed=1; result[$1]=$2; }
skip=",${MLAROPE_LINT_SKIP:-},"
for check in clang-format clang-tidy ruff whitespace; do
  [[ $skip == *",$check,"* ]] && result[$check]="skipped (MLAROPE_LINT_SKIP)"
done
wanted() { [ -z "${result[$1]:-}" ]; }

# --- clang-format ------------------------------------------------------------------------------
if ! wanted clang-format; then
  :
elif ((${#cxx[@]})); then
  command -v "$clang_format" >/dev/null || die "$clang_format not found (apt-get install clang-format)"
  version=$("$clang_format" --version | grep -oE 'version [0-9]+' | grep -oE '[0-9]+')
  [ "$version" = 14 ] || log "note: $clang_format is version $version; .clang-format was tuned on 14"
  start=$SECONDS bad=0 lines=0
  for f in "${cxx[@]}"; do
    if ! "$clang_format" --dry-run -Werror --style=file "$f" >/dev/null 2>"$tmp/cf"; then
      n=$(grep -c 'error: code should be clang-formatted' "$tmp/cf" || true)
      echo "clang-format: $f: $n places to reformat (clang-format -i $f); first changes:"
      "$clang_format" --style=file "$f" | diff -u "$f" - | sed -n '3,14p' | sed 's/^/    /' || true
      bad=$((bad + 1)) lines=$((lines + n))
    fi
  done
  log "clang-format: ${#cxx[@]} files checked in $((SECONDS - start)) s, $bad need formatting"
  if ((bad)); then finding clang-format "$bad files, $lines places"; else result[clang-format]=ok; fi
else
  result[clang-format]="nothing to check"
fi

# --- clang-tidy --------------------------------------------------------------------------------
db=$build/compile_commands.json
cpp=(); for f in "${cxx[@]}"; do [[ $f == *.cpp ]] && cpp+=("$f"); done
headers=(); for f in "${cxx[@]}"; do [[ $f == *.h || $f == *.cuh ]] && headers+=("$f"); done
if ! wanted clang-tidy; then
  :
elif ((${#cpp[@]} + ${#headers[@]} == 0)); then
  result[clang-tidy]="nothing to check"
elif [ ! -f "$db" ]; then
  result[clang-tidy]="skipped: no $db (configure first: bash ci/build.sh)"
else
  command -v "$clang_tidy" >/dev/null || die "$clang_tidy not found (apt-get install clang-tidy)"
  root=$(pwd -P)
  # The .cpp files the compilation database lists, relative to the root.
  grep -oE '"file": *"[^"]*\.cpp"' "$db" | sed -E 's/.*"([^"]*)"$/\1/; s#^'"$root"'/##' | sort -u >"$tmp/db"
  units=()
  for f in "${cpp[@]}"; do
    if grep -qxF "$f" "$tmp/db"; then units+=("$f"); else log "clang-tidy: $f is not in $db, not checked"; fi
  done
  # A changed header is checked through its own .cpp when that one is not changed too.
  ((all)) && headers=()
  for h in "${headers[@]}"; do
    own=${h%.*}.cpp
    if ! grep -qxF "$own" "$tmp/db"; then
      log "clang-tidy: $h has no $own in $db: checked only through changed files that include it"
    elif [[ " ${units[*]} " != *" $own "* ]]; then
      units+=("$own")
    fi
  done
  if ((all)); then
    filter=()   # the repository's headers, as .clang-tidy has it
  else
    regex='^$'  # nothing, unless headers changed
    for h in "${headers[@]}"; do regex+="|^$(printf '%s' "$root/$h" | sed 's/[.[\*^$()+?{}|]/\\&/g')\$"; done
    filter=(--header-filter="$regex")
  fi
  if ((${#units[@]})); then
    start=$SECONDS
    log "clang-tidy: ${#units[@]} files, $jobs at a time: ${units[*]}"
    printf '%s\n' "${units[@]}" | xargs -d '\n' -P "$jobs" -I{} bash -c \
      'out=$0 tidy=$1 build=$2 f=$3; shift 3
       "$tidy" -p "$build" --quiet "$@" "$f" >"$out/${f//\//_}.out" 2>&1 || echo "$f" >>"$out/tidy-failed"' \
      "$tmp" "$clang_tidy" "$build" {} "${filter[@]}" || true
    # Each finding once (a header's is reported by every unit that includes it), with context.
    cat "$tmp"/*.out | grep -E '^[^ ].*:[0-9]+:[0-9]+: (warning|error): ' | sort -u >"$tmp/tidy" || true
    n=$(wc -l <"$tmp/tidy")
    if ((n)); then
      sed "s#^$root/##" "$tmp/tidy" | sed 's/^/clang-tidy: /'
      echo "clang-tidy: by check:"; sed -E 's/.*\[([^]]*)\]$/\1/' "$tmp/tidy" | sort | uniq -c | sort -rn | sed 's/^/    /'
    fi
    if [ -f "$tmp/tidy-failed" ] && ((n == 0)); then
      cat "$tmp"/*.out; n=$(wc -l <"$tmp/tidy-failed")
    fi
    log "clang-tidy: ${#units[@]} files checked in $((SECONDS - start)) s, $n findings"
    if ((n)); then finding clang-tidy "$n findings"; else result[clang-tidy]=ok; fi
  else
    result[clang-tidy]="nothing to check (no changed .cpp in $db)"
  fi
fi

# --- ruff --------------------------------------------------------------------------------------
if ! wanted ruff; then
  :
elif ((${#py[@]})); then
  ruff=$(ruff_bin)
  start=$SECONDS
  if "$ruff" check --force-exclude --output-format=concise --no-cache "${py[@]}" >"$tmp/ruff" 2>&1; then
    result[ruff]=ok
  else
    grep -vE '^Found [0-9]+ error|fixable with|^No fixes available' "$tmp/ruff" | sed 's/^/ruff: /'
    n=$(grep -cE '^[^ ].*:[0-9]+:[0-9]+: ' "$tmp/ruff" || true)
    ((n)) || n="a failure of ruff itself, no"
    echo "ruff: by rule:"; grep -oE ':[0-9]+:[0-9]+: [A-Z]+[0-9]+' "$tmp/ruff" | awk '{print $2}' |
      sort | uniq -c | sort -rn | sed 's/^/    /'
    finding ruff "$n findings (ci/lint.sh --ruff check --fix FILE fixes some)"
  fi
  log "ruff $RUFF_VERSION: ${#py[@]} files checked in $((SECONDS - start)) s"
else
  result[ruff]="nothing to check"
fi

# --- whitespace --------------------------------------------------------------------------------
if ! wanted whitespace; then
  :
elif git diff --check "$base" -- . ':(exclude)*.md' >"$tmp/ws" 2>&1; then
  result[whitespace]=ok
else
  sed 's/^/whitespace: /' "$tmp/ws" | grep -v '^whitespace: [+-]' || true
  finding whitespace "$(grep -cE '^[^+-].*:[0-9]+: ' "$tmp/ws" || true) places"
fi

# --- Summary -----------------------------------------------------------------------------------
echo "lint: summary after ${SECONDS} s"
for check in clang-format clang-tidy ruff whitespace; do
  printf 'lint:   %-13s %s\n' "$check" "${result[$check]:-?}"
done
if ((failed)); then echo "lint: FAILED"; exit 1; fi
echo "lint: passed"
