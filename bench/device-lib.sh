# bench/device-lib.sh — sourced by the device benchmarks (bench/device-*.sh)
# on the lent GPU machine, from the repository root; defines functions and
# does nothing by itself.
#
#   device_install OUTDIR [pgvector]
#       builds and installs the extension and libcagra_gpu.so into the
#       carried PostgreSQL (test/device-sql.sh without its tests; log
#       OUTDIR/build.txt; SKIP_BUILD=1 skips it, e.g. after an earlier
#       command on the same warm machine), unpacks PostgreSQL and puts its
#       bin first on PATH (.device/pg-up.sh, no server started), and with
#       "pgvector" builds and installs the real pgvector 0.8.0 from
#       .device/pgvector/pgvector_0.8.0.orig.tar.gz (Debian 13's source; log
#       OUTDIR/pgvector-build.log), with OPTFLAGS="" as Debian builds it,
#       or with PGVECTOR_OWN_FLAGS=1 with its own Makefile's flags
#       (-march=native); a pgvector that does not build is said, and the
#       benchmark goes on without it.
#   device_dataset c1m | hard N
#       prints the folder of a bench/gen.py set, made first when missing:
#       c1m is 1,000,000 x 128 (/tmp/c1m); hard N is N x 1,024 of intrinsic
#       dimension 100 in 1,024 clusters (/tmp/hardN).

device_install() {
  local out=$1
  if [ "${SKIP_BUILD:-0}" != 1 ]; then
    SKIP_REGRESS=1 SKIP_TAP=1 bash test/device-sql.sh "$out/build" >"$out/build.txt" 2>&1 ||
      { tail -20 "$out/build.txt"; return 1; }
  fi
  PG_UP_NOSTART=1 source .device/pg-up.sh || return 1
  [ "${2:-}" = pgvector ] || return 0
  local pgc optflags=(OPTFLAGS=)
  pgc=$(command -v pg_config)
  [ "${PGVECTOR_OWN_FLAGS:-0}" = 1 ] && optflags=()
  if [ -f .device/pgvector/pgvector_0.8.0.orig.tar.gz ]; then
    rm -rf /tmp/pgvector-0.8.0 && tar -xzf .device/pgvector/pgvector_0.8.0.orig.tar.gz -C /tmp &&
      make -C /tmp/pgvector-0.8.0 -j "$(nproc)" PG_CONFIG="$pgc" ${optflags[@]+"${optflags[@]}"} with_llvm=no >"$out/pgvector-build.log" 2>&1 &&
      make -C /tmp/pgvector-0.8.0 PG_CONFIG="$pgc" ${optflags[@]+"${optflags[@]}"} with_llvm=no install >>"$out/pgvector-build.log" 2>&1 ||
      { tail -20 "$out/pgvector-build.log"; echo "pgvector did not build: cagra alone"; }
  else
    echo "no .device/pgvector/pgvector_0.8.0.orig.tar.gz: cagra alone"
  fi
}

device_dataset() {
  local dir
  case $1 in
    c1m) dir=/tmp/c1m
         [ -f $dir/gt.ivecs ] || python3 bench/gen.py $dir 1000000 128 1000 7 >/dev/null ;;
    hard) dir=/tmp/hard$2
          [ -f "$dir/gt.ivecs" ] || python3 bench/gen.py "$dir" "$2" 1024 1000 7 --intrinsic 100 --clusters 1024 >/dev/null ;;
    *) echo "device_dataset: c1m or hard N" >&2; return 2 ;;
  esac
  echo "$dir"
}
