#!/usr/bin/python3
"""bench/scale_out_bench.py — issue 17's figures: a texmex set (bench/gen.py)
spread over N shard servers behind a coordinator, as docs/scale-out.md lays
it out, for each N of --shards, and one plain server with one index over all
the rows.  Prints the figures; it asserts nothing.

For each layout, test/scale-out.sh (ROWS=0) starts the coordinator (port
--port) and N shards (ports --port + i) on this machine, each shard with
cagra preloaded (its own GPU worker) when --preload is given; the base
vectors go straight into the shards (shard i: the rows with id % N = i - 1,
as tenant i), the queries and the ground truth into the coordinator, and
every shard builds its cagra index at the same time.  Then, through the
coordinator, with pgbench (prepared statements; 1 client, and --clients
clients):

  partitioned table   SELECT id FROM items ORDER BY v <-> q LIMIT 10
                      (Merge Append of the foreign partitions, one after
                      another; postgres_fdw's fetch_size is --fetch-size)
  items_knn           SELECT id FROM items_knn(q, 10)  (an Append of one
                      pushed-down ORDER BY ... LIMIT 10 per shard, all
                      shards at once)
  items_batch_knn     --batch queries in one call, one cagra_search per
                      shard through dblink

q/s, mean latency (clients / q/s), recall@10 against the ground truth over
every query, the CPU per query of the coordinator's backends, of the shards'
postgres_fdw backends (both from /proc/<pid>/stat over a window inside the
run), and of the whole host less pgbench and the shards' GPU workers
(coordinator, shards and anything else running).  With one shard, the shard
is also measured directly: the plain server (the same query on its table
items, and cagra_search).  cagra runs with its default settings; every
node has work_mem 64MB (as bench/sql_bench.py's cagra_search calls).  The
coordinator does not ANALYZE its foreign
partitions (in PostgreSQL 15 that reads every remote row): it plans with
postgres_fdw's default estimates; its plans are printed.  Each layout's
servers are stopped and removed after it is measured (--logs keeps their
logs).

usage: scale_out_bench.py DIR [options]     (psql, pgbench, pg_config from PATH)
  --shards 1,4              layouts to measure
  --dir /tmp/so-bench       data directories and sockets (removed afterwards)
  --port 5701               the coordinator's port; shard i listens on port + i
  --user cagra_test         the user the servers run as when this runs as root
  --preload                 shared_preload_libraries = 'cagra' on the shards
  --shared-buffers 1GB      every node's shared_buffers
  --clients 64 --seconds 10 pgbench; the 1-client runs take --seconds-one-client (4)
  --fetch-size 10           postgres_fdw's fetch_size (rows per round trip)
  --batch 10000             queries per items_batch_knn / cagra_search call (0: skip)
  --maintenance-work-mem 1GB
  --logs DIR                copy the servers' logs here (LAYOUTshards-nodeI.log) before removing them
"""
import argparse
import concurrent.futures
import os
import shutil
import subprocess
import time

import numpy as np

import sql_bench
from sql_bench import Db, copy_binary, fmt_ms, read_vecs

QUERY = "(SELECT v FROM bench_queries WHERE qid = :q)"
SCALE_OUT_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "scale-out.sh")


class Layout:
    """A coordinator and `shards` shard servers set up by test/scale-out.sh."""

    def __init__(self, args, shards, dim):
        self.args, self.shards = args, shards
        cores = os.cpu_count() or 1
        self.env = dict(os.environ, SHARDS=str(shards), PORT=str(args.port), DIR=args.dir, ROWS="0", DIM=str(dim),
                        FETCH_SIZE=str(args.fetch_size), CAGRA_TEST_USER=args.user,
                        NODE_CONF="\n".join([
                            "max_connections = %d" % (2 * args.clients + 50),
                            "shared_buffers = %s" % args.shared_buffers,
                            "max_worker_processes = 32",
                            # a batch's result rows stay in memory on the shards
                            "work_mem = '64MB'",
                            # the shards build at the same time: the cores shared out
                            "max_parallel_maintenance_workers = %d" % max(1, cores // shards - 1),
                            "jit = off"]),
                        SHARD_CONF="shared_preload_libraries = 'cagra'" if args.preload else "")
        user = "user=%s " % args.user if os.getuid() == 0 else ""
        self.coordinator = Db("host=%s port=%d dbname=postgres %s" % (args.dir, args.port, user))
        self.shard = [Db("host=%s port=%d dbname=postgres %s" % (args.dir, args.port + i, user))
                      for i in range(1, shards + 1)]

    def script(self, command):
        r = subprocess.run(["bash", SCALE_OUT_SH, command], env=self.env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("test/scale-out.sh %s failed:\n%s%s" % (command, r.stdout, r.stderr))

    def __enter__(self):
        self.script("clean")
        self.script("start")
        return self

    def __exit__(self, *exc):
        if self.args.logs:
            os.makedirs(self.args.logs, exist_ok=True)
            for i in range(self.shards + 1):
                log = os.path.join(self.args.dir, "node%d.log" % i)
                if os.path.exists(log):
                    shutil.copy(log, os.path.join(self.args.logs, "%dshards-node%d.log" % (self.shards, i)))
        self.script("clean")

    def on_shards(self, work):
        """work(shard number from 1, Db) on every shard at once; the results in shard order."""
        with concurrent.futures.ThreadPoolExecutor(self.shards) as pool:
            return list(pool.map(work, range(1, self.shards + 1), self.shard))

    def wait_for_workers(self):
        """Each shard's GPU worker state once it has left 'starting' (at most 30 s)."""
        def state(_, db):
            for _ in range(60):
                st = db.psql("SELECT state FROM cagra_status")
                if st not in ("not started", "starting"):
                    return st
                time.sleep(0.5)
            return st
        return self.on_shards(state)

    def load(self, base):
        """Shard i gets the rows with id % shards = i - 1, as tenant i."""
        def load_shard(i, db):
            ids = np.arange(i - 1, len(base), self.shards, dtype=np.int64)
            tenant = np.full(len(ids), i, dtype=np.int32)
            db.psql("\\copy items (tenant, id, v) FROM STDIN (FORMAT binary)", copy_binary([tenant, ids], base[ids]))
            db.psql("VACUUM ANALYZE items")
        t = time.time()
        self.on_shards(load_shard)
        return time.time() - t

    def build(self):
        """CREATE INDEX items_v on every shard at once: (wall seconds, [(seconds, build device)])."""
        def build_shard(_, db):
            secs = db.timed("SET maintenance_work_mem = '%s'; CREATE INDEX items_v ON items USING cagra (v vector_l2_ops)"
                            % self.args.maintenance_work_mem)
            return secs, db.psql("SELECT build_device FROM cagra_index_info('items_v')")
        t = time.time()
        builds = self.on_shards(build_shard)
        return time.time() - t, builds

    def worker_counters(self):
        return self.on_shards(lambda i, db: db.psql(
            "SELECT format('shard %s: worker %s, queries %s, batches %s, mean batch %s, fallbacks %s', " + str(i) +
            ", state, queries, batches, round(mean_batch_size::numeric, 2), fallbacks) FROM cagra_status"))


def recall_at_10(answers, gt):
    return sum(len(set(answers.get(q, ())) & set(gt[q, :10])) for q in range(len(gt))) / (10.0 * len(gt))


def measure(args, db, label, search, statement, gt, backends):
    """recall, 1-client and N-client pgbench of `statement` on `db`; a row of the table."""
    answers = db.answers(statement, list(range(len(gt))), jobs=min(8, os.cpu_count() or 1))
    script = "\\set q random(0, %d)\n%s;\n" % (len(gt) - 1, statement)
    qps1, _, _ = db.pgbench(script, 1, args.seconds_one_client)
    tps, host, cpus = db.run_pgbench(script, args.clients, args.seconds, backends=backends)
    coordinator = cpus[0] if len(backends) > 1 else None
    shards = cpus[1:] if len(backends) > 1 else cpus
    shards_cpu = None if None in shards else sum(shards)
    row = "| %s | %s | %.3f | %.0f (%.2f ms) | %.0f | %.2f | %s | %s | %.3f |" % (
        label, search, recall_at_10(answers, gt), qps1, 1000.0 / qps1, tps, args.clients * 1000.0 / tps,
        fmt_ms(coordinator), fmt_ms(shards_cpu), host * 1000.0)
    print(row, flush=True)
    return row


def batch_knn(args, db, label, nq):
    """items_batch_knn of --batch queries on the coordinator: a row of the batch table."""
    array = sql_bench.batch_array_sql(args.batch, nq)
    settings = [("work_mem", "'256MB'")]
    best, median, counted, nrows, cpu = sql_bench.timed_calls(
        db, array, "items_batch_knn(qs, 10)", args.batch, settings, runs=4)
    recall = float(db.psql(sql_bench.set_statements(settings) + """
SELECT count(*)::float8 / (10 * %d) FROM items_batch_knn(%s, 10) r
  JOIN bench_gt g ON g.qid = r.query - 1 AND g.id = r.id WHERE r.query <= %d""" % (nq, array, nq)))
    row = "| %s | items_batch_knn | %.3f | %.3f / %.3f | %.0f / %.0f | %s |" % (
        label, recall, best, median, args.batch / best, args.batch / median,
        "n/a" if cpu is None else "%.2f" % cpu)
    print(row, flush=True)
    return row


def plain_server(args, db, gt):
    """The shard of a one-shard layout measured directly: one server, one index over every row."""
    sql_bench.load_queries(db, args.dir_data)
    label = "1 plain server, %d rows" % int(db.psql("SELECT count(*) FROM items"))
    row = measure(args, db, label, "ORDER BY v <-> q LIMIT 10",
                  "SELECT id FROM items ORDER BY v <-> %s LIMIT 10" % QUERY, gt, [(db, "pgbench")])
    batch = None
    if args.batch:
        best_qps, median_qps, cpu, recall = sql_bench.batch_search(
            db, args.batch, len(gt), index="items_v", table="items", itopk=None, runs=4)
        batch = "| %s | cagra_search | %.3f | %.3f / %.3f | %.0f / %.0f | %s |" % (
            label, recall, args.batch / best_qps, args.batch / median_qps, best_qps, median_qps,
            "n/a" if cpu is None else "%.2f" % cpu)
    return row, batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir_data", metavar="DIR")
    ap.add_argument("--shards", default="1,4")
    ap.add_argument("--dir", default="/tmp/so-bench")
    ap.add_argument("--port", type=int, default=5701)
    ap.add_argument("--user", default="cagra_test")
    ap.add_argument("--preload", action="store_true")
    ap.add_argument("--shared-buffers", default="1GB")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--seconds-one-client", type=int, default=4)
    ap.add_argument("--fetch-size", type=int, default=10)
    ap.add_argument("--batch", type=int, default=10000)
    ap.add_argument("--maintenance-work-mem", default="1GB")
    ap.add_argument("--logs", default="")
    args = ap.parse_args()
    base = read_vecs(os.path.join(args.dir_data, "base.fvecs"), "f")
    gt = read_vecs(os.path.join(args.dir_data, "gt.ivecs"), "i")
    print("%d vectors of %d dimensions, %d queries; %d clients, %d s a run; fetch_size %d; machine: %d CPUs"
          % (len(base), base.shape[1], len(gt), args.clients, args.seconds, args.fetch_size, os.cpu_count() or 0))
    rows, batch_rows = [], []
    for shards in [int(x) for x in args.shards.split(",")]:
        with Layout(args, shards, base.shape[1]) as layout:
            label = "%d shard%s via coordinator" % (shards, "" if shards == 1 else "s")
            print("\n== %s (%d rows a shard)" % (label, len(base) // shards), flush=True)
            if args.preload:
                print("GPU workers: %s" % ", ".join(layout.wait_for_workers()))
            print("loaded in %.1f s" % layout.load(base))
            wall, builds = layout.build()
            print("CREATE INDEX on every shard at once: %.1f s (%s)"
                  % (wall, ", ".join("%.1f s on %s" % b for b in builds)), flush=True)
            coordinator = layout.coordinator
            nq = sql_bench.load_queries(coordinator, args.dir_data)
            print(coordinator.psql("EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM items ORDER BY v <-> %s LIMIT 10"
                                   % QUERY.replace(":q", "0")))
            print("shard 1, the cursor postgres_fdw opens:\n" + layout.shard[0].psql(
                "EXPLAIN (COSTS OFF) DECLARE c CURSOR FOR SELECT tenant, id, v FROM items "
                "ORDER BY v <-> (SELECT v FROM items LIMIT 1)"))
            backends = [(coordinator, "pgbench")] + [(db, "postgres_fdw") for db in layout.shard]
            rows.append(measure(args, coordinator, label, "partitioned table",
                                "SELECT id FROM items ORDER BY v <-> %s LIMIT 10" % QUERY, gt, backends))
            rows.append(measure(args, coordinator, label, "items_knn",
                                "SELECT id FROM items_knn(%s, 10)" % QUERY, gt, backends))
            if args.batch:
                batch_rows.append(batch_knn(args, coordinator, label, nq))
            if shards == 1:
                row, batch = plain_server(args, layout.shard[0], gt)
                rows.insert(len(rows) - 2, row)
                if batch:
                    batch_rows.insert(len(batch_rows) - 1, batch)
            if args.preload:
                print("\n".join(layout.worker_counters()))

    print("\n%d clients (pgbench -M prepared, %d s; 1 client %d s); recall@10 over %d queries; CPU in ms per query"
          % (args.clients, args.seconds, args.seconds_one_client, len(gt)))
    print("\n| layout | search | recall@10 | 1 client q/s (latency) | %d clients q/s | latency ms "
          "| coordinator backends' CPU | shards' backends' CPU | host CPU less pgbench and GPU workers |" % args.clients)
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    if batch_rows:
        print("\n%d queries a call (best / median of 3 after a first call)\n" % args.batch)
        print("| layout | call | recall@10 | seconds a call | q/s | calling backend's CPU us/query |")
        print("|---|---|---:|---:|---:|---:|")
        print("\n".join(batch_rows))


if __name__ == "__main__":
    main()
