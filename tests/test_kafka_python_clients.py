"""Real Kafka clients against the brokers' Kafka listener (brokerd/kafka/): kafka-python and
aiokafka create topics, produce idempotently with acks=all in every compression codec they
have here, consume in groups, commit and resume from the committed offsets; records cross
between those clients and our own gRPC Producer and Consumer unchanged; and a kafka-python
group consumer goes on, skipping nothing, after its group coordinator's broker is killed
with SIGKILL. One cluster of three brokers serves the whole module."""
from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as ATP
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as ANewTopic
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import KafkaError

from clients import Consumer, Producer
from tests.brokercluster import BrokerCluster, running_cluster
from tests.eventually import eventually
from tests.test_consumer_groups import GROUP_PROPS

#: (key, value, headers, timestamp) of a record; records are compared keyed by (partition, offset).
Rec = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]
Log = dict[tuple[int, int], Rec]
TS0 = 1_600_000_000_000  # explicit CreateTime timestamps, far from "now"
GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with running_cluster(tmp_path_factory.mktemp("kafka-clients"), GROUP_PROPS) as c:
        yield c


def run(coro: Coroutine[Any, Any, None], timeout: float = 90) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


def rec(i: int, who: str) -> Rec:
    headers = (("i", b"%d" % i), ("from", who.encode()), ("empty", b""))
    return b"key-%d" % i, b"value-%d-\x00\xff" % i, headers, TS0 + 1000 * i


def as_log(records: list[Any]) -> Log:
    """Consumed records of any of the three clients, keyed by (partition, offset); no repeats."""
    out = {(r.partition, r.offset): (r.key, r.value, tuple(tuple(h) for h in r.headers), r.timestamp)
           for r in records}
    assert len(out) == len(records), "a record was delivered twice"
    return out


async def collect(poll: Callable[[], list[Any] | Awaitable[list[Any]]], want: int, what: str,
                  timeout: float = 30) -> Log:
    got: list[Any] = []

    async def enough() -> bool:
        batch = poll()
        got.extend(await batch if inspect.isawaitable(batch) else batch)
        return len(got) >= want
    await eventually(enough, timeout, interval=0, what=what)
    return as_log(got)


def contiguous(log: Log) -> bool:
    """Every partition's offsets run 0, 1, 2, ... without a gap."""
    by_partition: dict[int, list[int]] = {}
    for p, o in log:
        by_partition.setdefault(p, []).append(o)
    return all(sorted(os) == list(range(len(os))) for os in by_partition.values())


def end_offsets(log: Log) -> dict[int, int]:
    ends: dict[int, int] = {}
    for p, o in log:
        ends[p] = max(ends.get(p, 0), o + 1)
    return ends


# -- kafka-python ---------------------------------------------------------------------------------

def kp_produce(bs: str, topic: str, codec: str | None, indexes: range) -> Log:
    p = KafkaProducer(bootstrap_servers=bs, acks="all", enable_idempotence=True, compression_type=codec, linger_ms=5)
    try:
        futures = [(i, p.send(topic, key=rec(i, "kp")[0], value=rec(i, "kp")[1], headers=list(rec(i, "kp")[2]),
                              timestamp_ms=rec(i, "kp")[3])) for i in indexes]
        p.flush(30)
        out: Log = {}
        for i, f in futures:
            md = f.get(30)
            assert md.timestamp == rec(i, "kp")[3]
            out[(md.partition, md.offset)] = rec(i, "kp")
        return out
    finally:
        p.close(10)


def kp_poll(c: KafkaConsumer) -> Callable[[], list[Any]]:
    return lambda: [r for rs in c.poll(timeout_ms=500).values() for r in rs]


def kp_consumer(bs: str, topic: str, group: str | None, **kw: Any) -> KafkaConsumer:
    return KafkaConsumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, **GROUP_TIMEOUTS, **kw)


def kp_admin_create(cluster: BrokerCluster, admin: KafkaAdminClient, topic: str) -> None:
    r = admin.create_topics([NewTopic(topic, 3, 3)])
    assert [(t["name"], t["error_code"], t["num_partitions"], t["replication_factor"]) for t in r["topics"]] == \
        [(topic, 0, 3, 3)]
    asyncio.run(cluster.wait_topic(topic, 3))
    [described] = admin.describe_topics([topic])
    assert sorted(len(p["replica_nodes"]) for p in described["partitions"]) == [3, 3, 3]


def kp_coordinator(bs: str, group: str) -> int:
    """FindCoordinator over the Kafka listener, by a new admin client (one caches the answer;
    and the admin client has no public call for it)."""
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=15000)
    try:
        return admin._manager.run(admin._find_coordinator_id, group)
    finally:
        admin.close()


def test_kafka_python_round_trip_commit_resume_and_admin(cluster: BrokerCluster) -> None:
    bs, topic, group = cluster.kafka_bootstrap_servers, "kp-round-trip", "kp-round-trip-group"
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=15000)
    try:
        kp_admin_create(cluster, admin, topic)
        codecs = ["gzip", "lz4", "zstd", None]  # snappy: test_kafka_python_snappy
        sent: Log = {}
        for n, codec in enumerate(codecs):
            sent |= kp_produce(bs, topic, codec, range(20 * n, 20 * n + 20))
        assert len(sent) == 20 * len(codecs) and contiguous(sent), sorted(sent)

        c = kp_consumer(bs, topic, group)
        try:
            got = asyncio.run(collect(kp_poll(c), len(sent), "kafka-python consumed everything"))
            assert got == sent
            c.commit()
            committed = admin.list_group_offsets(group)[group]
            assert {tp.partition: om.offset for tp, om in committed.items() if tp.topic == topic} == end_offsets(sent)
        finally:
            c.close()

        later = kp_produce(bs, topic, "gzip", range(1000, 1012))
        c = kp_consumer(bs, topic, group)
        try:
            assert asyncio.run(collect(kp_poll(c), len(later), "the restarted consumer resumed")) == later
            assert {"group_id": group, "protocol_type": "consumer", "group_state": "Stable"} in admin.list_groups()
            described = admin.describe_groups([group])[group]
            assert (described["group_state"], described["protocol_type"], len(described["members"])) == \
                ("Stable", "consumer", 1), described
            assert kp_coordinator(bs, group) in cluster.ids
        finally:
            c.close()
        info = admin.describe_cluster()
        assert {(b["broker_id"], b["port"]) for b in info["brokers"]} == set(cluster.kafka_ports.items())
        assert info["cluster_id"] and info["controller_id"] in cluster.ids
    finally:
        admin.close()


def test_kafka_python_snappy(cluster: BrokerCluster) -> None:
    """kafka-python frames snappy the xerial way (python-snappy, a dev dependency)."""
    topic = "kp-snappy"
    asyncio.run(cluster.create_topic(topic, partitions=3, rf=3))
    sent = kp_produce(cluster.kafka_bootstrap_servers, topic, "snappy", range(30))
    c = kp_consumer(cluster.kafka_bootstrap_servers, topic, None)
    try:
        assert asyncio.run(collect(kp_poll(c), len(sent), "snappy records consumed")) == sent
    finally:
        c.close()


# -- aiokafka -------------------------------------------------------------------------------------

async def aio_produce(bs: str, topic: str, codec: str | None, indexes: range) -> Log:
    p = AIOKafkaProducer(bootstrap_servers=bs, acks="all", enable_idempotence=True, compression_type=codec,
                         linger_ms=5)
    await p.start()
    try:
        futures = [(i, await p.send(topic, key=rec(i, "aio")[0], value=rec(i, "aio")[1],
                                    headers=list(rec(i, "aio")[2]), timestamp_ms=rec(i, "aio")[3])) for i in indexes]
        out: Log = {}
        for i, f in futures:
            md = await f  # not md.timestamp: aiokafka 0.14 gives every record of a batch the first one's
            out[(md.partition, md.offset)] = rec(i, "aio")
        return out
    finally:
        await p.stop()


def aio_consumer(bs: str, topic: str, group: str | None) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
                            enable_auto_commit=False, **GROUP_TIMEOUTS)


def aio_poll(c: AIOKafkaConsumer) -> Callable[[], Awaitable[list[Any]]]:
    async def poll() -> list[Any]:
        return [r for rs in (await c.getmany(timeout_ms=500)).values() for r in rs]
    return poll


def test_aiokafka_round_trip_commit_and_resume(cluster: BrokerCluster) -> None:
    bs, topic, group = cluster.kafka_bootstrap_servers, "aio-round-trip", "aio-round-trip-group"

    async def go() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bs)
        await admin.start()
        try:
            r = await admin.create_topics([ANewTopic(topic, 3, 3)])
            assert [(name, code) for name, code, *_ in r.topic_errors] == [(topic, 0)]
            await cluster.wait_topic(topic, 3)
            sent: Log = {}
            for n, codec in enumerate(["gzip", "snappy", "lz4", "zstd", None]):
                sent |= await aio_produce(bs, topic, codec, range(20 * n, 20 * n + 20))
            assert len(sent) == 100 and contiguous(sent), sorted(sent)

            c = aio_consumer(bs, topic, group)
            await c.start()
            try:
                assert await collect(aio_poll(c), len(sent), "aiokafka consumed everything") == sent
                await c.commit()
                ends = end_offsets(sent)
                assert {p: await c.committed(ATP(topic, p)) for p in range(3)} == ends
            finally:
                await c.stop()

            later = await aio_produce(bs, topic, "zstd", range(1000, 1012))
            c = aio_consumer(bs, topic, group)
            await c.start()
            try:
                assert await collect(aio_poll(c), len(later), "the restarted consumer resumed") == later
                assert (group, "consumer") in await admin.list_consumer_groups()
                [resp] = await admin.describe_consumer_groups([group])
                [g] = resp.groups
                assert (g[0], g[1], g[2], len(g[5])) == (0, group, "Stable", 1), g
            finally:
                await c.stop()
            info = await admin.describe_cluster()
            assert {(b["node_id"], b["port"]) for b in info["brokers"]} == set(cluster.kafka_ports.items())
        finally:
            await admin.close()
    run(go())


# -- our clients and theirs -----------------------------------------------------------------------

def test_our_producer_to_aiokafka_and_kafka_python_to_our_consumer(cluster: BrokerCluster) -> None:
    async def go() -> None:
        await cluster.create_topic("ours-to-aio", partitions=3, rf=3)
        await cluster.create_topic("kp-to-ours", partitions=3, rf=3)
        sent: Log = {}
        async with Producer(cluster.bootstrap_servers, linger_ms=5, compression_type="zstd") as p:
            futures = [(i, await p.send("ours-to-aio", rec(i, "ours")[1], rec(i, "ours")[0],
                                        headers=rec(i, "ours")[2], timestamp_ms=rec(i, "ours")[3])) for i in range(60)]
            for i, f in futures:
                md = await f
                sent[(md.partition, md.offset)] = rec(i, "ours")
        assert contiguous(sent)
        c = aio_consumer(cluster.kafka_bootstrap_servers, "ours-to-aio", None)
        await c.start()
        try:
            assert await collect(aio_poll(c), len(sent), "aiokafka read our producer's records") == sent
        finally:
            await c.stop()

        sent = kp_produce(cluster.kafka_bootstrap_servers, "kp-to-ours", "lz4", range(60))
        assert contiguous(sent)
        async with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest") as ours:
            await ours.subscribe("kp-to-ours")
            assert await collect(lambda: ours.poll(500), len(sent), "our consumer read kafka-python's") == sent
    run(go())


# -- a fault --------------------------------------------------------------------------------------

def test_kafka_python_group_goes_on_after_its_coordinator_is_killed(cluster: BrokerCluster) -> None:
    bs, topic, group = cluster.kafka_bootstrap_servers, "kp-fault", "kp-fault-group"
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=15000)
    c: KafkaConsumer | None = None
    victim: int | None = None
    try:
        kp_admin_create(cluster, admin, topic)
        sent = kp_produce(bs, topic, "lz4", range(300))
        c = kp_consumer(bs, topic, group, max_poll_records=25)
        delivered: list[tuple[int, int]] = []
        committed: dict[int, int] = {}   # what the consumer was told it committed, per partition
        early: list[tuple[int, int, int]] = []  # redeliveries below a successful commit
        commits_after_kill: list[dict[int, int]] = []
        failed_commits: list[str] = []

        def step() -> None:
            assert c is not None
            batch = c.poll(timeout_ms=500)
            for tp, records in batch.items():
                for r in records:
                    if (tp.partition, r.offset) in delivered and r.offset < committed.get(tp.partition, 0):
                        early.append((tp.partition, r.offset, committed[tp.partition]))
                    delivered.append((tp.partition, r.offset))
            offsets = {tp: OffsetAndMetadata(rs[-1].offset + 1, "", -1) for tp, rs in batch.items() if rs}
            if offsets:
                try:
                    c.commit(offsets)
                except KafkaError as e:  # a rebalance, or no coordinator yet: the records may come again
                    failed_commits.append(repr(e))
                    return
                done = {tp.partition: om.offset for tp, om in offsets.items()}
                committed.update(done)
                if victim is not None:
                    commits_after_kill.append(done)

        async def consume_until(enough: Callable[[], bool], timeout: float, what: str) -> None:
            await eventually(lambda: step() or enough(), timeout, interval=0, what=what)

        asyncio.run(consume_until(lambda: sum(committed.values()) >= 75, 30, "a few batches consumed and committed"))
        victim = kp_coordinator(bs, group)
        cluster.kill(victim)
        sent |= kp_produce(bs, topic, "lz4", range(300, 450))
        try:
            asyncio.run(consume_until(lambda: set(sent) <= set(delivered) and committed == end_offsets(sent), 60,
                                      "every record consumed and committed after the coordinator's death"))
        except AssertionError as e:
            missing: dict[int, list[int]] = {}
            for p, o in sorted(set(sent) - set(delivered)):
                missing.setdefault(p, []).append(o)
            raise AssertionError(f"{e}; partition: [first offset not consumed, how many] "
                                 f"{ {p: [os[0], len(os)] for p, os in missing.items()} }; committed {committed}; "
                                 f"the end offsets {end_offsets(sent)}") from None
        assert kp_coordinator(bs, group) != victim
        assert commits_after_kill, "no commit succeeded after the kill"
        assert not early, f"(partition, offset, committed) delivered again below a successful commit: {early}"
        after = admin.list_group_offsets(group)[group]
        assert {tp.partition: om.offset for tp, om in after.items()} == end_offsets(sent)
        print(f"{len(delivered) - len(set(delivered))} duplicates, 0 missing; failed commits: {failed_commits}")
    finally:
        if c is not None:
            c.close()
        admin.close()
        if victim is not None:
            cluster.start_broker(victim)
            asyncio.run(cluster.wait_unfenced([victim], timeout=60))


def test_kafka_python_reassigns_partitions_and_elects_leaders(cluster: BrokerCluster) -> None:
    """Kafka's AlterPartitionReassignments, ListPartitionReassignments and ElectLeaders from
    kafka-python's admin client, forwarded by the broker to the controller."""
    from kafka import TopicPartition as KTP
    from kafka.errors import InvalidReplicationAssignmentError

    asyncio.run(cluster.create_topic("kp-move", partitions=1, assignments=[[101, 102]]))
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers, request_timeout_ms=15000)
    try:
        bad = admin.alter_partition_reassignments({KTP("kp-move", 0): [102, 999]})
        assert bad == {KTP("kp-move", 0): InvalidReplicationAssignmentError}, bad
        assert [list(p.replicas) for p in asyncio.run(cluster.describe_topic("kp-move")).partitions] == [[101, 102]]
        admin.alter_partition_reassignments({KTP("kp-move", 0): [102, 103]})

        async def moved() -> bool:
            t = await cluster.describe_topic("kp-move")
            return list(t.partitions[0].replicas) == [102, 103] and sorted(t.partitions[0].isr) == [102, 103]
        run(eventually(moved, 30, what="kp-move-0 on brokers 102 and 103"))
        assert admin.list_partition_reassignments() == {}
        result = admin.elect_leaders(0, {"kp-move": [0]}, raise_errors=False)
        [[outcome]] = [r.partition_result for r in result.replica_election_results]
        assert (outcome.partition_id, outcome.error_code) == (0, 84), result  # ELECTION_NOT_NEEDED: 102 leads
    finally:
        admin.close()


def test_kafka_python_alter_configs_the_legacy_whole_set(cluster: BrokerCluster) -> None:
    """AlterConfigs (API 33), which kafka-python sends with ``incremental=False``: topic and
    broker configs; BROKER_LOGGER is refused as unsupported (issue 27)."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers, request_timeout_ms=15000)
    try:
        kp_admin_create(cluster, admin, "kp-configs")
        broker = str(cluster.ids[0])
        r = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-configs", configs={
            "retention.ms": "3600000", "message.timestamp.type": "LogAppendTime"}),
            ConfigResource(ConfigResourceType.BROKER, broker, configs={"log.retention.ms": "604800000"})],
            incremental=False)
        assert r == {"topic": {"kp-configs": "OK"}, "broker": {broker: "OK"}}
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp-configs"),
                                            ConfigResource(ConfigResourceType.BROKER, broker)])
        assert {k: (v["value"], v["config_source"]) for k, v in described["topic"]["kp-configs"].items()} == {
            "retention.ms": ("3600000", "DYNAMIC_TOPIC_CONFIG"),
            "message.timestamp.type": ("LogAppendTime", "DYNAMIC_TOPIC_CONFIG")}
        assert described["broker"][broker]["log.retention.ms"]["value"] == "604800000"  # the default: changes nothing
        assert described["broker"][broker]["log.retention.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG"
        refused = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER_LOGGER, broker, configs={
            "kafka": "DEBUG"})], incremental=False, raise_on_unknown=False)
        assert refused["broker_logger"][broker].startswith("[Error 42] InvalidRequestError: Unexpected resource "
                                                           "type BROKER_LOGGER")
    finally:
        admin.close()
