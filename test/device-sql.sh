#!/usr/bin/env bash
# test/device-sql.sh — the SQL-level checks of the GPU worker on the lent GPU
# machine (see ../shared/device/README.md): builds libcagra_gpu.so and the
# extension against the carried PostgreSQL, installs both, then
#   1. pg_regress on a cluster with the worker on the GPU (cagra preloaded),
#      compared with the expected (CPU) outputs; status counters afterwards
#      show that builds and searches really went to the device;
#   2. the worker TAP tests (test/t/1*_worker_*.pl) with the device:
#      102 builds and searches on the GPU, kill -9 of the worker mid-batch;
#      103 out of device memory (test/gpu/hold_memory, built here, holds all
#      but 64 MB of every device) and cagra.gpu_memory_limit below a copy:
#      ERROR with build_device = gpu / cagra.device = gpu, CPU fallback with
#      a NOTICE otherwise, counters, recovery once the memory is back;
#      104 index copies spread over several devices (skips with one device:
#      run on the nvidia-h200-x2 kind).
# Logs go to OUTDIR (default $OUT or device-sql-out).
#
# usage (repository root, carrying .device): bash test/device-sql.sh [OUTDIR]
#   SKIP_TAP=1: pg_regress only; SKIP_REGRESS=1: TAP only;
#   TAP_ONLY="102 103": only the TAP files whose names contain one of these
#   words (separated by spaces or commas); GPU_LIB=path: install that
#   libcagra_gpu.so (built elsewhere with the same CUDA) instead of building;
#   CAGRA_CUDA_ARCH="80-virtual": the architectures to build it for
set -uo pipefail
out=${1:-${OUT:-device-sql-out}}
mkdir -p "$out"
chmod a+rwx "$out"
root=$(pwd)
jobs=$(nproc)

PG_UP_NOSTART=1 source .device/pg-up.sh || exit 1
pgc=$(command -v pg_config)
pkglib=$("$pgc" --pkglibdir)
pgxs_src=$(dirname "$("$pgc" --pgxs)")/..

echo "== GPU library"
if [ -n "${GPU_LIB:-}" ]; then
  lib=$GPU_LIB
else
  cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCAGRA_GPU=ON \
    ${CAGRA_CUDA_ARCH:+-DCAGRA_CUDA_ARCH="$CAGRA_CUDA_ARCH"} >"$out/cmake.log" 2>&1 &&
    cmake --build build-device -j "$jobs" --target cagra_gpu >>"$out/cmake.log" 2>&1 ||
    { tail -30 "$out/cmake.log"; exit 1; }
  lib=$(find build-device -name libcagra_gpu.so | head -1)
fi
install -m 755 "$lib" "$pkglib/libcagra_gpu.so"

if [ -z "${SKIP_TAP:-}" ]; then
echo "== hold_memory (TAP 103)"
# test/gpu is added to the build only where CMake finds GoogleTest: without
# the target, compile the one file with the same CUDA compiler
hold=""
if cmake --build build-device -j "$jobs" --target hold_memory >>"$out/cmake.log" 2>&1; then
  hold=$(find build-device -name hold_memory -type f | head -1)
else
  nvcc=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' build-device/CMakeCache.txt)
  mkdir -p build-device/hold &&
    "${nvcc:-nvcc}" -O2 -std=c++17 -cudart static -o build-device/hold/hold_memory \
      test/gpu/hold_memory.cu >>"$out/cmake.log" 2>&1 && hold=build-device/hold/hold_memory
fi
[ -n "$hold" ] || echo "hold_memory was not built (see cmake.log): TAP 103 will skip"
fi

echo "== extension"
make -j "$jobs" with_llvm=no PG_CONFIG="$pgc" >"$out/make.log" 2>&1 &&
  make with_llvm=no PG_CONFIG="$pgc" install >>"$out/make.log" 2>&1 ||
  { tail -30 "$out/make.log"; exit 1; }

if [ -z "${SKIP_REGRESS:-}" ]; then
echo "== pg_regress with the worker on the GPU"
PG_UP_OPTS="-c shared_preload_libraries=cagra" source .device/pg-up.sh || exit 1
for i in $(seq 1 30); do
  st=$(psql -At -c "CREATE EXTENSION IF NOT EXISTS cagra; SELECT state FROM cagra_status" 2>/dev/null | tail -1)
  [ -n "$st" ] && [ "$st" != "not started" ] && [ "$st" != "starting" ] && break
  sleep 1
done
psql -c "SELECT state, devices, message FROM cagra_status" | tee "$out/status-before.txt"
psql -c "DROP EXTENSION cagra" >/dev/null
rdir=/tmp/regress-gpu
rm -rf "$rdir" && mkdir -p "$rdir" && cp -r sql expected "$rdir"/ && chown -R pguser "$rdir"
tests=$(for f in sql/*.sql; do basename "$f" .sql; done | tr '\n' ' ')
# the real pgvector is not carried to the GPU machine
[ -f "$("$pgc" --sharedir)/extension/vector.control" ] || tests=$(echo "$tests" | sed 's/\bpgvector\b//; s/\bpgvector_settings\b//')
su pguser -c "cd $rdir && PATH=$PATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH $pgxs_src/test/regress/pg_regress \
  --bindir=$(dirname "$(command -v psql)") --host=/tmp --user=pguser --dbname=regress_gpu --inputdir=$rdir --outputdir=$rdir \
  $tests" >"$out/regress.log" 2>&1
echo "pg_regress exit status $? (differences from the CPU outputs below; build_device and recall lines may differ)"
tail -5 "$out/regress.log"
[ -f "$rdir/regression.diffs" ] && cp "$rdir/regression.diffs" "$out/" && head -150 "$rdir/regression.diffs"
psql -d regress_gpu -x -c "SELECT * FROM cagra_status" | tee "$out/status-after.txt"

fi
[ -n "${SKIP_TAP:-}" ] && exit 0
echo "== TAP: worker tests"
tdir=/tmp/tap-gpu
rm -rf "$tdir" && mkdir -p "$tdir" && chown pguser "$tdir"
# the carried PostgreSQL has no LLVM: JIT off in every TAP cluster
echo "jit = off" > "$tdir/temp.conf"
# hold_memory where the test user can run it
hold_bin=""
if [ -n "${hold:-}" ]; then
  hold_bin=$tdir/hold_memory
  install -m 755 "$hold" "$hold_bin"
fi
tap_files=$(ls "$root"/test/t/1*_worker_*.pl)
if [ -n "${TAP_ONLY:-}" ]; then
  pat=$(echo "$TAP_ONLY" | tr ', ' '\n\n' | grep -v '^$' | paste -sd'|')
  tap_files=$(echo "$tap_files" | grep -E -- "/[^/]*($pat)[^/]*$")
fi
echo "files: $(echo "$tap_files" | xargs -n1 basename | tr '\n' ' ')"
su pguser -c "cd $tdir && TEMP_CONFIG=$tdir/temp.conf PATH=$PATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH PERL5LIB=${PERL5LIB:-} \
  TESTDIR=$tdir PG_REGRESS=$pgxs_src/test/regress/pg_regress CAGRA_SRC=$root \
  CAGRA_GPU_LIBRARY=$pkglib/libcagra_gpu.so CAGRA_HOLD_MEMORY=$hold_bin \
  prove -v -I $pgxs_src/test/perl -I $root/test/t $(echo "$tap_files" | tr '\n' ' ')" >"$out/tap.log" 2>&1
echo "TAP exit status $?"
grep -E "^(not ok|ok|# )|^Result|Files=" "$out/tap.log" | head -120
# the logs of failed TAP files, flat (only two folder levels come back)
for f in "$tdir"/tmp_check/log/regress_log_*; do
  [ -f "$f" ] && tail -60 "$f" > "$out/tap-$(basename "$f").txt"
done
grep -h -B2 -A12 "Failed test\|died\|ERROR" "$tdir"/tmp_check/log/regress_log_* 2>/dev/null | head -80
exit 0
