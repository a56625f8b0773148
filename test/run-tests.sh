#!/bin/bash
# test/run-tests.sh — every test layer of cagra, from a clean checkout:
#
#   0. layers: test/check-layers.sh (include arrows of docs/architecture.md)
#      and test/check-lengths.sh (no function in src/am over 80 lines, no
#      file in src/ or gpu/ over 800)
#   1. core: CMake build (Release) into build/, then ctest (GoogleTest; the
#      GPU tests skip themselves without a device)
#   2. extension: PGXS build and install (make && make install)
#   3. pg_regress: every sql/*.sql on a temporary instance
#   4. isolation: every test/isolation/specs/*.spec with PostgreSQL's
#      isolation tester (pg_isolation_regress), on a temporary instance
#   5. TAP: test/t/*.pl with PostgreSQL::Test::Cluster
#
# Servers refuse to run as root, so as root the SQL layers run as the
# unprivileged user $CAGRA_TEST_USER (default cagra_test, created if missing)
# in a scratch directory.  Failure details are copied back into the checkout:
# regression.diffs and results/ (pg_regress), results/isolation/ (isolation:
# its regression.diffs and results), tmp_check/log/ (TAP).
# TAP tests run from a copy of test/, docs/ and the sources of src/ and get
# CAGRA_SRC, the root of that copy (with build/gpu/libcagra_gpu.so when it
# was built).
# Exit status is non-zero when any layer fails.  The summary counts the
# tests that skipped themselves (GPU tests without a device, TAP files
# whose prerequisite is missing) and says why.
#
# Usage: bash test/run-tests.sh [LAYER...]: the named layers only (of:
# layers core extension regress isolation tap; the SQL layers use the
# installed extension when extension is not named), the same as LAYERS.
#
# Environment: PG_CONFIG (default pg_config), JOBS (default 2),
# CAGRA_TEST_USER, KEEP_SCRATCH=1 to keep the scratch directory,
# LAYERS to run some layers only, TESTS to run only the
# named pg_regress, isolation and TAP tests (names without .sql, .spec or .pl),
# TEST_PORT for pg_regress's and isolation's temporary instance,
# CAGRA_CUDA_ARCH for the GPU library's CUDA architectures (default: the
# GPU of this machine, or sm_75 where there is none, which still compiles
# every kernel for the oldest generation; the packages build them all).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$(pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
JOBS=${JOBS:-2}
TEST_USER=${CAGRA_TEST_USER:-cagra_test}
if [ -n "${CAGRA_CUDA_ARCH:-}" ]; then
    CUDA_ARCH=$CAGRA_CUDA_ARCH
elif nvidia-smi -L >/dev/null 2>&1; then
    CUDA_ARCH=native
else
    CUDA_ARCH=75-real
fi
ALL_LAYERS="layers core extension regress isolation tap"
[ $# -gt 0 ] && LAYERS="$*"
LAYERS=${LAYERS:-$ALL_LAYERS}
for layer in $LAYERS; do
    [[ " $ALL_LAYERS " == *" $layer "* ]] ||
        { echo "unknown layer \"$layer\" (layers: $ALL_LAYERS)" >&2; exit 2; }
done
TESTS=${TESTS:-}
PORT_ARG=${TEST_PORT:+--port=$TEST_PORT}
wanted_layer() { [[ " $LAYERS " == *" $1 "* ]]; }
wanted_test() { [ -z "$TESTS" ] || [[ " $TESTS " == *" $1 "* ]]; }

BINDIR=$("$PG_CONFIG" --bindir) || { echo "pg_config not found" >&2; exit 2; }
PGXS_SRC=$(dirname "$("$PG_CONFIG" --pgxs)")/..
PG_REGRESS=$PGXS_SRC/test/regress/pg_regress
PG_ISOLATION_REGRESS=$PGXS_SRC/test/isolation/pg_isolation_regress

declare -a SUMMARY=()
declare -a SKIPPED=()
FAILED=0 N_PASS=0 N_FAIL=0 N_SKIP=0 N_SKIPPED_TESTS=0
record() {  # record LAYER STATUS DETAIL
    SUMMARY+=("$(printf '%-11s %-5s %s' "$1" "$2" "$3")")
    case $2 in
        PASS) N_PASS=$((N_PASS + 1)) ;;
        FAIL) N_FAIL=$((N_FAIL + 1)); FAILED=1 ;;
        SKIP) N_SKIP=$((N_SKIP + 1)) ;;
    esac
}
banner() { printf '\n==== %s ====\n' "$*"; }
skipped() {  # skipped LAYER COUNT WHAT: tests of a layer that skipped themselves
    SKIPPED+=("$(printf '%-11s %s' "$1" "$3")")
    N_SKIPPED_TESTS=$((N_SKIPPED_TESTS + $2))
}

# --- scratch space and the unprivileged user --------------------------------
SCRATCH=$(mktemp -d /tmp/cagra-tests.XXXXXX)
cleanup() {
    if [ "${KEEP_SCRATCH:-}" = 1 ]; then echo "scratch kept: $SCRATCH"; else rm -rf "$SCRATCH"; fi
}
trap cleanup EXIT

if [ "$(id -u)" = 0 ]; then
    if ! id "$TEST_USER" >/dev/null 2>&1; then
        useradd --create-home --shell /bin/bash "$TEST_USER" || { echo "cannot create user $TEST_USER" >&2; exit 2; }
    fi
    chown "$TEST_USER" "$SCRATCH"
    as_test_user() { runuser -u "$TEST_USER" -- "$@"; }
else
    as_test_user() { "$@"; }
fi

# --- 0. layers ------------------------------------------------------------------
if ! wanted_layer layers; then
    :
elif banner "layers: include arrows"; bash test/check-layers.sh; then
    record layers PASS "include arrows follow docs/architecture.md"
else
    record layers FAIL "an include crosses the layers (test/check-layers.sh)"
fi
if ! wanted_layer layers; then
    :
elif banner "layers: lengths"; bash test/check-lengths.sh; then
    record layers PASS "no function in src/am over 80 lines, no file in src/ or gpu/ over 800"
else
    record layers FAIL "a function in src/am or a file is too long (test/check-lengths.sh)"
fi

# --- 1. core library and GoogleTest ------------------------------------------
if ! wanted_layer core; then
    :
elif banner "core: CMake build and ctest"; [ ! -f CMakeLists.txt ]; then
    record core SKIP "no CMakeLists.txt"
elif ! cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCAGRA_CUDA_ARCH="$CUDA_ARCH" >"$SCRATCH/cmake.log" 2>&1; then
    tail -40 "$SCRATCH/cmake.log"
    record core FAIL "cmake configure failed"
elif ! cmake --build build -j "$JOBS" >"$SCRATCH/build.log" 2>&1; then
    tail -60 "$SCRATCH/build.log"
    record core FAIL "cmake build failed"
elif ctest --test-dir build --output-on-failure -j "$JOBS" >"$SCRATCH/ctest.log" 2>&1; then
    tail -5 "$SCRATCH/ctest.log"
    record core PASS "$(grep -E 'tests passed' "$SCRATCH/ctest.log" | tail -1)"
else
    cat "$SCRATCH/ctest.log" | tail -150
    record core FAIL "$(grep -E 'tests passed|tests failed' "$SCRATCH/ctest.log" | tail -1)"
fi
# ctest lists the tests that skipped themselves as "N - Name (Skipped)"; the
# reason is in their output (the GPU tests: "no CUDA device: ...").
if wanted_layer core && [ -f "$SCRATCH/ctest.log" ]; then
    n_skipped=$(grep -c '(Skipped)' "$SCRATCH/ctest.log")
    if [ "$n_skipped" -gt 0 ]; then
        why=$(grep -ho 'no CUDA device: .*' build/Testing/Temporary/LastTest.log 2>/dev/null | head -1)
        skipped core "$n_skipped" "$n_skipped GoogleTests skipped${why:+ ($why)}"
    fi
fi

# --- 2. the extension ----------------------------------------------------------
EXT_OK=0
if ! wanted_layer extension; then
    EXT_OK=1    # installed before
elif banner "extension: PGXS build and install"; make -j "$JOBS" PG_CONFIG="$PG_CONFIG" >"$SCRATCH/make.log" 2>&1 &&
   make install PG_CONFIG="$PG_CONFIG" >>"$SCRATCH/make.log" 2>&1; then
    grep -E 'warning|error' "$SCRATCH/make.log" | grep -v -- '-Werror' | head -20
    EXT_OK=1
    record extension PASS "built and installed into $("$PG_CONFIG" --pkglibdir)"
else
    tail -60 "$SCRATCH/make.log"
    record extension FAIL "make or make install failed"
fi

# --- 3. pg_regress ---------------------------------------------------------------
wanted_layer regress && banner "pg_regress"
# sql/pgvector.sql and sql/pgvector_settings.sql need the real pgvector
# (.ci/install-deps.sh builds it)
NEEDS_PGVECTOR=" pgvector pgvector_settings "
HAVE_PGVECTOR=0
[ -f "$("$PG_CONFIG" --sharedir)/extension/vector.control" ] && HAVE_PGVECTOR=1
REGRESS_TESTS=$(for f in sql/*.sql; do
    [ -e "$f" ] || continue
    [[ $NEEDS_PGVECTOR == *" $(basename "$f" .sql) "* ]] && [ "$HAVE_PGVECTOR" != 1 ] && continue
    wanted_test "$(basename "$f" .sql)" && basename "$f" .sql
done)
[ "$HAVE_PGVECTOR" = 1 ] || record pgvector SKIP "pgvector not installed: sql/pgvector.sql and sql/pgvector_settings.sql left out"
if ! wanted_layer regress; then
    :
elif [ "$EXT_OK" != 1 ]; then
    record pg_regress FAIL "not run: the extension did not build"
elif [ -z "$REGRESS_TESTS" ]; then
    record pg_regress SKIP "no sql/*.sql"
else
    RDIR=$SCRATCH/regress
    mkdir -p "$RDIR"
    cp -r sql expected "$RDIR"/
    cp test/regress.conf "$RDIR"/
    [ "$(id -u)" = 0 ] && chown -R "$TEST_USER" "$RDIR"
    rm -rf results regression.diffs regression.out
    # shellcheck disable=SC2086
    if (cd "$RDIR" && as_test_user "$PG_REGRESS" \
            --temp-instance="$RDIR/tmp_check" \
            --temp-config="$RDIR/regress.conf" \
            --inputdir="$RDIR" --outputdir="$RDIR" \
            --bindir="$BINDIR" \
            --dbname=contrib_regression $PORT_ARG \
            --encoding=UTF8 --no-locale \
            $REGRESS_TESTS) 2>&1 | tee "$SCRATCH/regress.log"
       [ "${PIPESTATUS[0]}" = 0 ]; then
        record pg_regress PASS "$(grep -E 'tests passed' "$SCRATCH/regress.log" | sed 's/^ *//; s/ *$//')"
    else
        cp -r "$RDIR/results" . 2>/dev/null
        cp "$RDIR/regression.diffs" "$RDIR/regression.out" . 2>/dev/null
        [ -f regression.diffs ] && { banner "regression.diffs"; cat regression.diffs; }
        [ -d "$RDIR/tmp_check/log" ] && tail -30 "$RDIR"/tmp_check/log/postmaster.log
        record pg_regress FAIL "see regression.diffs and results/"
    fi
fi

# --- 4. isolation ------------------------------------------------------------------
wanted_layer isolation && banner "isolation"
ISO_TESTS=$(for f in test/isolation/specs/*.spec; do [ -e "$f" ] && wanted_test "$(basename "$f" .spec)" && basename "$f" .spec; done)
if ! wanted_layer isolation; then
    :
elif [ "$EXT_OK" != 1 ]; then
    record isolation FAIL "not run: the extension did not build"
elif [ -z "$ISO_TESTS" ]; then
    record isolation SKIP "no test/isolation/specs/*.spec"
elif [ ! -x "$PG_ISOLATION_REGRESS" ]; then
    record isolation FAIL "no pg_isolation_regress at $PG_ISOLATION_REGRESS"
else
    IDIR=$SCRATCH/isolation
    mkdir -p "$IDIR"
    cp -r test/isolation/specs test/isolation/expected "$IDIR"/
    cp test/regress.conf "$IDIR"/
    [ "$(id -u)" = 0 ] && chown -R "$TEST_USER" "$IDIR"
    rm -rf results/isolation
    # shellcheck disable=SC2086
    if (cd "$IDIR" && as_test_user "$PG_ISOLATION_REGRESS" \
            --temp-instance="$IDIR/tmp_check" \
            --temp-config="$IDIR/regress.conf" \
            --inputdir="$IDIR" --outputdir="$IDIR" \
            --bindir="$BINDIR" \
            --dbname=isolation_regression $PORT_ARG \
            --load-extension=cagra \
            --encoding=UTF8 --no-locale \
            $ISO_TESTS) 2>&1 | tee "$SCRATCH/isolation.log"
       [ "${PIPESTATUS[0]}" = 0 ]; then
        record isolation PASS "$(grep -E 'tests passed' "$SCRATCH/isolation.log" | sed 's/^ *//; s/ *$//')"
    else
        mkdir -p results/isolation
        cp -r "$IDIR/results" results/isolation/ 2>/dev/null
        cp "$IDIR/regression.diffs" "$IDIR/regression.out" results/isolation/ 2>/dev/null
        [ -f results/isolation/regression.diffs ] && { banner "results/isolation/regression.diffs"; cat results/isolation/regression.diffs; }
        [ -d "$IDIR/tmp_check/log" ] && tail -30 "$IDIR"/tmp_check/log/postmaster.log
        record isolation FAIL "see results/isolation/regression.diffs"
    fi
fi

# --- 5. TAP ------------------------------------------------------------------------
wanted_layer tap && banner "TAP"
TAP_TESTS=$(for f in test/t/*.pl; do [ -e "$f" ] && wanted_test "$(basename "$f" .pl)" && echo "$f"; done)
if ! wanted_layer tap; then
    :
elif [ "$EXT_OK" != 1 ]; then
    record TAP FAIL "not run: the extension did not build"
elif [ -z "$TAP_TESTS" ]; then
    record TAP SKIP "no test/t/*.pl"
else
    # The checkout may not be readable by the test user (a clone under
    # /root): the tests run from a copy, and CAGRA_SRC names that copy.  It
    # holds test/, docs/ and the sources of src/ (which 023_docs_match_code
    # compares), and the GPU library when CMake built it.
    TDIR=$SCRATCH/tap
    mkdir -p "$TDIR/src"
    cp -r test docs "$TDIR/src/"
    find src \( -name '*.cpp' -o -name '*.h' \) -print0 | xargs -0 cp --parents -t "$TDIR/src"
    if [ -f build/gpu/libcagra_gpu.so ]; then
        mkdir -p "$TDIR/src/build/gpu" && cp build/gpu/libcagra_gpu.so "$TDIR/src/build/gpu/"
    fi
    [ "$(id -u)" = 0 ] && chown -R "$TEST_USER" "$TDIR"
    rm -rf tmp_check/log
    # shellcheck disable=SC2086
    if (cd "$TDIR" && as_test_user env \
            PATH="$BINDIR:$PATH" TESTDIR="$TDIR" PG_REGRESS="$PG_REGRESS" \
            PG_CONFIG="$BINDIR/pg_config" CAGRA_SRC="$TDIR/src" \
            prove -I "$PGXS_SRC/test/perl" -I "$TDIR/src/test/t" \
                  $(for t in $TAP_TESTS; do echo "$TDIR/src/$t"; done)) 2>&1 | tee "$SCRATCH/tap.log"
       [ "${PIPESTATUS[0]}" = 0 ]; then
        record TAP PASS "$(grep -E "^Files=" "$SCRATCH/tap.log" | cut -d, -f1-2)"
    else
        mkdir -p tmp_check && cp -r "$TDIR/tmp_check/log" tmp_check/ 2>/dev/null
        record TAP FAIL "logs in tmp_check/log/"
    fi
    # prove prints "t/NAME.pl .. skipped: REASON" for a file that skipped itself
    while IFS= read -r line; do
        skipped TAP 1 "$(basename "${line%% *}"): ${line#*skipped: }"
    done < <(grep -E '\.pl \.+ skipped: ' "$SCRATCH/tap.log")
fi

# --- summary ------------------------------------------------------------------------
banner "summary"
printf '%s\n' "${SUMMARY[@]}"
if [ ${#SKIPPED[@]} -gt 0 ]; then
    echo "skipped tests:"
    printf '  %s\n' "${SKIPPED[@]}"
fi
echo "layers: $N_PASS passed, $N_FAIL failed, $N_SKIP skipped; tests or test files skipped: $N_SKIPPED_TESTS"
exit "$FAILED"
