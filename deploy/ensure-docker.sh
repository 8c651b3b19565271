#!/usr/bin/env bash
# Make a working Docker engine available on this machine, offline-friendly.
#
#   deploy/ensure-docker.sh        # idempotent; a fast no-op once docker works
#
# 1. Installs Debian's docker.io (dockerd 20.10 + containerd + runc + iptables),
#    docker-compose (v1, 1.29) and debootstrap when they are missing
#    (apt-get update only when something is missing).
# 2. If `docker info` fails, starts dockerd in the background
#    (log: /var/log/dockerd.log, or /tmp/dockerd.log when /var/log is not writable)
#    and waits up to ~60 s (ENSURE_DOCKER_TIMEOUT) for `docker info` to succeed.
# On failure it exits non-zero with ONE line on stderr saying why.
#
# Environment: DOCKER_STORAGE_DRIVER (default vfs), DOCKERD_EXTRA_FLAGS (extra dockerd
# flags, word-split), ENSURE_DOCKER_TIMEOUT (seconds, default 60). They only matter
# when this script starts dockerd; a daemon that already answers is left as it is.
#
# ---------------------------------------------------------------------------
# Findings on this machine (Firecracker VM, kernel 6.18, Debian bookworm, no
# systemd: PID 1 is the VM's own init, so there is no service manager and
# /usr/sbin/policy-rc.d forbids starting services during apt-get install):
#  - Plain `dockerd --storage-driver=vfs` is enough: no --iptables=false, no
#    --bridge=none, no cgroup or bridge setup by hand. The kernel is monolithic
#    (no modprobe, no /lib/modules) but has bridge, veth, br_netfilter, nf_tables
#    and legacy iptables, NAT/MASQUERADE and overlayfs built in; Debian's default
#    iptables-nft works, dockerd creates docker0 (172.17.0.1/16), turns on
#    ip_forward and adds its NAT rules. The FORWARD policy becomes DROP (dockerd).
#  - cgroups: v1 hierarchies (cpu, memory, pids, ...) plus a v2 "unified" one are
#    already mounted by the VM; dockerd uses cgroupfs/v1 and --memory, --cpus,
#    --pids-limit work. Only harmless warnings ("kernel does not support cgroup
#    blkio weight"). Should /sys/fs/cgroup ever be empty, we mount cgroup2 there.
#  - No containerd service: dockerd (no --containerd flag) starts and supervises
#    its own containerd (/var/run/docker/containerd) -- nothing else to start.
#  - Keep iptables ON. With --iptables=false, inter-container traffic on a bridge is
#    dropped as soon as the FORWARD policy is DROP (br_netfilter is built in and
#    bridge-nf-call-iptables=1; any earlier dockerd run leaves DROP behind), and
#    containers get no NAT to the outside (no apt-get in a Dockerfile). Name
#    resolution of services (127.0.0.11) worked either way.
#  - Never run a second dockerd with --bridge=none next to this one: at start it
#    DELETES docker0, and then every `docker run` on the default bridge fails with
#    "could not find bridge docker0" until this dockerd is restarted. We warn then.
#  - Containers reach the outside via NAT (plain HTTP to deb.debian.org works),
#    but HTTPS to PyPI fails certificate verification: the host trusts an extra
#    egress CA in /etc/ssl/certs/ca-certificates.crt that images do not have.
#    So pip inside `docker build` cannot download; build wheels on the host.
#  - vfs copies the whole image for every container and build step: creating a
#    container from the 145 MB base takes 10-16 s here; overlay2 works on this
#    kernel too (ext4 backing) and takes ~1-2 s -- DOCKER_STORAGE_DRIVER=overlay2
#    (after stopping dockerd; images are per driver: rebuild the base image).
#  - The docker CLI first on PATH may be a static 28.x in /usr/local/bin (no buildx:
#    `docker build` = legacy builder, DOCKER_BUILDKIT=1 fails); Debian's 20.10 CLI
#    is /usr/bin/docker and has BuildKit built in (DOCKER_BUILDKIT=1 /usr/bin/docker
#    build). Both talk to this 20.10 daemon (API 1.41).
# ---------------------------------------------------------------------------
set -euo pipefail

PROG=ensure-docker
die() { echo "$PROG: $*" >&2; exit 1; }

TIMEOUT=${ENSURE_DOCKER_TIMEOUT:-60}

if [ "$(id -u)" = 0 ]; then
    ROOT=yes
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    ROOT=sudo
else
    ROOT=no
fi
as_root() { if [ "$ROOT" = yes ]; then "$@"; else sudo -n "$@"; fi; }
need_root() {
    [ "$ROOT" != no ] || die "$1 needs root (run as root or with passwordless sudo)"
}

# --- 1. packages ------------------------------------------------------------
missing=()
# dockerd, not docker: a docker CLI alone (e.g. a static one in /usr/local/bin) is not an engine.
command -v dockerd        >/dev/null 2>&1 || missing+=(docker.io)
command -v docker         >/dev/null 2>&1 || missing+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v debootstrap    >/dev/null 2>&1 || missing+=(debootstrap)
[ -s /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)

if [ ${#missing[@]} -gt 0 ]; then
    # de-duplicate
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    need_root "installing ${missing[*]}"
    aptlog=$(mktemp /tmp/ensure-docker-apt.XXXXXX.log)
    echo "$PROG: installing ${missing[*]} (log: $aptlog)" >&2
    # --no-install-recommends: docker.io recommends needrestart/apparmor/git/...,
    # none of which is needed here (and needrestart can prompt).
    if ! { as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
           as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
           >"$aptlog" 2>&1; then
        die "apt-get install ${missing[*]} failed: $(grep -v '^\s*$' "$aptlog" | tail -n 1) (full log: $aptlog)"
    fi
    rm -f "$aptlog"
fi

# --- 2. the daemon ------------------------------------------------------------
check_bridge() {   # see the --bridge=none note above; a warning, not a failure
    if [ "$(docker network inspect -f '{{index .Options "com.docker.network.bridge.name"}}' bridge 2>/dev/null)" = docker0 ] &&
       ! ip link show docker0 >/dev/null 2>&1; then
        echo "$PROG: warning: docker0 is gone (another dockerd with --bridge=none?): 'docker run' on the default network will fail; restart dockerd: kill \$(cat /var/run/docker.pid); $0" >&2
    fi
    return 0
}
if docker info >/dev/null 2>&1; then           # root, or a member of the docker group
    check_bridge
    exit 0
fi
if [ "$ROOT" = no ] && [ -S /var/run/docker.sock ] && [[ "$(docker info 2>&1)" == *"permission denied"* ]]; then
    die "dockerd is running but $(id -un) may not use /var/run/docker.sock (be root, or join the docker group)"
fi
need_root "starting dockerd"
docker_ok() { docker info >/dev/null 2>&1 || as_root docker info >/dev/null 2>&1; }

# cgroups: mounted by the VM here; mount the v2 hierarchy if a machine has none at all
if ! grep -qE '^[^ ]+ /sys/fs/cgroup(/[^ ]*)? (cgroup|cgroup2) ' /proc/mounts; then
    as_root mkdir -p /sys/fs/cgroup
    as_root mount -t cgroup2 none /sys/fs/cgroup 2>/dev/null ||
        die "no cgroup hierarchy is mounted and mounting cgroup2 on /sys/fs/cgroup failed"
fi

if as_root test -w /var/log; then LOG=/var/log/dockerd.log; else LOG=/tmp/dockerd.log; fi

FLAGS=(--storage-driver="${DOCKER_STORAGE_DRIVER:-vfs}")
# shellcheck disable=SC2206
FLAGS+=(${DOCKERD_EXTRA_FLAGS:-})

# the last meaningful lines of this start's log, on one line (skip our header, info/debug chatter)
log_tail() {
    local lines
    lines=$(as_root tail -n 200 "$LOG" | tac | sed '/^=== /q' | tac | grep -v '^=== ' || true)
    { grep -v -e '^\s*$' -e 'level=info' -e 'level=debug' <<<"$lines" || tail -n 1 <<<"$lines"; } |
        tail -n 3 | tr '\n' ' ' | cut -c1-700 | grep . || echo "(no output yet)"
}
alive() { [ -n "${1:-}" ] && [ -d "/proc/$1" ]; }
running_pid() {   # pid of a dockerd started earlier (by us or anyone), if still alive
    local pid
    pid=$(as_root cat /var/run/docker.pid 2>/dev/null) && alive "$pid" && { echo "$pid"; return 0; }
    # just started, pid file not written yet (the pid file is how dockerd itself refuses a twin)
    pid=$(pgrep -o -x dockerd 2>/dev/null) && { echo "$pid"; return 0; }
    return 1
}

# Two runs at once (CI and a developer) must not both start a daemon.
if [ -w /var/run ]; then LOCK=/var/run/ensure-docker.lock; else LOCK=/tmp/ensure-docker.lock; fi
exec 8>>"$LOCK" || die "cannot open the lock file $LOCK"
flock -w "$((TIMEOUT + 30))" 8 || die "could not lock $LOCK (another ensure-docker.sh is stuck?)"
if docker_ok; then check_bridge; exit 0; fi     # a concurrent run started it meanwhile

if pid=$(running_pid); then
    echo "$PROG: dockerd (pid $pid) is already running; waiting for it" >&2
else
    echo "$PROG: starting dockerd ${FLAGS[*]} (log: $LOG)" >&2
    # setsid: its own session, so the daemon outlives this script, its shell and
    # whatever process group runs it; stdin closed, output appended to $LOG.
    # fd 8 (the lock) must not leak into the daemon, or it would hold the lock forever; nor
    # any descriptor our caller left open: `flock /tmp/docker.lock make compose-test` runs us
    # with flock's lock open, and a daemon keeping it would lock every later docker user out.
    echo "=== $(date -u +%FT%TZ) dockerd ${FLAGS[*]}" | as_root tee -a "$LOG" >/dev/null
    # Not through the as_root function: a backgrounded function keeps a bash subshell
    # alive as dockerd's parent, holding our stdout/stderr open -- a caller reading
    # them (`$(...)`, `| tee`) would then never see EOF. Same for every fd here: the
    # daemon gets /dev/null and $LOG only.
    # shellcheck disable=SC2016  # $@, $0 and $$ are for the inner bash
    launch=(setsid bash -c 'for fd in /proc/$$/fd/*; do fd=${fd##*/}; [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
                            exec dockerd "$@" >>"$0" 2>&1' "$LOG" "${FLAGS[@]}")
    if [ "$ROOT" = yes ]; then
        "${launch[@]}" </dev/null >/dev/null 2>&1 8>&- &
    else
        sudo -n "${launch[@]}" </dev/null >/dev/null 2>&1 8>&- &
    fi
    pid=$!
fi

for _ in $(seq "$TIMEOUT"); do
    if docker_ok; then check_bridge; exit 0; fi
    if ! alive "$pid" && ! running_pid >/dev/null; then
        die "dockerd exited: $(log_tail) (log: $LOG)"
    fi
    sleep 1
done
die "dockerd did not answer 'docker info' within ${TIMEOUT}s: $(log_tail) (log: $LOG)"
