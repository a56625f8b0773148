#!/usr/bin/python3
"""bench/scale_bench.py — the measuring half of bench/device-scale.sh (issue 13's
scale run): disk estimate, the table's sizes, CREATE INDEX with peak memory
sampling, recall and queries/s.  Reuses bench/sql_bench.py (Db, load_queries,
run_method) for everything sql_bench already does.

usage: scale_bench.py COMMAND [options]        (psql, pgbench from PATH; PG* env)
  disk DIR --n N --dim D --storage S --column vector|halfvec --free-path P
        estimate of what the run puts on disk against the free space of P's
        file system; exit status 3 when it will not fit
  sizes                      heap, TOAST, indexes of bench_items; database size
  queries DIR                bench_queries and bench_gt from DIR (sql_bench.load_queries)
  index  --storage S --degree 32 --intermediate 64 --maintenance-work-mem M
        DROP and CREATE INDEX bench_items_cagra, timed phase by phase
        (pg_stat_progress_create_index, as sql_bench); samples every 0.1 s the
        building backend's and the cagra worker's /proc/PID/status (VmHWM,
        VmRSS, RssAnon, RssShmem) and the devices' used memory (nvidia-smi,
        when there is one); prints the index size against its vectors, graph
        and node headers and the bound of docs/storage.md
  query  --itopk default,32,64,128 --clients 64 --seconds 10
        the first search (it loads the worker's copy of the index), then
        sql_bench.run_method per itopk value: recall@10 over every query of
        bench_queries, 1 client and N clients pgbench q/s; the worker's
        counters and copy, and its peak memory, after
"""
import argparse
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sql_bench  # noqa: E402

MB = 1024.0 * 1024.0
GB = 1024.0 * MB


# ---- disk estimate ----

def heap_bytes_per_row(dim, column):
    """Bytes per row of bench_items (id int, v vector(dim) or halfvec(dim))
    with its TOAST table and index and the primary key, as COPY (FREEZE)
    writes them: a value over the TOAST threshold goes out of line in chunks of
    1,996 bytes (4-byte header, tuple header 24, chunk id and sequence), each
    chunk put on the TOAST table's last page or a new one (a bulk insert does
    not look back for space), which the loop below packs as that does."""
    value = 8 + (2 if column == "halfvec" else 4) * dim   # varlena header, dim, unused, elements
    usable = 8192 - 24

    def maxalign(x):
        return (x + 7) // 8 * 8

    inline = maxalign(24 + 4 + value) + 4
    if 24 + 4 + value <= 2032:   # TOAST_TUPLE_THRESHOLD: stays in the heap
        return 8192.0 / (usable // inline) + 22
    chunks, rest = [], value
    while rest > 0:
        chunks.append(min(rest, 1996))
        rest -= 1996
    tuples = [maxalign(24 + 8 + 4 + c) + 4 for c in chunks]
    pages, used = 1, 0
    rows = 200
    for _ in range(rows):
        for t in tuples:
            if used + t > usable:
                pages, used = pages + 1, 0
            used += t
    toast = pages * 8192.0 / rows
    main = 8192.0 / (usable // (maxalign(24 + 4 + 18) + 4))
    toast_index = len(chunks) * 20 / 0.9
    primary_key = 20 / 0.9
    return toast + main + toast_index + primary_key


def index_bytes(n, dim, storage, degree):
    """docs/storage.md's bound: 1.035 n (8 + 4 degree + element bytes x dims) + 2 pages."""
    elt = 2 if storage == "float16" else 4
    return 1.035 * n * (8 + 4 * degree + elt * dim) + 2 * 8192


def cmd_disk(a):
    heap = a.n * heap_bytes_per_row(a.dim, a.column)
    index = index_bytes(a.n, a.dim, a.storage, a.degree)
    # WAL: COPY FREEZE into the table created in the same transaction under
    # wal_level = minimal writes none; the index build WAL-logs every page
    # (log_newpages) under wal_level = replica, recycled at checkpoints:
    # max_wal_size and a margin of 1 GB, none under INDEX_WAL=minimal
    wal = 0 if a.index_wal == "minimal" else a.max_wal_size_gb * GB + 1 * GB
    files = a.nq * (a.dim + 1) * 4 + a.nq * 101 * 4 + 0.5 * GB   # query.fvecs, gt.ivecs, logs and catalogs
    need = heap + index + wal + files
    st = os.statvfs(a.free_path)
    free = st.f_bavail * st.f_frsize
    print("disk estimate for %d x %d (%s column, %s index, degree %d): table %.1f GiB (%.0f bytes a row), "
          "index %.1f GiB, WAL %.1f GiB, files %.1f GiB: %.1f GiB; free on %s: %.1f GiB"
          % (a.n, a.dim, a.column, a.storage, a.degree, heap / GB, heap / a.n, index / GB, wal / GB, files / GB,
             need / GB, a.free_path, free / GB))
    if a.existing:
        # a table already loaded: only the index and WAL still have to fit
        need = index + wal
        print("the table is loaded already: the index and WAL need %.1f GiB" % (need / GB))
    if need > free:
        print("it will NOT fit: %.1f GiB more are needed" % ((need - free) / GB))
        sys.exit(3)
    print("it fits, %.1f GiB to spare" % ((free - need) / GB))


# ---- sizes ----

def cmd_sizes(a):
    db = sql_bench.Db(a.dsn)
    print(db.psql("""SELECT format('bench_items: %s rows; heap %s, TOAST %s (its index %s), indexes (primary key, cagra) %s; total %s, %s bytes a row; database %s',
        c.reltuples::bigint, pg_size_pretty(pg_relation_size(c.oid)),
        pg_size_pretty(coalesce(pg_relation_size(c.reltoastrelid), 0)),
        pg_size_pretty(coalesce((SELECT sum(pg_relation_size(indexrelid)) FROM pg_index WHERE indrelid = c.reltoastrelid), 0)),
        pg_size_pretty(pg_indexes_size(c.oid)),
        pg_size_pretty(pg_total_relation_size(c.oid)),
        round(pg_total_relation_size(c.oid)::numeric / greatest(c.reltuples, 1)),
        pg_size_pretty(pg_database_size(current_database())))
      FROM pg_class c WHERE c.oid = 'bench_items'::regclass"""))


def cmd_queries(a):
    db = sql_bench.Db(a.dsn)
    t = time.time()
    nq = sql_bench.load_queries(db, a.dir)
    print("loaded %d queries and their ground truth in %.1f s" % (nq, time.time() - t))


# ---- sampling ----

def proc_status(pid):
    """VmHWM, VmRSS, RssAnon, RssShmem of a process, in bytes (None when gone)."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmHWM", "VmRSS", "RssAnon", "RssShmem"):
                    out[k] = int(v.split()[0]) * 1024
    except OSError:
        return None
    return out


class Sampler:
    """Every `interval` s: the peak of each /proc status field of the process
    `find_pid()` returns (looked up until found), and of the devices' used
    memory (nvidia-smi, its own loop)."""

    def __init__(self, processes, interval=0.1):
        self.processes = processes          # {label: callable returning a pid or None}
        self.interval = interval
        self.peaks = {label: {} for label in processes}
        self.pids = {label: None for label in processes}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.smi = None
        self.gpu_peak = None
        self.gpu_first = None

    def run(self):
        while not self.stop.is_set():
            for label, find in self.processes.items():
                if self.pids[label] is None:
                    try:
                        self.pids[label] = find()
                    except Exception:
                        self.pids[label] = None
                if self.pids[label]:
                    st = proc_status(self.pids[label])
                    if st:
                        p = self.peaks[label]
                        for k, v in st.items():
                            p[k] = max(p.get(k, 0), v)
            self.stop.wait(self.interval)

    def start(self):
        if shutil.which("nvidia-smi"):
            self.smi = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                         "-lms", "100"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.smi_thread = threading.Thread(target=self.read_smi, daemon=True)
            self.smi_thread.start()
        self.thread.start()
        return self

    def read_smi(self):
        for line in self.smi.stdout:
            try:
                v = float(line.strip()) * MB      # MiB, summed over the devices of one sample line each
            except ValueError:
                continue
            if self.gpu_first is None:
                self.gpu_first = v
            self.gpu_peak = max(self.gpu_peak or 0, v)

    def finish(self):
        self.stop.set()
        self.thread.join()
        if self.smi:
            self.smi.terminate()
            self.smi.wait()

    def report(self, what):
        lines = []
        for label, p in self.peaks.items():
            if not p:
                lines.append("%s %s: not seen" % (what, label))
                continue
            lines.append("%s %s (pid %s): peak RSS (VmHWM) %.2f GiB, sampled peaks: RSS %.2f GiB, anonymous %.2f GiB, "
                         "shared memory %.2f GiB" % (what, label, self.pids[label], p.get("VmHWM", 0) / GB,
                                                     p.get("VmRSS", 0) / GB, p.get("RssAnon", 0) / GB,
                                                     p.get("RssShmem", 0) / GB))
        if self.gpu_peak is not None:
            lines.append("%s device memory used (nvidia-smi, every 0.1 s): %.2f GiB at the start, peak %.2f GiB"
                         % (what, self.gpu_first / GB, self.gpu_peak / GB))
        else:
            lines.append("%s device memory: no nvidia-smi" % what)
        return "\n".join(lines)


class NoticeDb(sql_bench.Db):
    """sql_bench.Db that keeps what psql wrote to stderr (NOTICEs: a CPU
    fallback of the build and why, rows beyond maintenance_work_mem)."""

    def __init__(self, dsn):
        super().__init__(dsn)
        self.notices = []

    def psql(self, sql, stdin=None):
        cmd = ["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", self.dsn, "-c", sql]
        r = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("psql failed: %s\n%s" % (sql[:200], r.stderr))
        self.notices += [line for line in r.stderr.splitlines() if line.strip()]
        return r.stdout.strip()


def worker_pid(db):
    pid = db.psql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'cagra gpu worker' LIMIT 1")
    return int(pid) if pid else None


def build_pid(db):
    pid = db.psql("SELECT pid FROM pg_stat_activity WHERE application_name = 'cagra_bench_build' "
                  "AND pid <> pg_backend_pid() LIMIT 1")
    return int(pid) if pid else None


# ---- CREATE INDEX ----

def cmd_index(a):
    db = NoticeDb(a.dsn)
    sql_bench.print_server(db)
    print(db.psql("SELECT format('worker: %s (%s), devices %s', state, backend, devices) FROM cagra_status"))
    db.psql("DROP INDEX IF EXISTS bench_items_cagra")
    db.psql("CHECKPOINT")
    db.psql("SELECT pg_stat_reset_shared('wal')")
    n = int(db.psql("SELECT count(*) FROM bench_items"))
    dim = int(db.psql("SELECT vector_dims(v) FROM bench_items LIMIT 1"))
    sampler = Sampler({"building backend": lambda: build_pid(db), "cagra worker": lambda: worker_pid(db)}).start()
    opts = "graph_degree = %d, intermediate_graph_degree = %d, storage = %s" % (a.degree, a.intermediate, a.storage)
    if a.build_device:
        opts += ", build_device = %s" % a.build_device
    opclass = "halfvec_l2_ops" if db.psql("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                                          "WHERE attrelid = 'bench_items'::regclass AND attname = 'v'"
                                          ).startswith("halfvec") else "vector_l2_ops"
    # log_min_messages debug1: the build's line on its parallel heap scan goes to the server log
    sql = ("SET maintenance_work_mem = '%s'; SET client_min_messages = notice; SET log_min_messages = debug1; "
           "CREATE INDEX bench_items_cagra ON bench_items USING cagra (v %s) WITH (%s)"
           % (a.maintenance_work_mem, opclass, opts))
    print("statement: %s" % sql, flush=True)
    db.notices = []
    secs, phases = db.timed_build(sql)
    sampler.finish()
    for line in db.notices:
        print("server said: %s" % line)
    info = db.psql("SELECT build_device || '|' || nodes || '|' || nodes_per_page || '|' || pages_per_node "
                   "FROM cagra_index_info('bench_items_cagra')").split("|")
    size = int(db.psql("SELECT pg_relation_size('bench_items_cagra')"))
    print("CREATE INDEX %d x %d, %s: %.1f s, built on %s (k %s nodes over p %s pages a group)"
          % (n, dim, a.storage, secs, info[0], info[2], info[3]))
    print("phases: %s" % ", ".join("%s %.2f s" % p for p in phases))
    print(sampler.report("build:"))
    # what the build's WAL cost: the building session's counters reach
    # pg_stat_wal when it ends (times only under track_wal_io_timing)
    time.sleep(1.5)
    print(db.psql("SELECT format('WAL of the build: %s records, %s full-page images, %s MB; written because "
                  "wal_buffers were full %s times; %s writes (%s ms), %s syncs (%s ms)', wal_records, wal_fpi, "
                  "round(wal_bytes / 1048576), wal_buffers_full, wal_write, round(wal_write_time::numeric), "
                  "wal_sync, round(wal_sync_time::numeric)) FROM pg_stat_wal"))
    elt = 2 if a.storage == "float16" else 4
    vectors, graph, headers = n * dim * elt, n * a.degree * 4, n * 8
    print("index size %.2f GiB (%d bytes): vectors %.2f GiB + graph %.2f GiB + node headers (TID, flags) %.2f GiB = "
          "%.2f GiB, ratio %.4f; docs/storage.md bound %.2f GiB"
          % (size / GB, size, vectors / GB, graph / GB, headers / GB, (vectors + graph + headers) / GB,
             size / (vectors + graph + headers), index_bytes(n, dim, a.storage, a.degree) / GB))
    print(db.psql("SELECT format('worker after the build: builds %s, fallbacks %s, errors %s', builds, fallbacks, errors) "
                  "FROM cagra_status"))


# ---- queries ----

def cmd_query(a):
    db = sql_bench.Db(a.dsn)
    nq = int(db.psql("SELECT count(*) FROM bench_queries"))
    a.op = "<->"
    sampler = Sampler({"cagra worker": lambda: worker_pid(db)}).start()
    t = time.time()
    db.psql("SET enable_seqscan = off; SELECT id FROM bench_items ORDER BY v <-> (SELECT v FROM bench_queries "
            "WHERE qid = 0) LIMIT 10")
    print("first search (loads the worker's copy of the index): %.2f s" % (time.time() - t))
    print(db.psql("SELECT coalesce(string_agg(format('worker copy: %s nodes, %s MB on device %s', nodes, "
                  "round(size_mb::numeric, 1), device), '; '), 'worker copy: none') FROM cagra_worker_cache()"))
    print("cagra.itopk_size default: %s (0: the index's own, %s)"
          % (db.psql("SHOW cagra.itopk_size"),
             db.psql("SELECT search_itopk FROM cagra_index_info('bench_items_cagra')")), flush=True)
    started = time.time()
    for itopk in a.itopk.split(","):
        if a.time_budget and time.time() - started > a.time_budget:
            print("time budget of %d s spent: itopk %s and later not measured" % (a.time_budget, itopk))
            break
        settings = [("cagra.device", a.device)] + ([] if itopk == "default" else [("cagra.itopk_size", int(itopk))])
        sql_bench.run_method(db, "cagra %s itopk_size %s" % (a.device, itopk), settings, a, nq)
    sampler.finish()
    print(db.psql("SELECT format('worker: %s, queries %s, batches %s, mean batch %s, fallbacks %s, errors %s', "
                  "state, queries, batches, round(mean_batch_size::numeric, 2), fallbacks, errors) FROM cagra_status"))
    print(sampler.report("queries:"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["disk", "sizes", "queries", "index", "query"])
    ap.add_argument("dir", nargs="?")
    ap.add_argument("--dsn", default="")
    ap.add_argument("--n", type=int)
    ap.add_argument("--dim", type=int)
    ap.add_argument("--nq", type=int, default=1000)
    ap.add_argument("--column", default="vector", choices=["vector", "halfvec"])
    ap.add_argument("--storage", default="float32", choices=["float32", "float16"])
    ap.add_argument("--degree", type=int, default=32)
    ap.add_argument("--intermediate", type=int, default=64)
    ap.add_argument("--build-device", default="")
    ap.add_argument("--maintenance-work-mem", default="1GB")
    ap.add_argument("--free-path", default="/tmp")
    ap.add_argument("--max-wal-size-gb", type=float, default=4)
    ap.add_argument("--index-wal", default="replica")
    ap.add_argument("--existing", action="store_true")
    ap.add_argument("--itopk", default="default,32,64,128,256")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--clients", type=lambda v: [int(x) for x in v.split(",")], default=[64])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--time-budget", type=int, default=0)
    a = ap.parse_args()
    {"disk": cmd_disk, "sizes": cmd_sizes, "queries": cmd_queries, "index": cmd_index, "query": cmd_query}[a.command](a)


if __name__ == "__main__":
    main()
