#!/usr/bin/env bash
# bench/device-latency.sh — small-batch latency of the GPU library on the
# lent GPU machine (issue 15): the GPU tests of the search, then
# gpu_bench --only latency (batches 1, 4, 16 and 64: one thread block per
# query against several) on c1m (1,000,000 x 128) and on a hard set
# (HARD_N x 1,024, intrinsic dimension 100, 1,024 clusters).  The two sets
# are generated in the background while the tests run.  Into OUTDIR (six
# files at most): tests.log, sanitizer.log, latency-c1m.md,
# latency-hard.md, misc.log (data generation, the benchmark's stderr).
#
# usage (repository root): bench/device-latency.sh OUTDIR
#   env: BIN=DIR      prebuilt libcagra_gpu.so, cagra_gpu_tests and gpu_bench
#                     (built on a machine with the same CUDA); used when they
#                     run here, else everything is built (as gpu/device-check.sh)
#        HARD_N=300000  rows of the hard set (0: skip it)
#        TESTS=GpuSearch.*:GpuLibrary.*  GoogleTest filter ("" skips the tests)
#        SANITIZE=1     compute-sanitizer memcheck and racecheck on one small test
#        GTEST_SRC=.device/googletest    GoogleTest sources for a build here
set -uo pipefail
out=${1:-${OUT:-device-out}}
mkdir -p "$out"
hard_n=${HARD_N:-300000}
tests_filter=${TESTS-GpuSearch.*:GpuLibrary.*}
gtest_src=${GTEST_SRC:-.device/googletest}
start=$SECONDS
step() { echo "== $* ($((SECONDS - start)) s)"; }

step "device"
nvidia-smi --query-gpu=name,memory.used,clocks.sm,clocks.max.sm,driver_version --format=csv,noheader

# the data sets, made beside the rest (numpy on the host's cores)
(
  [ -f /tmp/c1m/gt.ivecs ] || python3 bench/gen.py /tmp/c1m 1000000 128 1000 7
  if [ "$hard_n" -gt 0 ] && [ ! -f /tmp/hard$hard_n/gt.ivecs ]; then
    python3 bench/gen.py /tmp/hard$hard_n "$hard_n" 1024 1000 7 --intrinsic 100 --clusters 1024
  fi
) >"$out/misc.log" 2>&1 &
gen=$!

tests="" bench=""
if [ -n "${BIN:-}" ] && LD_LIBRARY_PATH="$BIN" "$BIN/cagra_gpu_tests" --gtest_list_tests >/dev/null 2>&1 &&
  ! LD_LIBRARY_PATH="$BIN" ldd "$BIN/gpu_bench" | grep -q "not found"; then
  step "prebuilt binaries from $BIN"
  export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  tests=$BIN/cagra_gpu_tests bench=$BIN/gpu_bench
  # the dlopen test opens the library by the path it was built at
  built_at=$(grep -ao '/[[:alnum:]/_.-]*/libcagra_gpu\.so' "$tests" | head -1)
  if [ -n "$built_at" ] && [ ! -e "$built_at" ]; then
    mkdir -p "$(dirname "$built_at")" && ln -s "$PWD/$BIN/libcagra_gpu.so" "$built_at"
  fi
else
  step "build"
  prefix=()
  if [ -d "$gtest_src" ] && [ ! -d /tmp/gtest ]; then
    cmake -S "$gtest_src" -B /tmp/gtest-build -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
      -DCMAKE_INSTALL_PREFIX=/tmp/gtest >"$out/gtest-build.log" 2>&1 &&
      cmake --build /tmp/gtest-build -j "$(nproc)" >>"$out/gtest-build.log" 2>&1 &&
      cmake --install /tmp/gtest-build >>"$out/gtest-build.log" 2>&1
  fi
  [ -d /tmp/gtest ] && prefix=(-DCMAKE_PREFIX_PATH=/tmp/gtest)
  cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCAGRA_GPU=ON -DCAGRA_CUDA_ARCH="${CAGRA_CUDA_ARCH:-native}" "${prefix[@]}" >"$out/build.log" 2>&1 &&
    cmake --build build-device -j "$(nproc)" --target cagra_gpu cagra_gpu_tests gpu_bench >>"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }
  tests=build-device/gpu/test/cagra_gpu_tests bench=build-device/gpu/gpu_bench
fi

if [ -n "$tests_filter" ]; then
  step "GPU tests ($tests_filter)"
  timeout 240 "$tests" --gtest_filter="$tests_filter" >"$out/tests.log" 2>&1
  echo "tests exit status $?"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[       OK|Failure|Expected|Which is|^recall:" "$out/tests.log" | head -60
fi

if [ "${SANITIZE:-0}" = 1 ]; then
  step "compute-sanitizer memcheck and racecheck (GpuSearch.BadSearch*: a search of one query, several blocks)"
  for tool in memcheck racecheck; do
    timeout 90 compute-sanitizer --tool $tool --print-limit 5 "$tests" --gtest_filter='GpuSearch.BadSearch*' \
      >"$out/sanitizer-$tool.tmp" 2>&1
    tail -2 "$out/sanitizer-$tool.tmp"
    cat "$out/sanitizer-$tool.tmp" >>"$out/sanitizer.log" && rm "$out/sanitizer-$tool.tmp"
  done
fi

step "waiting for the data sets"
wait $gen || { tail -5 "$out/misc.log"; exit 1; }
step "latency, c1m"
"$bench" /tmp/c1m --only latency --out "$out/latency-c1m.md" >/dev/null 2>>"$out/misc.log" ||
  { echo "bench failed"; tail -5 "$out/misc.log"; }
cat "$out/latency-c1m.md"
if [ "$hard_n" -gt 0 ]; then
  step "latency, hard $hard_n x 1024"
  "$bench" /tmp/hard$hard_n --only latency --out "$out/latency-hard.md" >/dev/null 2>>"$out/misc.log" ||
    { echo "bench failed"; tail -5 "$out/misc.log"; }
  cat "$out/latency-hard.md"
fi
step "done"
