#!/usr/bin/env bash
# bench/device-ab.sh — two revisions of cagra side by side in one run on the
# lent GPU machine, so that a refactoring's "no change in recall or speed" is
# measured on one machine (machines of one kind differ up to 2x): the tree
# in BASE (an earlier revision, e.g. `git archive REV | tar -x -C .device/base`)
# and the working tree, each built and installed in turn into the carried
# PostgreSQL, the cluster restarted, then bench/sql_bench.py on the same
# tables (c1m, 1,000,000 x 128; and HARD_N x 1,024 of the hard set unless
# HARD_N=0).  Rounds alternate A B A B so drift shows.
#
# usage (repository root, carrying .device): BASE=.device/base bash bench/device-ab.sh OUTDIR
#   env: ROUNDS=2  HARD_N=200000  CLIENTS=64  SECONDS_PER_RUN=8
#        SQL_BENCH_ARGS (default: --itopk 0 --devices auto --batch 10000 --batch-clients 8)
# Figures go to stdout and OUTDIR/ab-SET-REV-ROUND.txt.
set -uo pipefail
out=${1:-${OUT:-device-ab-out}}
base=${BASE:?BASE, the tree of the earlier revision}
rounds=${ROUNDS:-2}
hard_n=${HARD_N:-200000}
mkdir -p "$out"
source bench/device-lib.sh
jobs=$(nproc)

device_install "$out" || exit 1
pgc=$(command -v pg_config)
pkglib=$("$pgc" --pkglibdir)
lib_b=$(find build-device -name libcagra_gpu.so | head -1)
echo "== building BASE ($base)"
(cd "$base" && cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCAGRA_GPU=ON >"$out/base-cmake.log" 2>&1 &&
  cmake --build build-device -j "$jobs" --target cagra_gpu >>"$out/base-cmake.log" 2>&1 &&
  make -j "$jobs" with_llvm=no PG_CONFIG="$pgc" >"$out/base-make.log" 2>&1) ||
  { tail -20 "$out/base-cmake.log" "$out/base-make.log"; exit 1; }
lib_a=$(find "$base/build-device" -name libcagra_gpu.so | head -1)

opts="-k /tmp -c jit=off -c shared_preload_libraries=cagra -c shared_buffers=16GB -c max_connections=200 \
  -c max_parallel_maintenance_workers=15 -c max_worker_processes=32"
ctl() { su pguser -c "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} $(pg_config --bindir)/pg_ctl -D /tmp/pgdata -l /tmp/pg.log $*"; }
use() {  # use A|B: install that revision and restart the cluster (the tables stay)
  local dir=. lib=$lib_b
  [ "$1" = A ] && { dir=$base; lib=$lib_a; }
  ctl -m fast -w stop >/dev/null 2>&1
  make -C "$dir" with_llvm=no PG_CONFIG="$pgc" install >>"$out/install.log" 2>&1 || return 1
  install -m 755 "$lib" "$pkglib/libcagra_gpu.so"
  ctl -o "\"$opts\"" -w start >/dev/null || { tail -20 /tmp/pg.log; return 1; }
}

PG_UP_OPTS="-c shared_preload_libraries=cagra" source .device/pg-up.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
sets="c1m"
[ "$hard_n" -gt 0 ] && sets="c1m hard"
for set in $sets; do
  if [ "$set" = c1m ]; then data=$(device_dataset c1m); else data=$(device_dataset hard "$hard_n"); fi
  [ -n "$data" ] || exit 1
  load=""
  for r in $(seq 1 "$rounds"); do
    for rev in A B; do
      echo "== $set, revision $rev, round $r"
      use $rev || { echo "install of $rev failed"; exit 1; }
      python3 bench/sql_bench.py "$data" --clients "${CLIENTS:-64}" --seconds "${SECONDS_PER_RUN:-8}" \
        --exact-queries 10 --maintenance-work-mem 8GB $load \
        ${SQL_BENCH_ARGS:---itopk 0 --devices auto --batch 10000 --batch-clients 8} 2>&1 |
        tee "$out/ab-$set-$rev-$r.txt" | grep -E "CREATE INDEX|recall|q/s|queries" | head -20
      load=--skip-load
    done
  done
done
