#!/bin/bash
# test/check-layers.sh — fails when an #include crosses the layers of
# docs/architecture.md the wrong way, when files include each other in a
# circle, or when a header declares what a source of another name defines.
# Needs ctags (universal-ctags) for the last.
#
# Each folder may include (with #include "folder/...", or a file of its own
# folder) only the folders listed for it below; anything else, any cycle
# between folders and any circle of includes between files is an error.  PostgreSQL headers are allowed only
# where the table says so (pg), CUDA headers only in gpu/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

# folder: folders it may include ("pg": PostgreSQL headers allowed)
declare -A ALLOWED=(
    [src/core]=""
    [gpu]="core"
    [src/boundary]="core pg"
    [src/type]="core boundary pg"
    [src/protocol]="core pg"
    [src/client]="protocol boundary core pg"
    [src/worker]="protocol boundary core gpu pg"
    [src/am]="client protocol boundary type core pg"
    [src]="am protocol boundary core pg"
    [test/core]="core"
    [test/gpu]="core gpu"
    [bench]="core gpu"
)

# A folder's short name as it appears in include paths.
short() { case $1 in src) echo src ;; src/*) echo "${1#src/}" ;; test/*) echo "$1" ;; *) echo "$1" ;; esac; }

# PostgreSQL headers: the ones the extension uses, by their top folder or name.
PG_HEADER='^(postgres|fmgr|funcapi|miscadmin|pgstat|access|catalog|commands|common|datatype|executor|lib|libpq|nodes|optimizer|port|postmaster|storage|tcop|utils)(\.h|/)'

status=0
complain() { echo "check-layers: $*" >&2; status=1; }

for dir in "${!ALLOWED[@]}"; do
    allowed=" ${ALLOWED[$dir]} "
    self=$(short "$dir")
    maxdepth=1
    while IFS= read -r file; do
        while IFS= read -r inc; do
            [ -z "$inc" ] && continue
            case $inc in
                */*) target=${inc%%/*} ;;
                *) target="" ;;
            esac
            if [[ $inc =~ $PG_HEADER ]]; then
                [[ $allowed == *" pg "* ]] || complain "$file includes PostgreSQL header $inc"
                continue
            fi
            if [[ $inc == ../* ]]; then
                complain "$file includes $inc by a relative path"
                continue
            fi
            if [ -z "$target" ] || [ "$target" = "$self" ] || [ -e "$(dirname "$file")/$inc" ]; then
                continue    # a file of its own folder
            fi
            [[ $allowed == *" $target "* ]] || complain "$file ($dir) includes $inc: $dir may include only:${ALLOWED[$dir]:- nothing}"
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
        if [ "$dir" != gpu ] && [ "$dir" != test/gpu ] && [ "$dir" != bench ] &&
           grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](cuda|cub/|thrust/|cuda_)' "$file"; then
            complain "$file includes a CUDA header outside gpu/"
        fi
    done < <(find "$dir" -maxdepth "$maxdepth" -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
done

# The table itself must have no cycle (a layer that includes one that
# includes it back).
declare -A NAME=([core]=src/core [gpu]=gpu [boundary]=src/boundary [type]=src/type [protocol]=src/protocol
                 [client]=src/client [worker]=src/worker [am]=src/am)
reaches() {  # reaches FROM TO [seen...]: does FROM reach TO through the table?
    local from=$1 to=$2 dep
    for dep in ${ALLOWED[${NAME[$from]:-$from}]}; do
        [ "$dep" = pg ] && continue
        [ "$dep" = "$to" ] && return 0
        reaches "$dep" "$to" && return 0
    done
    return 1
}
for short_name in "${!NAME[@]}"; do
    reaches "$short_name" "$short_name" && complain "the layer table has a cycle through $short_name"
done

# No circle of files either: a source and its header count as one file
# (their path without the extension), and one includes another when its
# source or its header does.  A circle means neither can be read, tested or
# replaced without the other.
module() { echo "${1%.*}"; }
resolve() {  # resolve FILE INCLUDE: the included file's path, or nothing
    local dir; dir=$(dirname "$1")
    if [ -e "$dir/$2" ]; then echo "$dir/$2"
    elif [ -e "src/$2" ]; then echo "src/$2"
    elif [ -e "$2" ]; then echo "$2"
    fi
}
edges=$(
    find src gpu -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort |
    while IFS= read -r file; do
        from=$(module "$file")
        while IFS= read -r inc; do
            target=$(resolve "$file" "$inc")
            [ -z "$target" ] && continue
            to=$(module "${target#./}")
            [ "$to" != "$from" ] && echo "$from $to"
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
    done | sort -u)
if ! loop=$(printf '%s\n' "$edges" | tsort 2>&1 >/dev/null); then
    complain "a circle of #includes between files: $(printf '%s\n' "$loop" | sed -n 's/^tsort: \([^:]*\)$/\1/p' | tr '\n' ' ')"
fi

# Every header is named after the source that defines what it declares: a
# function declared in folder/x.h (or .cuh) and defined, not static, in a
# source of the same folder is defined in folder/x.cpp (or .cu), or in the
# header itself (x_impl.h: its templates).  Only a folder's interface
# header, named after the folder (client/client.h, protocol/protocol.h,
# am/cagra_am.h, gpu/cagra_gpu.h), declares for several sources.
if ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
    complain "universal-ctags is needed to check which source defines what a header declares"
fi
misnamed=$(
    for dir in "${!ALLOWED[@]}"; do
        [[ $dir == src/* || $dir == gpu ]] || continue
        folder=${dir##*/}
        find "$dir" -maxdepth 1 -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort |
            ctags --output-format=u-ctags --fields=+KzsS -f - --language-force=C++ --kinds-C++=pf -L - 2>/dev/null |
            awk -F'\t' -v folder="$folder" '
                function base(path) { sub(/.*\//, "", path); sub(/\.[^.]*$/, "", path); sub(/_impl$/, "", path); return path }
                {
                    kind = ""; scoped = 0; local = 0
                    for (i = 4; i <= NF; i++) {
                        if ($i ~ /^kind:/) kind = substr($i, 6)
                        else if ($i ~ /^(class|struct|union|function|enum):/) scoped = 1
                        else if ($i == "file:") local = 1
                    }
                    if (scoped || $1 ~ /^__anon/) next
                    if (kind == "prototype" && $2 ~ /\.(h|cuh)$/) {
                        b = base($2)
                        if (b != folder && b != "cagra_" folder) declared[$1] = declared[$1] " " $2
                    } else if (kind == "function" && !local) {
                        defined[$1] = defined[$1] " " $2
                        defined_in[$1, base($2)] = 1
                    }
                }
                END {
                    for (name in declared) {
                        if (!(name in defined)) continue
                        n = split(declared[name], headers, " ")
                        for (i = 1; i <= n; i++)
                            if (!((name, base(headers[i])) in defined_in))
                                print headers[i] " declares " name ", defined in" defined[name]
                    }
                }'
    done | sort -u)
if [ -n "$misnamed" ]; then
    while IFS= read -r line; do
        complain "$line: a header declares only what the source of its name defines"
    done <<< "$misnamed"
fi

[ $status = 0 ] && echo "check-layers: every include follows docs/architecture.md"
exit $status
