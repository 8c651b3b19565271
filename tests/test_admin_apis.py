"""Kafka's admin APIs that clients call (issue 27, item 2) with real clients against broker
processes: DeleteRecords (confluent-kafka's ``delete_records`` and ``kraft delete-records``),
replicated to followers and kept across a restart. One cluster of three brokers serves the
whole module."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.brokercluster import REPO, BrokerCluster, running_cluster
from tests.eventually import eventually
from tests.test_consumer_groups import GROUP_PROPS


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("admin-apis"), GROUP_PROPS) as c:
        yield c


def kraft(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def admin(cluster: BrokerCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap_servers})


def produce(cluster: BrokerCluster, topic: str, n: int, partition: int = 0, timestamps: list[int] | None = None
            ) -> None:
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "acks": "all", "linger.ms": 0})
    for i in range(n):
        p.produce(topic, b"v%d" % i, key=b"k%d" % i, partition=partition,
                  timestamp=timestamps[i] if timestamps else 0)
        p.flush(30)  # one batch per record, so a log start can fall between batches
    assert p.flush(30) == 0


async def replica_starts(cluster: BrokerCluster, topic: str, partition: int = 0) -> dict[int, int]:
    """Each live broker's log start offset of its replica of the partition."""
    out = {}
    for bid in cluster.ids:
        if cluster.procs[bid].poll() is None:
            for s in (await cluster.describe_broker(bid)).replicas:
                if s.topic == topic and s.partition == partition:
                    out[bid] = s.log_start_offset
    return out


def first_offset_read(cluster: BrokerCluster, topic: str, partition: int = 0, at: int = 0) -> int:
    """The offset of the first record a consumer positioned at ``at`` reads, with
    auto.offset.reset=earliest."""
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": f"probe-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, partition, at)])
        for _ in range(60):
            m = c.poll(0.5)
            if m is not None and not m.error():
                return m.offset()
        raise AssertionError(f"nothing read from {topic}-{partition} at {at}")
    finally:
        c.close()


# -- DeleteRecords ------------------------------------------------------------------------------------

def test_delete_records_moves_the_log_start_on_the_leader_and_its_followers(cluster):
    asyncio.run(cluster.create_topic("dr", partitions=1, rf=3))
    produce(cluster, "dr", 10)
    a = admin(cluster)
    done = a.delete_records([TopicPartition("dr", 0, 4)])
    assert [f.result(30).low_watermark for f in done.values()] == [4]
    # followers learn the new start from the leader's fetch responses and delete below it too
    async def followed() -> bool:
        return await replica_starts(cluster, "dr") == {b: 4 for b in cluster.ids}
    asyncio.run(eventually(followed, 20,
                           what="every replica of dr-0 starting at 4"))
    # a consumer below the start resets per auto.offset.reset
    assert first_offset_read(cluster, "dr", at=1) == 4
    # above the high watermark: Kafka's OFFSET_OUT_OF_RANGE; an older offset changes nothing
    with pytest.raises(KafkaException) as e:
        next(iter(a.delete_records([TopicPartition("dr", 0, 11)]).values())).result()
    assert e.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert next(iter(a.delete_records([TopicPartition("dr", 0, 2)]).values())).result(30).low_watermark == 4
    # -1: everything below the high watermark
    assert next(iter(a.delete_records([TopicPartition("dr", 0, -1)]).values())).result(30).low_watermark == 10


def test_delete_records_refuses_compacted_and_internal_topics(cluster):
    asyncio.run(cluster.create_topic("dr-compacted", rf=1, configs={"cleanup.policy": "compact"}))
    produce(cluster, "dr-compacted", 2)
    a = admin(cluster)
    for tp, code in ((TopicPartition("dr-compacted", 0, 1), KafkaError.POLICY_VIOLATION),
                     (TopicPartition("__consumer_offsets", 0, 0), KafkaError.TOPIC_EXCEPTION)):
        with pytest.raises(KafkaException) as e:
            next(iter(a.delete_records([tp]).values())).result(30)
        assert e.value.args[0].code() == code, (tp, e.value)


def test_delete_records_is_kept_across_a_restart_of_the_leader(cluster):
    """A single replica, so that nothing but its own log can tell it the start after the restart."""
    asyncio.run(cluster.create_topic("dr-restart", rf=1))
    produce(cluster, "dr-restart", 6)
    a = admin(cluster)
    assert next(iter(a.delete_records([TopicPartition("dr-restart", 0, 3)]).values())).result(30).low_watermark == 3
    leader = asyncio.run(cluster.describe_topic("dr-restart")).partitions[0].leader
    assert cluster.stop_broker(leader) == 0
    cluster.start_broker(leader)
    asyncio.run(cluster.wait_unfenced())
    asyncio.run(cluster.wait_topic("dr-restart", 1))
    low, high = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "wm"}
                         ).get_watermark_offsets(TopicPartition("dr-restart", 0), timeout=30)
    assert (low, high) == (3, 6)
    assert first_offset_read(cluster, "dr-restart") == 3


def test_kraft_delete_records_reads_kafka_delete_records_offset_file(cluster, tmp_path: Path):
    asyncio.run(cluster.create_topic("dr-cli", partitions=2, rf=2))
    produce(cluster, "dr-cli", 5, partition=0)
    produce(cluster, "dr-cli", 3, partition=1)
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"partitions": [{"topic": "dr-cli", "partition": 0, "offset": 2},
                                               {"topic": "dr-cli", "partition": 1, "offset": -1}], "version": 1}))
    boot = ["--bootstrap-server", cluster.bootstrap_servers]
    p = kraft("delete-records", *boot, "--offset-json-file", str(spec))
    assert p.returncode == 0, p.stderr
    assert p.stdout == ("Executing records delete operation\nRecords delete operation completed:\n"
                        "partition: dr-cli-0\tlow_watermark: 2\npartition: dr-cli-1\tlow_watermark: 3\n")
    spec.write_text(json.dumps({"partitions": [{"topic": "dr-cli", "partition": 0, "offset": 99}]}))
    p = kraft("delete-records", *boot, "--offset-json-file", str(spec))
    assert p.returncode == 1
    assert p.stderr.startswith("Error: OFFSET_OUT_OF_RANGE: Cannot increment the log start offset to 99")
    assert len(p.stderr.splitlines()) == 1
    spec.write_text("{not json")
    p = kraft("delete-records", *boot, "--offset-json-file", str(spec))
    assert p.returncode == 1 and p.stderr.startswith("Error: --offset-json-file") and len(p.stderr.splitlines()) == 1


# -- OffsetDelete -------------------------------------------------------------------------------------

def test_offset_delete_spares_the_topics_a_stable_group_consumes(cluster):
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError
    for t in ("od-a", "od-b"):
        asyncio.run(cluster.create_topic(t, rf=1))
        produce(cluster, t, 3)
    c: Consumer | None = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "od-group",
                                   "auto.offset.reset": "earliest", "enable.auto.commit": False})
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers)
    boot = ["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers, "--group", "od-group"]
    try:
        c.subscribe(["od-a"])
        got = 0
        while got < 3:
            m = c.poll(1)
            got += m is not None and not m.error()
        c.commit(asynchronous=False)  # od-a, which it consumes, and od-b, which it does not
        c.commit(offsets=[TopicPartition("od-b", 0, 2)], asynchronous=False)
        answer = kadmin.delete_group_offsets("od-group", [KTP("od-a", 0), KTP("od-b", 0)])
        assert answer == {KTP("od-a", 0): GroupSubscribedToTopicError, KTP("od-b", 0): NoError}
        left = kadmin.list_group_offsets("od-group")["od-group"]
        assert set(left) == {KTP("od-a", 0)} and left[KTP("od-a", 0)].offset == 3
        p = kraft(*boot, "--delete-offsets", "--topic", "od-a")
        assert p.returncode == 1 and p.stderr.splitlines() == [
            "Error: GROUP_SUBSCRIBED_TO_TOPIC: the offsets of od-a-0 were not deleted"]
        c.close()
        c = None
        # once the group is empty its offsets of any topic may go (tombstones in __consumer_offsets)
        p = kraft(*boot, "--delete-offsets", "--topic", "od-a:0")
        assert p.returncode == 0, p.stderr
        assert p.stdout == ("Request succeed for deleting offsets with topic od-a group od-group\n\n"
                            "TOPIC PARTITION STATUS\nod-a  0         Successful\n")
        assert kadmin.list_group_offsets("od-group")["od-group"] == {}
        with pytest.raises(GroupIdNotFoundError):
            kadmin.delete_group_offsets("od-nobody", [KTP("od-a", 0)])
    finally:
        if c is not None:
            c.close()
        kadmin.close()


# -- ListOffsets v7-v8 ---------------------------------------------------------------------------------

def test_list_offsets_max_timestamp_and_earliest_local(cluster):
    """KIP-734's -3: the first record with the largest timestamp (not the last offset); v8's
    -4 (earliest local) is the log start, as nothing is tiered here."""
    from confluent_kafka.admin import OffsetSpec
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.admin import OffsetSpec as KSpec
    asyncio.run(cluster.create_topic("lo-max", rf=1))
    produce(cluster, "lo-max", 5, timestamps=[1_000, 5_000, 3_000, 5_000, 2_000])
    tp = TopicPartition("lo-max", 0)
    a = admin(cluster)  # kept: a future of a client already collected never completes
    found = {name: next(iter(a.list_offsets({tp: spec}).values())).result(30)
             for name, spec in (("max", OffsetSpec.max_timestamp()), ("earliest", OffsetSpec.earliest()))}
    assert (found["max"].offset, found["max"].timestamp) == (1, 5_000)
    assert found["earliest"].offset == 0
    next(iter(a.delete_records([TopicPartition("lo-max", 0, 2)]).values())).result(30)
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers)
    try:
        got = kadmin.list_partition_offsets({KTP("lo-max", 0): KSpec.MAX_TIMESTAMP})[KTP("lo-max", 0)]
        assert (got.offset, got.timestamp) == (3, 5_000)  # offset 1 is below the log start now
        assert kadmin.list_partition_offsets({KTP("lo-max", 0): KSpec.EARLIEST_LOCAL})[KTP("lo-max", 0)].offset == 2
    finally:
        kadmin.close()


# -- DescribeProducers ---------------------------------------------------------------------------------

def test_describe_producers_on_the_leader_and_not_on_a_follower(cluster):
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NotLeaderForPartitionError
    asyncio.run(cluster.create_topic("dp", rf=2))
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "enable.idempotence": True, "linger.ms": 0})
    for i in range(3):
        p.produce("dp", b"%d" % i, partition=0)
        p.flush(30)
    tx = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "transactional.id": "dp-tx", "linger.ms": 0})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce("dp", b"open", partition=0)  # at offset 3, in a transaction left open
    assert tx.flush(30) == 0
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers)
    try:
        state = kadmin.describe_producers([KTP("dp", 0)])[KTP("dp", 0)]
        by_start = sorted((x.current_transaction_start_offset, x.last_sequence, x.producer_epoch)
                          for x in state.active_producers)
        assert by_start == [(-1, 2, 0), (3, 0, 0)], state
        assert all(x.last_timestamp > 0 and x.coordinator_epoch == -1 for x in state.active_producers)
        desc = asyncio.run(cluster.describe_topic("dp")).partitions[0]
        follower = next(r for r in desc.replicas if r != desc.leader)
        with pytest.raises(NotLeaderForPartitionError):
            kadmin.describe_producers([KTP("dp", 0)], broker_id=follower)
    finally:
        tx.abort_transaction(30)
        kadmin.close()


# -- DescribeLogDirs -----------------------------------------------------------------------------------

def test_describe_log_dirs_lists_each_replica_with_its_size(cluster):
    from kafka.admin import KafkaAdminClient
    asyncio.run(cluster.create_topic("ld", partitions=2, rf=2))
    produce(cluster, "ld", 4, partition=1)
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers)
    try:
        answers = {a["broker"]: a["log_dirs"] for a in kadmin.describe_log_dirs()}
    finally:
        kadmin.close()
    assert set(answers) == set(cluster.ids)
    hosts: dict[int, list[int]] = {}
    for bid, dirs in answers.items():
        assert [d["log_dir"] for d in dirs] == [str(cluster.log_dir(bid))]
        d = dirs[0]
        assert d["error_code"] == 0 and 0 < d["usable_bytes"] <= d["total_bytes"]
        for t in d["topics"]:
            if t["name"] == "ld":
                for x in t["partitions"]:
                    hosts.setdefault(x["partition_index"], []).append(bid)
                    assert x["is_future_key"] is False and x["offset_lag"] == 0
                    assert (x["partition_size"] > 0) == (x["partition_index"] == 1)
    assert sorted(hosts) == [0, 1] and all(len(v) == 2 for v in hosts.values())
