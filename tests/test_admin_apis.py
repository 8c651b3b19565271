"""Kafka's admin APIs that clients call (issue 27, item 2) with real clients against broker
processes: DeleteRecords (confluent-kafka's ``delete_records`` and ``kraft delete-records``),
replicated to followers and kept across a restart; DescribeConfigs' synonyms. One cluster of
three brokers serves the whole module."""
from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from protos import controller_pb2 as cpb
from tests.brokercluster import REPO, BrokerCluster, running_cluster
from tests.eventually import eventually
from tests.test_consumer_groups import GROUP_PROPS


#: A broker key in every broker's properties file: DescribeConfigs' STATIC_BROKER_CONFIG.
STATIC = {"log.retention.ms": "259200000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("admin-apis"), {**GROUP_PROPS, **STATIC}) as c:
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


def test_delete_records_waits_for_every_live_follower(cluster):
    """Kafka's DelayedDeleteRecords: the answer comes once every replica on a live broker has
    moved its log start, with the smallest as the low watermark; a follower that cannot (here
    stopped, still registered) makes it REQUEST_TIMED_OUT after the request's timeout."""
    asyncio.run(cluster.create_topic("dr-wait", partitions=1, rf=3))
    produce(cluster, "dr-wait", 6)
    desc = asyncio.run(cluster.describe_topic("dr-wait")).partitions[0]
    follower = next(r for r in desc.replicas if r != desc.leader)
    a = admin(cluster)
    cluster.signal(follower, signal.SIGSTOP)
    try:
        with pytest.raises(KafkaException) as e:
            next(iter(a.delete_records([TopicPartition("dr-wait", 0, 3)], operation_timeout=1).values())).result(30)
        assert e.value.args[0].code() == KafkaError.REQUEST_TIMED_OUT
    finally:
        cluster.signal(follower, signal.SIGCONT)
    assert next(iter(a.delete_records([TopicPartition("dr-wait", 0, 5)]).values())).result(30).low_watermark == 5
    assert asyncio.run(replica_starts(cluster, "dr-wait")) == {b: 5 for b in cluster.ids}  # already, not eventually


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


# -- DescribeConfigs synonyms (KIP-226) -----------------------------------------------------------------

def test_describe_configs_synonyms_list_where_each_value_comes_from(cluster):
    """A topic key's synonyms: the topic's value, then its broker key's (the broker's dynamic
    config, the cluster default, the properties file), then Kafka's default under the broker's
    name, in the order a Kafka 3.x broker lists them; a broker key's likewise."""
    from confluent_kafka.admin import ConfigResource, ConfigSource
    from kafka.admin import ConfigResource as KResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    a = admin(cluster)
    asyncio.run(cluster.create_topic("syn", rf=1, configs={"retention.ms": "3600000"}))
    broker = str(cluster.ids[0])

    def alter(name: str, value: str | None) -> None:
        """log.retention.ms of one broker, or cluster-wide when ``name`` is "" (None: deleted)."""
        async def go() -> None:
            async with cluster.controller() as c:
                r = await c.incremental_alter_configs(cpb.IncrementalAlterConfigsRequest(resources=[
                    cpb.AlterConfigsResource(resource_type=cpb.BROKER, resource_name=name, configs=[
                        cpb.AlterableConfig(name="log.retention.ms", value=value or "", op=(
                            cpb.AlterableConfig.SET if value else cpb.AlterableConfig.DELETE))])]))
            assert [x.error_code for x in r.resources] == [0], r
        asyncio.run(go())
    alter("", "172800000")
    alter(broker, "86400000")
    kadmin = KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap_servers)
    try:
        def described(kind: ConfigResourceType, name: str) -> dict:
            return kadmin.describe_configs([KResource(kind, name)], include_synonyms=True,
                                           config_filter="all")[kind.name.lower()][name]

        def chain(entry: dict) -> list[tuple[str, str, str]]:
            return [(x["name"], x["value"], x["source"]) for x in entry["synonyms"]]
        tail = [("log.retention.ms", "259200000", "STATIC_BROKER_CONFIG"),
                ("log.retention.hours", "168", "DEFAULT_CONFIG")]
        wanted = [("retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"),
                  ("log.retention.ms", "172800000", "DYNAMIC_DEFAULT_BROKER_CONFIG"), *tail]
        # the answering broker learns the cluster default from its metadata log
        asyncio.run(eventually(lambda: chain(described(ConfigResourceType.TOPIC, "syn")["retention.ms"]) in (
            wanted, wanted[:1] + [("log.retention.ms", "86400000", "DYNAMIC_BROKER_CONFIG")] + wanted[1:]),
            20, what="retention.ms's synonyms with the cluster default"))
        mine = described(ConfigResourceType.BROKER, broker)["log.retention.ms"]
        assert (mine["value"], mine["config_source"]) == ("86400000", "DYNAMIC_BROKER_CONFIG")
        assert chain(mine) == [("log.retention.ms", "86400000", "DYNAMIC_BROKER_CONFIG"),
                               ("log.retention.ms", "172800000", "DYNAMIC_DEFAULT_BROKER_CONFIG"), *tail]

        assert chain(kadmin.describe_configs([KResource(ConfigResourceType.TOPIC, "syn")])["topic"]["syn"][
            "retention.ms"]) == []  # not asked
        # confluent-kafka (librdkafka asks for synonyms) keeps one per name: a dict, the last source of each
        topic = ConfigResource("TOPIC", "syn")
        got = a.describe_configs([topic])[topic].result(30)
        assert (got["retention.ms"].value, got["retention.ms"].source) == (
            "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        assert list(got["retention.ms"].synonyms) == ["retention.ms", "log.retention.ms", "log.retention.hours"]
        hours = got["retention.ms"].synonyms["log.retention.hours"]
        assert (hours.value, hours.source) == ("168", ConfigSource.DEFAULT_CONFIG.value)
        assert (got["max.message.bytes"].value, got["max.message.bytes"].source) == (
            "1048588", ConfigSource.DEFAULT_CONFIG.value)
        assert list(got["max.message.bytes"].synonyms) == ["message.max.bytes"]
        assert got["flush.ms"].synonyms == {}  # not a key the broker reads: no broker synonym
        # a key set nowhere but in the properties file reads it
        alter(broker, None)
        alter("", None)
        asyncio.run(eventually(lambda: [described(ConfigResourceType.BROKER, broker)["log.retention.ms"][k]
                                        for k in ("value", "config_source")] == ["259200000", "STATIC_BROKER_CONFIG"],
                               20, what="log.retention.ms read from the properties file"))
    finally:
        kadmin.close()
