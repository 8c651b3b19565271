#!/bin/sh
# Build the wheels the images install into deploy/, on the host, so that `docker build` needs no
# network:
#   deploy/build-wheels.sh          pykraft with its server and web extras and their dependencies,
#                                   no PySpark, in deploy/wheels/ (deploy/Dockerfile)
#   deploy/build-wheels.sh spark    pykraft with its analytics extra (PySpark, pyarrow, matplotlib)
#                                   in deploy/wheels-spark/ (deploy/spark.Dockerfile): a directory
#                                   of its own, so PySpark's ~300 MB stay out of the server image
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
case "${1:-}" in
    "") dir=deploy/wheels extras=server,web ;;
    spark) dir=deploy/wheels-spark extras=analytics ;;
    *) echo "build-wheels: unknown argument '$1' (nothing, or spark)" >&2; exit 2 ;;
esac
rm -rf "$dir"
"$PY" -m pip wheel -q --wheel-dir "$dir" ".[$extras]"
echo "wheels in $dir: $(ls "$dir" | wc -l) files"
