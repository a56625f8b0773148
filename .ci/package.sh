#!/bin/bash
# .ci/package.sh — the Debian package leg of CI (as root, on the Debian 12
# host, after the PostgreSQL 15 leg):
#
#   1. the packaging tools, when some are missing (debhelper, lintian, and
#      postgresql-server-dev-all for pg_buildext);
#   2. dpkg-buildpackage -us -uc -b in a copy of the checkout (git's tracked
#      and untracked, not ignored, files): postgresql-15-cagra, and
#      cagra-gpu where nvcc is found (debian/rules);
#   3. lintian, failing on errors;
#   4. the PostgreSQL 15 leg's `make install` removed, the package installed
#      as a user installs it (apt install ./postgresql-15-cagra_*.deb), and
#      the pg_regress suite run against a fresh cluster of that PostgreSQL
#      (debian/tests/installcheck: pg_virtualenv, make installcheck);
#   5. the package purged.
#
# The packages are left in $PACKAGE_OUT (default /tmp/cagra-deb).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CHECKOUT=$(pwd)
OUT=${PACKAGE_OUT:-/tmp/cagra-deb}

say() { echo "package: $*"; }
die() { echo "package: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (apt-get, dpkg)"
export DEBIAN_FRONTEND=noninteractive

# --- 1. tools ------------------------------------------------------------------
tools=(debhelper dpkg-dev fakeroot lintian postgresql-server-dev-all)
missing=()
for p in "${tools[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    apt-get install -y --no-install-recommends "${missing[@]}" >/tmp/cagra-package-apt.log 2>&1 ||
        { apt-get update >>/tmp/cagra-package-apt.log 2>&1 &&
          apt-get install -y --no-install-recommends "${missing[@]}" >>/tmp/cagra-package-apt.log 2>&1; } ||
        { tail -30 /tmp/cagra-package-apt.log; die "cannot install ${missing[*]}"; }
fi

# --- 2. build ------------------------------------------------------------------
rm -rf "$OUT"
mkdir -p "$OUT/cagra"
if git -C "$CHECKOUT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$CHECKOUT" ls-files -z --cached --others --exclude-standard |
        (cd "$CHECKOUT" && xargs -0 tar -cf - --ignore-failed-read 2>/dev/null) | tar -xf - -C "$OUT/cagra"
else
    tar -C "$CHECKOUT" --exclude=./build --exclude='./build-*' --exclude='*.o' --exclude='*.so' \
        --exclude='./cagra--*.sql' -cf - . | tar -xf - -C "$OUT/cagra"
fi
say "dpkg-buildpackage -us -uc -b"
(cd "$OUT/cagra" && DEB_BUILD_OPTIONS="parallel=${JOBS:-2}" dpkg-buildpackage -us -uc -b) >"$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; die "dpkg-buildpackage failed (log: $OUT/build.log)"; }
ls "$OUT"/*.deb

# --- 3. lintian ----------------------------------------------------------------
say "lintian"
lintian --fail-on error "$OUT"/cagra_*.changes || die "lintian found errors"

# --- 4. install and pg_regress ---------------------------------------------------
pg_config=/usr/lib/postgresql/15/bin/pg_config
make -s uninstall PG_CONFIG="$pg_config" >/dev/null 2>&1 || true
say "apt install ./postgresql-15-cagra_*.deb"
(cd "$OUT" && apt-get install -y ./postgresql-15-cagra_*_"$(dpkg --print-architecture)".deb) \
    >"$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; die "the package did not install"; }
dpkg -L postgresql-15-cagra | grep -q '/cagra.so$' || die "postgresql-15-cagra has no cagra.so"
say "pg_regress against a fresh PostgreSQL 15 cluster"
rc=0
(cd "$OUT/cagra" && debian/tests/installcheck) || rc=$?

# --- 5. purge ------------------------------------------------------------------
apt-get purge -y postgresql-15-cagra >/dev/null 2>&1 || true
[ "$rc" = 0 ] || die "pg_regress against the installed package failed"
say "done"
