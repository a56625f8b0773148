#!/usr/bin/python3
"""bench/plot.py — recall@10 against queries/s, one curve per system, as a PNG.

Reads result tables and draws one curve per system (cagra GPU, cagra CPU,
pgvector HNSW, hnswlib, exact: a single point), queries/s on a log scale, the
build time of each system in the legend.  Each INPUT is either

  * a CSV file (name ends in .csv) with the header
        system,build_seconds,param,recall_at_10,qps
    one row per measured point (build_seconds may be empty: no build, e.g.
    exact search), or
  * the printed output of a benchmark program, recognised by its content:
        bench/core_bench   "cagra: build ..." / "hnswlib: build ..." tables
                           and the "exact (brute force ...)" line
        bench/gpu_bench    the markdown tables it prints (also the same
                           tables pasted into docs/benchmarks.md)
        bench/sql_bench.py "cagra CREATE INDEX ..." and its per-setting lines

Options:
  --out FILE.png     the plot (required)
  --csv FILE.csv     also write every parsed point in the CSV form above
  --title TEXT       the plot title (say the data set and the machine)
  --core-qps cpu|wall  which core_bench rate to use (default cpu: queries per
                     CPU-second of one thread; on a shared machine the wall
                     clock also counts time spent waiting for a core)
  --only REGEX       keep only systems whose name matches
  --min-recall R     left edge of the x axis (default: from the data)

Needs matplotlib (Debian: apt-get install python3-matplotlib; run it with
/usr/bin/python3).  The plots in docs/ were made by:

  # c100k on the 2-core machine: core_bench's output (cagra CPU, hnswlib, exact)
  build/core_bench /work/data/c100k --repeat 5 > c100k.txt
  bench/plot.py --out docs/c100k-cpu.png --csv docs/c100k-cpu.csv \
      --title "c100k (100,000 x 128, L2, k=10), ..." c100k.txt

  # c1m on the H200: gpu_bench's tables as pasted into docs/benchmarks.md, and
  # pgvector's reference figures (shared/bench/README.md) as a CSV
  bench/plot.py --out docs/c1m-gpu.png --csv docs/c1m-gpu.csv \
      --only "fp32|^cagra GPU, batch [0-9,]+$|exact|pgvector" --min-recall 0.9 \
      --title "c1m (1,000,000 x 128, L2, k=10), ..." \
      docs/benchmarks.md docs/c1m-pgvector-reference.csv

  # text384 on the H200 (bench/device-text384.sh's gpu_bench tables) with the
  # CPU curves of text384-cpu.csv
  bench/plot.py --out docs/text384-gpu.png --csv docs/text384-gpu.csv \
      --only "^cagra GPU, batch [0-9,]+$|exact|CPU \(|hnswlib" --min-recall 0.85 \
      --title "..." text384-gpu.md docs/text384-cpu.csv

  # text384 (bench/text_dataset.py) on the 2-core machine, as for c100k
  build/core_bench /work/data/text384 --repeat 2 > text384.txt
  bench/plot.py --out docs/text384-cpu.png --csv docs/text384-cpu.csv \
      --title "..." text384.txt
"""
import argparse
import csv
import math
import re
import sys

FIELDS = ["system", "build_seconds", "param", "recall_at_10", "qps"]


class Point:
    def __init__(self, system, build_seconds, param, recall, qps):
        self.system = system
        self.build_seconds = build_seconds  # None: not built (exact search)
        self.param = param
        self.recall = recall
        self.qps = qps


# ---------------------------------------------------------------- readers

def read_csv(path):
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            b = row.get("build_seconds", "").strip()
            out.append(Point(row["system"], float(b) if b else None, row.get("param", ""),
                             float(row["recall_at_10"]), float(row["qps"])))
    return out


def read_core_bench(text, rate):
    """bench/core_bench output: a cagra itopk sweep, an hnswlib ef sweep, exact."""
    out = []
    # cagra rows: itopk width probes random recall wall cpu dists
    # hnswlib rows: ef recall wall cpu nbrs
    system, build, param_name = None, None, None
    for line in text.splitlines():
        m = re.match(r"(cagra|hnswlib): build ([\d.]+) s wall.*?\(([^)]*)\)", line)
        if m:
            kind = m.group(1)
            system = ("cagra CPU" if kind == "cagra" else "hnswlib") + " (%s)" % m.group(3)
            build, param_name = float(m.group(2)), "itopk" if kind == "cagra" else "ef"
            continue
        m = re.match(r"exact \(brute force, (\d+) thread.*recall@10 ([\d.]+), QPS ([\d.]+) wall, ([\d.]+) CPU", line)
        if m:
            out.append(Point("exact (brute force)", None, "", float(m.group(2)),
                             float(m.group(4) if rate == "cpu" else m.group(3))))
            system = None
            continue
        f = line.split()
        if system and f and f[0].isdigit():
            if param_name == "itopk":
                recall, qps = float(f[4]), float(f[6] if rate == "cpu" else f[5])
                label = "itopk %s, probes %s, random %s" % (f[0], f[2], f[3])
            else:
                recall, qps = float(f[1]), float(f[3] if rate == "cpu" else f[2])
                label = "ef %s" % f[0]
            out.append(Point(system, build, label, recall, qps))
        elif system and line.strip() == "":
            system = None
    return out


def read_gpu_tables(text):
    """bench/gpu_bench markdown: build rows, the exact row and itopk/batch tables."""
    builds, out, title = {}, [], ""
    pending = []
    in_table = False  # inside a table headed "| itopk | batch | ..."
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"\|\s*(GPU|CPU) build[^|]*\|\s*([\d.]+) s", s)
        if m:
            builds[m.group(1)] = float(m.group(2))
            continue
        m = re.match(r"\|\s*exact brute force on the GPU[^|]*\|\s*([\d.]+) q/s, recall@10 ([\d.]+)", s)
        if m:
            out.append(Point("exact on the GPU (batch 10,000)", None, "", float(m.group(2)),
                             float(m.group(1))))
            continue
        if re.match(r"\|\s*itopk\s*\|\s*batch\s*\|\s*recall", s):
            in_table = True
            continue
        if not s.startswith("|"):
            in_table = False
        cells = [c.strip() for c in s.strip("|").split("|")] if in_table else []
        if len(cells) == 5 and cells[0].isdigit():
            itopk, batch, recall, qps = int(cells[0]), int(cells[1]), float(cells[2]), float(cells[3])
            cpu_graph = "CPU-built" in title
            fp16 = "fp16" in title
            name = "cagra GPU, batch %s%s%s" % (format(batch, ","), ", fp16" if fp16 else "",
                                                 ", CPU-built graph" if cpu_graph else "")
            pending.append((name, "CPU" if cpu_graph else "GPU", "itopk %d" % itopk, recall, qps))
        elif s and not s.startswith("|"):
            title = s
    for name, builder, param, recall, qps in pending:
        out.append(Point(name, builds.get(builder), param, recall, qps))
    return out


def read_sql_bench(text):
    """bench/sql_bench.py output: CREATE INDEX times and per-setting figures."""
    out, builds = [], {}
    for line in text.splitlines():
        m = re.match(r"(cagra|pgvector HNSW) CREATE INDEX.*?: ([\d.]+) s", line)
        if m:
            builds["cagra" if m.group(1) == "cagra" else "pgvector"] = float(m.group(2))
            continue
        m = re.match(r"exact \(seq scan\)\s+recall@10 ([\d.]+)\s+([\d.]+) ms/query", line)
        if m:
            out.append(Point("exact (seq scan, SQL)", None, "", float(m.group(1)), 1000.0 / float(m.group(2))))
            continue
        m = re.match(r"(cagra(?: (\w+))? itopk_size|pgvector hnsw ef_search) (\d+)\s+recall@10 ([\d.]+).*?"
                     r"1 client\s+([\d.]+) q/s\s+(\d+) clients\s+([\d.]+) q/s", line)
        if m:
            kind = "cagra" if m.group(1).startswith("cagra") else "pgvector"
            if kind == "cagra":
                label = "cagra (SQL%s)" % (", cagra.device " + m.group(2) if m.group(2) else "")
            else:
                label = "pgvector HNSW (SQL)"
            param = ("itopk " if kind == "cagra" else "ef ") + m.group(3)
            recall = float(m.group(4))
            out.append(Point(label + ", 1 client", builds.get(kind), param, recall, float(m.group(5))))
            out.append(Point(label + ", %s clients" % m.group(6), builds.get(kind), param, recall,
                             float(m.group(7))))
    return out


def read_any(path, rate):
    if path.endswith(".csv"):
        return read_csv(path)
    with open(path) as f:
        text = f.read()
    if re.search(r"^(cagra|hnswlib): build", text, re.M):
        return read_core_bench(text, rate)
    if re.search(r"\| itopk \| batch \|", text):
        return read_gpu_tables(text)
    if "CREATE INDEX" in text and "recall@10" in text:
        return read_sql_bench(text)
    sys.exit("plot.py: %s: not a CSV file nor output of core_bench, gpu_bench or sql_bench" % path)


# ---------------------------------------------------------------- output

def write_csv(path, points):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        for p in points:
            w.writerow([p.system, "" if p.build_seconds is None else "%g" % p.build_seconds, p.param,
                        "%.4f" % p.recall, "%.1f" % p.qps])


def family_color(system):
    s = system.lower()
    on_gpu = s.startswith("cagra gpu") or "gpu worker" in s or "device gpu" in s
    return ("black" if s.startswith("exact") else "tab:green" if s.startswith("cagra") and on_gpu else
            "tab:blue" if s.startswith("cagra") else "tab:red" if "pgvector" in s else
            "tab:orange" if "hnswlib" in s else "tab:purple")


def styles(systems):
    """Colour by family (cagra GPU, cagra CPU, pgvector, hnswlib, exact); the
    curves of one family differ by line style and marker, in order of appearance."""
    dashes, markers = ["-", "--", ":", "-."], ["o", "s", "^", "D", "v"]
    seen, out = {}, {}
    for name in systems:
        color = family_color(name)
        if name.lower().startswith("exact"):
            out[name] = {"color": color, "marker": "*", "markersize": 12, "linestyle": "none"}
            continue
        k = seen.get(color, 0)
        seen[color] = k + 1
        out[name] = {"color": color, "linestyle": dashes[k % len(dashes)],
                     "marker": markers[k % len(markers)], "markersize": 4}
    return out


def plot(points, out, title, min_recall):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    systems = []
    for p in points:
        if p.system not in systems:
            systems.append(p.system)
    fig, ax = plt.subplots(figsize=(9, 6.5 + 0.22 * len(systems)), dpi=110)
    look = styles(systems)
    for name in systems:
        pts = sorted((p for p in points if p.system == name), key=lambda p: p.recall)
        build = pts[0].build_seconds
        label = name + ("" if build is None else " — build %s s" % ("%.2f" % build if build < 10 else "%.1f" % build))
        ax.plot([p.recall for p in pts], [p.qps for p in pts], label=label, **look[name])
    lo = min_recall if min_recall is not None else max(0.0, math.floor(min(p.recall for p in points) * 20) / 20)
    ax.set_xlim(lo, 1.0 + (1.0 - lo) * 0.02)
    ax.set_yscale("log")
    # plain numbers on the log axis; the 2x and 5x minor ticks labelled too
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: "{:,.0f}".format(v))
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _: "{:,.0f}".format(v) if "{:.0e}".format(v)[0] in "25" else ""))
    ax.set_xlabel("recall@10")
    ax.set_ylabel("queries per second (log scale)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    # below the axes, so that no curve hides behind it
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1, frameon=False)
    fig.tight_layout()
    fig.savefig(out)


def main():
    ap = argparse.ArgumentParser(description="recall@10 against queries/s, one curve per system")
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--csv")
    ap.add_argument("--title", default="")
    ap.add_argument("--core-qps", choices=["cpu", "wall"], default="cpu")
    ap.add_argument("--only")
    ap.add_argument("--min-recall", type=float)
    args = ap.parse_args()
    points = []
    for path in args.inputs:
        points += read_any(path, args.core_qps)
    if args.only:
        points = [p for p in points if re.search(args.only, p.system)]
    if not points:
        sys.exit("plot.py: no points read")
    if args.csv:
        write_csv(args.csv, points)
    plot(points, args.out, args.title, args.min_recall)
    print("%s: %d points, %d systems" % (args.out, len(points), len({p.system for p in points})))


if __name__ == "__main__":
    main()
