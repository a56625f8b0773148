#!/usr/bin/env bash
# bench/device-bench.sh — the SQL benchmark of issue 5 on the lent GPU machine:
# c1m through PostgreSQL with cagra preloaded (GPU worker), side by side:
# CREATE INDEX end to end, pgbench with CLIENTS clients running
# ORDER BY embedding <-> (query) LIMIT 10 with cagra.device = auto (the GPU
# worker) and cpu (the backends), the host's one-row-lookup ceiling, and
# cagra_search with batches of 10,000.  Run after test/device-sql.sh (which
# builds and installs the extension and libcagra_gpu.so), from the repository
# root, carrying .device:
#     bash test/device-sql.sh "$OUT"; bash bench/device-bench.sh "$OUT"
# Figures go to stdout and OUTDIR/sql-bench$TAG.txt.  PG_EXTRA adds server
# settings (e.g. "-c cagra.gpu_memory_limit=8000"), SQL_BENCH_ARGS replaces
# the sweep (default: --itopk 32,64 --devices auto,cpu --ceiling --batch 10000
# --batch-clients 8).
set -uo pipefail
out=${1:-${OUT:-device-bench-out}}
clients=${CLIENTS:-64}
seconds=${SECONDS_PER_RUN:-10}
mkdir -p "$out"
PG_UP_OPTS="-c shared_preload_libraries=cagra -c shared_buffers=16GB -c max_connections=200 \
  -c max_parallel_maintenance_workers=15 -c max_worker_processes=32 ${PG_EXTRA:-}" source .device/pg-up.sh || exit 1
source bench/device-lib.sh
data=$(device_dataset c1m) || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
echo "server settings: ${PG_EXTRA:-(defaults)}"
python3 bench/sql_bench.py "$data" --clients "$clients" --seconds "$seconds" --exact-queries 10 \
  --maintenance-work-mem 8GB ${SQL_BENCH_ARGS:---itopk 32,64 --devices auto,cpu --ceiling --batch 10000 --batch-clients 8} \
  2>&1 | tee "$out/sql-bench${TAG:-}.txt"
