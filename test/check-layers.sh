#!/bin/bash
# test/check-layers.sh — fails when an #include crosses the layers of
# docs/architecture.md the wrong way, or files include each other in a
# circle.
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

[ $status = 0 ] && echo "check-layers: every include follows docs/architecture.md"
exit $status
