#!/bin/bash
# .ci/install-deps.sh — install the Debian 12 packages that building and
# testing cagra need, when some are missing (as root; apt-get).
set -euo pipefail

packages=(
    build-essential cmake git         # compilers, CMake/CTest
    postgresql-15                     # server, psql, pg_ctl, initdb (its postgresql-client-15: pg_isolation_regress, pgbench)
    postgresql-server-dev-15          # PGXS, server headers, pg_regress, TAP modules
    libgtest-dev                      # GoogleTest for the core tests
    libipc-run-perl                   # IPC::Run, needed by PostgreSQL::Test::Cluster
    libhnswlib-dev                    # hnswlib headers (reference in core tests/benchmarks)
    python3-numpy                     # data set generator of the benchmarks
    universal-ctags                   # test/check-layers.sh: which source defines what a header declares
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all packages present"
elif [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages (${missing[*]}); run this script as root" >&2
    exit 1
else
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

# The real pgvector 0.8.0 beside cagra (sql/pgvector.sql): Debian 13's source
# package, fetched through a sources list of its own (the system's apt
# configuration is left alone) and built against PostgreSQL 15 with PGXS.
pg_config=${PG_CONFIG:-pg_config}
if [ ! -f "$("$pg_config" --sharedir)/extension/vector.control" ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: pgvector missing; run this script as root" >&2
        exit 1
    fi
    work=$(mktemp -d /tmp/pgvector-src.XXXXXX)
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        >"$work/trixie-src.sources"
    mkdir -p "$work/lists/partial"
    apt_src=(-o Dir::Etc::SourceList="$work/trixie-src.sources" -o Dir::Etc::SourceParts=/nonexistent
             -o Dir::State::Lists="$work/lists")
    echo "install-deps: building pgvector 0.8.0 from Debian's source package"
    step() { "$@" >>"$work/log" 2>&1 || { tail -30 "$work/log"; echo "install-deps: pgvector: $1 failed" >&2; exit 1; }; }
    step apt-get "${apt_src[@]}" update
    (cd "$work" && step apt-get "${apt_src[@]}" source --download-only pgvector=0.8.0-1)
    step tar -xzf "$work"/pgvector_0.8.0.orig.tar.gz -C "$work"
    # OPTFLAGS="": no -march=native, so the library runs on any x86-64 host
    step make -C "$work"/pgvector-0.8.0 -j2 PG_CONFIG="$pg_config" OPTFLAGS="" with_llvm=no
    step make -C "$work"/pgvector-0.8.0 PG_CONFIG="$pg_config" OPTFLAGS="" with_llvm=no install
    rm -rf "$work"
fi
