#!/bin/bash
# test/check-function-length.sh — fails when a function in src/am is longer
# than 80 lines (docs/architecture.md, "Code style"): the access method is
# read by maintainers who come from PostgreSQL's own code, where a function
# fits a screen or two.  A function's lines run from its name to its closing
# brace, as universal-ctags reports them.
#
# Usage: bash test/check-function-length.sh [FILE...] (default: src/am).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

MAX_LINES=80

if ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
    echo "check-function-length: universal-ctags is needed for the functions' line ranges" >&2
    exit 1
fi
if [ $# -gt 0 ]; then
    files=("$@")
else
    mapfile -t files < <(find src/am -type f \( -name '*.cpp' -o -name '*.h' \) | sort)
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
    echo "$long" | sed 's/^/check-function-length: /' >&2
    exit 1
fi
echo "check-function-length: no function is over $MAX_LINES lines"
