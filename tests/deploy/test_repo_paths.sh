#!/usr/bin/env bash
# test_repo_paths.sh SOURCE_DIR - the style gate's path check (.ci/check_paths.py):
# the repository passes it, and a copy with one planted line of each kind fails it,
# naming the line. A checker that passed everything would fail here.
set -euo pipefail
src=$1
check=$src/.ci/check_paths.py
python3 "$check" "$src"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
plant() { # plant FILE LINE: a one-file repository holding LINE must fail the check
    local repo=$tmp/r$RANDOM
    mkdir -p "$repo/$(dirname "$1")"
    printf '%s\n' "$2" >"$repo/$1"
    git -C "$repo" init -q
    if python3 "$check" "$repo" 2>"$repo.err"; then
        echo "FAIL: not caught: $1: $2" >&2
        fails=$((fails + 1))
    elif ! grep -q "^$1:1:" "$repo.err"; then
        echo "FAIL: caught without naming $1:1: $(cat "$repo.err")" >&2
        fails=$((fails + 1))
    else
        echo "ok: caught $1: $2"
    fi
}
keep() { # keep FILE LINE: a one-file repository holding LINE passes
    local repo=$tmp/k$RANDOM
    mkdir -p "$repo/$(dirname "$1")"
    printf '%s\n' "$2" >"$repo/$1"
    git -C "$repo" init -q
    if python3 "$check" "$repo" >/dev/null 2>"$repo.err"; then
        echo "ok: kept $1: $2"
    else
        echo "FAIL: refused: $1: $2: $(cat "$repo.err")" >&2
        fails=$((fails + 1))
    fi
}
up=..
plant tests/unit/t.c "        dir = \"$up/shared/fixtures\";"
plant tests/CMakeLists.txt 'get_filename_component(D "${CMAKE_SOURCE_DIR}/../data" ABSOLUTE)' # paths: data
plant tests/CMakeLists.txt 'set(D ${CMAKE_CURRENT_SOURCE_DIR}/../../elsewhere)' # paths: data
plant deploy/run.sh 'cd "$(dirname "$0")/../../other"' # paths: data
plant deploy/x.sh 'cat "$here/../../fixtures/nn/lenet5.layout"' # paths: data
plant tests/unit/t.c '#include "../../../outside.h"' # paths: data
plant CMakePresets.json '"binaryDir": "${sourceDir}/../build"' # paths: data
keep tests/unit/t.c '#include "../../device/nn/nn_int.h"'
keep deploy/run.sh 'ROOT=$(cd "$(dirname "$0")/.." && pwd)'
keep tests/CMakeLists.txt 'add_executable(c ${CMAKE_CURRENT_SOURCE_DIR}/../coordinator/main.c)'
keep tests/unit/t.c 'DATA=/usr/share/datasets/fashion-mnist; printf("...");'
keep tests/unit/t.c 'send("../../etc/passwd"); /* paths: data */'
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed" >&2; exit 1; }
echo "repo paths: all checks passed"
