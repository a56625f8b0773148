#!/usr/bin/env bash
# bench/device-filter.sh — issue 16's filtered-search benchmark on the lent
# GPU machine (bench/filter_bench.py): filters keeping 50%, 10%, 1%, 0.1% and
# 0.01% of the rows, 64 pgbench clients, cagra with the GPU worker (default
# settings) side by side with the real pgvector 0.8.0 HNSW (built there from
# .device/pgvector/pgvector_0.8.0.orig.tar.gz) with hnsw.iterative_scan off,
# relaxed_order and strict_order at ef_search 40 and 200, and exact search of
# the filtered rows.  Run from the repository root, carrying .device:
#     bash bench/device-filter.sh "$OUT"                                 # c1m
#     FILTER_SET=hard HARD_N=300000 bash bench/device-filter.sh "$OUT"   # hard 1,024-dimension set
# About 6 minutes each: the builds (SKIP_BUILD=1 skips the extension's when
# an earlier command on the same warm machine did it), the set made once
# (/tmp/c1m, /tmp/hardN), pgvector's HNSW build with 15 workers (about 60 s
# on c1m), 40 pgbench runs of SECONDS_PER_RUN (4) s.  CLIENTS (64), DATA
# (another bench/gen.py set); FILTER_BENCH_ARGS adds options of
# bench/filter_bench.py (later ones win).  Figures go to stdout and
# OUTDIR/filter-c1m.txt (filter-hardN.txt).
set -uo pipefail
out=${1:-${OUT:-device-filter-out}}
mkdir -p "$out"
set=${FILTER_SET:-c1m}
source bench/device-lib.sh
device_install "$out" pgvector || exit 1
case $set in
  c1m) data=${DATA:-$(device_dataset c1m)} || exit 1 ;;
  hard) data=${DATA:-$(device_dataset hard "${HARD_N:-300000}")} || exit 1 ;;
  *) echo "FILTER_SET is c1m or hard" >&2; exit 2 ;;
esac
PG_UP_OPTS="-c shared_preload_libraries=cagra -c shared_buffers=24GB -c max_connections=200 \
  -c max_parallel_maintenance_workers=15 -c max_worker_processes=32 ${PG_EXTRA:-}" source .device/pg-up.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
python3 bench/filter_bench.py "$data" --clients "${CLIENTS:-64}" --seconds "${SECONDS_PER_RUN:-4}" \
  --maintenance-work-mem 16GB ${FILTER_BENCH_ARGS:-} 2>&1 | tee "$out/filter-$(basename "$data").txt"
