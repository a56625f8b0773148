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
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all packages present"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing packages (${missing[*]}); run this script as root" >&2
    exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
