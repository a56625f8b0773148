#!/usr/bin/python3
"""bench/sql_bench.py — cagra through SQL on a texmex data set (bench/gen.py).

Loads DIR/base.fvecs, DIR/query.fvecs and DIR/gt.ivecs into a database, builds
a cagra index with CREATE INDEX, and measures recall@10 and queries/s for one
client and for N concurrent clients (pgbench), for several cagra.itopk_size
values; side by side with exact search (sequential scan) and, when pgvector's
`vector` extension is installed in the database, pgvector HNSW.  Prints the
figures; it asserts nothing.

Every pgbench run (cagra, pgvector and the one-row-lookup ceiling alike) uses
prepared statements (-M prepared) and gets its settings as connection
options (PGOPTIONS), so no transaction pays for SET statements or for
parsing and planning.  Server CPU per query is given twice: the whole
machine's busy time less pgbench's and the GPU worker's (other processes
count too), and the CPU time of the pgbench connections' backends alone
(/proc/<pid>/stat over a window inside the run; needs the server on this
machine).

usage: sql_bench.py DIR [options]      (psql and pgbench from PATH)
  --dsn 'host=... port=... dbname=...'  libpq connection string (default: PG* env)
  --degree 32 --intermediate 64         cagra reloptions
  --itopk 32,64,128                     cagra.itopk_size values to measure
  --clients 4 --seconds 10              pgbench settings for the concurrent runs
                                        (--clients 64,256: one run at each count)
  --exact-queries 50                    queries for the exact-search figure (0: none)
  --hnsw-ef 40,80                       hnsw.ef_search values (pgvector only)
  --hnsw-m 16,32                        HNSW m values (ef_construction 64 for m 16, else 128;
                                        empty: no pgvector index)
  --skip-load                           reuse the tables of an earlier run
  --devices auto,cpu                    cagra.device values to sweep (auto: the GPU
                                        worker when it runs; cpu: in the backend)
  --sweep cagra.skip_unread_distances=on,off
                                        one more cagra setting to sweep at every device
                                        and itopk_size (default: none)
  --ceiling                             also pgbench a one-row lookup in a 1,000-row
                                        table: the host's ceiling for N clients
  --maintenance-work-mem 1GB            for CREATE INDEX
  --column-storage main                 STORAGE of the vector column, set before loading
                                        (default: the type's, external)
  --opclass l2|ip|cosine                operator class and operator (<->, <#>, <=>);
                                        the ground truth must be of that metric
  --storage float32,float16             cagra indexes to build and measure, one per
                                        storage reloption value (default float32)
  --batch 10000                         also time cagra_search with batches of this
                                        many queries (0: skip)
  --batch-clients 8                     with --batch: also run such calls from this
                                        many sessions at once (pgbench)
"""
import argparse
import concurrent.futures
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np


def read_vecs(path, kind):
    """texmex .fvecs / .ivecs: per vector an int32 count, then that many values.
    Returns an n x d numpy array."""
    raw = np.fromfile(path, dtype=np.int32)
    d = int(raw[0])
    return raw.reshape(-1, d + 1)[:, 1:].view(np.float32 if kind == "f" else np.int32)


# SQL type of an integer column by its numpy item size
SQL_INT = {4: "int", 8: "bigint"}


def copy_binary(columns, vecs):
    """COPY ... (FORMAT binary) stream of rows of integer columns, then a
    vector: `columns` is a list of numpy integer arrays, one value per row,
    each int32 (an int4 field) or int64 (int8).  The vector's binary form is
    int16 dim, int16 unused, float4 values, big-endian."""
    n, d = vecs.shape
    fields = [("nfields", ">i2")]
    for i, c in enumerate(columns):
        fields += [("len%d" % i, ">i4"), ("col%d" % i, ">i%d" % c.dtype.itemsize)]
    fields += [("vlen", ">i4"), ("dim", ">i2"), ("unused", ">i2"), ("x", ">f4", (d,))]
    a = np.zeros(n, dtype=np.dtype(fields))
    a["nfields"] = len(columns) + 1
    for i, c in enumerate(columns):
        a["len%d" % i], a["col%d" % i] = c.dtype.itemsize, c
    a["vlen"], a["dim"], a["x"] = 4 + 4 * d, d, vecs
    return b"PGCOPY\n\xff\r\n\0" + b"\0" * 8 + a.tobytes() + b"\xff\xff"


# The phases of the CREATE INDEX run by the session named cagra_bench_build,
# as NOTICEs "phase|epoch|name" at each change, "(done)" once it is gone.
BUILD_MONITOR_SQL = """
DO $$
DECLARE
    seen boolean := false;
    last text := '';
    cur text;
    waited int := 0;
BEGIN
    LOOP
        PERFORM pg_stat_clear_snapshot();
        SELECT p.phase INTO cur FROM pg_stat_progress_create_index p JOIN pg_stat_activity a USING (pid)
         WHERE a.application_name = 'cagra_bench_build';
        IF cur IS NULL THEN
            EXIT WHEN seen OR waited > 3000;
            waited := waited + 1;
        ELSIF cur IS DISTINCT FROM last THEN
            RAISE NOTICE 'phase|%|%', extract(epoch FROM clock_timestamp()), cur;
            last := cur;
            seen := true;
        END IF;
        PERFORM pg_sleep(0.01);
    END LOOP;
    RAISE NOTICE 'phase|%|(done)', extract(epoch FROM clock_timestamp());
END $$"""


class Db:
    def __init__(self, dsn):
        self.dsn = dsn

    def psql(self, sql, stdin=None):
        cmd = ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", self.dsn, "-c", sql]
        binary = isinstance(stdin, bytes)
        r = subprocess.run(cmd, input=stdin, capture_output=True, text=not binary)
        out, err = (r.stdout.decode(), r.stderr.decode()) if binary else (r.stdout, r.stderr)
        if r.returncode != 0:
            sys.exit("psql failed: %s\n%s" % (sql[:200], err))
        return out.strip()

    def worker_cpu_seconds(self):
        """CPU seconds of the cagra GPU worker so far (0 when none runs here)."""
        pid = int(self.psql("SELECT coalesce((SELECT pid FROM pg_stat_activity "
                            "WHERE backend_type = 'cagra gpu worker' LIMIT 1), 0)"))
        return sum(proc_cpu_seconds([pid]).values()) if pid else 0.0

    def timed(self, sql):
        t = time.time()
        self.psql(sql)
        return time.time() - t

    def timed_build(self, sql):
        """Run `sql` (a CREATE INDEX) and time it, with the seconds of each
        phase pg_stat_progress_create_index showed for it, sampled every
        10 ms by a second session (pg_stat_clear_snapshot() before each read:
        a transaction otherwise keeps its first view of the statistics).
        Returns (seconds, [(phase, seconds), ...])."""
        monitor = subprocess.Popen(
            ["psql", "-X", "-q", "-At", "-d", self.dsn, "-c", BUILD_MONITOR_SQL],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)  # the monitor is connected and polling
        t = time.time()
        self.psql("SET application_name = 'cagra_bench_build'; " + sql)
        secs = time.time() - t
        _, err = monitor.communicate(timeout=60)
        marks = []
        for line in err.splitlines():
            m = re.match(r"NOTICE:\s+phase\|([0-9.]+)\|(.*)$", line)
            if m:
                marks.append((float(m.group(1)), m.group(2)))
        phases = [(marks[i][1], marks[i + 1][0] - marks[i][0]) for i in range(len(marks) - 1)
                  if marks[i][1] != "(done)"]
        return secs, phases

    def backend_pids(self, application_name):
        """pids of the server backends of connections named `application_name`."""
        out = self.psql("SELECT pid FROM pg_stat_activity WHERE application_name = '%s' "
                        "AND pid <> pg_backend_pid()" % application_name)
        return [int(x) for x in out.split()]

    def pgbench(self, script, clients, seconds, settings=()):
        """One pgbench run (prepared statements, `settings` as connection
        options).  Returns transactions/s, the server CPU seconds per
        transaction outside the GPU worker (the whole machine's busy time less
        pgbench's own and the worker's: other processes count too), and the
        CPU seconds per transaction of the pgbench connections' backends alone
        (from /proc/<pid>/stat over a window inside the run, transactions
        counted in that window from pgbench's per-second log), or None when
        the run is too short for a window."""
        tps, server, (backend,) = self.run_pgbench(script, clients, seconds, settings)
        return tps, server, backend

    def run_pgbench(self, script, clients, seconds, settings=(), backends=None):
        """pgbench() with the CPU of other backends sampled over the same
        window: `backends` is a list of (Db, application_name) pairs (default
        [(self, "pgbench")], the pgbench connections' backends), e.g. the
        postgres_fdw connections' backends on the shards behind a
        coordinator.  Returns transactions/s, the server CPU seconds per
        transaction as pgbench() does (the machine's busy time less
        pgbench's and the GPU workers': this server's and those of the
        pairs' servers), and per pair the CPU seconds per transaction of its
        backends (None when the run is too short for a window or none of
        them lived through it)."""
        backends = backends or [(self, "pgbench")]
        servers = list({db.dsn: db for db in [self] + [db for db, _ in backends]}.values())
        tmp = tempfile.mkdtemp(prefix="sql_bench.")
        path = os.path.join(tmp, "script.sql")
        with open(path, "w") as f:
            f.write(script)
        try:
            cmd = ["pgbench", "-n", "-M", "prepared", "-f", path, "-c", str(clients),
                   "-j", str(min(clients, os.cpu_count() or 1)), "-T", str(seconds),
                   "-l", "--aggregate-interval=1", "--log-prefix=" + os.path.join(tmp, "log"), self.dsn]
            env = dict(os.environ, PGOPTIONS=pg_options(settings), PGAPPNAME="pgbench")
            before = (machine_busy_seconds(), children_cpu_seconds(), workers_cpu_seconds(servers))
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=env, cwd=tmp)
            window = sample_backends(backends, time.time(), seconds) if seconds >= 4 else None
            out, err = proc.communicate()
            after = (machine_busy_seconds(), children_cpu_seconds(), workers_cpu_seconds(servers))
            if proc.returncode != 0:
                sys.exit("pgbench failed:\n%s" % err)
            m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
            n = re.search(r"number of transactions actually processed: ([0-9]+)", out)
            server = (after[0] - before[0]) - (after[1] - before[1]) - (after[2] - before[2])
            per_xact = [None] * len(backends)
            if window:
                t1, t2, cpus = window
                xacts = transactions_between(tmp, t1, t2)
                per_xact = [cpu / xacts if cpu is not None and xacts > 0 else None for cpu in cpus]
            return float(m.group(1)), server / max(int(n.group(1)), 1), per_xact
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def answers(self, statement, qids, settings=(), jobs=1):
        """The rows `statement` returns for each query id: the statement names
        its query by `:q`, as in a pgbench script, and runs as a prepared
        statement would (`:q` becomes the parameter $1 of an EXECUTE, once
        per query), with `settings` in force, from `jobs` sessions at once.
        Returns {qid: [id, ...]} (the statement's column id, in its order;
        queries with no row are absent)."""
        chunks = [qids[i::jobs] for i in range(jobs) if qids[i::jobs]]
        sql = (set_statements(settings) + ANSWERS_FUNCTION +
               "; SELECT qid, id FROM pg_temp.bench_answers($stmt$" + statement.replace(":q", "$1") +
               "$stmt$, ARRAY[{qids}]::int[])")
        with concurrent.futures.ThreadPoolExecutor(len(chunks)) as pool:
            outs = list(pool.map(lambda c: self.psql(sql.replace("{qids}", ",".join(map(str, c)))), chunks))
        rows = {}
        for line in "\n".join(outs).split():
            qid, rid = line.split("|")
            rows.setdefault(int(qid), []).append(int(rid))
        return rows


# one EXECUTE of a statement per query id, each row returned with that id
ANSWERS_FUNCTION = """CREATE FUNCTION pg_temp.bench_answers(statement text, qids int[])
RETURNS TABLE (qid int, id bigint) LANGUAGE plpgsql AS $fn$
DECLARE
    q int;
BEGIN
    FOREACH q IN ARRAY qids LOOP
        RETURN QUERY EXECUTE format('SELECT %s, x.id::bigint FROM (%s) x', q, statement) USING q;
    END LOOP;
END $fn$"""


def workers_cpu_seconds(servers):
    return sum(db.worker_cpu_seconds() for db in servers)


def sample_backends(backends, started, seconds):
    """(t1, t2, [CPU seconds]) of the backends of each (Db,
    application_name) pair between t1 and t2, a window that leaves out the
    first and last second of the run (None for a pair none of whose backends
    lived through the window)."""
    time.sleep(1.5)
    pids = [db.backend_pids(name) for db, name in backends]
    t1, cpu1 = time.time(), [proc_cpu_seconds(p) for p in pids]
    time.sleep(max(0.5, started + seconds - 1.0 - time.time()))
    t2, cpu2 = time.time(), [proc_cpu_seconds(p) for p in pids]
    cpus = []
    for a, b in zip(cpu1, cpu2):
        common = set(a) & set(b)
        cpus.append(sum(b[p] - a[p] for p in common) if common else None)
    return t1, t2, cpus


def pg_options(settings):
    """PGOPTIONS for (name, value) settings: given at connection start, so no
    statement of the benchmark pays for them."""
    return " ".join("-c %s=%s" % (name, value) for name, value in settings)


def set_statements(settings):
    return "".join("SET %s = %s; " % (name, value) for name, value in settings)


def proc_cpu_seconds(pids):
    """utime + stime of each pid still alive, in seconds."""
    out = {}
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass
    return out


def transactions_between(logdir, t1, t2):
    """Transactions pgbench logged between epoch times t1 and t2, from its
    per-second aggregate logs (one per thread), each second's count prorated
    by its overlap with the window."""
    total = 0.0
    for name in os.listdir(logdir):
        if not name.startswith("log"):
            continue
        with open(os.path.join(logdir, name)) as f:
            for line in f:
                fields = line.split()
                if len(fields) < 2:
                    continue
                start, count = int(fields[0]), int(fields[1])
                overlap = min(start + 1, t2) - max(start, t1)
                if overlap > 0:
                    total += count * overlap
    return total


def machine_busy_seconds():
    """CPU seconds the whole machine spent busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:]]
    return (t[0] + t[1] + t[2] + t[5] + t[6]) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def load(db, dirname, more_columns=(), column_storage=None):
    """DIR's base vectors into bench_items (id int PRIMARY KEY, v vector,
    then `more_columns`: (name, numpy int32 or int64 array) pairs, a value
    per base vector), and its queries and ground truth (load_queries).
    column_storage (e.g. "main"): v's STORAGE, set before the rows go in
    (the type's default, external, moves vectors above about 500
    dimensions out of line into the TOAST table)."""
    base = read_vecs(os.path.join(dirname, "base.fvecs"), "f")
    dim = base.shape[1]
    db.psql("DROP TABLE IF EXISTS bench_items")
    db.psql("CREATE TABLE bench_items (id int PRIMARY KEY, v vector(%d)%s)"
            % (dim, "".join(", %s %s" % (name, SQL_INT[values.dtype.itemsize]) for name, values in more_columns)))
    if column_storage:
        db.psql("ALTER TABLE bench_items ALTER COLUMN v SET STORAGE %s" % column_storage)
    t = time.time()
    db.psql("\\copy bench_items (id, %s v) FROM STDIN (FORMAT binary)" % "".join(name + ", " for name, _ in more_columns),
            copy_binary([np.arange(len(base), dtype=np.int32)] + [values for _, values in more_columns], base))
    db.psql("VACUUM ANALYZE bench_items")
    nq = load_queries(db, dirname)
    print("loaded %d vectors of %d dimensions, %d queries in %.1f s" % (len(base), dim, nq, time.time() - t))


def load_queries(db, dirname):
    """DIR's queries into bench_queries (qid int PRIMARY KEY, v vector) and
    the ids of their 10 nearest base vectors into bench_gt (qid, rank, id).
    Returns the number of queries."""
    query = read_vecs(os.path.join(dirname, "query.fvecs"), "f")
    gt = read_vecs(os.path.join(dirname, "gt.ivecs"), "i")
    db.psql("DROP TABLE IF EXISTS bench_queries, bench_gt")
    db.psql("CREATE TABLE bench_queries (qid int PRIMARY KEY, v vector(%d))" % query.shape[1])
    db.psql("CREATE TABLE bench_gt (qid int, rank int, id int, PRIMARY KEY (qid, rank))")
    db.psql("\\copy bench_queries FROM STDIN (FORMAT binary)",
            copy_binary([np.arange(len(query), dtype=np.int32)], query))
    db.psql("\\copy bench_gt FROM STDIN",
            "".join("%d\t%d\t%d\n" % (q, r, i) for q, row in enumerate(gt) for r, i in enumerate(row[:10])))
    for table in ("bench_queries", "bench_gt"):
        db.psql("VACUUM ANALYZE " + table)
    return len(query)


# recall@10 of the index over every query, in one statement
RECALL_SQL = """
SELECT count(*)::float8 / (10 * (SELECT count(*) FROM bench_queries))
  FROM bench_queries q CROSS JOIN LATERAL
       (SELECT id FROM bench_items i ORDER BY i.v {op} q.v LIMIT 10) x
  JOIN bench_gt g ON g.qid = q.qid AND g.id = x.id
"""

QUERY_SCRIPT = """\\set q random(0, {nq})
SELECT id FROM bench_items ORDER BY v {op} (SELECT v FROM bench_queries WHERE qid = :q) LIMIT 10;
"""


def run_method(db, label, settings, args, nq):
    """recall, 1-client and N-client queries/s with `settings` ((name, value)
    pairs) in force.  The recall statement runs every query in one backend:
    its time per query is the search's cost without the client round trip
    (less noisy on a busy machine than pgbench's queries/s).  pgbench gets the
    settings as connection options and runs prepared statements, like every
    pgbench run here."""
    settings = list(settings) + [("enable_seqscan", "off")]
    t = time.time()
    recall = float(db.psql(set_statements(settings) + RECALL_SQL.format(op=args.op)))
    in_server_ms = (time.time() - t) * 1000.0 / nq
    script = QUERY_SCRIPT.format(nq=nq - 1, op=args.op)
    qps1, _, _ = db.pgbench(script, 1, args.seconds, settings)
    line = "%-34s recall@10 %.3f  %.3f ms/query in one statement  1 client %6.0f q/s" % (
        label, recall, in_server_ms, qps1)
    for clients in args.clients:
        qpsn, cpu, backend = db.pgbench(script, clients, args.seconds, settings)
        line += "  %d clients %6.0f q/s (server CPU %.3f, backends' CPU %s ms/query)" % (
            clients, qpsn, cpu * 1000.0, fmt_ms(backend))
    print(line, flush=True)


def create_extensions(db):
    """cagra, after the real pgvector when the server has it: cagra's
    operator classes then attach to pgvector's type, and HNSW figures come
    from the same run."""
    if (db.psql("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'") == "1"
            and db.psql("SELECT count(*) FROM pg_extension WHERE extname = 'cagra'") == "0"):
        db.psql("CREATE EXTENSION IF NOT EXISTS vector")
    db.psql("CREATE EXTENSION IF NOT EXISTS cagra")


def has_pgvector(db):
    return db.psql("SELECT count(*) FROM pg_extension WHERE extname = 'vector'") == "1"


def print_server(db):
    print(db.psql("SELECT 'PostgreSQL ' || current_setting('server_version') || ', '"
                  " || current_setting('max_parallel_maintenance_workers') || ' parallel maintenance workers, '"
                  " || 'maintenance_work_mem ' || current_setting('maintenance_work_mem') || ', '"
                  " || 'shared_buffers ' || current_setting('shared_buffers')"))
    print("machine: %d CPUs (os.cpu_count)" % (os.cpu_count() or 0))


def fmt_ms(seconds):
    return "n/a" if seconds is None else "%.3f" % (seconds * 1000.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--dsn", default="")
    ap.add_argument("--degree", type=int, default=32)
    ap.add_argument("--intermediate", type=int, default=64)
    ap.add_argument("--itopk", default="32,64,128")
    ap.add_argument("--clients", type=lambda v: [int(x) for x in v.split(",")], default=[4])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--exact-queries", type=int, default=50)
    ap.add_argument("--hnsw-ef", default="40,80")
    ap.add_argument("--hnsw-m", default="16")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--devices", default="auto")
    ap.add_argument("--sweep", default="")
    ap.add_argument("--ceiling", action="store_true")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--batch-clients", type=int, default=0)
    ap.add_argument("--maintenance-work-mem", default="1GB")
    ap.add_argument("--column-storage", choices=["external", "main", "plain", "extended"], default=None)
    ap.add_argument("--opclass", choices=["l2", "ip", "cosine"], default="l2")
    ap.add_argument("--storage", default="float32",
                    help="comma-separated storage reloption values, one cagra index each")
    args = ap.parse_args()
    args.op = {"l2": "<->", "ip": "<#>", "cosine": "<=>"}[args.opclass]
    db = Db(args.dsn)
    create_extensions(db)
    if not args.skip_load:
        load(db, args.dir, column_storage=args.column_storage)
    nq = int(db.psql("SELECT count(*) FROM bench_queries"))
    print_server(db)

    # exact search
    if args.exact_queries > 0:
        t = time.time()
        db.psql("SET enable_indexscan = off; SELECT count(*) FROM (SELECT q.qid, x.id FROM "
                "(SELECT * FROM bench_queries ORDER BY qid LIMIT %d) q CROSS JOIN LATERAL "
                "(SELECT id FROM bench_items i ORDER BY i.v %s q.v LIMIT 10) x) s" % (args.exact_queries, args.op))
        print("%-30s recall@10 1.000  %.3f ms/query"
              % ("exact (seq scan)", (time.time() - t) * 1000.0 / args.exact_queries))

    # cagra, once per storage element type
    for storage in args.storage.split(","):
        db.psql("DROP INDEX IF EXISTS bench_items_cagra")
        secs, phases = db.timed_build("SET maintenance_work_mem = '%s'; CREATE INDEX bench_items_cagra ON bench_items "
                        "USING cagra (v vector_%s_ops) WITH (graph_degree = %d, intermediate_graph_degree = %d, "
                        "storage = %s)" % (args.maintenance_work_mem, args.opclass, args.degree, args.intermediate,
                                           storage))
        size = db.psql("SELECT pg_size_pretty(pg_relation_size('bench_items_cagra'))")
        print("cagra CREATE INDEX (degree %d, intermediate %d, storage %s): %.1f s, %s"
              % (args.degree, args.intermediate, storage, secs, size))
        print("built on: %s" % db.psql("SELECT build_device FROM cagra_index_info('bench_items_cagra')"))
        print("phases: %s" % ", ".join("%s %.2f s" % p for p in phases))
        sweep_name, _, sweep_values = args.sweep.partition("=")
        for device in args.devices.split(","):
            for itopk in [int(x) for x in args.itopk.split(",")]:
                for value in (sweep_values.split(",") if sweep_name else [None]):
                    extra = [(sweep_name, value)] if value is not None else []
                    label = "cagra %s %s itopk_size %d" % (storage, device, itopk)
                    if value is not None:
                        label += " %s=%s" % (sweep_name.replace("cagra.", ""), value)
                    run_method(db, label, [("cagra.device", device), ("cagra.itopk_size", itopk)] + extra,
                               args, nq)
        if args.batch:
            batch_search(db, args.batch, nq)
            if args.batch_clients:
                batch_search_concurrent(db, args.batch, args.batch_clients, args.seconds)
        if db.psql("SELECT count(*) FROM pg_views WHERE viewname = 'cagra_status'") == "1":
            print(db.psql("SELECT format('worker: %s, queries %s, batches %s, mean batch %s, fallbacks %s', "
                          "state, queries, batches, round(mean_batch_size::numeric, 2), fallbacks) FROM cagra_status"))
            print(db.psql("SELECT coalesce(string_agg(format('worker copy: %s nodes, %s MB on device %s', nodes, "
                          "round(size_mb::numeric, 1), device), '; '), 'worker copy: none') FROM cagra_worker_cache()"))
        db.psql("DROP INDEX bench_items_cagra")

    # pgvector HNSW, when pgvector is the vector type's owner
    if has_pgvector(db):
        for m in [int(x) for x in args.hnsw_m.split(",") if x]:
            efc = 64 if m <= 16 else 128
            secs, phases = db.timed_build("SET maintenance_work_mem = '%s'; CREATE INDEX bench_items_hnsw ON bench_items "
                            "USING hnsw (v vector_%s_ops) WITH (m = %d, ef_construction = %d)"
                            % (args.maintenance_work_mem, args.opclass, m, efc))
            print("pgvector HNSW CREATE INDEX (m %d, ef_construction %d): %.1f s, %s"
                  % (m, efc, secs, db.psql("SELECT pg_size_pretty(pg_relation_size('bench_items_hnsw'))")))
            print("phases: %s" % ", ".join("%s %.2f s" % p for p in phases))
            for ef in [int(x) for x in args.hnsw_ef.split(",")]:
                run_method(db, "pgvector hnsw m %d ef_search %d" % (m, ef), [("hnsw.ef_search", ef)], args, nq)
            db.psql("DROP INDEX bench_items_hnsw")
    else:
        print("pgvector not installed in this database: no HNSW figures")

    if args.ceiling:
        db.psql("DROP TABLE IF EXISTS bench_lookup; CREATE TABLE bench_lookup (id int PRIMARY KEY, x int);"
                "INSERT INTO bench_lookup SELECT g, g FROM generate_series(1, 1000) g")
        db.psql("VACUUM ANALYZE bench_lookup")
        for clients in args.clients:
            tps, cpu, backend = db.pgbench("\\set i random(1, 1000)\nSELECT x FROM bench_lookup WHERE id = :i;\n",
                                           clients, args.seconds)
            print("ceiling: one-row lookup in a 1,000-row table, %d clients: %.0f q/s  server CPU %.3f ms/query"
                  "  backends' CPU %s ms/query" % (clients, tps, cpu * 1000.0, fmt_ms(backend)))


def batch_array_sql(batch, nq):
    """SQL for an array of `batch` query vectors: bench_queries in qid
    order, repeated as often as needed (query i of the array is qid
    (i - 1) % nq)."""
    reps = (batch + nq - 1) // nq
    return ("(SELECT array_agg(v ORDER BY g, qid) FROM (SELECT v, g, qid FROM bench_queries, "
            "generate_series(1, %d) g ORDER BY g, qid LIMIT %d) s)" % (reps, batch))


def timed_calls(db, array, call, batch, settings=(), runs=5):
    """Server-side time of `runs` executions of `call` (a set-returning
    call in which qs stands for the query array), the array (SQL `array`,
    `batch` queries) built beforehand in the same session: timed with
    clock_timestamp() in a DO block, with the backend's CPU time (from
    /proc/self/stat of the backend, read with pg_read_file: superusers only,
    and only where /proc exists).  The first call (which may load the
    worker's copy of the index) is not counted when there are others.
    Returns (best s, median s, calls counted, rows of a call, backend CPU
    microseconds per query or None)."""
    out = db.psql("""%s
CREATE TEMP TABLE bench_batch_runs (run int, secs float8, nrows bigint, ticks bigint);
DO $$
DECLARE
    qs vector[] := %s;
    t0 timestamptz;
    secs float8;
    n bigint;
    c0 bigint;
    c1 bigint;
BEGIN
    FOR r IN 1..%d LOOP
        BEGIN
            c0 := split_part(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ', 12)::bigint
                + split_part(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ', 13)::bigint;
        EXCEPTION WHEN OTHERS THEN
            c0 := NULL;
        END;
        t0 := clock_timestamp();
        SELECT count(*) INTO n FROM %s;
        secs := extract(epoch FROM clock_timestamp() - t0);
        IF c0 IS NOT NULL THEN
            c1 := split_part(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ', 12)::bigint
                + split_part(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ', 13)::bigint;
        END IF;
        INSERT INTO bench_batch_runs VALUES (r, secs, n, c1 - c0);
    END LOOP;
END $$;
SELECT secs, nrows, coalesce(ticks::text, '') FROM bench_batch_runs ORDER BY run""" % (
        set_statements(settings), array, runs, call))
    rows = [x.split("|") for x in out.splitlines()]
    timed = rows[1:] if len(rows) > 1 else rows
    times = sorted(float(r[0]) for r in timed)
    ticks = [int(r[2]) for r in timed if r[2] != ""]
    cpu = (sum(ticks) / os.sysconf("SC_CLK_TCK") * 1e6 / (batch * len(ticks))
           if len(ticks) == len(timed) else None)
    return times[0], times[len(times) // 2], len(timed), int(rows[0][1]), cpu


def batch_search(db, batch, nq, index="bench_items_cagra", table="bench_items", itopk=32, runs=5):
    """cagra_search with `batch` queries in one call (the query set repeated)
    at cagra.itopk_size `itopk` (None: the server's): the server-side time
    of the call alone (timed_calls: best and median of `runs` calls, the
    backend's CPU time per query), the end-to-end time of one statement that
    also builds the array (as psql sees it), and recall@10 over the distinct
    queries of the call.  Prints them; returns (best q/s, median q/s,
    backend CPU us per query or None, recall), of the generic plan."""
    array = batch_array_sql(batch, nq)
    # work_mem: the 100,000 result rows stay in the function's tuplestore
    # in memory instead of spilling to a temporary file
    settings = ([("cagra.itopk_size", itopk)] if itopk else []) + [("work_mem", "'64MB'")]
    # The first five executions of a statement with a parameter (here the
    # PL/pgSQL variable qs) get custom plans, in which PostgreSQL copies the
    # array's value into the plan twice; later ones reuse the generic plan,
    # as an application's prepared statement does.  Both are measured; the
    # generic plan's figures are returned.
    for mode in ("auto", "force_generic_plan"):
        best, median, counted, nrows, cpu = timed_calls(
            db, array, "cagra_search('%s', qs, 10)" % index, batch,
            list(settings) + [("plan_cache_mode", mode)], runs)
        print("cagra_search, %d queries in one call, server side (array built beforehand, plan_cache_mode %s): "
              "best %.3f s (%.0f q/s), median of %d %.3f s (%.0f q/s), %d rows; backend CPU per query %s"
              % (batch, mode, best, batch / best, counted, median, batch / median, nrows,
                 "n/a" if cpu is None else "%.2f us" % cpu))
    t = time.time()
    out = db.psql(set_statements(settings) + "SELECT count(*) FROM cagra_search('%s', %s, 10)" % (index, array))
    secs = time.time() - t
    print("cagra_search, %d queries in one call, end to end (array build, statement, client): %.3f s, %.0f q/s"
          " (%s rows)" % (batch, secs, batch / secs, out.splitlines()[-1]))
    recall = float(db.psql(set_statements(settings) + """
WITH r AS (SELECT query - 1 AS qid, ctid FROM cagra_search('%s', %s, 10) WHERE query <= %d)
SELECT count(*)::float8 / (10 * %d) FROM r JOIN %s i ON i.ctid = r.ctid
  JOIN bench_gt g ON g.qid = r.qid AND g.id = i.id""" % (index, array, min(nq, batch), min(nq, batch), table)))
    print("cagra_search recall@10 over the first %d queries: %.3f" % (min(nq, batch), recall))
    return batch / best, batch / median, cpu, recall


def batch_search_concurrent(db, batch, clients, seconds):
    """cagra_search calls of `batch` queries from `clients` sessions at once
    (pgbench, the array stored beforehand in a one-row table): queries/s of
    the whole server."""
    reps = "(SELECT (%d + count(*) - 1) / count(*) FROM bench_queries)" % batch
    # stored uncompressed: each call reads the array, none decompresses it
    db.psql("DROP TABLE IF EXISTS bench_batch; CREATE TABLE bench_batch (qs vector[]); "
            "ALTER TABLE bench_batch ALTER qs SET STORAGE EXTERNAL; "
            "INSERT INTO bench_batch SELECT array_agg(v ORDER BY g, qid) FROM (SELECT v, g, qid "
            "FROM bench_queries, generate_series(1, %s) g ORDER BY g, qid LIMIT %d) s" % (reps, batch))
    script = ("SELECT count(*) FROM cagra_search('bench_items_cagra', (SELECT qs FROM bench_batch), 10);\n")
    tps, _, backend = db.pgbench(script, clients, seconds,
                                 [("cagra.itopk_size", 32), ("work_mem", "64MB")])
    print("cagra_search, %d queries per call, %d sessions at once: %.1f calls/s, %.0f q/s; backends' CPU %s ms/call"
          % (batch, clients, tps, tps * batch, fmt_ms(backend)))


if __name__ == "__main__":
    main()
