#!/usr/bin/env bash
# bench/device-resident.sh — issue 15's resident search kernel on the lent
# GPU machine, one run: the GPU tests of the search (GpuSearch.*: the
# resident kernel against launches, beside builds and allocations), then
# bench/worker_profile.py on c1m and, with HARD_N > 0, on HARD_N x 1,024
# (intrinsic dimension 100, 1,024 clusters): recall@10, queries/s and the
# round trip's steps at 1, 64 and 256 clients.  Logs into OUTDIR: tests.log, build.txt, profile-*.txt.
#
# usage (repository root, carrying .device): bash bench/device-resident.sh OUTDIR
#   env: BIN=.device/bin  prebuilt libcagra_gpu.so and cagra_gpu_tests (same CUDA)
#        HARD_N=300000    rows of the hard set (0: c1m only)
#        CLIENTS=1,64,256 SECONDS_PER_RUN=5 TESTS=GpuSearch.*
#        ITOPK="32"       cagra.itopk_size values of the c1m profile, one sweep each
#        BATCH=10000      also time cagra_search calls of BATCH queries on each set
#        NEXT_HARD_N=N    also make the hard N x 1,024 set (before the profiles, beside
#                         c1m), for a later command on the same warm machine
#        BASE="dir..."    then the first c1m profile again with each dir's cagra.so and
#                         libcagra_gpu.so (this tree's for either it lacks; other commits', built beforehand for
#                         the carried PostgreSQL) installed instead, and once more with
#                         this tree's: the builds measured on one machine, interleaved
#                         (before the hard set, whose load replaces c1m's tables)
#        BASE_ROUNDS=1    how many times that round (each base, then this tree) runs
#        FLOOR=1          after the first c1m profile, the same statement with a B-tree
#                         range scan in place of the search at each client count
#                         (worker_profile.py --floor): the host's ceiling for it
set -uo pipefail
out=${1:-${OUT:-device-resident-out}}
mkdir -p "$out"
bin=${BIN:-.device/bin}
hard_n=${HARD_N:-300000}
clients=${CLIENTS:-1,64,256}
seconds=${SECONDS_PER_RUN:-5}
start=$SECONDS
step() { echo "== $* ($((SECONDS - start)) s)"; }
source bench/device-lib.sh

step "device"
nvidia-smi --query-gpu=name,memory.used,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader
(
  device_dataset c1m
  if [ "$hard_n" -gt 0 ]; then device_dataset hard "$hard_n"; fi
) >"$out/data.log" 2>&1 &
gen=$!
next_gen=$gen
[ -n "${NEXT_HARD_N:-}" ] && { device_dataset hard "$NEXT_HARD_N" >"$out/next-data.log" 2>&1 & next_gen=$!; }

if [ -n "${TESTS-GpuSearch.*}" ]; then
  step "GPU tests (${TESTS-GpuSearch.*})"
  LD_LIBRARY_PATH="$bin" timeout 150 "$bin/cagra_gpu_tests" --gtest_filter="${TESTS-GpuSearch.*}" >"$out/tests.log" 2>&1
  echo "tests exit status $?"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[       OK|Failure|Expected|Which is|^recall:|^thread" "$out/tests.log" | head -80
fi

step "extension and library"
GPU_LIB="$bin/libcagra_gpu.so" device_install "$out" || exit 1
PG_UP_OPTS="-c shared_preload_libraries=cagra -c shared_buffers=16GB -c max_connections=300 \
  -c max_worker_processes=32 -c max_parallel_maintenance_workers=15" source .device/pg-up.sh || exit 1
step "waiting for the data sets"
wait $gen || { tail -5 "$out/data.log"; exit 1; }
wait $next_gen

batch=${BATCH:+--batch $BATCH}
load=""
for itopk in ${ITOPK:-32}; do
  step "worker profile, c1m, itopk $itopk"
  python3 bench/worker_profile.py /tmp/c1m $load --clients "$clients" --seconds "$seconds" \
    --itopk "$itopk" $batch 2>&1 | tee "$out/profile-c1m-itopk$itopk.txt"
  load=--skip-load
done
if [ -n "${FLOOR:-}" ]; then
  step "c1m, the statement without the search"
  python3 bench/worker_profile.py /tmp/c1m --skip-load --clients "$clients" --seconds "$seconds" \
    --no-sweep --floor 2>&1 | tee "$out/floor-c1m.txt"
fi
itopk_first=${ITOPK:-32}
if [ -n "${BASE:-}" ]; then
  pkglib=$(pg_config --pkglibdir)
  mkdir -p /tmp/tree-build
  cp "$pkglib/cagra.so" "$pkglib/libcagra_gpu.so" /tmp/tree-build/
  for run in $(seq 1 "${BASE_ROUNDS:-1}"); do
    for build in $BASE /tmp/tree-build; do
      name=$(basename "$build"); [ "$build" = /tmp/tree-build ] && name=tree
      step "c1m, itopk ${itopk_first%% *}, the $name build ($build, round $run)"
      ext=$build/cagra.so; [ -f "$ext" ] || ext=/tmp/tree-build/cagra.so
      lib=$build/libcagra_gpu.so; [ -f "$lib" ] || lib=/tmp/tree-build/libcagra_gpu.so
      install -m 755 "$ext" "$pkglib/cagra.so" && install -m 755 "$lib" "$pkglib/libcagra_gpu.so"
      su pguser -c "LD_LIBRARY_PATH=$LD_LIBRARY_PATH $(pg_config --bindir)/pg_ctl -D /tmp/pgdata -l /tmp/pg.log -w restart" >/dev/null
      python3 bench/worker_profile.py /tmp/c1m --skip-load --clients "$clients" --seconds "$seconds" \
        --itopk "${itopk_first%% *}" $batch 2>&1 | tee "$out/profile-c1m-$name-$run.txt"
    done
  done
fi
if [ "$hard_n" -gt 0 ]; then
  step "worker profile, hard $hard_n x 1024"
  python3 bench/worker_profile.py "/tmp/hard$hard_n" --clients "$clients" --seconds "$seconds" \
    --itopk 64 $batch 2>&1 | tee "$out/profile-hard.txt"
fi
psql -Atc "SELECT * FROM cagra_status" >"$out/status.txt" 2>&1
step "done"
