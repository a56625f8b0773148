#!/usr/bin/env bash
# bench/device-scale-out.sh — issue 17's figures on the lent GPU machine: c1m
# spread over 1 and over 4 shard servers on this host (sharing its GPU and
# its cores), each shard with its own GPU worker, behind a coordinator on the
# same host; 64 pgbench clients through the coordinator, the batch pattern
# (items_batch_knn, 10,000 queries a call), and one plain server with one
# index over all the rows for comparison (bench/scale_out_bench.py, which
# sets the servers up with test/scale-out.sh).  Run from the repository
# root, carrying .device:
#     bash bench/device-scale-out.sh "$OUT"
# About 5 minutes: the extension's build (SKIP_BUILD=1 skips it when an
# earlier command on the same warm machine did it), c1m made once
# (/tmp/c1m), then per layout loading 1M rows, the shards' builds at once
# and 2-3 pgbench runs of SECONDS_PER_RUN (10) s.  SHARDS (default 1,4),
# CLIENTS (64), DATA (another bench/gen.py set instead of c1m), SERVER_USER
# (pguser); SCALE_OUT_ARGS adds options of bench/scale_out_bench.py (later
# ones win).
# Figures go to stdout and OUTDIR/scale-out.txt, the servers' logs to
# OUTDIR/scale-out-logs/.
set -uo pipefail
out=${1:-${OUT:-device-scale-out-out}}
mkdir -p "$out"
source bench/device-lib.sh
device_install "$out" || exit 1
data=${DATA:-$(device_dataset c1m)} || exit 1
nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader
python3 bench/scale_out_bench.py "$data" --shards "${SHARDS:-1,4}" --dir /tmp/so-bench --port 5701 --user "${SERVER_USER:-pguser}" \
  --preload --shared-buffers 4GB --maintenance-work-mem 8GB --clients "${CLIENTS:-64}" \
  --seconds "${SECONDS_PER_RUN:-10}" --batch 10000 --logs "$out/scale-out-logs" ${SCALE_OUT_ARGS:-} \
  2>&1 | tee "$out/scale-out.txt"
