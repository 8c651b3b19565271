"""``make compose-test-spark``: Spark as compose services, tested for real (issue 31, item 4).

Builds the server image and the Spark image on it (deploy/spark.Dockerfile: Java and the
analytics extra, offline from deploy/wheels-spark), brings the quorum, the brokers and
deploy/docker-compose.spark.yml's spark-master and two spark-workers up (project
kraft-spark-test), waits for the health checks and for both workers in the master's web UI
(published at 127.0.0.1:28081), produces log lines with acks=all, then runs
deploy/spark_topics_job.py as a driver in the spark-master container: the docs' batch word count
and a streaming aggregation (Trigger.AvailableNow, several micro-batches, its checkpoint on the
shared volume) in cluster mode, on the workers' two executors. Checks the word and status counts
are those of the lines produced, prints its timings, tears everything down. Kept out of
`make test` and `make compose-test` (a few minutes more); exits 0 with one line saying why when
no Docker engine is reachable and KRAFT_SKIP_COMPOSE=1.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import compose_test as ct
from compose_test import compose, exec_in, log, sh, step

from kraft.topics_example import PATHS, STATUSES
from metadata.analytics.standalone import StandaloneCluster

SPARK_FILE = ct.REPO / "deploy" / "docker-compose.spark.yml"
JOB = ct.REPO / "deploy" / "spark_topics_job.py"
MASTER_UI_PORT = 28081  # the master's web UI, published on the host's loopback
LINES = 1200
SEED = 31
CONTROLLERS = ["controller-1", "controller-2", "controller-3"]
BROKERS = ["broker-4", "broker-5", "broker-6"]
SPARK = ["spark-master", "spark-worker-1", "spark-worker-2"]


def log_lines(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [f"GET {rnd.choice(PATHS)} {rnd.choice(STATUSES)}" for _ in range(n)]


def build_spark_image() -> None:
    with step("build the Spark wheels on the host"):
        sh(str(ct.REPO / "deploy" / "build-wheels.sh"), "spark")
    with step("build the Spark image on pykraft:latest (Java, PySpark)"):
        docker = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
        env = dict(os.environ, DOCKER_BUILDKIT="1")
        cmd = ["build", "-q", "-f", "deploy/spark.Dockerfile", "-t", "pykraft-spark:latest", "."]
        p = subprocess.run([docker, *cmd], cwd=ct.REPO, capture_output=True, text=True, env=env)
        if p.returncode != 0:  # an older client without BuildKit: the classic builder
            sh("docker", *cmd, timeout=1200)


def wait_for_workers(timeout: float = 240) -> None:
    """Both workers registered with the master (its web UI's JSON, from the host)."""
    master_ui = StandaloneCluster(Path("/nonexistent"), webui_port=MASTER_UI_PORT)
    deadline = time.monotonic() + timeout
    while (alive := master_ui.alive_workers()) < 2:
        if time.monotonic() > deadline:
            logs = compose("logs", "--tail", "5", *SPARK, check=False).stdout
            raise SystemExit(f"compose-test-spark: {alive} of 2 workers registered within {timeout:.0f}s:\n{logs}")
        time.sleep(1)


def main() -> int:
    problem = ct.engine_problem()
    if problem:
        if os.environ.get("KRAFT_SKIP_COMPOSE") == "1":
            print(f"compose-test-spark: SKIPPED because KRAFT_SKIP_COMPOSE=1 ({problem})", flush=True)
            return 0
        print(f"compose-test-spark: FAILED: {problem}; run deploy/ensure-docker.sh to start one, or set "
              f"KRAFT_SKIP_COMPOSE=1 to skip this test on purpose", flush=True)
        return 1
    # creating a container of the 1.5 GB Spark image takes over compose's 60 s under vfs
    os.environ.setdefault("COMPOSE_HTTP_TIMEOUT", "600")
    ct.PROJECT, ct.PROFILES = "kraft-spark-test", []
    ct.FILES.append(SPARK_FILE)
    compose("down", "-v", "--remove-orphans", check=False)
    try:
        ct.build_image(prometheus=False)
        build_spark_image()
        with step("compose up (quorum, brokers, Spark master and two workers); health checks; workers registered"):
            compose("up", "-d", *CONTROLLERS, *BROKERS, *SPARK, timeout=900)
            ct.wait_healthy(CONTROLLERS + BROKERS)
            wait_for_workers()
        lines = log_lines(LINES, SEED)
        with step(f"create web-logs and status-counts; produce {LINES} lines with acks=all"):
            for topic, partitions in (("web-logs", "3"), ("status-counts", "1")):
                exec_in("controller-1", "kraft", "topics", "--bootstrap-controller", ct.BOOTSTRAP, "create",
                        "--topic", topic, "--partitions", partitions, "--replication-factor", "3")
            exec_in(BROKERS[0], "kraft", "console-producer", "--bootstrap-server", ct.SERVERS, "--topic",
                    "web-logs", "--acks", "all", input="\n".join(lines) + "\n")
        with step("the docs' word count and streaming aggregation, driver in spark-master, on the cluster"):
            out = exec_in("spark-master", "python", "-", "--servers", ct.SERVERS, input=JOB.read_text(),
                          timeout=900).stdout
            result = json.loads(out.strip().splitlines()[-1])
        words = Counter(w for line in lines for w in line.split(" "))
        statuses = Counter(line.split(" ")[2] for line in lines)
        if result["master"] != "spark://spark-master:7077" or result["executors"] != 2:
            raise SystemExit(f"compose-test-spark: not on the cluster's two executors: master "
                             f"{result['master']}, {result['executors']} executors")
        if result["words"] != words:
            raise SystemExit(f"compose-test-spark: word counts {result['words']} != produced {dict(words)}")
        if result["statuses"] != statuses:
            raise SystemExit(f"compose-test-spark: status counts {result['statuses']} != produced {dict(statuses)}")
        log(f"on {result['executors']} executors of {result['master']}: {sum(words.values())} words and "
            f"{sum(statuses.values())} requests per status of the {LINES} lines produced")
    finally:
        with step("compose down -v"):
            compose("down", "-v", "--remove-orphans", check=False)
    total = time.monotonic() - ct.T0
    print(json.dumps({"bench": "compose-test-spark", "seconds": round(total, 1),
                      "steps": {n: round(t, 1) for n, t in ct.timings}}), flush=True)
    log(f"passed in {total:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
