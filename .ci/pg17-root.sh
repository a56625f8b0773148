#!/bin/bash
# .ci/pg17-root.sh — the PostgreSQL 17 leg of CI (as root).
#
# Debian 12 has no PostgreSQL 17, Debian 13 (trixie) has it with pgvector
# 0.8.0, so the leg runs in a Debian 13 root made with debootstrap:
#
#   1. the root, when $PG17_ROOT has none yet (debootstrap --variant=minbase;
#      an interrupted one is started over);
#   2. its packages, when some are missing (the same set as
#      .ci/install-deps.sh, for PostgreSQL 17, and Debian's
#      postgresql-17-pgvector);
#   3. /proc, /sys, /dev, /dev/pts and a /dev/shm of its own mounted for the
#      servers of the tests, unmounted on exit;
#   4. a copy of the checkout (git's tracked and untracked, not ignored,
#      files; no build outputs of the host's leg) at /tmp/cagra-src in the
#      root, where the README's test command runs against PostgreSQL 17:
#      PG_CONFIG=/usr/lib/postgresql/17/bin/pg_config bash test/run-tests.sh
#   5. failure details (regression.diffs, results/, tmp_check/log/) copied
#      back into the checkout under pg17/.
#
# Exit status: that of test/run-tests.sh (non-zero when a test failed), or
# 2 when the root could not be made.
#
# Environment: PG17_ROOT (default /opt/d13), DEBIAN_MIRROR (default
# http://deb.debian.org/debian), JOBS, KEEP_SCRATCH (passed to the tests).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CHECKOUT=$(pwd)

ROOT=${PG17_ROOT:-/opt/d13}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PG_CONFIG_17=/usr/lib/postgresql/17/bin/pg_config
DONE_MARK=$ROOT/.cagra-debootstrap-done

packages=(
    build-essential cmake git
    postgresql-17 postgresql-server-dev-17
    postgresql-17-pgvector            # the real pgvector beside cagra (sql/pgvector.sql, TAP 016)
    libgtest-dev libipc-run-perl libhnswlib-dev python3-numpy
    universal-ctags                   # test/check-layers.sh: which source defines what a header declares
)

say() { echo "pg17-root: $*"; }
die() { echo "pg17-root: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot, mounts)"

# --- 1. the root -------------------------------------------------------------
if [ ! -f "$DONE_MARK" ]; then
    if ! command -v debootstrap >/dev/null; then
        say "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >/dev/null ||
            { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >/dev/null; } ||
            die "cannot install debootstrap"
    fi
    # a root without the mark is an interrupted debootstrap: start over
    # (nothing may be mounted in it)
    if [ -e "$ROOT" ]; then
        findmnt -rn -o TARGET | grep -q "^$ROOT/" && die "$ROOT is incomplete and has mounts; unmount them first"
        rm -rf "$ROOT"
    fi
    say "debootstrap trixie into $ROOT (minbase)"
    debootstrap --variant=minbase trixie "$ROOT" "$MIRROR" >/tmp/pg17-root-debootstrap.log 2>&1 ||
        { tail -20 /tmp/pg17-root-debootstrap.log; die "debootstrap failed"; }
    echo "deb $MIRROR trixie main" >"$ROOT/etc/apt/sources.list"
    # packages installed in the root must not start their services there
    printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
    chmod 755 "$ROOT/usr/sbin/policy-rc.d"
    touch "$DONE_MARK"
fi

# --- 3. mounts (before the packages: their scripts want /proc) ---------------
MOUNTED=()
mount_in() {  # mount_in TARGET mount-arguments...
    local target=$ROOT$1
    shift
    mountpoint -q "$target" && return 0
    mkdir -p "$target"
    mount "$@" "$target" || die "cannot mount $target"
    MOUNTED=("$target" "${MOUNTED[@]}")
}
unmount_all() {
    local m
    for m in "${MOUNTED[@]}"; do umount "$m" || umount -l "$m" || true; done
}
trap unmount_all EXIT
mount_in /proc -t proc proc
mount_in /sys -t sysfs sysfs
mount_in /dev --bind /dev
mount_in /dev/pts --bind /dev/pts
mount_in /dev/shm -t tmpfs -o mode=1777,size=50% tmpfs
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"

in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

# --- 2. packages ---------------------------------------------------------------
missing=()
for p in "${packages[@]}"; do
    in_root dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    in_root apt-get update >/tmp/pg17-root-apt.log 2>&1 &&
        in_root DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
            >>/tmp/pg17-root-apt.log 2>&1 ||
        { tail -30 /tmp/pg17-root-apt.log; die "apt-get in the root failed"; }
fi
[ -x "$ROOT$PG_CONFIG_17" ] || die "no $PG_CONFIG_17 in the root"

# --- 4. the checkout, and the tests ------------------------------------------------
SRC=/tmp/cagra-src
rm -rf "${ROOT:?}$SRC"
mkdir -p "$ROOT$SRC"
if git -C "$CHECKOUT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$CHECKOUT" ls-files -z --cached --others --exclude-standard |
        (cd "$CHECKOUT" && xargs -0 tar -cf - --ignore-failed-read 2>/dev/null) | tar -xf - -C "$ROOT$SRC"
else
    tar -C "$CHECKOUT" --exclude=./build --exclude='./build-*' --exclude='*.o' --exclude='*.so' -cf - . |
        tar -xf - -C "$ROOT$SRC"
fi

say "test/run-tests.sh against PostgreSQL $(in_root "$PG_CONFIG_17" --version | sed 's/^PostgreSQL //')"
rc=0
in_root PG_CONFIG="$PG_CONFIG_17" JOBS="${JOBS:-2}" KEEP_SCRATCH="${KEEP_SCRATCH:-}" \
    bash "$SRC/test/run-tests.sh" || rc=$?

# --- 5. failure details ---------------------------------------------------------------
rm -rf "$CHECKOUT/pg17"
for f in regression.diffs regression.out results tmp_check/log; do
    if [ -e "$ROOT$SRC/$f" ]; then
        mkdir -p "$CHECKOUT/pg17/$(dirname "$f")"
        cp -r "$ROOT$SRC/$f" "$CHECKOUT/pg17/$f"
    fi
done
[ -d "$CHECKOUT/pg17" ] && say "failure details in $CHECKOUT/pg17/"
exit "$rc"
