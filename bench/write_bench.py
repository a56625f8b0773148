#!/usr/bin/python3
"""bench/write_bench.py — the write path through SQL, cagra beside pgvector HNSW.

On a texmex data set (bench/gen.py, bench/text_dataset.py), in one run and on
one server, for cagra and (when pgvector's `vector` extension is installed)
pgvector HNSW m 16, ef_construction 64:

  build    CREATE INDEX on the whole set at each --build-mem
           (maintenance_work_mem): seconds, the seconds of each
           pg_stat_progress_create_index phase, index size, and recall@10 at
           the default search settings (the figure users get)
  insert   an index built on the first --insert-base of the set, then rows of
           the rest inserted one row a statement by 1, 4 and 16 sessions
           (--sessions; pgbench, --insert-rows rows at each count): rows/s;
           for cagra once per --devices value (cagra.device: auto sends work
           to the GPU worker when it runs, cpu keeps it in the backend)
  grow     inserting on (16 sessions) until the table has grown by each
           --grow fraction of the built size: recall@10 against the exact
           answer of the rows present, and a fresh build's recall on the same
           rows beside it
  churn    --churn of the rows deleted, VACUUM (seconds, index size), the
           rows inserted again (rows/s, reusing the freed slots), recall@10
  vacuum   an index built on the whole set (in a copy of it), --churn of the
           rows deleted, VACUUM (seconds, index size before and after,
           recall@10); for cagra with the seconds of each step of its index
           pass (logged at DEBUG1)

Prints the figures; it asserts nothing.

usage: write_bench.py DIR [options]      (psql and pgbench from PATH)
  --dsn 'host=... dbname=...'   libpq connection string (default: PG* env)
  --opclass l2|ip|cosine        operator class (the ground truth must be of that metric)
  --build-mem 64MB,1GB,16GB     maintenance_work_mem values for the build (empty: no build phase)
  --insert-base 0.5             fraction of the set the insert index is built on
  --insert-rows 5000            rows inserted at each session count
  --sessions 1,4,16             inserting sessions
  --grow 0.25,1.0               growth fractions (of the insert base) to measure recall at
  --churn 0.1                   fraction deleted and inserted again (0: skip)
  --devices auto,cpu            cagra.device values for cagra's inserts
  --methods cagra,hnsw          which indexes (none: the inserts with no vector index)
  --gt-queries 200              queries recall is measured over (exact answers computed here)
  --phases build,insert         which of build, insert (with grow and churn), vacuum
  --skip-load                   reuse bench_items of an earlier run
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sql_bench import Db, create_extensions, has_pgvector, load, pg_options, print_server, read_vecs  # noqa: E402

AMPLE_MEM = "16GB"
INSERT_SCRIPT = ("INSERT INTO bench_grow (id, v) SELECT id, v FROM bench_items "
                 "WHERE id = (SELECT nextval('bench_grow_next'));\n")


class Method:
    """One index kind: how to create it and what its default search is."""

    def __init__(self, name, using, options):
        self.name, self.using, self.options = name, using, options

    def create_sql(self, index, table, opclass, mem):
        return ("SET maintenance_work_mem = '%s'; CREATE INDEX %s ON %s USING %s (v vector_%s_ops)%s"
                % (mem, index, table, self.using, opclass, self.options))


METHODS = {
    "cagra": Method("cagra", "cagra", ""),
    "hnsw": Method("pgvector HNSW m 16", "hnsw", " WITH (m = 16, ef_construction = 64)"),
    # the same table and inserts without a vector index: what the server
    # itself takes a row, the ceiling of any index's rows/s
    "none": Method("no vector index", None, ""),
}


def exact_ids(base, queries, present, op, k=10):
    """The k nearest of the rows `present` (a boolean mask over base ids) for
    each query, by the metric of `op`, in float64."""
    ids = np.nonzero(present)[0]
    rows = base[ids].astype(np.float64)
    q = queries.astype(np.float64)
    if op == "<->":
        d = (rows * rows).sum(1)[None, :] - 2.0 * q @ rows.T
    elif op == "<#>":
        d = -(q @ rows.T)
    else:
        d = -(q @ rows.T) / np.maximum(np.linalg.norm(rows, axis=1)[None, :], 1e-30)
    part = np.argpartition(d, k, axis=1)[:, :k]
    return ids[part]


def recall(db, table, op, settings=()):
    """recall@10 of `table`'s index over bench_queries against bench_wgt (the
    exact answer loaded by load_truth), the index forced."""
    sets = "".join("SET %s = %s; " % (n, v) for n, v in list(settings) + [("enable_seqscan", "off")])
    return float(db.psql(sets + """
SELECT count(*)::float8 / (10 * (SELECT count(DISTINCT qid) FROM bench_wgt))
  FROM bench_queries q CROSS JOIN LATERAL
       (SELECT id FROM {t} i ORDER BY i.v {op} q.v LIMIT 10) x
  JOIN bench_wgt g ON g.qid = q.qid AND g.id = x.id""".format(t=table, op=op)))


def load_truth(db, truth):
    """bench_wgt (qid, id): the exact 10 nearest ids of each query."""
    db.psql("DROP TABLE IF EXISTS bench_wgt; CREATE TABLE bench_wgt (qid int, id int)")
    db.psql("\\copy bench_wgt FROM STDIN",
            "".join("%d\t%d\n" % (qi, i) for qi, row in enumerate(truth) for i in row))
    db.psql("ANALYZE bench_wgt")


def index_size(db, index):
    return db.psql("SELECT pg_size_pretty(pg_relation_size('%s'))" % index)


def pgbench_rows(db, script, sessions, rows, settings=()):
    """`script` (one row a transaction) run `rows` times in all by `sessions`
    pgbench clients (the remainder by the first ones).  Returns rows/s over
    the whole run (connections included) and its seconds."""
    tmp = tempfile.mkdtemp(prefix="write_bench.")
    path = os.path.join(tmp, "script.sql")
    with open(path, "w") as f:
        f.write(script)
    t = time.time()
    procs = []
    per, extra = divmod(rows, sessions)
    # one pgbench a distinct count of transactions: -t is per client
    for count, clients in ((per + 1, extra), (per, sessions - extra)):
        if clients and count:
            procs.append(subprocess.Popen(
                ["pgbench", "-n", "-M", "prepared", "-f", path, "-c", str(clients), "-j", str(clients),
                 "-t", str(count), db.dsn], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env=dict(os.environ, PGOPTIONS=pg_options(settings), PGAPPNAME="write_bench")))
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            sys.exit("pgbench failed:\n%s" % err)
    secs = time.time() - t
    shutil.rmtree(tmp, ignore_errors=True)
    return rows / secs, secs


def insert_rows(db, rows, sessions, settings=()):
    """`rows` rows of bench_items inserted into bench_grow by `sessions`
    sessions, one row a statement.  Returns rows/s and seconds."""
    return pgbench_rows(db, INSERT_SCRIPT, sessions, rows, settings)


def worker_uploads(db):
    """Index copies the worker has loaded whole so far, or None when no
    worker runs."""
    got = db.psql("SELECT uploads FROM cagra_status WHERE state = 'running'")
    return int(got) if got else None


def build_phase(db, args, method):
    for mem in [m for m in args.build_mem.split(",") if m]:
        db.psql("DROP INDEX IF EXISTS bench_build_idx")
        secs, phases = db.timed_build(method.create_sql("bench_build_idx", "bench_items", args.opclass, mem))
        r = recall(db, "bench_items", args.op)
        print("%-20s CREATE INDEX at maintenance_work_mem %-5s %7.1f s  %8s  recall@10 %.3f  phases: %s" % (
            method.name, mem, secs, index_size(db, "bench_build_idx"), r,
            ", ".join("%s %.2f s" % p for p in phases)), flush=True)
    db.psql("DROP INDEX IF EXISTS bench_build_idx")


def grow_table(db, method, args, base_rows):
    db.psql("DROP TABLE IF EXISTS bench_grow; CREATE TABLE bench_grow (id int PRIMARY KEY, v vector(%d))" % args.dim)
    db.psql("INSERT INTO bench_grow SELECT id, v FROM bench_items WHERE id < %d" % base_rows)
    db.psql("VACUUM ANALYZE bench_grow")
    db.psql("DROP SEQUENCE IF EXISTS bench_grow_next; CREATE SEQUENCE bench_grow_next MINVALUE 0 START %d"
            % base_rows)
    if method.using:
        secs, _ = db.timed_build(method.create_sql("bench_grow_idx", "bench_grow", args.opclass, AMPLE_MEM))
        print("%-20s built on %d rows in %.1f s" % (method.name, base_rows, secs), flush=True)


def rows_present(db):
    return int(db.psql("SELECT count(*) FROM bench_grow"))


def truth_of(db, args, base, queries):
    present = np.zeros(len(base), dtype=bool)
    ids = np.array([int(x) for x in db.psql("SELECT id FROM bench_grow").split()], dtype=np.int64)
    present[ids] = True
    load_truth(db, exact_ids(base, queries, present, args.op))


def insert_phase(db, args, method, base, queries):
    n = len(base)
    base_rows = int(n * args.insert_base)
    grow_table(db, method, args, base_rows)
    devices = args.devices.split(",") if method.using == "cagra" else [None]
    for device in devices:
        settings = [("cagra.device", device)] if device else []
        label = method.name + (" (%s)" % device if device else "")
        for s in [int(x) for x in args.sessions.split(",")]:
            room = n - rows_present(db)
            rows = min(args.insert_rows, room)
            if rows < s:
                print("%-20s no rows left to insert" % label)
                break
            uploads = worker_uploads(db)
            rps, secs = insert_rows(db, rows, s, settings)
            copies = "" if uploads is None else ", %d whole copy uploads" % (worker_uploads(db) - uploads)
            print("%-20s INSERT %d sessions: %8.0f rows/s (%d rows, %.1f s%s)" % (label, s, rps, rows, secs, copies),
                  flush=True)
    if not method.using:
        db.psql("DROP TABLE bench_grow")
        return
    # growing: inserts (the most sessions, default device) up to each growth point
    top = max(int(x) for x in args.sessions.split(","))
    for g in [float(x) for x in args.grow.split(",") if x]:
        target = min(n, int(base_rows * (1.0 + g)))
        have = rows_present(db)
        if target > have:
            insert_rows(db, target - have, top)
        have = rows_present(db)
        truth_of(db, args, base, queries)
        r = recall(db, "bench_grow", args.op)
        fresh = fresh_recall(db, args, method)
        print("%-20s grown by %3.0f%% (%d rows): recall@10 %.3f, a fresh build on the same rows %.3f" % (
            method.name, 100.0 * (have - base_rows) / base_rows, have, r, fresh), flush=True)
    if args.churn > 0:
        churn(db, args, method, base, queries, top)
    db.psql("DROP TABLE bench_grow")


def fresh_recall(db, args, method):
    """recall@10 of an index built afresh on bench_grow's rows (in a copy of
    the table, so the grown index stays as it is)."""
    db.psql("DROP TABLE IF EXISTS bench_fresh; CREATE TABLE bench_fresh AS SELECT * FROM bench_grow")
    db.psql(method.create_sql("bench_fresh_idx", "bench_fresh", args.opclass, AMPLE_MEM))
    r = recall(db, "bench_fresh", args.op)
    db.psql("DROP TABLE bench_fresh")
    return r


def churn(db, args, method, base, queries, sessions):
    """--churn of the rows deleted (every row whose id hashes below it),
    VACUUM, then the same rows inserted again."""
    before = index_size(db, "bench_grow_idx")
    modulus = 1000
    cut = int(args.churn * modulus)
    db.psql("DROP TABLE IF EXISTS bench_churned; CREATE TABLE bench_churned AS SELECT id FROM bench_grow "
            "WHERE abs(hashint4(id)) %% %d < %d" % (modulus, cut))
    deleted = int(db.psql("SELECT count(*) FROM bench_churned"))
    t = time.time()
    db.psql("DELETE FROM bench_grow WHERE id IN (SELECT id FROM bench_churned)")
    del_secs = time.time() - t
    vac = db.timed("VACUUM bench_grow")
    after = index_size(db, "bench_grow_idx")
    db.psql("DROP SEQUENCE IF EXISTS bench_churn_next; CREATE SEQUENCE bench_churn_next MINVALUE 0 START 0;"
            "ALTER TABLE bench_churned ADD COLUMN n int; "
            "UPDATE bench_churned c SET n = r.n FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS n "
            "FROM bench_churned) r WHERE r.id = c.id; CREATE INDEX ON bench_churned (n)")
    script = ("INSERT INTO bench_grow (id, v) SELECT i.id, i.v FROM bench_items i JOIN bench_churned c USING (id) "
              "WHERE c.n = (SELECT nextval('bench_churn_next'));\n")
    rps, secs = pgbench_rows(db, script, sessions, deleted)
    truth_of(db, args, base, queries)
    r = recall(db, "bench_grow", args.op)
    print("%-20s churn: %d rows deleted (%.1f s), VACUUM %.1f s, index %s -> %s; inserted again %.0f rows/s "
          "(%.1f s), index %s, recall@10 %.3f" % (
              method.name, deleted, del_secs, vac, before, after, rps, secs,
              index_size(db, "bench_grow_idx"), r), flush=True)
    db.psql("DROP TABLE bench_churned")


def vacuum_phase(db, args, method, base, queries):
    """The whole set in bench_vac, its index, --churn of the rows deleted
    (every row whose id hashes below it), VACUUM."""
    db.psql("DROP TABLE IF EXISTS bench_vac; CREATE TABLE bench_vac AS SELECT id, v FROM bench_items; "
            "ALTER TABLE bench_vac ADD PRIMARY KEY (id)")
    db.psql("VACUUM ANALYZE bench_vac")
    build, _ = db.timed_build(method.create_sql("bench_vac_idx", "bench_vac", args.opclass, AMPLE_MEM))
    before = index_size(db, "bench_vac_idx")
    modulus = 1000
    db.psql("DELETE FROM bench_vac WHERE abs(hashint4(id)) %% %d < %d" % (modulus, int(args.churn * modulus)))
    present = np.zeros(len(base), dtype=bool)
    present[np.array([int(x) for x in db.psql("SELECT id FROM bench_vac").split()], dtype=np.int64)] = True
    deleted = len(base) - int(present.sum())
    t = time.time()
    # cagra logs the seconds of each step of its index pass at DEBUG1
    run = subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db.dsn, "-c",
                          "SET client_min_messages = debug1", "-c", "VACUUM bench_vac"], capture_output=True, text=True)
    secs = time.time() - t
    if run.returncode != 0:
        sys.exit("VACUUM failed:\n%s" % run.stderr)
    log = run.stderr
    steps = [line.split("DEBUG:", 1)[1].strip() for line in log.splitlines()
             if "DEBUG:" in line and "cagra vacuum" in line]
    load_truth(db, exact_ids(base, queries, present, args.op))
    r = recall(db, "bench_vac", args.op)
    print("%-20s built in %.1f s; %d rows deleted, VACUUM %.1f s, index %s -> %s, recall@10 %.3f%s" % (
        method.name, build, deleted, secs, before, index_size(db, "bench_vac_idx"), r,
        "".join("\n    " + x for x in steps)), flush=True)
    db.psql("DROP TABLE bench_vac")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--dsn", default="")
    ap.add_argument("--opclass", choices=["l2", "ip", "cosine"], default="l2")
    ap.add_argument("--build-mem", default="64MB,1GB," + AMPLE_MEM)
    ap.add_argument("--insert-base", type=float, default=0.5)
    ap.add_argument("--insert-rows", type=int, default=5000)
    ap.add_argument("--sessions", default="1,4,16")
    ap.add_argument("--grow", default="0.25,1.0")
    ap.add_argument("--churn", type=float, default=0.1)
    ap.add_argument("--devices", default="auto,cpu")
    ap.add_argument("--methods", default="cagra,hnsw")
    ap.add_argument("--gt-queries", type=int, default=200)
    ap.add_argument("--phases", default="build,insert")
    ap.add_argument("--skip-load", action="store_true")
    args = ap.parse_args()
    args.op = {"l2": "<->", "ip": "<#>", "cosine": "<=>"}[args.opclass]
    db = Db(args.dsn)
    create_extensions(db)
    base = read_vecs(os.path.join(args.dir, "base.fvecs"), "f")
    queries = read_vecs(os.path.join(args.dir, "query.fvecs"), "f")[:args.gt_queries]
    args.dim = base.shape[1]
    if not args.skip_load:
        load(db, args.dir)
    db.psql("DELETE FROM bench_queries WHERE qid >= %d" % args.gt_queries)
    load_truth(db, exact_ids(base, queries, np.ones(len(base), dtype=bool), args.op))
    print_server(db)
    print("set %s: %d x %d, %d queries, %s" % (args.dir, len(base), args.dim, len(queries), args.opclass))
    for name in args.methods.split(","):
        if name == "hnsw" and not has_pgvector(db):
            print("pgvector not installed in this database: no HNSW figures")
            continue
        method = METHODS[name]
        phases = args.phases.split(",")
        if not method.using:
            phases = [p for p in phases if p == "insert"]
        if "build" in phases:
            build_phase(db, args, method)
        if "insert" in phases:
            insert_phase(db, args, method, base, queries)
        if "vacuum" in phases:
            vacuum_phase(db, args, method, base, queries)
        # the grow and vacuum phases loaded the truth of their own rows
        load_truth(db, exact_ids(base, queries, np.ones(len(base), dtype=bool), args.op))


if __name__ == "__main__":
    main()
