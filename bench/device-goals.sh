#!/usr/bin/env bash
# bench/device-goals.sh — issue 15's goals in one run on the lent GPU machine:
# cagra (GPU worker, server defaults) beside the real pgvector 0.8.0 HNSW
# (built there from .device/pgvector/pgvector_0.8.0.orig.tar.gz, Debian 13's
# source) and the host's one-row-lookup ceiling, at 1 client and at each of
# CLIENTS pgbench clients, plus cagra_search calls of 10,000 queries; on each
# set of SETS in turn (c1m: 1,000,000 x 128; hardN: N x 1,024 of intrinsic
# dimension 100 in 1,024 clusters).  All sets are made first, before any
# figure is taken, so no generator shares the cores with a measurement.
#
# usage (repository root, carrying .device): bash bench/device-goals.sh OUTDIR
#   env: SETS="c1m hard300000"  CLIENTS=64,256  SECONDS_PER_RUN=5
#        BIN=dir                prebuilt libcagra_gpu.so (same CUDA) instead of a build
#        SKIP_BUILD=1           reuse the install of an earlier command on the same machine
#        C1M_ARGS, HARD_ARGS    replace each set's sweep (see below)
#        PG_EXTRA               more server settings ("-c name=value ...")
# The ceiling is taken once, with the first set.  Figures go to stdout and
# OUTDIR/goals-SET.txt.
set -uo pipefail
out=${1:-${OUT:-device-goals-out}}
mkdir -p "$out"
sets=${SETS:-c1m hard300000}
clients=${CLIENTS:-64,256}
seconds=${SECONDS_PER_RUN:-5}
source bench/device-lib.sh

[ -n "${BIN:-}" ] && export GPU_LIB="$BIN/libcagra_gpu.so"
device_install "$out" pgvector || exit 1
for set in $sets; do
  case $set in
    c1m) device_dataset c1m ;;
    hard*) device_dataset hard "${set#hard}" ;;
  esac >"$out/data-$set.log" 2>&1 &
done
wait
PG_UP_OPTS="-c shared_preload_libraries=cagra -c shared_buffers=24GB -c max_connections=300 \
  -c max_parallel_maintenance_workers=15 -c max_worker_processes=32 ${PG_EXTRA:-}" source .device/pg-up.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
ceiling=--ceiling
for set in $sets; do
  case $set in
    c1m) data=/tmp/c1m
         args=${C1M_ARGS:---itopk 32,64 --hnsw-m 16 --hnsw-ef 40,100,320 --exact-queries 10} ;;
    hard*) data=/tmp/hard${set#hard}
           args=${HARD_ARGS:---itopk 32,64 --hnsw-m 16 --hnsw-ef 40,100,200 --exact-queries 3} ;;
  esac
  echo "== $set"
  python3 bench/sql_bench.py "$data" --clients "$clients" --seconds "$seconds" --devices auto \
    --maintenance-work-mem 16GB --batch 10000 --batch-clients 8 $ceiling $args 2>&1 | tee "$out/goals-$set.txt"
  ceiling=""
done
