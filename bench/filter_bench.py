#!/usr/bin/python3
"""bench/filter_bench.py — filtered vector search through SQL (issue 16):

    SELECT id FROM bench_items WHERE cat = <value> ORDER BY v <-> (query) LIMIT 10

at several filter selectivities, side by side in one run: cagra (default
settings), pgvector 0.8 HNSW with hnsw.iterative_scan off, relaxed_order and
strict_order at each --hnsw-ef, and exact search of the filtered rows (no
vector index on the table: the btree index on cat, or a sequential scan,
then a sort).  Prints the figures; it asserts nothing.

The set is a texmex set of bench/gen.py, loaded as bench/sql_bench.py loads
it, with an int column cat: value i on a random share selectivity_i of the
rows (1: 50%, 2: 10%, 3: 1%, 4: 0.1%, 5: 0.01% by default), 0 on the rest;
random over the rows, so independent of the vectors' clusters.  cat has a
btree index and statistics from every row (statistics target 10000: a
sample of 3M rows), so the planner knows each value's share.

For each method and selectivity:
  plan       the scans the planner chose (EXPLAIN)
  recall@10  over --recall-queries queries, against the exact filtered
             answer: the rows the exact plan returns (computed first, with
             no vector index on the table)
  short      how many of those queries returned fewer rows than
             min(10, matching rows)
  q/s        pgbench, --clients clients, prepared statements, --seconds
  CPU        the pgbench connections' backends' CPU per query (n/a when
             --seconds < 4)
  worker     for cagra, where the pgbench run's searches spent their time in
             the GPU worker (cagra_worker_timings(), the run's difference):
             requests and batches served, the mean wait in the queue per
             request, and per batch the search thread's job, the engine's
             search call within it and the GPU's own time
pgvector is measured twice: as the planner chooses with the btree index on
cat (which at a selective filter is the btree and a sort), and with that
index dropped ("no btree"), which leaves its iterative index scan as the
only plan besides a sequential scan, the baseline issue 16's goal names.
The filter value is a constant of the statement, one statement per
selectivity, not a parameter: a prepared statement's generic plan would be
costed with one estimate for every value.  The query vector is the
parameter, through (SELECT v FROM bench_queries WHERE qid = :q), as in
bench/sql_bench.py.

usage: filter_bench.py DIR [options]     (psql and pgbench from PATH)
  --dsn 'host=... port=... dbname=...'   libpq connection string (default: PG* env)
  --selectivities 50,10,1,0.1,0.01        percent of the rows a filter keeps
  --clients 64 --seconds 5                pgbench settings
  --recall-queries 100                    queries for recall and short rows
  --hnsw-ef 40,200                        hnsw.ef_search values
  --iterative off,relaxed_order,strict_order
                                          hnsw.iterative_scan values
  --hnsw-m 16                             HNSW m (ef_construction 64 for m 16, else 128)
  --cagra-itopk ''                        cagra.itopk_size values besides the default
  --cagra-width ''                        cagra.search_width values besides the default (0, automatic)
  --cagra-with ''                         storage parameters of a second cagra index measured after
                                          the first (e.g. 'storage = float16')
  --methods exact,cagra,hnsw              which to measure
  --maintenance-work-mem 1GB              for CREATE INDEX
  --skip-load                             reuse the table of an earlier run
  --no-btree-iterative relaxed_order,strict_order
                                          hnsw.iterative_scan values measured with
                                          the btree index dropped ('' for none), at
                                          the largest --hnsw-ef
"""
import argparse
import os
import re
import time

import numpy as np

import sql_bench
from sql_bench import fmt_ms, read_vecs

STATEMENT = ("SELECT id FROM bench_items WHERE cat = {value} "
             "ORDER BY v <-> (SELECT v FROM bench_queries WHERE qid = :q) LIMIT 10")


def categories(n, selectivities, seed=7):
    """cat for n rows: value i + 1 on a random round(n * selectivities[i])
    of them (at least one), 0 on the rest."""
    assert sum(selectivities) <= 1.0
    order = np.random.default_rng(seed).permutation(n)
    cat = np.zeros(n, dtype=np.int32)
    start = 0
    for i, share in enumerate(selectivities):
        m = max(1, round(n * share))
        cat[order[start:start + m]] = i + 1
        start += m
    return cat


def plan_summary(db, statement, settings):
    """The plan's nodes below its Limit, outermost first, without the
    initplan that reads the query vector: e.g. "Sort / Bitmap Heap Scan /
    Bitmap Index Scan on bench_items_cat" or "Index Scan using
    bench_items_cagra"."""
    plan = db.psql(sql_bench.set_statements(settings) + "EXPLAIN (COSTS OFF) " + statement.replace(":q", "0"))
    nodes = []
    for i, line in enumerate(plan.splitlines()):
        node = line.strip()
        if i > 0 and not node.startswith("->"):
            continue  # a node's detail line (Sort Key, Filter, Index Cond, ...)
        node = node[2:].strip() if i > 0 else node
        if node.startswith("Limit") or "bench_queries" in node:
            continue
        nodes.append(re.sub(r" on bench_items\b", "", node))
    return " / ".join(nodes)


class Bench:
    """One run: the exact answers per selectivity, and the table's rows."""

    def __init__(self, db, args, values):
        self.db, self.args, self.values = db, args, values  # values: [(selectivity %, cat value, matching rows)]
        self.qids = list(range(args.recall_queries))
        self.nq = int(db.psql("SELECT count(*) FROM bench_queries"))
        self.jobs = min(8, os.cpu_count() or 1)
        self.truth = {}
        self.rows = []

    def exact_answers(self):
        """The exact plan's answer per selectivity: run with no vector index
        on the table."""
        for pct, value, _ in self.values:
            t = time.time()
            self.truth[value] = self.db.answers(STATEMENT.format(value=value), self.qids, jobs=self.jobs)
            print("exact answers, cat = %d (%s%%): %.1f s for %d queries"
                  % (value, pct, time.time() - t, len(self.qids)), flush=True)

    def measure(self, method, setting, settings):
        """recall, short answers and q/s of `settings` at each selectivity."""
        timed = method.startswith("cagra") and worker_running(self.db)
        for pct, value, matching in self.values:
            statement = STATEMENT.format(value=value)
            plan = plan_summary(self.db, statement, settings)
            got = self.db.answers(statement, self.qids, settings, jobs=self.jobs)
            truth = self.truth[value]
            hits = sum(len(set(got.get(q, ())) & set(truth.get(q, ()))) for q in self.qids)
            wanted = sum(len(truth.get(q, ())) for q in self.qids)
            short = sum(len(got.get(q, ())) < len(truth.get(q, ())) for q in self.qids)
            script = "\\set q random(0, %d)\n%s;\n" % (self.nq - 1, statement)
            before = worker_timings(self.db) if timed else None
            tps, _, backend = self.db.pgbench(script, self.args.clients, self.args.seconds, settings)
            if timed:
                print("  worker, %s%%: %s" % (pct, timings_summary(before, worker_timings(self.db))), flush=True)
            row = "| %s | %s | %s%% | %d | %s | %.3f | %d of %d | %.0f | %s |" % (
                method, setting, pct, matching, plan, hits / max(wanted, 1), short, len(self.qids), tps,
                fmt_ms(backend))
            self.rows.append(row)
            print(row, flush=True)

    def print_table(self):
        print("\n%d clients, %d s per point; recall@10 and short answers over %d queries against the exact plan's"
              % (self.args.clients, self.args.seconds, len(self.qids)))
        print("\n| method | setting | selectivity | matching rows | plan | recall@10 | short | q/s "
              "| backends' CPU ms/query |")
        print("|---|---|---:|---:|---|---:|---:|---:|---:|")
        print("\n".join(self.rows))


def worker_running(db):
    return db.psql("SELECT count(*) FROM cagra_status WHERE state = 'running'") == "1"


def worker_timings(db):
    """{step: (events, total ms)} of cagra_worker_timings(), summed since the server started."""
    rows = db.psql("SELECT step, events, total_ms FROM cagra_worker_timings()").splitlines()
    return {step: (int(events), float(ms)) for step, events, ms in (row.split("|") for row in rows)}


def timings_summary(before, after):
    """The worker's steps between two worker_timings() snapshots."""
    delta = {step: (after[step][0] - before[step][0], after[step][1] - before[step][1]) for step in after}

    def mean_us(step):
        events, ms = delta[step]
        return "%.0f us" % (1000.0 * ms / events) if events else "n/a"
    return ("%d requests in %d batches; queue %s a request; per batch job %s, engine %s, device %s; round trip %s"
            % (delta["round trip"][0], delta["job"][0], mean_us("queue"), mean_us("job"), mean_us("engine"),
               mean_us("device"), mean_us("round trip")))


def timed_index(db, args, sql, name):
    secs = db.timed("SET maintenance_work_mem = '%s'; %s" % (args.maintenance_work_mem, sql))
    print("%s: CREATE INDEX %.1f s, %s" % (name, secs, db.psql("SELECT pg_size_pretty(pg_relation_size('%s'))" % name)),
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--dsn", default="")
    ap.add_argument("--selectivities", default="50,10,1,0.1,0.01")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--recall-queries", type=int, default=100)
    ap.add_argument("--hnsw-ef", default="40,200")
    ap.add_argument("--iterative", default="off,relaxed_order,strict_order")
    ap.add_argument("--hnsw-m", type=int, default=16)
    ap.add_argument("--cagra-itopk", default="")
    ap.add_argument("--cagra-width", default="")
    ap.add_argument("--cagra-with", default="")
    ap.add_argument("--methods", default="exact,cagra,hnsw")
    ap.add_argument("--maintenance-work-mem", default="1GB")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--no-btree-iterative", default="relaxed_order,strict_order")
    args = ap.parse_args()
    methods = args.methods.split(",")
    db = sql_bench.Db(args.dsn)
    sql_bench.create_extensions(db)
    percents = args.selectivities.split(",")
    if not args.skip_load:
        n = len(read_vecs(os.path.join(args.dir, "base.fvecs"), "f"))
        sql_bench.load(db, args.dir, [("cat", categories(n, [float(p) / 100 for p in percents]))])
        db.psql("CREATE INDEX bench_items_cat ON bench_items (cat)")
        db.psql("ALTER TABLE bench_items ALTER cat SET STATISTICS 10000")
        db.psql("ANALYZE bench_items (cat)")
    db.psql("DROP INDEX IF EXISTS bench_items_cagra, bench_items_hnsw")
    sql_bench.print_server(db)
    counts = dict(tuple(map(int, line.split("|"))) for line in
                  db.psql("SELECT cat, count(*) FROM bench_items GROUP BY cat").splitlines())
    values = [(pct, i + 1, counts.get(i + 1, 0)) for i, pct in enumerate(percents)]
    for pct, value, matching in values:
        estimate = re.search(r"rows=(\d+)", db.psql("EXPLAIN SELECT * FROM bench_items WHERE cat = %d" % value))
        print("cat = %d: %s%% of the rows, %d rows match, the planner estimates %s"
              % (value, pct, matching, estimate.group(1)))
    bench = Bench(db, args, values)
    bench.exact_answers()

    if "exact" in methods:
        bench.measure("exact", "no vector index", [])
    if "cagra" in methods:
        timed_index(db, args, "CREATE INDEX bench_items_cagra ON bench_items USING cagra (v vector_l2_ops)",
                    "bench_items_cagra")
        print("built on: %s" % db.psql("SELECT build_device FROM cagra_index_info('bench_items_cagra')"))
        print(db.psql("SELECT 'cagra defaults: ' || string_agg(name || ' ' || setting, ', ' ORDER BY name) "
                      "FROM pg_settings WHERE name IN ('cagra.itopk_size', 'cagra.max_scan_tuples', 'cagra.device')"))
        bench.measure("cagra", "defaults", [])
        # the index scan alone, which filters the rows it returns
        bench.measure("cagra", "cagra.enable_filtered_scan off", [("cagra.enable_filtered_scan", "off")])
        # the filtered scan wherever the filter has an index
        bench.measure("cagra", "filtered scan forced", [("enable_bitmapscan", "off"), ("enable_indexscan", "off"),
                                                        ("enable_seqscan", "off")])
        for itopk in [int(x) for x in args.cagra_itopk.split(",") if x]:
            bench.measure("cagra", "itopk_size %d" % itopk, [("cagra.itopk_size", itopk)])
        for width in [int(x) for x in args.cagra_width.split(",") if x]:
            bench.measure("cagra", "search_width %d" % width, [("cagra.search_width", width)])
        if db.psql("SELECT count(*) FROM pg_views WHERE viewname = 'cagra_status'") == "1":
            print(db.psql("SELECT format('worker: %s, queries %s, batches %s, mean batch %s, fallbacks %s', "
                          "state, queries, batches, round(mean_batch_size::numeric, 2), fallbacks) FROM cagra_status"))
        db.psql("DROP INDEX bench_items_cagra")
        if args.cagra_with:
            # a second index with storage parameters, at its default settings
            timed_index(db, args, "CREATE INDEX bench_items_cagra ON bench_items USING cagra (v vector_l2_ops) "
                        "WITH (%s)" % args.cagra_with, "bench_items_cagra")
            bench.measure("cagra WITH (%s)" % args.cagra_with, "defaults", [])
            bench.measure("cagra WITH (%s)" % args.cagra_with, "cagra.enable_filtered_scan off",
                          [("cagra.enable_filtered_scan", "off")])
            db.psql("DROP INDEX bench_items_cagra")
    if "hnsw" in methods and sql_bench.has_pgvector(db):
        efc = 64 if args.hnsw_m <= 16 else 128
        timed_index(db, args, "CREATE INDEX bench_items_hnsw ON bench_items USING hnsw (v vector_l2_ops) "
                    "WITH (m = %d, ef_construction = %d)" % (args.hnsw_m, efc), "bench_items_hnsw")
        # (a vector literal loads pgvector's library, which defines its settings)
        print(db.psql("SELECT '[1]'::vector; SELECT 'pgvector ' || extversion || ', ' || "
                      "(SELECT string_agg(name || ' ' || setting, ', ' ORDER BY name) FROM pg_settings "
                      " WHERE name IN ('hnsw.max_scan_tuples', 'hnsw.scan_mem_multiplier')) "
                      "FROM pg_extension WHERE extname = 'vector'").splitlines()[-1])
        for mode in args.iterative.split(","):
            for ef in [int(x) for x in args.hnsw_ef.split(",")]:
                bench.measure("pgvector hnsw m %d" % args.hnsw_m, "iterative_scan %s, ef_search %d" % (mode, ef),
                              [("hnsw.iterative_scan", mode), ("hnsw.ef_search", ef)])
        no_btree = [mode for mode in args.no_btree_iterative.split(",") if mode]
        if no_btree:
            # the iterative scan itself: without the btree the planner has
            # only it and a sequential scan
            db.psql("DROP INDEX bench_items_cat")
            ef = max(int(x) for x in args.hnsw_ef.split(","))
            for mode in no_btree:
                bench.measure("pgvector hnsw m %d" % args.hnsw_m,
                              "no btree, iterative_scan %s, ef_search %d" % (mode, ef),
                              [("hnsw.iterative_scan", mode), ("hnsw.ef_search", ef)])
            db.psql("CREATE INDEX bench_items_cat ON bench_items (cat)")
        db.psql("DROP INDEX bench_items_hnsw")
    elif "hnsw" in methods:
        print("pgvector not installed in this database: no HNSW figures")
    bench.print_table()


if __name__ == "__main__":
    main()
