# Every target builds the virtual environment .venv on its own; a fresh clone needs nothing else.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PROTOS := $(wildcard protos/*.proto raft/proto/*.proto raft/examples/kv/*.proto)
GEN    := $(PROTOS:.proto=_pb2.py)
SEEDS  ?= 20000
STEPS  ?= 3000

.PHONY: venv protos lint test test-slow compose-test compose-test-spark demo console report topics-example sim bench-core bench-raft anchors clean

venv: $(STAMP) $(GEN)

$(STAMP): pyproject.toml setup.py
	@command -v java >/dev/null 2>&1 || ./deploy/install-debian.sh java default-jre-headless
	@command -v kcat >/dev/null 2>&1 || ./deploy/install-debian.sh kcat kcat
	@command -v chromium >/dev/null 2>&1 || ./deploy/install-debian.sh chromium chromium
	@command -v chromedriver >/dev/null 2>&1 || ./deploy/install-debian.sh chromedriver chromium-driver
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[server,web,dev,analytics]'
	@touch $(STAMP)

%_pb2.py: %.proto $(STAMP)
	$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. --pyi_out=. $<

protos: $(GEN)

# The static checks (README, "Development"), as pyproject.toml configures them: ruff over the
# tree, mypy over the packages. The generated protobuf modules and their .pyi stubs come first.
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The static checks, the unit, simulation and process tests, then the docker compose test.
# deploy/ensure-docker.sh installs and starts a Docker engine when it can (root or passwordless
# sudo); when it cannot, the compose test fails saying why, unless KRAFT_SKIP_COMPOSE=1 says to
# skip it on purpose.
test: venv lint
	$(PY) -m pytest -q
	$(MAKE) compose-test

# the tests marked slow (a Spark standalone cluster of three JVMs, a 30 s quota measurement), kept out of `make test`'s 30 minutes
test-slow: venv
	$(PY) -m pytest -q -m slow

compose-test: venv
	./deploy/ensure-docker.sh || echo "no Docker engine could be started; the compose test will say why"
	$(PY) deploy/compose_test.py

# Spark as compose services (deploy/docker-compose.spark.yml: a master and two workers): the docs'
# word count and streaming aggregation in cluster mode against the compose brokers. Minutes of
# image build and JVM start-up, so neither `make test` nor `make compose-test` runs it.
compose-test-spark: venv
	./deploy/ensure-docker.sh || echo "no Docker engine could be started; the compose test will say why"
	$(PY) deploy/compose_spark_test.py

demo: venv
	$(PY) -m kraft.demo

# A local quorum (3 controllers, 3 brokers on loopback, every node's metrics on) and the web
# console over it at http://127.0.0.1:8080/, until Ctrl-C (docs/web.md).
console: venv
	$(VENV)/bin/kraft dev-quorum --console

# The main job, keeping its data in .demo/, then the Spark health report on a controller's
# metadata log directory (docs/analytics.md), at the offset where every broker still ran (the
# demo ends by stopping them all).
report: venv
	rm -rf .demo
	$(PY) -m kraft.demo --dir .demo
	$(VENV)/bin/kraft analytics report --directory .demo/controller-1 --offset $$(cat .demo/healthy.offset) \
		--output .demo/report --plots

# Spark over topics (docs/analytics.md, "Topics"): a batch word count, a streaming aggregation
# with a checkpoint written back to a topic and run twice, the results read back.
topics-example: venv
	$(PY) -m kraft.topics_example

sim: venv
	$(PY) -m raft.testing --seeds $(SEEDS) --steps $(STEPS)

bench-core: venv
	$(PY) -m bench.core

# The etcd and PySyncObj anchors of ../shared/anchors, for bench-raft to run beside ours.
anchors:
	@command -v etcd >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null)
	@test -x .venv-anchors/bin/python || ($(PYTHON) -m venv .venv-anchors && .venv-anchors/bin/pip install -q pysyncobj grpcio grpcio-tools protobuf)

bench-raft: venv
	$(PY) -m bench.raft_all

clean:
	rm -rf $(VENV) build *.egg-info protos/*_pb2*.py protos/*_pb2.pyi raft/proto/*_pb2*.py raft/proto/*_pb2.pyi raft/examples/kv/*_pb2*.py raft/examples/kv/*_pb2.pyi
