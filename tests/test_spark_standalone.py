"""Spark on a standalone cluster (issue 31, item 4): a master and two workers started from
PySpark's own jars (``metadata.analytics.standalone``), the docs' batch word count and
streaming aggregation read with ``kraft-topic`` in cluster mode giving local mode's results
(the counts of the lines produced),
and the ``kraft`` metadata source reading a snapshot and a log directory there. The tasks
run in the workers' executors, on the code the driver shipped; every JVM of the cluster (and
the driver's) is gone when the module ends."""
from __future__ import annotations

import asyncio
import os
import random
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
#: Six JVMs (master, two workers, their executors, the driver) start in the first test's set-up:
#: minutes on a busy 2-core machine.
pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]  # make test-slow: three JVMs and a cluster

from kraft.topics_example import PATHS, STATUSES, produce_log_lines  # noqa: E402
from metadata.analytics.standalone import StandaloneCluster  # noqa: E402
from metadata.snapshot import write_snapshot  # noqa: E402
from tests.brokercluster import BrokerCluster, running_cluster  # noqa: E402
from tests.kvcluster import free_ports  # noqa: E402
from tests.test_analytics import (crafted_batches, expected, history_image, make_log_dir, replay,  # noqa: E402
                                  table)

LINES = 600
SEED = 7


def spark_processes(directory: Path, master_port: int) -> list[int]:
    """Java processes of this cluster: the master (its port), the workers (their work
    directories) and the executors (which run inside those)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if "org.apache.spark" in cmdline and (str(directory) in cmdline or cwd.startswith(str(directory))
                                              or f"--port {master_port}" in cmdline):
            found.append(int(pid))
    return found


@pytest.fixture(scope="module")
def brokers(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("standalone-brokers"), {}) as c:
        yield c


@pytest.fixture(scope="module")
def standalone(brokers, tmp_path_factory) -> Iterator[tuple[StandaloneCluster, Future]]:
    """The Spark cluster, starting in the background (its JVMs are slow to start) while local
    and the topics are filled; every JVM of it is gone after."""
    port, webui = free_ports(2)
    spark_cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone"), port=port, webui_port=webui)
    pool = ThreadPoolExecutor(1)
    started = pool.submit(spark_cluster.start)
    try:
        yield spark_cluster, started
    finally:
        pool.shutdown()  # start has returned (or failed) before the cluster is stopped
        spark_cluster.stop()
    assert spark_processes(spark_cluster.directory, port) == [], "a JVM of the Spark cluster outlived it"


def stop_spark(spark) -> None:
    """Stop the session and the driver's JVM too (PySpark keeps it for the next session)."""
    from pyspark import SparkContext
    gateway = SparkContext._gateway
    spark.stop()
    if gateway is not None:
        gateway.shutdown()
        gateway.proc.stdin.close()  # the JVM exits when its stdin closes
        gateway.proc.wait(60)
        SparkContext._gateway = SparkContext._jvm = None


def word_count(spark, servers: str) -> dict[str, int]:
    """docs/analytics.md, "Batch: a word count"."""
    words = (spark.read.format("kraft-topic").option("bootstrap.servers", servers).option("subscribe", "web-logs")
             .load().selectExpr("explode(split(CAST(value AS STRING), ' ')) AS word").groupBy("word").count())
    return {r.word: r["count"] for r in words.collect()}


def status_counts(spark, servers: str, topic: str, checkpoint: Path) -> dict[str, int]:
    """docs/analytics.md, "Streaming: an aggregation with a checkpoint, written back to a
    topic" (up to the high watermarks: Trigger.AvailableNow), then the latest count per status."""
    (spark.readStream.format("kraft-topic").option("bootstrap.servers", servers).option("subscribe", "web-logs")
     .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "400").load()
     .selectExpr("split(CAST(value AS STRING), ' ')[2] AS status").groupBy("status").count()
     .selectExpr("status AS key", "CAST(count AS STRING) AS value")
     .writeStream.format("kraft-topic").option("bootstrap.servers", servers).option("topic", topic)
     .option("checkpointLocation", str(checkpoint)).outputMode("complete")
     .trigger(availableNow=True).start().awaitTermination(240))
    from pyspark.sql import functions as F
    latest = (spark.read.format("kraft-topic").option("bootstrap.servers", servers).option("subscribe", topic).load()
              .selectExpr("CAST(key AS STRING) AS status", "CAST(CAST(value AS STRING) AS INT) AS n", "offset")
              .groupBy("status").agg(F.max_by("n", "offset").alias("n")))
    return {r.status: r.n for r in latest.collect()}


@pytest.fixture(scope="module")
def topics(brokers) -> str:
    for topic, partitions in (("web-logs", 3), ("counts-cluster", 1)):
        asyncio.run(brokers.create_topic(topic, partitions=partitions))
    asyncio.run(produce_log_lines(brokers.bootstrap_servers, LINES, seed=SEED))
    return brokers.bootstrap_servers


def produced_lines(n: int, seed: int) -> list[str]:
    """The values ``produce_log_lines`` sent (the same seeded draws, in the same order)."""
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        out.append(f"GET {rnd.choice(PATHS)} {rnd.choice(STATUSES)}")
        rnd.randrange(8)  # the key's host
    return out


@pytest.fixture(scope="module")
def spark(standalone, topics) -> Iterator:
    """A session on the cluster, after a local one in the same process (as in the whole test
    run, where tests/test_analytics.py starts the JVM first): the executors must still ask for
    what fits a worker, which the JVM's environment can no longer say."""
    from metadata.analytics.session import start
    stop_spark(start("local[1]"))
    _, started = standalone
    session = start(started.result())
    yield session
    stop_spark(session)


def test_the_docs_word_count_and_streaming_examples_count_every_line_on_the_cluster(spark, standalone, topics, tmp_path):
    """What local mode gives (tests/test_spark_topics.py: every record, exactly once): the word
    and status counts of the lines produced."""
    spark_cluster, _ = standalone
    assert spark.sparkContext.master == spark_cluster.master_url
    lines = produced_lines(LINES, SEED)
    assert word_count(spark, topics) == Counter(w for line in lines for w in line.split(" "))
    assert status_counts(spark, topics, "counts-cluster", tmp_path / "checkpoint") == \
        Counter(line.split(" ")[2] for line in lines)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # the driver's is listed too
    assert executors == 2


def test_executors_run_the_code_the_driver_shipped(spark):
    """Every package a task imports comes from the driver's archive, not from whatever the
    workers' Python has installed."""
    def origins(_: object) -> Iterator[tuple[str, str]]:
        import clients.spark.tasks
        import common.config_def
        import metadata.analytics.plan
        for m in (clients.spark.tasks, common.config_def, metadata.analytics.plan):
            yield m.__name__, m.__file__
    found = spark.sparkContext.parallelize(range(2), 2).mapPartitions(origins).collect()
    assert {name for name, _ in found} == {"clients.spark.tasks", "common.config_def", "metadata.analytics.plan"}
    assert all("pykraft.zip" in path for _, path in found), found


def test_the_metadata_source_reads_a_snapshot_and_a_log_directory_on_the_cluster(spark, tmp_path):
    image = replay(crafted_batches())
    snapshot = tmp_path / "crafted.snapshot"
    write_snapshot(image, snapshot, created_ms=0, index_interval=4)
    for name in ("partitions", "brokers", "configs"):
        assert set(table(spark, snapshot, name, numPartitions=2)) == expected(name, image), name
    log_dir = make_log_dir(tmp_path / "metadata-log")
    for offset in (6, 10):
        assert set(table(spark, log_dir, "partitions", offset=offset)) == expected("partitions", history_image(offset))
    assert {r[5] for r in table(spark, log_dir, "records", source="log")} >= {"PartitionChangeRecord",
                                                                               "RemoveTopicRecord"}
