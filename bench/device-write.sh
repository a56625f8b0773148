#!/usr/bin/env bash
# bench/device-write.sh — the write path on the lent GPU machine: for each set of
# SETS, bench/write_bench.py (CREATE INDEX at several maintenance_work_mem values,
# inserts by 1, 4 and 16 sessions, recall after growing through inserts, churn
# with VACUUM), cagra (GPU worker and cagra.device = cpu) beside the real pgvector
# 0.8.0 HNSW m 16 in the same run and server.  pgvector is built with its own
# Makefile's flags (-march=native, as its users build it from source), or as
# Debian builds it with PGVECTOR_OWN_FLAGS=0.
#
# usage (repository root, carrying .device): bash bench/device-write.sh OUTDIR
#   env: SETS="d128 d768 hard1024"   N=100000 (rows of each set)
#        WRITE_ARGS                  more write_bench.py options (e.g. --methods cagra)
#        SKIP_BUILD=1                reuse the install of an earlier command on the same machine
# Sets: d128 is N x 128 (bench/gen.py defaults), d768 N x 768 of intrinsic
# dimension 64 in 1,024 clusters, hard1024 N x 1,024 of intrinsic dimension 100
# in 1,024 clusters.  Figures go to stdout and OUTDIR/write-SET.txt.
set -uo pipefail
out=${1:-${OUT:-device-write-out}}
mkdir -p "$out"
sets=${SETS:-d128 d768 hard1024}
n=${N:-100000}
source bench/device-lib.sh
export PGVECTOR_OWN_FLAGS=${PGVECTOR_OWN_FLAGS:-1}

device_install "$out" pgvector || exit 1
for set in $sets; do
  case $set in
    d128) args="128" ;;
    d768) args="768 --intrinsic 64 --clusters 1024" ;;
    hard1024) args="1024 --intrinsic 100 --clusters 1024" ;;
    *) echo "unknown set $set" >&2; exit 2 ;;
  esac
  [ -f "/tmp/w-$set-$n/gt.ivecs" ] || python3 bench/gen.py "/tmp/w-$set-$n" "$n" $args --jobs 8 >"$out/data-$set.log" 2>&1 &
done
wait
PG_UP_OPTS="-c shared_preload_libraries=cagra -c shared_buffers=24GB -c max_connections=300 \
  -c max_parallel_maintenance_workers=15 -c max_worker_processes=32 ${PG_EXTRA:-}" source .device/pg-up.sh || exit 1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
[ "$PGVECTOR_OWN_FLAGS" = 1 ] && echo "pgvector: its Makefile's flags (-march=native)" || echo "pgvector: Debian's flags"
for set in $sets; do
  echo "== $set"
  python3 bench/write_bench.py "/tmp/w-$set-$n" ${WRITE_ARGS:-} 2>&1 | tee "$out/write-$set.txt"
done
