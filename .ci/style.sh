#!/usr/bin/env bash
# Style gate: clang-format (the repo's .clang-format), banned functions, and
# nothing that names a folder outside the repository (.ci/check_paths.py), and
# the agent's files calling down their layers only (.ci/check_layers.py).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.c' '*.h' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
[ ${#files[@]} -gt 0 ] || { echo "style: no C sources"; exit 0; }
fail=0
if ! clang-format --dry-run --Werror "${files[@]}"; then
    echo "style: run clang-format -i on the files above" >&2
    fail=1
fi
# Banned: unbounded or non-reentrant string functions (STYLE.md).
if grep -nE '\b(sprintf|vsprintf|strcpy|strcat|strtok|gets|atoi)[[:space:]]*\(' "${files[@]}"; then
    echo "style: banned functions above (use snprintf, memcpy with lengths, strtol)" >&2
    fail=1
fi
python3 .ci/check_paths.py || fail=1
{ python3 .ci/check_layers.py --selftest && python3 .ci/check_layers.py; } || fail=1
[ $fail -eq 0 ] && echo "style: ${#files[@]} files ok"
exit $fail
