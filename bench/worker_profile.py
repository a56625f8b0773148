#!/usr/bin/python3
"""bench/worker_profile.py — where a search's round trip through the GPU
worker goes.  On a cluster with cagra preloaded: loads a texmex set (or
reuses the tables of bench/sql_bench.py with --skip-load), builds the index,
then at each client count runs pgbench (prepared
ORDER BY ... LIMIT 10 at --itopk) and reads cagra_worker_timings() before
and after.  Per search it prints pgbench's mean latency, the round trip the
backend saw inside its call to the worker, and that round trip's steps:
the worker's pickup of a queued search, the rest of its queueing (batch
window, waiting for a free search thread), the search thread's job (engine
call, and around it the gathering of queries and scattering of answers),
the GPU's own time within the engine call, the hand-back of a finished job
to the worker's main loop, and the backend's wake-up.  "Backend" is
pgbench's latency less the round trip: the backend's own executor work and
the client protocol.  It also prints the worker main loop's busy share and
the backends' CPU per query.  Prints figures; asserts nothing.

Before the sweep it prints recall@10 over every query in one statement;
the sweep prints the share of batches the resident kernel answered.

With --floor it also runs, at each client count, the same statement with
a B-tree range scan of bench_items in place of the search (the query
vector still looked up, ten rows still fetched, no worker): what this
host's PostgreSQL and pgbench alone allow for a statement of that shape.
With --no-sweep that is all it runs.

With --batch N it also times cagra_search calls of N queries and prints
their steps per call (the worker's job, engine and device time; the
backend's share is the call less the round trip).

usage: worker_profile.py DIR [--skip-load] [--clients 1,64,128,256]
                             [--seconds 8] [--itopk 32] [--no-sweep]
                             [--batch 10000] [--floor]
"""
import argparse
import time

import sql_bench


def timings(db):
    """{step: (events, total_ms)} from cagra_worker_timings()."""
    out = db.psql("SELECT step, events, total_ms FROM cagra_worker_timings()")
    rows = {}
    for line in out.splitlines():
        step, events, total = line.split("|")
        rows[step] = (int(events), float(total))
    return rows


def per_event_us(before, after, step):
    events = after[step][0] - before[step][0]
    total = after[step][1] - before[step][1]
    return total * 1000.0 / events if events > 0 else 0.0, events


def sweep(db, args, script, settings):
    """pgbench at each client count, with the worker's
    steps per search from cagra_worker_timings() around each run."""
    print("Per search, in microseconds (job, engine, device and hand-back per batch):")
    print("| clients | q/s | latency | round trip | pickup | queue | job | engine | device "
          "| hand-back | wake | backend | mean batch | loop busy % | resident % | backends' CPU |")
    print("|" + "---:|" * 16)
    for clients in [int(x) for x in args.clients.split(",")]:
        before = timings(db)
        started = time.time()
        tps, _, backend_cpu = db.pgbench(script, clients, args.seconds, settings)
        elapsed = time.time() - started
        after = timings(db)
        us = {step: per_event_us(before, after, step) for step in after}
        latency = clients / tps * 1e6
        round_trip = us["round trip"][0]
        batches = us["job"][1]
        queries = us["queue"][1]
        loop_ms = after["loop busy"][1] - before["loop busy"][1]
        resident_share = 100.0 * us["resident"][1] / max(batches, 1) if "resident" in us else 0.0
        print("| %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f "
              "| %.1f | %.0f | %.0f | %s |"
              % (clients, tps, latency, round_trip, us["pickup"][0], us["queue"][0],
                 us["job"][0], us["engine"][0], us["device"][0], us["handback"][0], us["wake"][0],
                 latency - round_trip, queries / max(batches, 1), loop_ms / 10.0 / elapsed,
                 resident_share, sql_bench.fmt_ms(backend_cpu)), flush=True)


# the search's statement less the search: the query vector's lookup, ten
# heap rows in id order from a B-tree, no index search and no worker
FLOOR_SCRIPT = """\\set q random(0, {nq})
\\set i random(1, {last_id})
SELECT id FROM bench_items WHERE id >= :i AND (SELECT v FROM bench_queries WHERE qid = :q) IS NOT NULL
 ORDER BY id LIMIT 10;
"""


def floor(db, args, nq):
    last_id = int(db.psql("SELECT max(id) - 10 FROM bench_items"))
    script = FLOOR_SCRIPT.format(nq=nq - 1, last_id=last_id)
    db.pgbench(script, 4, 2)
    print("\nThe statement without the search (B-tree range scan of ten rows, query vector looked up):")
    print("| clients | q/s | backends' CPU |")
    print("|---:|---:|---:|")
    for clients in [int(x) for x in args.clients.split(",")]:
        tps, _, backend_cpu = db.pgbench(script, clients, args.seconds)
        print("| %d | %.0f | %s |" % (clients, tps, sql_bench.fmt_ms(backend_cpu)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--dsn", default="")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--clients", default="1,64,128,256")
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--itopk", type=int, default=32)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--floor", action="store_true")
    args = ap.parse_args()
    db = sql_bench.Db(args.dsn)
    db.psql("CREATE EXTENSION IF NOT EXISTS cagra")
    if not args.skip_load:
        sql_bench.load(db, args.dir)
    db.psql("SET maintenance_work_mem = '8GB'; "
            "CREATE INDEX IF NOT EXISTS bench_items_cagra ON bench_items USING cagra (v)")
    nq = int(db.psql("SELECT count(*) FROM bench_queries"))
    script = sql_bench.QUERY_SCRIPT.format(nq=nq - 1, op="<->")
    settings = [("cagra.itopk_size", args.itopk), ("enable_seqscan", "off")]
    # one warm-up run loads the index copy
    db.pgbench(script, 4, 2, settings)
    if not args.no_sweep:
        recall = float(db.psql(sql_bench.set_statements(settings) + sql_bench.RECALL_SQL.format(op="<->")))
        print("\nrecall@10 %.3f (itopk %d, every query in one statement)" % (recall, args.itopk))
        sweep(db, args, script, settings)
    if args.floor:
        floor(db, args, nq)
    if args.batch:
        before = timings(db)
        sql_bench.batch_search(db, args.batch, nq, runs=4)
        after = timings(db)
        us = {step: per_event_us(before, after, step) for step in after}
        print("cagra_search steps, ms per request (%d requests, %d launches): round trip %.2f, queue %.2f, "
              "job %.2f, engine %.2f, device %.2f"
              % (us["round trip"][1], us["job"][1], us["round trip"][0] / 1000.0, us["queue"][0] / 1000.0,
                 us["job"][0] / 1000.0, us["engine"][0] / 1000.0, us["device"][0] / 1000.0))


if __name__ == "__main__":
    main()
