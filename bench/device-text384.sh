#!/usr/bin/env bash
# bench/device-text384.sh — the GPU curve of the real-data set (text384,
# bench/text_dataset.py) on the lent GPU machine.  The 300 MB base set does
# not fit one transfer, so it travels as float16 parts made here by
#     python3 bench/fvecs_parts.py split /work/data/text384/base.fvecs .textparts 29,62,63
# and moved into .textparts/a (part0, shape, query.fvecs, gt.ivecs),
# .textparts/b (part1) and .textparts/c (part2), each carried by its own run
# on a warm machine (.textparts is ignored through .git/info/exclude).  This
# script joins them and runs bench/gpu_bench with inner-product ground truth;
# run it after gpu/device-check.sh has built gpu_bench in build-device.
#
# usage (repository root): bash bench/device-text384.sh [OUTDIR]
#   env: CPU_BUILD=16  threads of the CPU build measured beside (0: skip)
set -uo pipefail
out=${1:-${OUT:-device-text384-out}}
mkdir -p "$out"
data=/tmp/text384
bench=build-device/gpu/gpu_bench
[ -x "$bench" ] || { echo "no $bench: run gpu/device-check.sh first"; exit 1; }
rm -rf "$data" && mkdir -p "$data/parts"
cp .textparts/*/part* .textparts/a/shape "$data/parts/" &&
  cp .textparts/a/query.fvecs .textparts/a/gt.ivecs "$data/" || exit 1
python3 bench/fvecs_parts.py join "$data/parts" "$data/base.fvecs" || exit 1
"$bench" "$data" --metric ip --cpu-build "${CPU_BUILD:-16}" --out "$out/text384-gpu.md"
echo "gpu_bench exit status $?"
