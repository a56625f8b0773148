#!/usr/bin/env bash
# bench/device-build-phases.sh — what bounds CREATE INDEX on a large
# high-dimensional table (issue 13), on the lent GPU machine: the disk's
# sequential write rate (dd, 8 GB, fdatasync), then bench/device-scale.sh
# loads a hard set (N x DIM, 1,000,000 x 1,024 by default) and builds the
# index with the GPU worker under each variant: float32 and float16, the
# index pages WAL-logged (wal_level = replica) or not (INDEX_WAL=minimal),
# wal_buffers 64 MB or 1 GB.  Each build prints its phases
# (pg_stat_progress_create_index), the memory peaks and the WAL it wrote
# (pg_stat_wal: records, full-page images, bytes, writes forced by full
# wal_buffers, write and sync times).  Run from the repository root,
# carrying .device:
#     bash bench/device-build-phases.sh "$OUT"
#     N=1000000 DIM=128 VARIANTS=float32,float32-nowal bash bench/device-build-phases.sh "$OUT"
# (VARIANTS: a comma list of the five below; INTRINSIC and CLUSTERS go to
# bench/device-scale.sh, so to bench/gen.py.)
# About 2.5 minutes at the default size on the H200 host (the load 30 s, each
# build 20-40 s with its restart).  Logs: OUTDIR/<variant>/index.txt.
set -uo pipefail
out=${1:-${OUT:-device-build-phases-out}}
mkdir -p "$out"
export N=${N:-1000000} DIM=${DIM:-1024} QUERIES=0 PARALLEL_WORKERS=${PARALLEL_WORKERS:-15}
{ dd if=/dev/zero of=/tmp/dd.bin bs=1M count=8192 conv=fdatasync 2>&1 | tail -1; rm -f /tmp/dd.bin; } |
  sed 's/^/disk, 8 GB sequential write: /' | tee "$out/disk.txt"
STAGE=load bash bench/device-scale.sh "$out/load" > "$out/load.log" 2>&1 || { tail -30 "$out/load.log"; exit 1; }
grep -E "generated and loaded|bench_items:" "$out/load/load.txt"
variants=${VARIANTS:-float32,float32-nowal,float32-walbuffers1GB,float16,float16-nowal}
for name in ${variants//,/ }; do
  case $name in
    float32) set -- STORAGE=float32 ;;
    float32-nowal) set -- STORAGE=float32 INDEX_WAL=minimal ;;
    float32-walbuffers1GB) set -- STORAGE=float32 WAL_BUFFERS=1GB ;;
    float16) set -- STORAGE=float16 ;;
    float16-nowal) set -- STORAGE=float16 INDEX_WAL=minimal ;;
    *) echo "unknown variant $name" >&2; exit 2 ;;
  esac
  env SKIP_BUILD=1 STAGE=index "$@" bash bench/device-scale.sh "$out/$name" > "$out/$name.log" 2>&1 ||
    { echo "== $name failed"; tail -20 "$out/$name.log"; continue; }
  echo "== $name ($*)"
  grep -E "^CREATE INDEX|^phases|^WAL of|^build:|peak" "$out/$name/index.txt"
done
