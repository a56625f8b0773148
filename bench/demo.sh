#!/bin/bash
# bench/demo.sh — the README's main command.  On a fresh Debian 12 machine it
# installs the missing packages, builds and installs cagra, starts a throwaway
# PostgreSQL cluster, loads clustered random vectors, builds a cagra index, and
# reports recall@10 against exact search, timings, and which device served.
# The cluster and its data are removed at the end (KEEP=1 keeps them).
#
# Where a GPU is found and the GPU library builds, the cluster starts with
# shared_preload_libraries = cagra, which starts the GPU worker; otherwise
# (no GPU, no CUDA compiler, a failed GPU build) the demo goes on with the
# CPU, without the worker, as docs/install.md advises for CPU-only servers.
#
# Settings (environment): ROWS (20000), DIM (64), QUERIES (200), K (10),
# DEGREE (graph_degree, 32), PRELOAD (auto; 1 or 0 forces the preload on or
# off), CAGRA_GPU (ON: build the GPU library even where no GPU is seen),
# PG_CONFIG, DEMO_USER (cluster owner when run as root: cagra_test).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ROWS=${ROWS:-20000}
DIM=${DIM:-64}
QUERIES=${QUERIES:-200}
K=${K:-10}
DEGREE=${DEGREE:-32}
PRELOAD=${PRELOAD:-auto}
PG_CONFIG=${PG_CONFIG:-pg_config}
DEMO_USER=${DEMO_USER:-cagra_test}

step() { printf '\n== %s\n' "$*"; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# --- install and build -----------------------------------------------------------
step "packages"
if [ "$(id -u)" = 0 ]; then bash .ci/install-deps.sh; else echo "not root: assuming the packages are installed"; fi
step "build and install the extension"
# The GPU library is built (CMake, nvcc) only where a GPU is there to use it,
# or when CAGRA_GPU=ON asks for it; make install then puts it next to cagra.so.
# Without it the demo runs on the CPU.
HAVE_GPU=0
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && HAVE_GPU=1
GPU_LIB=0
cpu_only=""
if [ "$HAVE_GPU" = 1 ] || [ "${CAGRA_GPU:-}" = ON ]; then
    if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
        cpu_only="a GPU but no CUDA compiler (nvcc; docs/install.md says how to install the CUDA toolkit)"
    else
        echo "building the GPU library (CMake, nvcc)"
        if { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCAGRA_GPU=ON &&
             cmake --build build --target cagra_gpu -j2; } >/tmp/cagra-demo-gpu.log 2>&1; then
            GPU_LIB=1
        else
            tail -20 /tmp/cagra-demo-gpu.log
            cpu_only="the GPU library did not build (log: /tmp/cagra-demo-gpu.log)"
        fi
    fi
else
    cpu_only="no NVIDIA GPU found"
fi
make -j2 PG_CONFIG="$PG_CONFIG" >/tmp/cagra-demo-build.log 2>&1 &&
    make install PG_CONFIG="$PG_CONFIG" >>/tmp/cagra-demo-build.log 2>&1 ||
    { tail -40 /tmp/cagra-demo-build.log; echo "build failed (log: /tmp/cagra-demo-build.log)"; exit 1; }
pkglib=$("$PG_CONFIG" --pkglibdir)
echo "installed into $pkglib$([ "$GPU_LIB" = 1 ] && echo ", with libcagra_gpu.so")"
# The worker is preloaded only where the GPU library can run.
if [ "$PRELOAD" = auto ]; then
    PRELOAD=0
    [ "$GPU_LIB" = 1 ] && [ "$HAVE_GPU" = 1 ] && PRELOAD=1
fi
[ -n "$cpu_only" ] && echo "CPU only: $cpu_only; builds and searches run in the backends"

# --- a throwaway cluster -----------------------------------------------------------
BINDIR=$("$PG_CONFIG" --bindir)
DIR=$(mktemp -d /tmp/cagra-demo.XXXXXX)
if [ "$(id -u)" = 0 ]; then
    id "$DEMO_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$DEMO_USER"
    chown "$DEMO_USER" "$DIR"
    as_user() { runuser -u "$DEMO_USER" -- "$@"; }
else
    as_user() { "$@"; }
fi
PORT=5432   # no TCP: the socket lives in $DIR, so no other server can clash
stop_cluster() {
    as_user "$BINDIR/pg_ctl" -D "$DIR/data" -m immediate stop >/dev/null 2>&1 || true
    if [ "${KEEP:-}" = 1 ]; then echo "cluster kept in $DIR"; else rm -rf "$DIR"; fi
}
trap stop_cluster EXIT

step "throwaway cluster in $DIR"
as_user "$BINDIR/initdb" -D "$DIR/data" -A trust --no-locale -E UTF8 >"$DIR/initdb.log" 2>&1 ||
    { cat "$DIR/initdb.log"; exit 1; }
OPTS="-k $DIR -p $PORT -c listen_addresses='' -c jit=off"
[ "$PRELOAD" = 1 ] && OPTS="$OPTS -c shared_preload_libraries=cagra"
as_user "$BINDIR/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -o "$OPTS" -w start >/dev/null ||
    { tail -20 "$DIR/server.log"; exit 1; }
echo "PostgreSQL $(as_user "$BINDIR/psql" -h "$DIR" -p "$PORT" -d postgres -Atc 'SHOW server_version')" \
     "on port $PORT, preload: $([ "$PRELOAD" = 1 ] && echo cagra || echo none)"

sql() { as_user "$BINDIR/psql" -X -h "$DIR" -p "$PORT" -d postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
show() { as_user "$BINDIR/psql" -X -h "$DIR" -p "$PORT" -d postgres -v ON_ERROR_STOP=1 -q "$@"; }

# --- data ---------------------------------------------------------------------------
step "load $ROWS vectors of $DIM dimensions (100 clusters) and $QUERIES queries"
# Each vector: a random cluster centre plus uniform noise; queries are drawn the
# same way, so their neighbours are spread like real embeddings, not uniform.
t0=$(now)
sql <<EOF
CREATE EXTENSION cagra;
SELECT setseed(0.42) AS seed \gset
CREATE TABLE centres AS
  SELECT c, array_agg(random() * 2 - 1) AS x
    FROM generate_series(0, 99) c, generate_series(1, $DIM) d GROUP BY c;
CREATE FUNCTION near_centre(c int) RETURNS vector LANGUAGE sql AS \$\$
  SELECT array_agg(x[d] + (random() - 0.5) * 0.6 ORDER BY d)::vector($DIM)
    FROM centres, generate_series(1, $DIM) d WHERE centres.c = near_centre.c
\$\$;
CREATE TABLE items (id int PRIMARY KEY, embedding vector($DIM));
INSERT INTO items SELECT i, near_centre(i % 100) FROM generate_series(1, $ROWS) i;
CREATE TABLE queries (id int PRIMARY KEY, embedding vector($DIM));
INSERT INTO queries SELECT q, near_centre((random() * 99)::int) FROM generate_series(1, $QUERIES) q;
VACUUM ANALYZE items;
EOF
echo "loaded in $(secs "$t0" "$(now)") s"

step "exact search (sequential scan) for the ground truth"
t0=$(now)
sql <<EOF
CREATE TABLE truth AS
  SELECT q.id AS qid, ARRAY(SELECT i.id FROM items i ORDER BY i.embedding <-> q.embedding LIMIT $K) AS ids
    FROM queries q;
EOF
t_exact=$(secs "$t0" "$(now)")
echo "$QUERIES queries in $t_exact s: $(awk -v n="$QUERIES" -v t="$t_exact" 'BEGIN { printf "%.0f", n / t }') queries/s"

# --- the index ----------------------------------------------------------------------
step "CREATE INDEX ... USING cagra (embedding vector_l2_ops) WITH (graph_degree = $DEGREE)"
t0=$(now)
if ! sql -c "CREATE INDEX items_embedding_idx ON items USING cagra (embedding vector_l2_ops) WITH (graph_degree = $DEGREE)"; then
    echo "CREATE INDEX USING cagra failed; server log:"; tail -20 "$DIR/server.log"; exit 1
fi
t_build=$(secs "$t0" "$(now)")
echo "built in $t_build s, $(sql -c "SELECT pg_size_pretty(pg_relation_size('items_embedding_idx'))")"

step "plan of one query"
sql -c "EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY embedding <-> (SELECT embedding FROM queries WHERE id = 1) LIMIT $K"

# Queries the GPU worker has answered so far (none without the worker).
worker_queries() {
    sql -c "SELECT CASE WHEN to_regclass('cagra_status') IS NULL THEN 0
                        ELSE (SELECT coalesce(sum(queries), 0) FROM cagra_status) END"
}

step "index search"
q0=$(worker_queries)
t0=$(now)
sql <<EOF
CREATE TABLE approx AS
  SELECT q.id AS qid, ARRAY(SELECT i.id FROM items i ORDER BY i.embedding <-> q.embedding LIMIT $K) AS ids
    FROM queries q;
EOF
t_index=$(secs "$t0" "$(now)")
recall=$(sql -c "SELECT round(avg(cardinality(ARRAY(SELECT unnest(t.ids) INTERSECT SELECT unnest(a.ids)))::numeric / $K), 3)
                   FROM truth t JOIN approx a USING (qid)")

# --- what served the queries --------------------------------------------------------
step "device"
by_worker=$(( $(worker_queries) - q0 ))
if [ "$PRELOAD" = 1 ]; then
    show -x -c "SELECT state, backend, devices, queries, batches, fallbacks, message FROM cagra_status"
fi
show -x -c "SELECT * FROM cagra_index_info('items_embedding_idx')"
if [ "$by_worker" -gt 0 ]; then
    device="GPU worker ($(sql -c "SELECT backend FROM cagra_status") backend), $by_worker of $QUERIES queries"
else
    device="CPU, in the backend"
    if [ "$PRELOAD" = 1 ]; then device="$device (the GPU worker answered none)"; fi
fi
echo "served by: $device"

step "result"
cat <<EOF
rows $ROWS, dimensions $DIM, queries $QUERIES, k $K, graph_degree $DEGREE
exact search:  $t_exact s, $(awk -v n="$QUERIES" -v t="$t_exact" 'BEGIN { printf "%.0f", n / t }') queries/s (one backend)
index build:   $t_build s
index search:  $t_index s, $(awk -v n="$QUERIES" -v t="$t_index" 'BEGIN { printf "%.0f", n / t }') queries/s (one backend)
recall@$K:     $recall
served by:     $device
EOF
