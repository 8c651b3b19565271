"""AlterReplicaLogDirs (Kafka's API 34): a replica moved to another of its broker's log dirs
while producers write with acks=all, its future log seen in DescribeLogDirs, nothing lost or
duplicated, the old directory emptied; Kafka's errors; a broker killed (kill -9) mid-move and
restarted loses nothing; the swap's crash points, each recovered at start (in process); and
``kraft reassign-partitions`` honouring a plan's log_dirs."""
from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokerd import log_manager
from brokerd.dump_data import open_store
from brokerd.kafka import apis as A
from brokerd.log_dirs import alter_replica_log_dirs
from brokerd.log_manager import LogManager
from brokerd.log_store import FlushPolicy, StorageFailure
from brokerd.partition_log import PartitionLog, stored_state
from brokerd.requests import AlterReplicaLogDir, AlterReplicaLogDirsRequest, AlterReplicaLogDirsTopic
from clients.records import batches, build_batch
from common.errors import ErrorCode as E
from protos import controller_pb2 as cpb
from tests.brokercluster import BrokerCluster, running_cluster, write_acked
from tests.eventually import eventually
from tests.test_kafka_handlers import Broker
from tests.test_reassignment import kraft

RATE = "replica.alter.log.dirs.io.max.bytes.per.second"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("logdirs"), {}, brokers=2, log_dirs=2) as c:
        yield c


# -- helpers ------------------------------------------------------------------------------------------

def alter(c: BrokerCluster, bid: int, path: str, topic: str, partition: int = 0) -> E:
    r = Broker(c).ask(A.ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
        {"path": path, "topics": [{"name": topic, "partitions": [partition]}]}]}, bid)
    [t] = r.results
    assert t.topic_name == topic and [p.partition_index for p in t.partitions] == [partition]
    return E(t.partitions[0].error_code.value)


def replicas(c: BrokerCluster, bid: int, topic: str) -> dict[tuple[str, bool], int]:
    """(log dir, is future) -> offset lag of partition 0 of ``topic`` on broker ``bid``."""
    r = Broker(c).ask(A.DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": topic, "partitions": [0]}]}, bid)
    assert r.error_code.value == 0
    return {(d.log_dir, p.is_future_key): p.offset_lag for d in r.results for t in d.topics if t.name == topic
            for p in t.partitions}


def current_dir(c: BrokerCluster, bid: int, topic: str) -> tuple[str, str]:
    """(the dir holding the replica, the other one)."""
    [(here, _)] = [k for k in replicas(c, bid, topic) if not k[1]]
    [other] = [str(d) for d in c.log_dirs(bid) if str(d) != here]
    return here, other


async def set_rate(c: BrokerCluster, bid: int, rate: int) -> None:
    """The broker's copy rate, once the broker has applied it (a move asked for before it might
    copy everything at once)."""
    async with c.controller() as ctl:
        r = await ctl.incremental_alter_configs(cpb.IncrementalAlterConfigsRequest(resources=[
            cpb.AlterConfigsResource(resource_type=cpb.BROKER, resource_name=str(bid), configs=[
                cpb.AlterableConfig(name=RATE, value=str(rate))])]))
        assert [x.error_code for x in r.resources] == [0]
        committed = (await ctl.describe_quorum(cpb.DescribeQuorumRequest())).high_watermark

    async def applied() -> bool:
        return (await c.describe_broker(bid)).metadata_offset >= committed - 1
    await eventually(applied, 20, what=f"broker {bid} applying {RATE}")


def preload(c: BrokerCluster, topic: str, n: int, size: int = 1000) -> list[bytes]:
    from confluent_kafka import Producer
    values = [b"pre-%06d-" % i + b"x" * size for i in range(n)]
    # batches of ~20 records: a move copies whole batches, and a throttled one a batch at a time
    p = Producer({"bootstrap.servers": c.kafka_bootstrap_servers, "acks": "all", "linger.ms": 5,
                  "batch.size": 20 * (size + 100)})
    for v in values:
        while True:
            try:
                p.produce(topic, v, partition=0)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0
    return values


def read_all(c: BrokerCluster, topic: str) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": c.kafka_bootstrap_servers, "group.id": f"read-{uuid.uuid4()}",
                         "enable.auto.commit": False, "fetch.max.bytes": 4 << 20})
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[bytes] = []
        offset = 0
        while offset < end:
            m = consumer.poll(10)
            assert m is not None, f"nothing read at offset {offset} of {end}"
            assert m.error() is None, m.error()
            out.append(m.value())
            offset = m.offset() + 1
        return out
    finally:
        consumer.close()


async def moved(c: BrokerCluster, bid: int, topic: str, dest: str, timeout: float = 60) -> None:
    """Until the replica is in ``dest`` alone, with no future log left."""
    async def there() -> bool:
        try:
            return list(await asyncio.to_thread(replicas, c, bid, topic)) == [(dest, False)]
        except OSError:  # a restarted broker not listening yet
            return False
    await eventually(there, timeout, interval=0.2, what=f"{topic} moved to {dest}")


def stored_in(log_dir: str, topic_id: bytes) -> tuple[int, int, int, int] | None:
    """The partition's state in ``log_dir``'s store, read-only (None: no log of it there)."""
    with open_store(log_dir) as db:
        return stored_state(db, uuid.UUID(bytes=topic_id), 0)


# -- moving while producing ----------------------------------------------------------------------------

def test_a_leader_replica_moves_while_producers_write_with_acks_all(cluster: BrokerCluster) -> None:
    """The future log is shown (is_future_key, its lag), catches up while acks=all writes go on,
    and takes over: every acknowledged record is read once, and the old dir holds no trace."""
    c, bid, topic = cluster, 101, "moving"
    asyncio.run(c.create_topic(topic, assignments=[[bid, 102]]))
    values = preload(c, topic, 3000)  # ~3 MB: five seconds at the rate below (its first second at once)
    asyncio.run(set_rate(c, bid, 500_000))
    src, dest = current_dir(c, bid, topic)

    async def move() -> tuple[list[int], list[int]]:
        stop, acked = asyncio.Event(), []
        writer = asyncio.create_task(write_acked(c.bootstrap_servers, topic, stop, acked))
        await eventually(lambda: len(acked) >= 20, 30, what="acks=all writes going on")
        assert await asyncio.to_thread(alter, c, bid, dest, topic) == E.NONE
        seen = await eventually(lambda: [lag for (d, future), lag in replicas(c, bid, topic).items()
                                         if future and d == dest], 30, interval=0.1, what="the future log")
        during = len(acked)
        await moved(c, bid, topic, dest)
        assert len(acked) > during, "no write was acknowledged while the replica moved"
        after = len(acked)
        await eventually(lambda: len(acked) >= after + 50, 30, what="writes acknowledged after the swap")
        stop.set()
        await writer
        return seen, acked
    seen, acked = asyncio.run(move())
    assert seen[0] >= 0
    got = read_all(c, topic)
    assert got[:len(values)] == values
    live = got[len(values):]
    assert len(live) == len(set(live)), "a record was written twice"
    assert set(b"live-%d" % n for n in acked) <= set(live)
    topic_id = asyncio.run(c.describe_topic(topic)).topic_id
    assert stored_in(src, topic_id) is None
    assert stored_in(dest, topic_id) is not None
    assert alter(c, bid, dest, topic) == E.NONE and list(replicas(c, bid, topic)) == [(dest, False)]  # already there
    r = kraft(c, "log-dirs", "--bootstrap-server", c.bootstrap_servers, "--describe", "--broker-list", str(bid),
              "--topic-list", topic)
    assert r.returncode == 0, r.stderr
    [broker] = json.loads(r.stdout.splitlines()[-1])["brokers"]
    assert {d["logDir"]: [(p["partition"], p["isFuture"]) for p in d["partitions"]] for d in broker["logDirs"]} == {
        src: [], dest: [(f"{topic}-0", False)]}
    asyncio.run(set_rate(c, bid, 0))


# -- errors ------------------------------------------------------------------------------------------

def test_errors_are_kafkas(cluster: BrokerCluster) -> None:
    c = cluster
    asyncio.run(c.create_topic("only-on-102", assignments=[[102]]))
    here, _ = current_dir(c, 102, "only-on-102")
    assert alter(c, 101, "/no/such/dir", "only-on-102") == E.LOG_DIR_NOT_FOUND
    assert alter(c, 101, str(c.log_dir(101)), "only-on-102") == E.REPLICA_NOT_AVAILABLE
    assert alter(c, 101, str(c.log_dir(101)), "no-such-topic") == E.UNKNOWN_TOPIC_OR_PARTITION
    assert alter(c, 102, here, "only-on-102") == E.NONE  # where it is: nothing to do
    assert list(replicas(c, 102, "only-on-102")) == [(here, False)]

    # a move back to where the replica is cancels the move under way, and its future log goes
    preload(c, "only-on-102", 500)
    asyncio.run(set_rate(c, 102, 50_000))  # ten seconds to copy 0.5 MB
    other = current_dir(c, 102, "only-on-102")[1]
    assert alter(c, 102, other, "only-on-102") == E.NONE
    assert {d for d, future in replicas(c, 102, "only-on-102") if future} == {other}
    assert alter(c, 102, here, "only-on-102") == E.NONE
    assert list(replicas(c, 102, "only-on-102")) == [(here, False)]
    asyncio.run(set_rate(c, 102, 0))


def test_an_offline_destination_is_a_storage_error(tmp_path: Path) -> None:
    """KAFKA_STORAGE_ERROR for a failed (offline) dir, before the partition is looked at."""
    logs = LogManager((str(tmp_path / "a"), str(tmp_path / "b")), FlushPolicy())
    logs.stores[1].failure = StorageFailure("failed")

    class NoReplicas:  # the partition is not asked for: the directory is checked first
        broker_id = 1
        moves = None

        def __init__(self) -> None:
            self.logs = logs

        def partition(self, *a: Any) -> Any:
            raise AssertionError("the partition was looked up")
    req = AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDir(path=str(tmp_path / "b"), topics=[
        AlterReplicaLogDirsTopic(name="t", partitions=[0])])])
    [t] = alter_replica_log_dirs(NoReplicas(), req).topics  # type: ignore[arg-type]
    assert [(p.partition, E(p.error_code)) for p in t.partitions] == [(0, E.KAFKA_STORAGE_ERROR)]
    asyncio.run(logs.close())


# -- kill -9 mid-move ----------------------------------------------------------------------------------

def test_a_broker_killed_mid_move_loses_nothing(cluster: BrokerCluster) -> None:
    """kill -9 while the future log is half copied; at restart the move resumes from the future
    log and completes; every record is readable. The move is asked for with kafka-python's
    admin client."""
    from kafka import KafkaAdminClient
    from kafka.errors import NoError
    c, bid, topic = cluster, 101, "crash-moving"
    asyncio.run(c.create_topic(topic, assignments=[[bid, 102]]))
    values = preload(c, topic, 2000)
    asyncio.run(set_rate(c, bid, 400_000))  # five seconds to copy 2 MB
    src, dest = current_dir(c, bid, topic)
    admin = KafkaAdminClient(bootstrap_servers=c.kafka_bootstrap_servers, request_timeout_ms=10_000)
    try:
        answers = admin.alter_replica_log_dirs({(topic, 0, bid): dest})
    finally:
        admin.close()
    assert [(tuple(r), e) for r, e in answers.items()] == [((topic, 0, bid), NoError)]

    async def half_copied() -> bool:
        lags = [lag for (d, future), lag in (await asyncio.to_thread(replicas, c, bid, topic)).items() if future]
        return bool(lags) and 0 < lags[0] < len(values)
    asyncio.run(eventually(half_copied, 30, interval=0.1, what="the future log half copied"))
    c.kill(bid)
    c.start_broker(bid)
    asyncio.run(c.wait_unfenced([bid, 102], timeout=60))
    asyncio.run(moved(c, bid, topic, dest))
    starts = re.findall(rf"{topic}-0: moving from {src} to {dest} \(the future log starts at (\d+)\)",
                        c.log_path(bid).read_text())
    assert len(starts) == 2 and int(starts[1]) > 0, starts  # resumed where the future log was
    assert read_all(c, topic) == values
    topic_id = asyncio.run(c.describe_topic(topic)).topic_id
    assert stored_in(src, topic_id) is None
    asyncio.run(set_rate(c, bid, 0))


# -- the swap's crash points (in process) ---------------------------------------------------------------

TID = uuid.uuid4()


async def _two_dirs_with_a_copy(base: Path, policy: FlushPolicy | None = None
                                ) -> tuple[LogManager, PartitionLog, PartitionLog]:
    """A log of 5 batches in dir a, and its complete future log in dir b."""
    logs = LogManager((str(base / "a"), str(base / "b")), policy or FlushPolicy())
    current = logs.open(TID, 0)
    for i in range(5):
        await current.append_as_leader(build_batch([(b"k", b"v%d" % i, 0, ())]), 3)
    current.set_high_watermark(5)
    future = logs.open_future(TID, 0, logs.stores[1])
    frames, _ = current.read(0, 1 << 20, current.log_end_offset)
    await future.append_as_follower(batches(b"".join(frames)))
    return logs, current, future


@pytest.mark.parametrize("crash_before", ["promote", "delete"])
def test_a_swap_cut_short_is_finished_at_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               crash_before: str) -> None:
    """A crash after the old log is marked moved (before the future one is promoted), or after
    the promotion (before the old one is deleted): at start the future log is the current one,
    with every batch, the high watermark and epochs, and the old one is gone."""
    async def crash() -> None:
        logs, current, future = await _two_dirs_with_a_copy(tmp_path)

        def boom(*a: Any) -> None:
            raise RuntimeError("crash")
        if crash_before == "promote":
            monkeypatch.setattr(log_manager, "_promote", boom)
        else:
            monkeypatch.setattr(current, "delete_all", boom)
        with pytest.raises(RuntimeError):
            logs.swap(current, future)
        await logs.close()
    asyncio.run(crash())
    monkeypatch.undo()

    async def restart() -> None:
        logs = LogManager((str(tmp_path / "a"), str(tmp_path / "b")), FlushPolicy())
        assert logs.local_partitions() == [(TID, 0)] and logs.future_store(TID, 0) is None
        log = logs.open(TID, 0)
        assert log.store is logs.stores[1]
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, 5, 5)
        assert log.end_offset_for_epoch(3) == (3, 5)
        assert len(log.stored_batches()) == 5
        assert stored_state(logs.stores[0].db, TID, 0) is None
        await logs.close()
    asyncio.run(restart())


def test_a_future_log_found_at_start_is_kept_for_the_move_to_resume(tmp_path: Path) -> None:
    async def stop_mid_move() -> None:
        logs, _, _ = await _two_dirs_with_a_copy(tmp_path)
        await logs.close()
    asyncio.run(stop_mid_move())

    async def restart() -> None:
        logs = LogManager((str(tmp_path / "a"), str(tmp_path / "b")), FlushPolicy())
        assert logs.local_partitions() == [(TID, 0)]
        assert logs.open(TID, 0).store is logs.stores[0]
        assert logs.future_store(TID, 0) is logs.stores[1]
        logs.delete(TID, 0)  # no longer hosted: both go
        assert logs.future_store(TID, 0) is None and stored_state(logs.stores[1].db, TID, 0) is None
        await logs.close()
    asyncio.run(restart())


# -- kraft reassign-partitions with log_dirs -------------------------------------------------------------

def test_reassign_partitions_puts_replicas_in_the_plans_log_dirs(cluster: BrokerCluster, tmp_path: Path) -> None:
    """A plan's log_dirs, as kafka-reassign-partitions.sh honours them: the replica broker 101
    has moves to its other dir; the one the plan adds on 102 is created in its dir at once."""
    c, topic = cluster, "cli-moved"
    asyncio.run(c.create_topic(topic, assignments=[[101]]))
    values = preload(c, topic, 200)
    _, dest101 = current_dir(c, 101, topic)
    dest102 = str(c.log_dirs(102)[1])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [101, 102], "log_dirs": [dest101, dest102]}]}))
    tool = ["reassign-partitions", "--bootstrap-controller", c.quorum.bootstrap, "--reassignment-json-file", str(plan)]

    r = kraft(c, *tool, "--execute")
    assert (r.returncode, r.stderr) == (1, "Error: the plan's log_dirs need --bootstrap-server: each broker is asked "
                                           "to move its replicas between its log dirs\n")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [101, 999], "log_dirs": [dest101, "/data/x"]}]}))
    r = kraft(c, *tool[:-1], str(bad), "--bootstrap-server", c.bootstrap_servers, "--execute")
    assert r.returncode == 1 and r.stderr.startswith("Error: INVALID_REPLICA_ASSIGNMENT: ") and \
        len(r.stderr.splitlines()) == 1, r.stderr  # the reassignment's refusal, nothing moved
    r = kraft(c, *tool, "--bootstrap-server", c.bootstrap_servers, "--execute")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"Successfully started log directory moves for: {topic}-0-101,{topic}-0-102"

    def verified() -> str | None:
        v = kraft(c, *tool, "--bootstrap-server", c.bootstrap_servers, "--verify")
        return v.stdout if v.returncode == 0 else None
    out = asyncio.run(eventually(verified, 60, interval=0.5, what="--verify to pass"))
    assert f"Reassignment of replica {topic}-0-101 completed successfully." in out
    assert f"Reassignment of replica {topic}-0-102 completed successfully." in out
    assert list(replicas(c, 102, topic)) == [(dest102, False)]
    assert f"{topic}-0: moving from" not in c.log_path(102).read_text()  # created there, not moved
    assert read_all(c, topic) == values


def test_a_swap_with_every_write_synced(tmp_path: Path) -> None:
    """log.flush.interval.messages=1: the swap fsyncs its marks and the copy, and the new log has
    everything."""
    async def swap() -> None:
        logs, current, future = await _two_dirs_with_a_copy(tmp_path, FlushPolicy(interval_messages=1))
        new = logs.swap(current, future)
        assert (new.store, new.log_end_offset, new.high_watermark, len(new.stored_batches())) == (
            logs.stores[1], 5, 5, 5)
        assert logs.future_store(TID, 0) is None and stored_state(logs.stores[0].db, TID, 0) is None
        await logs.close()
    asyncio.run(swap())
