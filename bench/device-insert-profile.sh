#!/usr/bin/env bash
# bench/device-insert-profile.sh — where the time of concurrent inserts goes,
# on the lent GPU machine, after bench/device-write.sh left its server and
# bench_items (a d768 set) behind: an index built on the first half, then
# SESSIONS pgbench sessions insert single rows for each cagra.device value
# (DEVICES) while `perf record -a -g` samples the host (perf carried as
# .device/perf.tar.xz: Debian's build and its libraries) and a sampler
# reads the inserting sessions' wait events from pg_stat_activity every
# 10 ms, with the linkers running and the unlinked span.  Per device:
# pgbench's rows/s, the wait events (CPU: none), the linkers, the
# worker's queue and engine time per query (cagra_status) and each step
# of its round trips (cagra_worker_timings), then perf's
# split by command and library and the top symbols of the backends, in
# OUTDIR/profile-DEVICE.txt.
set -uo pipefail
out=${1:-${OUT:-device-insert-profile-out}}
mkdir -p "$out"
PG_UP_NOSTART=1 source .device/pg-up.sh || exit 1
tar -xJf .device/perf.tar.xz -C /tmp || exit 1
perf() { LD_LIBRARY_PATH=/tmp/perf/lib /tmp/perf/perf "$@"; }
sessions=${SESSIONS:-16}
base=$(psql -At -c "SELECT count(*) / 2 FROM bench_items")
script=/tmp/insert-profile.sql
echo "INSERT INTO bench_grow (id, v) SELECT id, v FROM bench_items WHERE id = (SELECT nextval('bench_grow_next'));" >$script
for device in ${DEVICES:-auto cpu gpu}; do
  psql -q -c "DROP TABLE IF EXISTS bench_grow; CREATE TABLE bench_grow (id int PRIMARY KEY, v vector(768));
    INSERT INTO bench_grow SELECT id, v FROM bench_items WHERE id < $base;
    DROP SEQUENCE IF EXISTS bench_grow_next; CREATE SEQUENCE bench_grow_next MINVALUE 0 START $base;
    SET maintenance_work_mem = '16GB'; CREATE INDEX bench_grow_idx ON bench_grow USING cagra (v vector_l2_ops)" || exit 1
  [ "$device" = none ] && psql -q -c "DROP INDEX bench_grow_idx"
  PGOPTIONS="-c cagra.device=${device/none/auto}" pgbench -n -M prepared -f $script -c "$sessions" -j "$sessions" \
    -t 2500 postgres >"$out/pgbench-$device.txt" 2>&1 &
  pgbench_pid=$!
  psql -At -c "SELECT queries, queue_time_ms, search_time_ms, batches FROM cagra_status" >/tmp/status-before 2>/dev/null
  psql -At -c "SELECT step, per, events, total_ms FROM cagra_worker_timings()" >/tmp/timings-before 2>/dev/null
  sleep 2
  for i in $(seq 1 300); do
    echo "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity
            WHERE application_name = 'pgbench' AND state = 'active';
          SELECT 'linkers running: ' || count(*) FROM pg_stat_activity WHERE backend_type = 'cagra linker';
          SELECT 'unlinked rows: ' || unlinked_nodes / 64 * 64 || '-' || unlinked_nodes / 64 * 64 + 63
            FROM cagra_index_info('bench_grow_idx'); SELECT pg_sleep(0.01);"
  done | psql -At 2>/dev/null | grep -v '^$' | sort | uniq -c | sort -rn >/tmp/waits-$device &
  perf record -a -g -o /tmp/perf-$device.data -- sleep 4 >/dev/null 2>&1
  wait $pgbench_pid
  psql -At -c "SELECT queries, queue_time_ms, search_time_ms, batches FROM cagra_status" >/tmp/status-after 2>/dev/null
  psql -At -c "SELECT step, per, events, total_ms FROM cagra_worker_timings()" >/tmp/timings-after 2>/dev/null
  wait
  {
    echo "== cagra.device = $device, $sessions sessions"
    grep -E "^tps|latency average" "$out/pgbench-$device.txt"
    echo "wait events of the inserting sessions (samples):"
    grep -v -e '^ *[0-9]* linkers running' -e '^ *[0-9]* unlinked rows' /tmp/waits-$device
    echo "linkers running, and the unlinked span (samples):"
    grep -e 'linkers running' -e 'unlinked rows' /tmp/waits-$device
    paste -d'|' /tmp/status-before /tmp/status-after | awk -F'|' '$5 > $1 {
      printf "worker: %d queries in %d batches (%.1f a batch), queue %.3f ms a query, engine %.3f ms a batch\n",
             $5 - $1, $8 - $4, ($5 - $1) / ($8 - $4), ($6 - $2) / ($5 - $1), ($7 - $3) / ($8 - $4) }'

    echo "the worker's steps (cagra_worker_timings, this run): step, per, events, mean us"
    paste -d'|' /tmp/timings-before /tmp/timings-after | awk -F'|' '$7 > $3 {
      printf "  %-10s %-9s %8d %9.1f\n", $1, $2, $7 - $3, 1000 * ($8 - $4) / ($7 - $3) }'
    perf report -i /tmp/perf-$device.data --no-children --sort comm,dso -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -25
    perf report -i /tmp/perf-$device.data --no-children --comm postgres --sort sym -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -60
    perf report -i /tmp/perf-$device.data --no-children --comm postgres --sort sym -g caller,0.5,callee --percent-limit 3 2>/dev/null | grep -v "^$" | head -150
  } >"$out/profile-$device.txt"
  head -3 "$out/profile-$device.txt"
done
