#!/usr/bin/env bash
# Build a local Python base image without pulling anything from a registry.
#
#   deploy/build-base-image.sh [--rebuild] [--fresh] [TAG]     (TAG: pykraft-base:bookworm)
#
#   --rebuild  re-import the image even when TAG exists (reuses the cached root fs)
#   --fresh    also throw away the cached root fs and debootstrap again (implies --rebuild)
#
# How: `debootstrap --variant=minbase bookworm` into deploy/.cache/rootfs-bookworm-minbase
# (gitignored; reused while its recipe stamp matches), with Debian's python3 (3.11),
# python3-venv, python3-pip, python-is-python3 and ca-certificates; upgrade from
# bookworm-updates/-security in a chroot; slim it like debian:bookworm-slim (no docs,
# man pages, locales, apt lists or caches); then
#   tar -C rootfs -c . | docker import --change ... - TAG
# Environment: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR override the mirrors (default:
# deb.debian.org, as this machine's apt uses); NO_UPGRADE=1 skips the chroot upgrade.
#
# Meant as a drop-in for python:3.11-slim in a Dockerfile taking `ARG BASE_IMAGE`:
#   - `python`, `python3`, `pip`, `pip3` are on PATH, in /usr/bin (Debian) and also as
#     symlinks in /usr/local/bin (where python:3.11-slim has them), so
#     ENTRYPOINT ["/usr/local/bin/python", ...] works too;
#   - `python -m venv /opt/venv` works (python3-venv); the venv gets Debian's pip 23.0.1;
#   - ENV PATH (with /usr/local/bin first), LANG=C.UTF-8, PYTHON_VERSION; CMD ["python3"].
# Differences a Dockerfile must account for:
#   - Debian's python is PEP 668 "externally managed": `pip install X` into the system
#     python fails with "externally-managed-environment" (python:3.11-slim allows it).
#     Install into a venv instead -- then both bases behave the same:
#         RUN python -m venv /opt/venv
#         ENV PATH=/opt/venv/bin:$PATH
#         RUN pip install --no-cache-dir ...        # (this is the venv's pip)
#     (`pip install --break-system-packages` also works on both, pip >= 23.0 knows the
#     flag, but it mixes with Debian's own python packages: prefer the venv).
#   - Python is 3.11.2 (+ Debian security patches), not the latest 3.11.x; the system
#     site dir is /usr/lib/python3/dist-packages (+ /usr/local/lib/python3.11/dist-packages),
#     not /usr/local/lib/python3.11/site-packages. Inside a venv the paths are identical.
#   - No apt lists in the image (like every official Debian image): `apt-get update`
#     before `apt-get install` (plain HTTP to deb.debian.org works from containers here).
#   - On this machine (either base) HTTPS from a container to PyPI fails certificate
#     verification: the host trusts an extra egress CA that images lack. Either build
#     wheels on the host and `pip install --no-index --find-links` them from the build
#     context, or with BuildKit (DOCKER_BUILDKIT=1 /usr/bin/docker build) lend the
#     host bundle to the pip step only, without baking it into the image:
#       RUN --mount=type=secret,id=cacert,target=/etc/ssl/certs/ca-certificates.crt pip install ...
#       ... build --secret id=cacert,src=/etc/ssl/certs/ca-certificates.crt ...
#   - A --rebuild gives a new image id (import time), which invalidates the build
#     cache of every image built FROM it.
set -euo pipefail

PROG=build-base-image
die() { echo "$PROG: $*" >&2; exit 1; }
say() { echo "$PROG: $*" >&2; }

HERE=$(cd "$(dirname "$0")" && pwd)
TAG=pykraft-base:bookworm
REBUILD=0 FRESH=0
while [ $# -gt 0 ]; do
    case $1 in
        --rebuild) REBUILD=1 ;;
        --fresh) REBUILD=1 FRESH=1 ;;
        -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) TAG=$1 ;;
    esac
    shift
done

SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
PACKAGES=(python3 python3-venv python3-pip python-is-python3 ca-certificates)
RECIPE="v1 $SUITE minbase ${PACKAGES[*]} $MIRROR upgrade=${NO_UPGRADE:-0}"

CACHE=$HERE/.cache
ROOTFS=$CACHE/rootfs-$SUITE-minbase
STAMP=$ROOTFS.stamp           # outside the root fs, so it is not imported
T0=$SECONDS

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot and tar of a root fs owned by root)"
"$HERE/ensure-docker.sh" || die "docker is not available (see the line above)"

if [ "$REBUILD" = 0 ] && docker image inspect "$TAG" >/dev/null 2>&1; then
    say "$TAG already exists ($(docker image inspect -f '{{.Id}}' "$TAG" | cut -c8-19)); nothing to do (--rebuild to redo it)"
    exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.build-base-image.lock"
flock 9                       # one build at a time (CI and a developer may race)

# ---------------------------------------------------------------- root fs ----
MOUNTED=()
cleanup() {
    local m
    for m in "${MOUNTED[@]}"; do umount -l "$m" 2>/dev/null || true; done
}
trap cleanup EXIT

# refuse to rm -rf a tree with something still mounted inside it (e.g. a killed earlier run)
safe_rm_tree() {
    local d=$1 m
    [ -e "$d" ] || return 0
    while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v d="$d/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r)
    if awk -v d="$d/" 'index($2, d) == 1 {f=1} END {exit !f}' /proc/mounts; then
        die "cannot remove $d: something is still mounted inside it"
    fi
    rm -rf --one-file-system "$d"
}

in_chroot() { chroot "$TMP" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

build_rootfs() {
    TMP=$ROOTFS.tmp
    safe_rm_tree "$TMP"
    local log=$CACHE/debootstrap.log t=$SECONDS
    say "debootstrap --variant=minbase $SUITE (+ ${PACKAGES[*]}) from $MIRROR (log: $log)"
    if ! debootstrap --variant=minbase --components=main \
            --include="$(IFS=,; echo "${PACKAGES[*]}")" \
            "$SUITE" "$TMP" "$MIRROR" >"$log" 2>&1; then
        die "debootstrap failed: $(grep -E '^[EW]:' "$log" | tail -n 1 || tail -n 1 "$log") (log: $log; also $TMP/debootstrap/debootstrap.log)"
    fi
    say "debootstrap took $((SECONDS - t))s"

    # Slim like debian:bookworm-slim (applies to the upgrade below and to any
    # later apt-get install in a Dockerfile built on this image).
    cat >"$TMP/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
# no docs, man pages or translations in this image (like debian:bookworm-slim)
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/man/*
EOF
    # The apt settings of the official Debian images.
    cat >"$TMP/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    echo 'Acquire::Languages "none";' >"$TMP/etc/apt/apt.conf.d/docker-no-languages"
    echo 'Acquire::GzipIndexes "true";' >"$TMP/etc/apt/apt.conf.d/docker-gzip-indexes"
    echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$TMP/etc/apt/apt.conf.d/docker-autoremove-suggests"
    cat >"$TMP/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY_MIRROR $SUITE-security main
EOF

    if [ "${NO_UPGRADE:-0}" != 1 ]; then
        t=$SECONDS
        # services must not start in the chroot; DNS from the host for the chroot only
        printf '#!/bin/sh\nexit 101\n' >"$TMP/usr/sbin/policy-rc.d"; chmod +x "$TMP/usr/sbin/policy-rc.d"
        cp -L /etc/resolv.conf "$TMP/etc/resolv.conf"
        mount -t proc proc "$TMP/proc" && MOUNTED+=("$TMP/proc")
        if ! { in_chroot apt-get update -qq &&
               in_chroot apt-get -y -qq -o Dpkg::Options::=--force-confold upgrade; } >>"$log" 2>&1; then
            die "apt-get upgrade in the chroot failed: $(grep -E '^(E|W):' "$log" | tail -n 1) (log: $log; NO_UPGRADE=1 skips it)"
        fi
        in_chroot apt-get clean
        umount "$TMP/proc"; MOUNTED=()
        rm -f "$TMP/usr/sbin/policy-rc.d"
        say "chroot apt-get upgrade took $((SECONDS - t))s ($(grep -c '^Unpacking .* over ' "$log" || true) packages upgraded)"
    fi

    # python / pip where python:3.11-slim has them (Debian's are in /usr/bin)
    local n
    for n in python python3 pip pip3; do ln -sfn "/usr/bin/$n" "$TMP/usr/local/bin/$n"; done

    # trim: docs/man/locales already installed, apt lists and caches, logs, leftovers
    find "$TMP/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
    find "$TMP/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$TMP"/usr/share/{man,info,groff,linda,lintian/overrides}/* 2>/dev/null || true
    find "$TMP/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
    rm -rf "$TMP"/var/lib/apt/lists/* "$TMP"/var/cache/apt/* "$TMP"/var/cache/debconf/*-old \
           "$TMP"/var/lib/dpkg/*-old "$TMP"/var/log/apt/* "$TMP"/var/cache/ldconfig/aux-cache
    find "$TMP/var/log" -type f -exec truncate -s 0 {} +
    rm -f "$TMP/etc/resolv.conf" "$TMP/etc/hostname"   # docker provides these

    safe_rm_tree "$ROOTFS"
    mv "$TMP" "$ROOTFS"
    printf '%s\n' "$RECIPE" >"$STAMP"
}

if [ "$FRESH" = 0 ] && [ -d "$ROOTFS" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$RECIPE" ]; then
    say "reusing the cached root fs $ROOTFS ($(du -sh --one-file-system "$ROOTFS" | cut -f1))"
else
    rm -f "$STAMP"
    build_rootfs
fi

# ---------------------------------------------------------------- import ----
t=$SECONDS
PYVER=$(chroot "$ROOTFS" /usr/bin/python3 -c 'import platform; print(platform.python_version())')
old=$(docker image inspect -f '{{.Id}}' "$TAG" 2>/dev/null || true)
say "importing $ROOTFS as $TAG (python $PYVER)"
tar --numeric-owner --xattrs --xattrs-include='*' -C "$ROOTFS" \
    --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' --exclude='./run/*' --exclude='./tmp/*' \
    -c . |
docker import \
    --message "debootstrap --variant=minbase $SUITE + ${PACKAGES[*]} (deploy/build-base-image.sh)" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "ENV PYTHON_VERSION=$PYVER" \
    --change "LABEL org.opencontainers.image.title=$TAG org.opencontainers.image.description=\"Debian $SUITE minbase + python3 $PYVER, venv, pip (built offline by deploy/build-base-image.sh)\"" \
    --change 'CMD ["python3"]' \
    - "$TAG" >/dev/null
new=$(docker image inspect -f '{{.Id}}' "$TAG")
if [ -n "$old" ] && [ "$old" != "$new" ]; then
    docker rmi "$old" >/dev/null 2>&1 || true    # the previous build, now untagged (vfs: full copy)
fi
say "import took $((SECONDS - t))s"

# ---------------------------------------------------------------- check ----
t=$SECONDS
if ! out=$(docker run --rm --network none "$TAG" sh -ec '
        python --version; pip --version >/dev/null; /usr/local/bin/python -c "import ssl, sqlite3, venv"
        python -m venv /tmp/v; /tmp/v/bin/python -m pip --version >/dev/null; echo venv-ok' 2>&1); then
    die "self-check of $TAG failed: $(echo "$out" | tail -n 1)"
fi
say "self-check ok in $((SECONDS - t))s: $(echo "$out" | tr '\n' ' ')"
say "built $TAG ($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')) in $((SECONDS - T0))s"
