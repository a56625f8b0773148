#!/usr/bin/env bash
# bench/device-graphs.sh — issue 12's "CPU-built graph within 0.01 of the
# GPU-built one" on the lent GPU machine: for each hard set, the GPU build
# and the core's CPU build (16 threads) of the same rows, both graphs
# searched on the GPU (gpu_bench --only graphs: fp32 vectors, batch 10,000,
# recall@10 at itopk 16 to 128).  The sets are generated there:
#   h200k   200,000 x 256, intrinsic dimension 96, 1,024 clusters
#   h768    100,000 x 768, intrinsic dimension 100, 512 clusters
#   hardN   HARD_N x 1,024, intrinsic dimension 100, 1,024 clusters
#   text384 the real sentence embeddings of bench/text_dataset.py, inner
#           product: the float16 parts of bench/device-text384.sh, each
#           carried by a run of its own and copied at once into one folder,
#           TEXT_PARTS (default /tmp/textparts: a later carry under
#           .textparts replaces the folder), then joined here
# Into OUTDIR: graphs-<set>.md, misc.log.
#
# usage (repository root): bash bench/device-graphs.sh OUTDIR
#   env: BIN=DIR   prebuilt gpu_bench and libcagra_gpu.so (same CUDA)
#        HARD_N=300000 (0: skip the 1,024-dimension set)  SETS="h200k h768 hard"
set -uo pipefail
out=${1:-${OUT:-device-graphs-out}}
mkdir -p "$out"
bin=${BIN:-.devbin}
hard_n=${HARD_N:-300000}
start=$SECONDS
step() { echo "== $* ($((SECONDS - start)) s)"; }

nvidia-smi --query-gpu=name,memory.used,clocks.sm,clocks.max.sm --format=csv,noheader
for set in ${SETS:-h200k h768 hard}; do
  case $set in
    h200k) dir=/tmp/h200k; args="200000 256 1000 7 --intrinsic 96 --clusters 1024" ;;
    h768) dir=/tmp/h768; args="100000 768 1000 7 --intrinsic 100 --clusters 512" ;;
    hard) [ "$hard_n" -gt 0 ] || continue
          dir=/tmp/hard$hard_n; args="$hard_n 1024 1000 7 --intrinsic 100 --clusters 1024" ;;
    text384) dir=/tmp/text384; args="" ;;
    *) echo "unknown set $set"; exit 2 ;;
  esac
  step "data $set"
  if [ "$set" = text384 ]; then
    metric=ip
    parts=${TEXT_PARTS:-/tmp/textparts}
    [ -f "$dir/base.fvecs" ] || { mkdir -p "$dir/parts" && cp "$parts"/part* "$parts/shape" "$dir/parts/" &&
      cp "$parts/query.fvecs" "$parts/gt.ivecs" "$dir/" &&
      python3 bench/fvecs_parts.py join "$dir/parts" "$dir/base.fvecs"; } >>"$out/misc.log" 2>&1 ||
      { tail -3 "$out/misc.log"; exit 1; }
  else
    metric=l2
    [ -f "$dir/gt.ivecs" ] || python3 bench/gen.py "$dir" $args >>"$out/misc.log" 2>&1 || { tail -3 "$out/misc.log"; exit 1; }
  fi
  step "gpu_bench --only graphs, $set"
  LD_LIBRARY_PATH="$bin" "$bin/gpu_bench" "$dir" --metric $metric --only graphs --cpu-build 16 --out "$out/graphs-$set.md" \
    2>>"$out/misc.log" | tail -6
done
step "done"
