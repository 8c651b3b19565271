"""Spark over topics (issue 16): the ``kraft-topic`` source reads what was produced, exactly,
by offsets, by time, while a leader is killed, and as a streaming query that is killed with
kill -9 and restarted from its checkpoint; only committed transactions unless told otherwise
(issue 28); the sink writes; bad options fail with one line."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from clients import Producer
from tests.brokercluster import REPO, BrokerCluster, running_cluster
from tests.eventually import eventually


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("spark-topics"), {"log.retention.check.interval.ms": "300",
                                                                   "transaction.state.log.num.partitions": "1"}) as c:
        yield c


@pytest.fixture(scope="module")
def spark() -> Iterator:
    from metadata.analytics.session import start
    session = start("local[2]")
    yield session
    session.stop()


def produce(c: BrokerCluster, topic: str, n: int, *, start: int = 0, timestamp_ms: int | None = None,
            partition: int | None = None) -> dict:
    """``n`` records with keys, values and headers; (partition, offset) -> (key, value, headers, ts)."""
    async def go() -> dict:
        out = {}
        async with Producer(c.bootstrap_servers, linger_ms=5) as p:
            sent = []
            for i in range(start, start + n):
                key, value, headers = b"k%d" % i, b"v%d" % i * 3, [("i", b"%d" % i), ("null", None)]
                f = await p.send(topic, value, key, headers=headers, timestamp_ms=timestamp_ms, partition=partition)
                sent.append(((key, value, headers), f))
            for (key, value, headers), f in sent:
                md = await f
                out[(md.partition, md.offset)] = (key, value, headers, md.timestamp)
        return out
    return asyncio.run(go())


def reader(spark, c: BrokerCluster, **options: str):
    r = spark.read.format("kraft-topic").option("bootstrap.servers", c.bootstrap_servers)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows(df) -> dict:
    return {(r.partition, r.offset): (r.key, r.value, [(h.key, h.value) for h in r.headers or ()],
                                      int(r.timestamp.timestamp() * 1000), r.topic, r.timestampType)
            for r in df.collect()}


def test_a_batch_read_is_exactly_what_was_produced(cluster, spark):
    asyncio.run(cluster.create_topic("sp-batch", partitions=3))
    sent = produce(cluster, "sp-batch", 300)
    assert {p for p, _ in sent} == {0, 1, 2}
    for options in ({}, {"maxRecordsPerPartition": "40"}):
        df = reader(spark, cluster, subscribe="sp-batch", **options)
        got = rows(df)
        assert {k: v[:4] for k, v in got.items()} == sent
        assert {(v[4], v[5]) for v in got.values()} == {("sp-batch", 0)}
    assert reader(spark, cluster, subscribe="sp-batch", maxRecordsPerPartition="40").rdd.getNumPartitions() >= 9
    assert reader(spark, cluster, subscribePattern="sp-ba.*").count() == 300


def test_offsets_by_json_and_by_timestamp(cluster, spark):
    asyncio.run(cluster.create_topic("sp-offsets", partitions=2))
    cut = int(time.time() * 1000) + 1000
    old = produce(cluster, "sp-offsets", 40, timestamp_ms=cut - 3_600_000)  # within retention.ms (7 days)
    new = produce(cluster, "sp-offsets", 30, start=40, timestamp_ms=cut + 5000)
    df = reader(spark, cluster, assign='{"sp-offsets":[1]}', startingOffsets='{"sp-offsets":{"1":3}}',
                endingOffsets='{"sp-offsets":{"1":9}}')
    assert sorted(rows(df)) == [(1, o) for o in range(3, 9)]
    df = reader(spark, cluster, subscribe="sp-offsets", startingOffsets='{"sp-offsets":{"0":-2,"1":-1}}')
    assert set(rows(df)) == {tp for tp in {**old, **new} if tp[0] == 0}
    df = reader(spark, cluster, subscribe="sp-offsets", startingTimestamp=str(cut))
    assert set(rows(df)) == set(new)
    df = reader(spark, cluster, subscribe="sp-offsets",
                startingOffsetsByTimestamp=json.dumps({"sp-offsets": {"0": cut, "1": 0}}),
                endingOffsetsByTimestamp=json.dumps({"sp-offsets": {"0": cut + 10_000, "1": cut}}))
    assert set(rows(df)) == {tp for tp in new if tp[0] == 0} | {tp for tp in old if tp[0] == 1}


def test_writes_round_trip(cluster, spark):
    asyncio.run(cluster.create_topic("sp-write", partitions=2))
    asyncio.run(cluster.create_topic("sp-write-2", partitions=1))
    data = [(b"k%d" % i, b"v%d" % i, i % 2, [("h", b"x%d" % i)]) for i in range(50)]
    df = spark.createDataFrame(data, "key binary, value binary, partition int, headers array<struct<key:string,value:binary>>")
    df.write.format("kraft-topic").option("bootstrap.servers", cluster.bootstrap_servers).option("topic", "sp-write") \
        .mode("append").save()
    got = rows(reader(spark, cluster, subscribe="sp-write"))
    assert sorted((v[0], v[1], p, v[2]) for (p, _), v in got.items()) == \
        sorted((k, v, p, [("h", h[0][1])]) for k, v, p, h in data)
    spark.createDataFrame([("sp-write-2", "a"), ("sp-write-2", "b")], "topic string, value string") \
        .write.format("kraft-topic").option("bootstrap.servers", cluster.bootstrap_servers).mode("append").save()
    written = reader(spark, cluster, subscribe="sp-write-2").collect()
    assert sorted(r.value for r in written) == [b"a", b"b"]
    assert [r.headers for r in written] == [None, None]  # no headers: null, as in Spark's Kafka source


@pytest.mark.parametrize("options, line", [
    ({"subscribe": "sp-batch", "assign": '{"sp-batch":[0]}'},
     "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be specified; subscribe, assign "
     "were given"),
    ({"subscribe": "no-such-topic"}, "topic no-such-topic does not exist (UNKNOWN_TOPIC_OR_PARTITION)"),
    ({"subscribe": "sp-batch", "startingOffsets": '{"sp-batch":'},
     "option 'startingOffsets' is not valid JSON (Expecting value at character 12): '{\"sp-batch\":'"),
    ({"assign": '["sp-batch"]'}, "option 'assign' must be JSON like {\"topicA\":[0,1],\"topicB\":[2,4]}"),
    ({"subscribe": "sp-batch", "startingOffsets": "latest"},
     "startingOffsets 'latest' is not valid for a batch read (it would read nothing)"),
    ({"subscribe": "sp-batch", "kafka.isolation.level": "committed"},
     "option 'isolation.level' must be read_committed or read_uncommitted, not 'committed'"),
])
def test_bad_options_fail_with_one_line(cluster, spark, options, line):
    with pytest.raises(Exception) as e:
        reader(spark, cluster, **options).count()
    assert f"TopicSourceError: {line}" in str(e.value)


def test_a_read_while_a_partition_leader_is_killed(cluster, spark):
    asyncio.run(cluster.create_topic("sp-failover", partitions=2))
    sent = produce(cluster, "sp-failover", 200)
    leader = asyncio.run(cluster.describe_topic("sp-failover")).partitions[0].leader
    cluster.kill(leader)  # no wait for the new leader: the read finds it
    try:
        assert {k: v[:4] for k, v in rows(reader(spark, cluster, subscribe="sp-failover")).items()} == sent
    finally:
        cluster.start_broker(leader)
        asyncio.run(cluster.wait_unfenced(timeout=60))


def test_transactions_are_read_committed_unless_told_otherwise(cluster, spark):
    """librdkafka commits a transaction, aborts one and leaves one open: by default, batch and
    streaming reads see the committed records only (they stop at the last stable offset and
    step over the aborted records and the markers); read_uncommitted sees every record. When
    the open transaction commits, the running stream reads it."""
    from confluent_kafka import Producer as KafkaProducer

    asyncio.run(cluster.create_topic("sp-txn", partitions=1))
    p = KafkaProducer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "sp-txn"})
    p.init_transactions(30)
    for outcome, n in (("committed", 5), ("aborted", 4), ("open", 3)):
        p.begin_transaction()
        for i in range(n):
            p.produce("sp-txn", b"%s-%d" % (outcome.encode(), i))
        p.flush(30)
        if outcome == "committed":
            p.commit_transaction(30)
        elif outcome == "aborted":
            p.abort_transaction(30)
    committed = [b"committed-%d" % i for i in range(5)]
    everything = committed + [b"aborted-%d" % i for i in range(4)] + [b"open-%d" % i for i in range(3)]

    def values(**options: str) -> list[bytes]:
        return [r.value for r in reader(spark, cluster, subscribe="sp-txn", **options).orderBy("offset").collect()]

    assert values() == committed
    assert values(**{"isolation.level": "read_committed"}) == committed
    assert values(**{"kafka.isolation.level": "read_uncommitted"}) == everything

    query = (spark.readStream.format("kraft-topic").option("bootstrap.servers", cluster.bootstrap_servers)
             .option("subscribe", "sp-txn").option("startingOffsets", "earliest").load()
             .writeStream.format("memory").queryName("sp_txn").start())
    try:
        query.processAllAvailable()
        assert [r.value for r in spark.sql("SELECT value FROM sp_txn ORDER BY offset").collect()] == committed
        p.commit_transaction(30)
        opened = [b"open-%d" % i for i in range(3)]

        def streamed() -> bool:
            query.processAllAvailable()
            got = [r.value for r in spark.sql("SELECT value FROM sp_txn ORDER BY offset").collect()]
            return got == committed + opened
        asyncio.run(eventually(streamed, timeout=60, what="the open transaction's records, once committed"))
    finally:
        query.stop()
    assert values() == committed + opened


async def add_partitions(c: BrokerCluster, topic: str, count: int) -> None:
    from protos import controller_pb2 as cpb
    async with c.controller() as ctl:
        await ctl.create_partitions(cpb.CreatePartitionsRequest(
            topics=[cpb.CreatePartitionsRequest.Topic(name=topic, count=count)]))
    await c.wait_topic(topic, count)


def test_a_streaming_write_copies_a_topic(cluster, spark, tmp_path):
    """readStream from one topic, writeStream to another (Trigger.AvailableNow: up to the high
    watermarks at the start), run twice on one checkpoint: the copy has each record once."""
    asyncio.run(cluster.create_topic("sp-copy-from", partitions=2))
    asyncio.run(cluster.create_topic("sp-copy-to", partitions=2))

    def copy() -> None:
        (spark.readStream.format("kraft-topic").option("bootstrap.servers", cluster.bootstrap_servers)
         .option("subscribe", "sp-copy-from").option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "70")
         .load().select("key", "value", "headers")
         .writeStream.format("kraft-topic").option("bootstrap.servers", cluster.bootstrap_servers)
         .option("topic", "sp-copy-to").option("checkpointLocation", str(tmp_path / "copy"))
         .trigger(availableNow=True).start().awaitTermination(120))

    sent = produce(cluster, "sp-copy-from", 150)
    copy()
    more = produce(cluster, "sp-copy-from", 50, start=150)
    copy()
    copied = reader(spark, cluster, subscribe="sp-copy-to").collect()
    assert sorted((r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in copied) == \
        sorted((k, v, h) for k, v, h, _ in {**sent, **more}.values())


@pytest.mark.timeout(1500)  # two Spark drivers start in it; on a busy 2-core machine each takes minutes
def test_a_streaming_query_killed_mid_batch_resumes_from_its_checkpoint_exactly_once(cluster, spark, tmp_path):
    asyncio.run(cluster.create_topic("sp-stream", partitions=3))
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"
    produce(cluster, "sp-stream", 1500)

    def job() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "tests.spark_topic_stream", cluster.bootstrap_servers,
                                 "sp-stream", str(checkpoint), str(sink)], cwd=REPO, start_new_session=True,
                                stdout=open(tmp_path / "job.out", "a"), stderr=open(tmp_path / "job.log", "a"))

    def started() -> int:  # the job prints "started" each time its query starts
        out = tmp_path / "job.out"
        return out.read_text().count("started") if out.exists() else 0

    def committed_batches() -> int:
        commits = checkpoint / "commits"
        return len([f for f in commits.iterdir() if f.name.isdigit()]) if commits.exists() else 0

    def sink_rows() -> list:
        return spark.read.parquet(str(sink)).collect() if (sink / "_spark_metadata").exists() else []

    def until(proc: subprocess.Popen, check, timeout: float, what: str) -> None:
        """``check`` within ``timeout`` while the job runs; a failure carries the job's own log."""
        def running_and_done() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the streaming job exited with {proc.returncode} before {what}")
            return check()
        try:
            asyncio.run(eventually(running_and_done, timeout=timeout, what=what))
        except AssertionError as e:
            if proc.poll() is None:  # where the job's Python threads are (tests/spark_topic_stream.py)
                proc.send_signal(signal.SIGUSR1)
                asyncio.run(eventually(lambda: "most recent call first" in (tmp_path / "job.log").read_text(
                    errors="replace"), timeout=10, what="the job's stacks"))
            log = (tmp_path / "job.log").read_text(errors="replace").splitlines()
            raise AssertionError(f"{e}; {committed_batches()} micro-batches committed; the job's log ends:\n"
                                 + "\n".join(log[-80:])) from None

    first = job()
    try:
        until(first, started, 420, "the job's query starting")
        until(first, lambda: committed_batches() >= 2, 180, "two micro-batches")
        produce(cluster, "sp-stream", 1500, start=1500)  # more arrives while it runs
        done = committed_batches()
        until(first, lambda: (checkpoint / "offsets" / str(done)).exists(), 60,
              "a micro-batch planned and not yet committed")
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, mid-batch
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    asyncio.run(add_partitions(cluster, "sp-stream", 4))  # a new partition is read from its start
    produce(cluster, "sp-stream", 900, start=3000)
    produce(cluster, "sp-stream", 100, start=3900, partition=3)
    starts = started()
    second = job()
    try:
        until(second, lambda: started() > starts, 420, "the job's query starting again")
        until(second, lambda: len(sink_rows()) >= 4000, 240, "all 4000 records in the sink")
        got = sink_rows()
        assert len(got) == 4000, f"{len(got)} rows for 4000 records"
        assert len({(r.partition, r.offset) for r in got}) == 4000  # none twice
        assert {r.key for r in got} == {f"k{i}" for i in range(4000)}  # none missing
        assert 3 in {r.partition for r in got}
    finally:
        os.killpg(second.pid, signal.SIGKILL)
        second.wait(30)


def test_offsets_that_retention_removed_fail_the_read_unless_told_to_skip(cluster, spark):
    asyncio.run(cluster.create_topic("sp-retention", partitions=1, configs={"retention.bytes": "2000"}))
    for round in range(6):  # separate batches, so retention can drop the oldest
        produce(cluster, "sp-retention", 20, start=round * 20)

    async def log_start() -> int:
        from clients.admin import Admin
        async with Admin(cluster.bootstrap_servers) as admin:
            return (await admin.offsets({("sp-retention", 0): -2}))[("sp-retention", 0)][0]
    first = asyncio.run(eventually(log_start, timeout=30, what="retention moving the log start"))
    from_zero = {"assign": '{"sp-retention":[0]}', "startingOffsets": '{"sp-retention":{"0":0}}'}
    with pytest.raises(Exception) as e:
        reader(spark, cluster, **from_zero).count()
    assert "of sp-retention-0 are no longer in the log" in str(e.value)
    kept = rows(reader(spark, cluster, failOnDataLoss="false", **from_zero))
    assert min(o for _, o in kept) >= first and max(o for _, o in kept) == 119


def test_a_task_reads_fetched_batches_into_columns_without_making_records(cluster, monkeypatch):
    """A task's read (clients/spark/tasks.py read_range) decodes the fetched batches straight
    into Arrow columns: the consumer's per-record path (a ConsumerRecord per record, then taken
    apart into columns) cost as much as decoding itself, and made the task's Python worker
    slower per record than our consumer (issue 31 item 4)."""
    from clients import consumer
    from clients.spark.ranges import OffsetRange
    from clients.spark.tasks import read_range

    asyncio.run(cluster.create_topic("sp-columns", partitions=1))
    sent = produce(cluster, "sp-columns", 120, partition=0)

    def per_record(*args, **kwargs):
        raise AssertionError("a ConsumerRecord per record")
    monkeypatch.setattr(consumer, "records_of", per_record)
    batches = list(read_range(cluster.bootstrap_servers, OffsetRange("sp-columns", 0, 10, 110),
                              fail_on_data_loss=True, poll_timeout_ms=5000))
    got = {(0, r["offset"]): (r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]],
                              int(r["timestamp"].timestamp() * 1000))
           for b in batches for r in b.to_pylist()}
    assert got == {k: v for k, v in sent.items() if 10 <= k[1] < 110}


def _columns_rows(pieces, end: int) -> list[tuple]:
    from clients.spark.columns import Columns
    from clients.spark.tasks import ARROW_SCHEMA, CREATE_TIME
    cols = Columns()
    for piece in pieces:
        cols.add(piece, end)
    table = cols.arrow(ARROW_SCHEMA, "t", 3, CREATE_TIME).to_pylist()
    return [(r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"], r["value"],
             [(h["key"], h["value"]) for h in r["headers"]] if r["headers"] is not None else []) for r in table]


def test_batches_without_headers_are_decoded_by_the_vectorized_path(monkeypatch):
    """Records without headers, the common shape, are decoded for all the slices of a chunk at
    once (clients/spark/columns.py: numpy over every record, values as Arrow views cast to
    binary), not by the loop per record: the same rows as the consumer's records, for slices
    that take a whole batch or part of one, compressed or not, LogAppendTime or not, keys
    null or not, lengths of one to three varint bytes, in one Arrow batch. Bytes that are not
    records still fail with the one line."""
    from clients.compression import Codec
    from clients.records import build_batch, records_of, set_log_append_time
    from clients.spark import columns
    from clients.spark.columns import batch_slice
    from common.errors import KafkaError

    def per_record(*args, **kwargs):
        raise AssertionError("the loop per record")
    monkeypatch.setattr(columns, "_decoded", per_record)
    entries = [(None if i % 7 == 0 else b"k%d" % i * (1 + i % 300), None if i % 11 == 0 else bytes([i % 256]) * (i * 37 % 20000),
                1_700_000_000_000 + (i * 997 % 3_000_000) - 1000, []) for i in range(400)]
    batches = []
    for codec, log_append in ((Codec.NONE, False), (Codec.LZ4, False), (Codec.NONE, True), (Codec.NONE, False)):
        b = build_batch(entries if len(batches) < 3 else [(None, b"v%d" % i, 1_700_000_000_000, []) for i in range(50)],
                        codec)
        b.base_offset = 10_000 * (len(batches) + 1)
        if log_append:
            set_log_append_time(b, 1_800_000_000_000)
        batches.append(b)
    cuts = [(0, 1 << 62), (batches[1].base_offset + 30, batches[1].base_offset + 350), (0, 1 << 62), (0, 1 << 62)]
    end = batches[3].base_offset + 20
    expected = [(r.offset, r.timestamp, r.key, r.value, []) for b, (start, stop) in zip(batches, cuts, strict=True)
                for r in records_of(b, "t", 3, start) if r.offset < min(stop, end)]
    assert _columns_rows([batch_slice(b, start, stop) for b, (start, stop) in zip(batches, cuts, strict=True)], end) == expected
    assert len(expected) == 400 + 320 + 400 + 20
    small = batches[3]  # records below 8 KiB alone: their starts found without the long varint loop
    assert _columns_rows([batch_slice(small, 0, 1 << 62)], 1 << 62) == [
        (r.offset, r.timestamp, r.key, r.value, []) for r in records_of(small, "t", 3)]

    monkeypatch.undo()
    garbled = build_batch(entries[1:4])
    garbled.records = garbled.records[:-1]
    with pytest.raises(KafkaError, match="CORRUPT_MESSAGE.*cannot be decoded"):
        _columns_rows([batch_slice(garbled, 0, 1 << 62)], 1 << 62)


def test_batches_decoded_into_columns_are_the_consumers_records():
    """The source's tasks decode fetched batches straight into Arrow columns
    (clients/spark/columns.py): the same rows as the consumer's records, whatever the batch
    holds (null and long keys and values, varints of every length, headers on some records,
    compression, LogAppendTime), the part of a batch a slice and the task's range take, and
    one line for bytes that are not records."""
    from clients.compression import Codec
    from clients.records import LOG_APPEND_TIME_FLAG, build_batch, marker_batch, records_of, set_log_append_time
    from clients.spark.columns import batch_slice
    from common.errors import KafkaError

    entries = [(None if i % 7 == 0 else b"k%d" % i * (1 + i % 300),  # keys of 1 to 3 varint bytes
                None if i % 11 == 0 else bytes([i % 256]) * (i * 37 % 20000),  # values up to 20 KB
                1_700_000_000_000 + (i * 997 % 3_000_000) - 1000,  # timestamp deltas of every length, < 0 too
                [("h%d" % i, b"x" * i), ("n", None)] if i % 5 == 0 and i else []) for i in range(400)]
    batches = []
    for codec, log_append in ((Codec.NONE, False), (Codec.LZ4, False), (Codec.NONE, True)):
        b = build_batch(entries, codec)
        b.base_offset = 10_000 * (len(batches) + 1)
        if log_append:
            set_log_append_time(b, 1_800_000_000_000)
            assert b.attributes & LOG_APPEND_TIME_FLAG
        batches.append(b)
    for b in batches:
        base = b.base_offset
        for start, stop, end in ((0, 1 << 62, 1 << 62), (base + 30, base + 350, 1 << 62), (0, 1 << 62, base + 5)):
            expected = [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers])
                        for r in records_of(b, "t", 3, start) if r.offset < min(stop, end)]
            assert _columns_rows([batch_slice(b, start, stop)], end) == expected
    assert [r[4] for r in _columns_rows([batch_slice(batches[0], 0, 10_004)], 1 << 62)] == [[], [], [], []]
    assert batch_slice(marker_batch(1, 0, True, 0, 0), 0, 1 << 62) is None

    garbled = build_batch(entries[:3])
    garbled.records = garbled.records[:-1]
    with pytest.raises(KafkaError, match="CORRUPT_MESSAGE.*cannot be decoded"):
        _columns_rows([batch_slice(garbled, 0, 1 << 62)], 1 << 62)
