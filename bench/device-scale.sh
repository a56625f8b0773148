#!/usr/bin/env bash
# bench/device-scale.sh — issue 13's scale run through SQL on the lent GPU
# machine: a hard generated set (bench/gen.py --intrinsic 100 --clusters
# 1024; 5,000,000 x 768 by default), loaded into PostgreSQL, CREATE INDEX
# USING cagra with the defaults and the GPU worker, then recall@10 over 1,000
# queries and 64-client pgbench queries/s.  In stages, each one 10-minute
# command on a warm machine (a stage finds the state of the one before only
# when it starts within the machine's idle time, about 30 s, of its end):
#
#   STAGE=load   builds and installs the extension and libcagra_gpu.so
#                (bench/device-lib.sh device_install; SKIP_BUILD=1 skips it),
#                checks the disk, makes a new cluster in $SCALE_PGDATA, and
#                streams the set into it: bench/gen.py --jobs generates it in
#                nproc - 1 processes, 25,000 rows a chunk, as one binary COPY
#                (FREEZE) into bench_items, created in the same transaction,
#                under wal_level = minimal, while computing the exact ground
#                truth of the 1,000 queries from the same rows (no base.fvecs
#                on disk); then the primary key, VACUUM ANALYZE, the queries
#                and their ground truth (tables bench_queries, bench_gt).
#   STAGE=index  restarts the server with wal_level = replica (INDEX_WAL=
#                minimal: none for the index pages either, when disk is
#                short), CREATE INDEX USING cagra (storage $STORAGE), timed
#                phase by phase, peak memory of the building backend and the
#                worker, device memory, index size; then the queries stage
#                with what is left of the 10 minutes (QUERIES=0: not).
#   STAGE=query  recall@10 and 1- and 64-client pgbench q/s at the server's
#                default cagra.itopk_size and each of ITOPK.
#   STAGE=all    load, index and query in one command (small sets).
#   STAGE=build  device_install alone; then STAGE=load SKIP_BUILD=1, should
#                building and loading not fit one command together.
#
# One COPY stream, not several: COPY FREEZE into a table created in the same
# transaction under wal_level = minimal writes no WAL and leaves every row
# frozen and every page all-visible (no later pass of vacuum or hint bits
# over the 21 GB heap), and the disk only ever holds the table; parallel
# streams into an existing table would write all of it to WAL as well and
# need a vacuum afterwards.  The generator runs on the other cores, so the
# one backend that parses the rows is the only serial part.
#
# Run from the repository root, carrying .device:
#     STAGE=load  bash bench/device-scale.sh "$OUT"
#     STAGE=index bash bench/device-scale.sh "$OUT"
#     STAGE=index STORAGE=float16 bash bench/device-scale.sh "$OUT"   (same table)
# 10,000,000 x 768 in float16:
#     STAGE=load N=10000000 COLUMN=halfvec bash bench/device-scale.sh "$OUT"
#     STAGE=index N=10000000 COLUMN=halfvec STORAGE=float16 bash bench/device-scale.sh "$OUT"
# (COLUMN=halfvec: pgvector's halfvec column, pgvector built there from
# .device/pgvector; a float32 column of 10M x 768 alone takes 42 GB.)
#
# Settings (environment): N (5000000), DIM (768), NQ (1000), SEED (7),
# INTRINSIC (100), CLUSTERS (1024), COLUMN (vector | halfvec), STORAGE
# (float32 | float16), JOBS (nproc - 1), CLIENTS (64), SECONDS_PER_RUN (10),
# ITOPK (default,32,128,256: the server default is 64), SHARED_BUFFERS (32GB), MAX_WAL_SIZE_GB (4), WAL_BUFFERS (64MB),
# MAINTENANCE_WORK_MEM (the build's estimate x 1.25), INDEX_WAL (replica |
# minimal), PARALLEL_WORKERS (unset: PostgreSQL picks the heap scan's workers
# from the size of the table's main fork, small when the vectors are in TOAST:
# about 4 at 5,000,000 x 768; a number: ALTER TABLE SET (parallel_workers)),
# WORKER_BACKEND (gpu | cpu), DEVICE (1; 0: no device_install, the
# PostgreSQL of PATH's pg_config, for a test elsewhere), SERVER_USER (pguser),
# SCALE_PGDATA (/tmp/scale-pgdata), SCALE_PORT (5440), SCALE_SOCKET (/tmp),
# DATA (/tmp/scale-NxDIM-COLUMN: query.fvecs, gt.ivecs), FORCE=1 (go on when
# the disk estimate says it will not fit), STAGE_SECONDS (570: the queries
# of STAGE=index stop starting new runs past it).
# Logs: OUTDIR/load.txt, index.txt, query.txt (stdout too), server-log.txt
# (the server log's end), build.txt and build/ (device_install).
set -uo pipefail
out=${1:-${OUT:-device-scale-out}}
mkdir -p "$out"
chmod a+rwx "$out"
t_stage=$(date +%s)
stage=${STAGE:-load}
n=${N:-5000000}
dim=${DIM:-768}
nq=${NQ:-1000}
seed=${SEED:-7}
column=${COLUMN:-vector}
storage=${STORAGE:-float32}
jobs=${JOBS:-$(( $(nproc) > 1 ? $(nproc) - 1 : 1 ))}
clients=${CLIENTS:-64}
seconds=${SECONDS_PER_RUN:-10}
itopk=${ITOPK:-default,32,128,256}
shared_buffers=${SHARED_BUFFERS:-32GB}
max_wal=${MAX_WAL_SIZE_GB:-4}
index_wal=${INDEX_WAL:-replica}
worker_backend=${WORKER_BACKEND:-gpu}
server_user=${SERVER_USER:-pguser}
pgdata=${SCALE_PGDATA:-/tmp/scale-pgdata}
port=${SCALE_PORT:-5440}
sock=${SCALE_SOCKET:-/tmp}
data=${DATA:-/tmp/scale-${n}x${dim}-$column}
stage_seconds=${STAGE_SECONDS:-570}
# the build's memory (docs/reference.md) with a quarter more, in MB
mwm=${MAINTENANCE_WORK_MEM:-$(( (n * (4 * dim + 6 + 16 * 64 + 12 * 32) / 4 * 5) / 1048576 + 64 ))MB}
case $column in vector|halfvec) ;; *) echo "COLUMN: vector or halfvec" >&2; exit 2 ;; esac
case $storage in float32|float16) ;; *) echo "STORAGE: float32 or float16" >&2; exit 2 ;; esac

log() { echo "== $(date -u +%H:%M:%S) $*"; }

# ---- the extension and PostgreSQL ----
if [ "${DEVICE:-1}" = 1 ]; then
  source bench/device-lib.sh
  with=""
  [ "$column" = halfvec ] && with=pgvector
  if [ "$stage" = load ] || [ "$stage" = all ] || [ "$stage" = build ]; then
    log "build and install (SKIP_BUILD=${SKIP_BUILD:-0})"
    device_install "$out" $with || exit 1
  else
    # a later stage on the same warm machine: installed already
    SKIP_BUILD=1 device_install "$out" || exit 1
  fi
  id "$server_user" >/dev/null 2>&1 || useradd -m "$server_user"
fi
bin=$(pg_config --bindir)
export PGHOST=$sock PGPORT=$port PGUSER=$server_user PGDATABASE=postgres
as_server() { su -s /bin/sh "$server_user" -c "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} $*"; }

stop_server() {
  [ -f "$pgdata/postmaster.pid" ] && as_server "$bin/pg_ctl -D $pgdata -m fast -w stop" >/dev/null 2>&1
  return 0
}

# start_server SETTINGS...: the scale cluster with the common settings and these
start_server() {
  stop_server
  local opts="-p $port -k $sock -c listen_addresses= -c jit=off -c max_connections=200 -c shared_preload_libraries=cagra \
-c cagra.worker_backend=$worker_backend -c shared_buffers=$shared_buffers -c max_wal_size=${max_wal}GB \
-c checkpoint_timeout=30min -c wal_buffers=${WAL_BUFFERS:-64MB} -c track_wal_io_timing=on -c maintenance_work_mem=$mwm \
-c max_parallel_maintenance_workers=$jobs -c max_parallel_workers=$jobs -c max_worker_processes=$(( jobs + 16 )) $*"
  touch "$pgdata.log" && chown "$server_user" "$pgdata.log"
  as_server "$bin/pg_ctl -D $pgdata -l $pgdata.log -t 600 -o \"$opts\" -w start" >/dev/null ||
    { tail -30 "$pgdata.log"; exit 1; }
  psql -X -At -c "SELECT 'server: ' || version()" | cut -c1-60
  echo "server settings: $opts"
  # the worker process is up before anything is measured (its state, once
  # the extension exists: the load stage creates it after this)
  for _ in $(seq 1 60); do
    [ "$(psql -X -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'cagra gpu worker'")" = 1 ] && break
    sleep 1
  done
  psql -X -At -c "SELECT format('cagra worker: %s, backend %s, devices %s, %s', state, backend, devices, message) FROM cagra_status" 2>/dev/null
  return 0
}

server_log() { tail -200 "$pgdata.log" > "$out/server-log.txt" 2>/dev/null; }

bench() { python3 bench/scale_bench.py "$@"; }

machine() {
  echo "machine: $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2 " GB memory, " $7 " GB available"}')"
  df -h /tmp /dev/shm 2>/dev/null | sed 's/^/  /'
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
  return 0
}

# ---- stages ----
stage_load() {
  log "load: $n x $dim ($column column), intrinsic ${INTRINSIC:-100}, clusters ${CLUSTERS:-1024}, $jobs generator processes"
  machine
  # the old cluster and set first, so the estimate sees their space free
  stop_server
  [ -f /tmp/pgdata/postmaster.pid ] && as_server "$bin/pg_ctl -D /tmp/pgdata -m fast stop" >/dev/null 2>&1
  rm -rf "$pgdata" "$pgdata.log" "$data"
  bench disk --n "$n" --dim "$dim" --nq "$nq" --column "$column" --storage "$storage" \
    --free-path "$(dirname "$pgdata")" --max-wal-size-gb "$max_wal" --index-wal "$index_wal" ||
    { [ "${FORCE:-0}" = 1 ] && echo "FORCE=1: going on" || exit 3; }
  mkdir -p "$pgdata" "$data" && chown "$server_user" "$pgdata"
  as_server "$bin/initdb -D $pgdata -A trust -U $server_user" > "$out/initdb.log" 2>&1 ||
    { cat "$out/initdb.log"; exit 1; }
  rm -f "$out/initdb.log"
  # no WAL for the table: wal_level = minimal, the table created in the COPY's transaction
  start_server -c wal_level=minimal -c max_wal_senders=0 -c autovacuum=off
  [ "$column" = halfvec ] && { psql -X -q -c "CREATE EXTENSION vector" || exit 1; }
  psql -X -q -c "CREATE EXTENSION cagra" || exit 1
  log "generate and COPY (FREEZE), one stream"
  local t0 t1 halfvec=""
  [ "$column" = halfvec ] && halfvec=--halfvec
  t0=$(date +%s.%N)
  python3 bench/gen.py "$data" "$n" "$dim" "$nq" "$seed" --intrinsic "${INTRINSIC:-100}" \
      --clusters "${CLUSTERS:-1024}" --jobs "$jobs" --copy $halfvec 2>"$data/gen.txt" |
    psql -X -v ON_ERROR_STOP=1 -c '\timing on' -c "BEGIN" \
      -c "CREATE TABLE bench_items (id int, v $column($dim))" \
      -c '\copy bench_items FROM pstdin (FORMAT binary, FREEZE)' -c "COMMIT" ||
    { cat "$data/gen.txt"; server_log; exit 1; }
  t1=$(date +%s.%N)
  cat "$data/gen.txt"
  awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { printf "generated and loaded %d rows in %.1f s (%.0f rows/s)\n", n, b - a, n / (b - a) }'
  psql -X -c '\timing on' -c "ALTER TABLE bench_items ADD PRIMARY KEY (id)" -c "VACUUM ANALYZE bench_items" || exit 1
  bench queries "$data" || exit 1
  bench sizes
  machine
  server_log
}

stage_index() {
  [ -f "$pgdata/PG_VERSION" ] || { echo "no cluster in $pgdata: the machine was not warm; run STAGE=load first"; exit 1; }
  log "index: storage $storage, index WAL $index_wal, maintenance_work_mem $mwm"
  machine
  bench disk --n "$n" --dim "$dim" --nq "$nq" --column "$column" --storage "$storage" --existing \
    --free-path "$(dirname "$pgdata")" --max-wal-size-gb "$max_wal" --index-wal "$index_wal" ||
    { [ "${FORCE:-0}" = 1 ] && echo "FORCE=1: going on" || exit 3; }
  if [ "$index_wal" = minimal ]; then
    start_server -c wal_level=minimal -c max_wal_senders=0
  else
    start_server -c wal_level=replica
  fi
  if [ -n "${PARALLEL_WORKERS:-}" ]; then
    psql -X -q -c "ALTER TABLE bench_items SET (parallel_workers = $PARALLEL_WORKERS)" || exit 1
  else
    psql -X -q -c "ALTER TABLE bench_items RESET (parallel_workers)" || exit 1
  fi
  bench index --storage "$storage" --maintenance-work-mem "$mwm" ${BUILD_DEVICE:+--build-device $BUILD_DEVICE} || { server_log; exit 1; }
  # PostgreSQL's line on the workers it planned, cagra's on those that scanned
  grep -h "building index \"bench_items_cagra\"\|heap scanned by" "$pgdata.log" | tail -2 | sed 's/^.*DEBUG: */server log: /'
  bench sizes
  df -h "$(dirname "$pgdata")" | sed 's/^/  /'
  server_log
}

stage_query() {
  [ -f "$pgdata/PG_VERSION" ] || { echo "no cluster in $pgdata: run STAGE=load and STAGE=index first"; exit 1; }
  log "queries: itopk $itopk, $clients clients, $seconds s a run"
  # the server of the index stage when it still runs, else started here
  psql -X -At -c "SELECT 1" >/dev/null 2>&1 || start_server -c wal_level=replica
  local left=$(( stage_seconds - ($(date +%s) - t_stage) ))
  bench query --itopk "$itopk" --clients "$clients" --seconds "$seconds" --time-budget "$(( left > 60 ? left - 40 : 20 ))" ||
    { server_log; exit 1; }
  server_log
}

status=0
case $stage in
  build) ;;   # device_install above, nothing more
  load) stage_load 2>&1 | tee "$out/load.txt"; status=${PIPESTATUS[0]} ;;
  index)
    stage_index 2>&1 | tee "$out/index.txt"; status=${PIPESTATUS[0]}
    if [ "$status" = 0 ] && [ "${QUERIES:-1}" = 1 ]; then
      stage_query 2>&1 | tee "$out/query.txt"; status=${PIPESTATUS[0]}
    fi ;;
  query) stage_query 2>&1 | tee "$out/query.txt"; status=${PIPESTATUS[0]} ;;
  all)
    stage_load 2>&1 | tee "$out/load.txt"; status=${PIPESTATUS[0]}
    if [ "$status" = 0 ]; then stage_index 2>&1 | tee "$out/index.txt"; status=${PIPESTATUS[0]}; fi
    if [ "$status" = 0 ]; then stage_query 2>&1 | tee "$out/query.txt"; status=${PIPESTATUS[0]}; fi ;;
  *) echo "STAGE: build, load, index, query or all" >&2; exit 2 ;;
esac
echo "stage $stage: $(( $(date +%s) - t_stage )) s, exit status $status"
exit "$status"
