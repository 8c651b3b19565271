#!/bin/sh
# Build the wheels the image installs (pykraft with its server and web extras and their dependencies, no PySpark) into
# deploy/wheels/, on the host, so that `docker build` needs no network.
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
rm -rf deploy/wheels
"$PY" -m pip wheel -q --wheel-dir deploy/wheels ".[server,web]"
echo "wheels in deploy/wheels: $(ls deploy/wheels | wc -l) files"
