#!/usr/bin/env bash
# test/device-sql.sh — the SQL-level checks of the GPU worker on the lent GPU
# machine (see ../shared/device/README.md): builds libcagra_gpu.so and the
# extension against the carried PostgreSQL, installs both, then
#   1. pg_regress on a cluster with the worker on the GPU (cagra preloaded),
#      compared with the expected (CPU) outputs; status counters afterwards
#      show that builds and searches really went to the device;
#   2. the worker TAP tests (test/t/1*_worker_*.pl), 102 with the device.
# Logs go to OUTDIR (default $OUT or device-sql-out).
#
# usage (repository root, carrying .device): bash test/device-sql.sh [OUTDIR]
#   SKIP_TAP=1: pg_regress only; SKIP_REGRESS=1: TAP only; TAP_ONLY=102: those TAP files
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
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCAGRA_GPU=ON >"$out/cmake.log" 2>&1 &&
  cmake --build build-device -j "$jobs" --target cagra_gpu >>"$out/cmake.log" 2>&1 ||
  { tail -30 "$out/cmake.log"; exit 1; }
lib=$(find build-device -name libcagra_gpu.so | head -1)
install -m 755 "$lib" "$pkglib/libcagra_gpu.so"

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
su pguser -c "cd $tdir && TEMP_CONFIG=$tdir/temp.conf PATH=$PATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH PERL5LIB=${PERL5LIB:-} \
  TESTDIR=$tdir PG_REGRESS=$pgxs_src/test/regress/pg_regress CAGRA_SRC=$root \
  CAGRA_GPU_LIBRARY=$pkglib/libcagra_gpu.so \
  prove -v -I $pgxs_src/test/perl $(ls "$root"/test/t/1*_worker_*.pl | grep -- "${TAP_ONLY:-}" | tr '\n' ' ')" >"$out/tap.log" 2>&1
echo "TAP exit status $?"
grep -E "^(not ok|ok|# )|^Result|Files=" "$out/tap.log" | head -120
# the logs of failed TAP files, flat (only two folder levels come back)
for f in "$tdir"/tmp_check/log/regress_log_*; do
  [ -f "$f" ] && tail -60 "$f" > "$out/tap-$(basename "$f").txt"
done
grep -h -B2 -A12 "Failed test\|died\|ERROR" "$tdir"/tmp_check/log/regress_log_* 2>/dev/null | head -80
exit 0
