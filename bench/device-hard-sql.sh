#!/usr/bin/env bash
# bench/device-hard-sql.sh — issue 12's SQL figure on the lent GPU machine: a
# hard set (bench/gen.py --intrinsic 100 --clusters 1024, 1,024 dimensions)
# through PostgreSQL with the GPU worker, side by side in one run with the
# real pgvector 0.8.0 HNSW (built there from .device/pgvector/
# pgvector_0.8.0.orig.tar.gz, Debian 13's source), 64 pgbench clients.
# Run from the repository root, carrying .device:
#     HARD_N=500000 bash bench/device-hard-sql.sh "$OUT"
# PGVECTOR=0 leaves pgvector out (cagra alone).
# Figures go to stdout and OUTDIR/hard-sql.txt.
set -uo pipefail
out=${1:-${OUT:-device-hard-sql-out}}
mkdir -p "$out"
n=${HARD_N:-500000}
clients=${CLIENTS:-64}
seconds=${SECONDS_PER_RUN:-8}

# the extension and libcagra_gpu.so, installed into the carried PostgreSQL, and pgvector
source bench/device-lib.sh
with=pgvector
[ "${PGVECTOR:-1}" = 0 ] && with=""
device_install "$out" $with || exit 1
data=$(device_dataset hard "$n") || exit 1
PG_UP_OPTS="-c shared_preload_libraries=cagra -c shared_buffers=24GB -c max_connections=200 \
  -c max_parallel_maintenance_workers=15 -c max_worker_processes=32 ${PG_EXTRA:-}" source .device/pg-up.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
python3 bench/sql_bench.py "$data" --clients "$clients" --seconds "$seconds" --exact-queries 5 \
  --maintenance-work-mem 16GB ${SQL_BENCH_ARGS:---itopk 32,64 --devices auto --hnsw-ef 40,100,200 --hnsw-m 16} \
  2>&1 | tee "$out/hard-sql.txt"
