#!/bin/bash
# test/check-lengths.sh — fails when a function in src/am is longer than 80
# lines or a file in src/ or gpu/ longer than 800 (docs/architecture.md,
# "Code style"): the access method is read by maintainers who come from
# PostgreSQL's own code, where a function fits a screen or two.  A
# function's lines run from its name to its closing brace, as
# universal-ctags reports them.
#
# Usage: bash test/check-lengths.sh [FILE...]: the functions of those files
# only (default: those of src/am, and every file's length).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

MAX_LINES=80
MAX_FILE_LINES=800

if ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
    echo "check-lengths: universal-ctags is needed for the functions' line ranges" >&2
    exit 1
fi
status=0
if [ $# -gt 0 ]; then
    files=("$@")
else
    mapfile -t files < <(find src/am -type f \( -name '*.cpp' -o -name '*.h' \) | sort)
    long_files=$(find src gpu -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 |
        xargs -0 wc -l | awk -v max="$MAX_FILE_LINES" '$2 != "total" && $1 > max { print $2 " is " $1 " lines (at most " max ")" }')
    if [ -n "$long_files" ]; then
        echo "$long_files" | sed 's/^/check-lengths: /' >&2
        status=1
    fi
fi

long=$(
    for file in "${files[@]}"; do
        ctags --fields=+ne -o - --language-force=C++ --kinds-C++=f "$file" 2>/dev/null
    done | awk -F'\t' -v max="$MAX_LINES" '
        {
            start = 0; end = 0
            for (i = 4; i <= NF; i++) {
                if ($i ~ /^line:/) start = substr($i, 6)
                else if ($i ~ /^end:/) end = substr($i, 5)
            }
            if (start > 0 && end - start + 1 > max)
                printf "%s:%d: %s is %d lines (at most %d)\n", $2, start, $1, end - start + 1, max
        }')
if [ -n "$long" ]; then
    echo "$long" | sed 's/^/check-lengths: /' >&2
    status=1
fi
[ $status = 0 ] && echo "check-lengths: no function over $MAX_LINES lines, no file over $MAX_FILE_LINES"
exit $status
