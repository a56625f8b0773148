#!/usr/bin/python3
"""bench/fvecs_parts.py — moves a large .fvecs base set to the GPU machine in
pieces that fit its per-run transfer limit: `split` writes the vectors as
float16 in parts of at most MB megabytes; `join` rebuilds a float32 .fvecs
from the parts.  float16 keeps about three decimal digits, so a benchmark on
the joined set should take its ground truth from an exact search of the
joined vectors (gpu_bench prints the exact search's recall against the
original ground truth, which shows how far the rounding moved it).

usage: fvecs_parts.py split BASE.fvecs OUTDIR MB[,MB...]
       fvecs_parts.py join OUTDIR BASE.fvecs
"""
import os
import sys

import numpy as np


def split(src, outdir, sizes_mb):
    raw = np.fromfile(src, dtype=np.int32)
    dim = int(raw[0])
    vecs = raw.reshape(-1, dim + 1)[:, 1:].view(np.float32).astype(np.float16)
    flat = vecs.tobytes()
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "shape"), "w") as f:
        f.write("%d %d\n" % vecs.shape)
    at, part = 0, 0
    while at < len(flat):
        size = sizes_mb[min(part, len(sizes_mb) - 1)] * 1000 * 1000
        with open(os.path.join(outdir, "part%d" % part), "wb") as f:
            f.write(flat[at:at + size])
        print("part%d: %d bytes" % (part, min(size, len(flat) - at)))
        at += size
        part += 1


def join(outdir, dst):
    with open(os.path.join(outdir, "shape")) as f:
        n, dim = (int(x) for x in f.read().split())
    parts = len([x for x in os.listdir(outdir) if x.startswith("part")])
    flat = b"".join(open(os.path.join(outdir, "part%d" % p), "rb").read() for p in range(parts))
    vecs = np.frombuffer(flat, dtype=np.float16).reshape(n, dim).astype(np.float32)
    out = np.empty((n, dim + 1), dtype=np.int32)
    out[:, 0] = dim
    out[:, 1:] = vecs.view(np.int32)
    out.tofile(dst)
    print("%s: %d x %d" % (dst, n, dim))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "split":
        split(sys.argv[2], sys.argv[3], [int(x) for x in sys.argv[4].split(",")])
    elif len(sys.argv) == 4 and sys.argv[1] == "join":
        join(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
