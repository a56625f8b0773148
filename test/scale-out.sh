#!/bin/bash
# test/scale-out.sh — a coordinator and N shard servers on local ports, for a
# manual try of docs/scale-out.md: one PostgreSQL cluster per shard, each with
# a plain table `items` and its own cagra index, and a coordinator whose
# partitioned table `items` (LIST by tenant) has one postgres_fdw foreign
# table partition per shard, and the functions of test/scale-out-functions.sql.  Nothing is installed: cagra must already be
# installed into the PostgreSQL that pg_config names.
#
#   bash test/scale-out.sh            # set up and start; prints how to connect
#   bash test/scale-out.sh stop       # stop every server
#   bash test/scale-out.sh clean      # stop and remove the data directories
#
# Environment: SHARDS (default 3), PORT (first port, default 5601; shard i
# listens on PORT + i), DIR (default /tmp/so-cluster), ROWS (rows per shard,
# default 10000; 0: the shards' tables are left empty, without the index
# and unanalyzed, for the caller to load and index, as bench/scale_out_bench.py
# does), DIM (default 16), FETCH_SIZE (postgres_fdw's fetch_size, default
# 1000), NODE_CONF and SHARD_CONF (postgresql.conf lines added on every node,
# and on the shards only, after the defaults: e.g.
# SHARD_CONF="shared_preload_libraries = 'cagra'" gives each shard its own GPU
# worker), PG_CONFIG, CAGRA_TEST_USER (the user the servers run as when this
# runs as root; default cagra_test).
set -euo pipefail

SHARDS=${SHARDS:-3}
PORT=${PORT:-5601}
DIR=${DIR:-/tmp/so-cluster}
ROWS=${ROWS:-10000}
DIM=${DIM:-16}
FETCH_SIZE=${FETCH_SIZE:-1000}
PG_CONFIG=${PG_CONFIG:-pg_config}
BINDIR=$("$PG_CONFIG" --bindir)
TEST_USER=${CAGRA_TEST_USER:-cagra_test}

if [ "$(id -u)" = 0 ]; then
    # LD_LIBRARY_PATH passed on explicitly: a relocated PostgreSQL (the GPU
    # machine's .device/pg-up.sh) finds its libraries through it
    as_user() { runuser -u "$TEST_USER" -- env ${LD_LIBRARY_PATH:+LD_LIBRARY_PATH="$LD_LIBRARY_PATH"} "$@"; }
else
    as_user() { "$@"; }
fi
psql_at() {  # psql_at PORT SQL...
    local p=$1; shift
    as_user "$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h "$DIR" -p "$p" -d postgres "$@"
}
stop_all() {
    for i in $(seq 0 "$SHARDS"); do
        [ -f "$DIR/node$i/postmaster.pid" ] && as_user "$BINDIR/pg_ctl" -D "$DIR/node$i" -m fast stop >/dev/null || true
    done
}

case ${1:-start} in
    stop)  stop_all; exit 0 ;;
    clean) stop_all; rm -rf "$DIR"; exit 0 ;;
    start) ;;
    *) echo "usage: $0 [start|stop|clean]" >&2; exit 2 ;;
esac

[ -e "$DIR" ] && { echo "$DIR exists: run '$0 clean' first" >&2; exit 2; }
mkdir -p "$DIR"
[ "$(id -u)" = 0 ] && chown "$TEST_USER" "$DIR"

# node0 is the coordinator, node1..N the shards
for i in $(seq 0 "$SHARDS"); do
    as_user "$BINDIR/initdb" -D "$DIR/node$i" -A trust --no-locale -E UTF8 >/dev/null
    cat >>"$DIR/node$i/postgresql.conf" <<CONF
port = $((PORT + i))
listen_addresses = ''
unix_socket_directories = '$DIR'
max_connections = 50
${NODE_CONF:-}
CONF
    if [ "$i" -gt 0 ]; then echo "${SHARD_CONF:-}" >>"$DIR/node$i/postgresql.conf"; fi
    as_user "$BINDIR/pg_ctl" -D "$DIR/node$i" -l "$DIR/node$i.log" -w start >/dev/null
done

# shards: a plain table each, with rows of tenant i, and its own cagra index
for i in $(seq 1 "$SHARDS"); do
    {
        echo "CREATE EXTENSION cagra;"
        echo "CREATE TABLE items (tenant int NOT NULL, id bigint NOT NULL, v vector($DIM), PRIMARY KEY (tenant, id));"
        if [ "$ROWS" -gt 0 ]; then cat <<SQL
SELECT setseed(0.$i);
INSERT INTO items
  SELECT $i, g, (SELECT array_agg(random()::real) FROM generate_series(1, $DIM) d WHERE g > 0)::vector
  FROM generate_series(1, $ROWS) g;
CREATE INDEX items_v ON items USING cagra (v vector_l2_ops);
ANALYZE items;
SQL
        fi
    } | psql_at $((PORT + i))
done

# coordinator: the partitioned table, one foreign partition per shard
{
    echo "CREATE EXTENSION cagra; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;"
    echo "CREATE TABLE items (tenant int NOT NULL, id bigint NOT NULL, v vector($DIM)) PARTITION BY LIST (tenant);"
    for i in $(seq 1 "$SHARDS"); do
        cat <<SQL
CREATE SERVER shard$i FOREIGN DATA WRAPPER postgres_fdw
  OPTIONS (host '$DIR', port '$((PORT + i))', dbname 'postgres',
           extensions 'cagra', async_capable 'true', fetch_size '$FETCH_SIZE');
CREATE USER MAPPING FOR PUBLIC SERVER shard$i;
CREATE FOREIGN TABLE items_s$i PARTITION OF items FOR VALUES IN ($i)
  SERVER shard$i OPTIONS (table_name 'items');
SQL
    done
    # (ANALYZE of a foreign partition reads the whole remote table)
    if [ "$ROWS" -gt 0 ]; then echo "ANALYZE items;"; fi
    # items_knn, items_batch_knn (docs/scale-out.md)
    cat "$(dirname "${BASH_SOURCE[0]}")/scale-out-functions.sql"
} | psql_at "$PORT"

echo "coordinator: psql -h $DIR -p $PORT postgres"
for i in $(seq 1 "$SHARDS"); do echo "shard $i:     psql -h $DIR -p $((PORT + i)) postgres"; done
echo "try: SELECT * FROM items_knn((SELECT v FROM items WHERE tenant = 1 AND id = 1), 10);"
echo "try: EXPLAIN VERBOSE SELECT tenant, id FROM items ORDER BY v <-> (SELECT v FROM items WHERE tenant = 1 AND id = 1) LIMIT 10;"
echo "stop: bash $0 stop; remove: bash $0 clean"
