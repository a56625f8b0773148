#!/usr/bin/python3
"""bench/worker_profile.py — where a search's round trip through the GPU
worker goes.  On a cluster with cagra preloaded: loads a texmex set (or
reuses the tables of bench/sql_bench.py with --skip-load), builds the index,
then for each cagra.batch_window and client count runs pgbench (prepared
ORDER BY ... LIMIT 10, cagra.itopk_size 32) and reads the worker's counters
before and after (cagra_status: queries, batches, queue_time_ms,
search_time_ms).  Per query it prints the mean latency pgbench saw, the time
the search waited in the worker's queue (batch window and busy threads
included), the launch it rode in (engine time of its batch), and the rest:
the backend's own work, the wake-ups on both sides, pgbench and the client
protocol.  Prints figures; asserts nothing.

usage: worker_profile.py DIR [--skip-load] [--windows 100,20,0]
                             [--clients 64,128] [--seconds 8]
"""
import argparse
import time

import sql_bench

COUNTERS = "SELECT queries, batches, queue_time_ms, search_time_ms FROM cagra_status"


def counters(db):
    return [float(x) for x in db.psql(COUNTERS).split("|")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--dsn", default="")
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--windows", default="100,20,0")
    ap.add_argument("--clients", default="64,128")
    ap.add_argument("--seconds", type=int, default=8)
    args = ap.parse_args()
    db = sql_bench.Db(args.dsn)
    db.psql("CREATE EXTENSION IF NOT EXISTS cagra")
    if not args.skip_load:
        sql_bench.load(db, args.dir)
    db.psql("SET maintenance_work_mem = '8GB'; "
            "CREATE INDEX IF NOT EXISTS bench_items_cagra ON bench_items USING cagra (v)")
    nq = int(db.psql("SELECT count(*) FROM bench_queries"))
    script = sql_bench.QUERY_SCRIPT.format(nq=nq - 1, op="<->")
    settings = [("cagra.itopk_size", 32), ("enable_seqscan", "off")]
    # one warm-up run loads the index copy
    db.pgbench(script, 4, 2, settings)
    print("| batch_window us | clients | q/s | latency ms | mean batch | queue ms/query | launch ms/batch | rest ms/query |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for window in [int(x) for x in args.windows.split(",")]:
        db.psql("ALTER SYSTEM SET cagra.batch_window = %d" % window)
        db.psql("SELECT pg_reload_conf()")
        time.sleep(1)
        for clients in [int(x) for x in args.clients.split(",")]:
            before = counters(db)
            tps, _, _ = db.pgbench(script, clients, args.seconds, settings)
            after = counters(db)
            queries, batches, queue_ms, search_ms = (a - b for a, b in zip(after, before))
            latency = clients / tps * 1000.0
            queue = queue_ms / max(queries, 1)
            launch = search_ms / max(batches, 1)
            print("| %d | %d | %.0f | %.3f | %.1f | %.3f | %.3f | %.3f |"
                  % (window, clients, tps, latency, queries / max(batches, 1), queue, launch,
                     latency - queue - launch), flush=True)
    db.psql("ALTER SYSTEM RESET cagra.batch_window")
    db.psql("SELECT pg_reload_conf()")


if __name__ == "__main__":
    main()
