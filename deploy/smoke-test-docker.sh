#!/usr/bin/env bash
# Smoke test of the offline Docker setup:
#   1. deploy/ensure-docker.sh              (engine up)
#   2. deploy/build-base-image.sh           (local base image, no pull)
#   3. docker build of a throwaway Dockerfile FROM ${BASE_IMAGE} that makes a venv,
#      with the classic builder and (when /usr/bin/docker exists) BuildKit
#   4. docker run of it: python -c 'print(1)' from the venv
#   5. docker-compose (v1) with 2 services: `client` reaches `server` by service name
#      over TCP (http.server + urllib), gated by a healthcheck; then `down -v`.
# Everything it creates except the base image is removed at the end; dockerd keeps running.
#
#   deploy/smoke-test-docker.sh     (env: BASE_IMAGE=pykraft-base:bookworm, SMOKE_BUILDKIT=1)
set -euo pipefail

PROG=smoke-test
HERE=$(cd "$(dirname "$0")" && pwd)
BASE_IMAGE=${BASE_IMAGE:-pykraft-base:bookworm}
ID=pkst$$                                   # unique per run: image tag, compose project
IMG=pykraft-smoke:$ID
WORK=$(mktemp -d /tmp/pykraft-smoke.XXXXXX)
PASSED=0
declare -a TIMES=()

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }
fail() {
    echo "$PROG: FAIL: $*" >&2
    echo "$PROG: $PASSED passed, 1 failed" >&2
    exit 1
}
ok() { PASSED=$((PASSED + 1)); TIMES+=("$(printf '%-48s %6ss' "$1" "$2")"); echo "$PROG: ok - $1 (${2}s)"; }

cleanup() {
    local rc=$?
    if [ "$rc" != 0 ] && ls "$WORK"/*.log >/dev/null 2>&1; then    # keep the evidence
        rm -rf /tmp/pykraft-smoke-last && cp -r "$WORK" /tmp/pykraft-smoke-last &&
            echo "$PROG: logs and files of this run kept in /tmp/pykraft-smoke-last" >&2
    fi
    if [ -f "$WORK/docker-compose.yml" ] && command -v docker-compose >/dev/null 2>&1; then
        docker-compose -p "$ID" -f "$WORK/docker-compose.yml" down -v --remove-orphans >/dev/null 2>&1 || true
    fi
    docker rmi -f "$IMG" "$IMG-bk" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

echo "$PROG: disk before: $(df -h / | awk 'NR==2 {print $4 " free of " $2}')"

# 1 -------------------------------------------------------------------------
t=$(now)
"$HERE/ensure-docker.sh" || fail "ensure-docker.sh"
ok "ensure-docker" "$(since "$t")"

# 2 -------------------------------------------------------------------------
t=$(now)
"$HERE/build-base-image.sh" "$BASE_IMAGE" || fail "build-base-image.sh $BASE_IMAGE"
ok "build-base-image ($BASE_IMAGE)" "$(since "$t")"

# 3 -------------------------------------------------------------------------
# Written as one would for python:3.11-slim; the base comes in as a build arg.
cat >"$WORK/Dockerfile" <<'EOF'
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
# A venv makes Debian's PEP 668 python and python:3.11-slim behave the same.
RUN python -m venv /opt/venv && /opt/venv/bin/python -c 'print(1)'
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
CMD ["python", "-c", "print(1)"]
EOF
t=$(now)
# The classic builder: what `docker build` falls back to with a docker CLI that has no
# buildx (the static 28.x in /usr/local/bin here), and what docker-compose v1 uses.
# It never contacts a registry for a FROM image that exists locally.
DOCKER_BUILDKIT=0 docker build -q --build-arg BASE_IMAGE="$BASE_IMAGE" -t "$IMG" "$WORK" >"$WORK/build.log" 2>&1 ||
    fail "docker build: $(tail -n 3 "$WORK/build.log" | tr '\n' ' ')"
ok "docker build, classic builder" "$(since "$t")"

# BuildKit, through Debian's 20.10 CLI (BuildKit built in; no buildx needed): much
# faster on vfs, since metadata-only steps (ENV, CMD, ...) make no container.
if [ -x /usr/bin/docker ] && [ "${SMOKE_BUILDKIT:-1}" = 1 ]; then
    t=$(now)
    DOCKER_BUILDKIT=1 /usr/bin/docker build --progress=plain --build-arg BASE_IMAGE="$BASE_IMAGE" \
        -t "$IMG-bk" "$WORK" >"$WORK/build-bk.log" 2>&1 ||
        fail "DOCKER_BUILDKIT=1 /usr/bin/docker build: $(tail -n 3 "$WORK/build-bk.log" | tr '\n' ' ')"
    ok "docker build, BuildKit (/usr/bin/docker)" "$(since "$t")"
    docker rmi "$IMG-bk" >/dev/null
fi

# 4 -------------------------------------------------------------------------
t=$(now)
# limits as a compose file may set them (cgroup v1 here): memory, cpus, pids
out=$(docker run --rm --memory 256m --cpus 1 --pids-limit 200 "$IMG" 2>&1) || fail "docker run: $out"
[ "$out" = 1 ] || fail "docker run printed '$out', expected 1"
where=$(docker run --rm "$IMG" sh -c 'command -v python') || fail "docker run (command -v python)"
[ "$where" = /opt/venv/bin/python ] || fail "python in the container is $where, expected the venv's"
ok "docker run x2 (print(1); venv on PATH)" "$(since "$t")"

# 5 -------------------------------------------------------------------------
# Compose file format 2.4 (docker-compose 1.29 honours depends_on conditions and
# init there; docker compose v2 reads it too). init: true runs docker-init (tini) as
# PID 1: python as PID 1 ignores SIGTERM, so without it every stop/down waits the
# 10 s kill timeout.
cat >"$WORK/docker-compose.yml" <<EOF
version: "2.4"
services:
  server:
    image: $IMG
    init: true
    command: ["python", "-m", "http.server", "8000", "--bind", "0.0.0.0"]
    healthcheck:
      test: ["CMD", "python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/', timeout=2)"]
      interval: 1s
      timeout: 3s
      retries: 60
  client:
    image: $IMG
    init: true
    depends_on:
      server:
        condition: service_healthy
    command:
      - python
      - -c
      - |
        import socket, urllib.request
        addr = socket.gethostbyname("server")
        status = urllib.request.urlopen("http://server:8000/", timeout=5).status
        print(f"client: server resolves to {addr}, GET http://server:8000/ -> {status}")
        assert status == 200
EOF
t=$(now)
if ! docker-compose -p "$ID" -f "$WORK/docker-compose.yml" up --no-color --exit-code-from client \
        >"$WORK/compose.log" 2>&1; then
    fail "docker-compose up: $(grep -v '^\s*$' "$WORK/compose.log" | tail -n 3 | tr '\n' ' ')"
fi
up_s=$(since "$t")
grep -q 'GET http://server:8000/ -> 200' "$WORK/compose.log" ||
    fail "client did not report a 200 from server: $(tail -n 3 "$WORK/compose.log" | tr '\n' ' ')"
grep 'client: server resolves' "$WORK/compose.log" | sed 's/^[^|]*| */  /'
ok "docker-compose up (healthy server, client ok)" "$up_s"

t=$(now)
docker-compose -p "$ID" -f "$WORK/docker-compose.yml" down -v --remove-orphans >"$WORK/down.log" 2>&1 ||
    fail "docker-compose down -v: $(tail -n 2 "$WORK/down.log" | tr '\n' ' ')"
left=$(docker ps -aq --filter "label=com.docker.compose.project=$ID")
[ -z "$left" ] || fail "containers left after down -v: $left"
docker network ls -q --filter "label=com.docker.compose.project=$ID" | grep -q . && fail "network left after down -v"
ok "docker-compose down -v" "$(since "$t")"

echo "$PROG: timings"
printf '  %s\n' "${TIMES[@]}"
echo "$PROG: disk after: $(df -h / | awk 'NR==2 {print $4 " free of " $2}')"
echo "$PROG: $PASSED passed, 0 failed"
