"""Follower fetching (KIP-392, docs/brokers.md "Follower fetching"): three brokers in racks a,
b, b with the RackAwareReplicaSelector, replicating over Kafka's protocol
(replica.fetch.protocol=kafka). A librdkafka consumer with client.rack=b reads a partition led
in rack a from a rack-b follower (the brokers' own bytes-out counters say which), and when that
follower is killed goes back to the leader and reads the rest; the requests' rules (who serves
what, up to which offset) checked one by one over gRPC; the followers' own fetches reach the
leader's Kafka listener, not its gRPC one."""
from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Awaitable, Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from clients.records import batches
from common.errors import ErrorCode
from common.server_keys import RACK_AWARE_REPLICA_SELECTOR
from protos import broker_pb2 as bpb
from tests.brokercluster import BrokerCluster, _stub, running_cluster
from tests.eventually import eventually
from tests.kvcluster import consecutive_ports

LEADER, RACKS = 101, {101: "a", 102: "b", 103: "b"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    first = consecutive_ports(3)
    nodes = {bid: {"broker.rack": rack, "prometheus.listener": f"127.0.0.1:{first + i}"}
             for i, (bid, rack) in enumerate(RACKS.items())}
    props = {"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR, "replica.lag.time.max.ms": "2000",
             "replica.fetch.protocol": "kafka"}
    with running_cluster(tmp_path_factory.mktemp("racks"), props, nodes) as c:
        yield c


def metric(c: BrokerCluster, bid: int, name: str, **labels: str) -> float:
    """The sum of broker ``bid``'s samples of ``name`` that have ``labels`` (0 if it is down)."""
    try:
        with urllib.request.urlopen(f"http://{c.node_props[bid]['prometheus.listener']}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def bytes_out(c: BrokerCluster, bid: int, topic: str) -> float:
    """Bytes consumers fetched of ``topic`` from broker ``bid``."""
    return metric(c, bid, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)


def produce(c: BrokerCluster, topic: str, values: range) -> None:
    p = Producer({"bootstrap.servers": c.kafka_bootstrap_servers, "acks": "all", "linger.ms": 5})
    for i in values:
        p.produce(topic, b"%d" % i)
    assert p.flush(30) == 0


def read_until(cons: Consumer, got: set[int], n: int, timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        m = cons.poll(0.2)
        if m is not None and not m.error():
            got.add(int(m.value()))
    assert len(got) == n, f"{len(got)} of {n} records within {timeout:.0f}s"


def test_a_consumer_reads_from_a_follower_in_its_rack_and_back_from_the_leader_when_it_dies(cluster):
    asyncio.run(cluster.create_topic("racked", assignments=[[LEADER, 102, 103]]))
    produce(cluster, "racked", range(200))
    cons = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "racked-reader",
                     "client.rack": "b", "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                     "topic.metadata.refresh.interval.ms": 1000})
    follower = None
    try:
        cons.assign([TopicPartition("racked", 0, OFFSET_BEGINNING)])
        got: set[int] = set()
        read_until(cons, got, 200)
        served = {bid: bytes_out(cluster, bid, "racked") for bid in RACKS}
        assert served[LEADER] == 0, f"the leader in rack a served the rack-b consumer: {served}"
        follower = next(bid for bid in (102, 103) if served[bid] > 0)

        fetches = "kafka_network_requestmetrics_total_time_seconds_count"
        before = metric(cluster, LEADER, fetches, request="Fetch")
        cluster.kill(follower)
        produce(cluster, "racked", range(200, 400))
        read_until(cons, got, 400)
        assert metric(cluster, LEADER, fetches, request="Fetch") > before, "the consumer never came back to the leader"
    finally:
        cons.close()
        if follower is not None:
            cluster.start_broker(follower)
            asyncio.run(cluster.wait_unfenced())


def test_who_serves_a_consumer_and_up_to_where(cluster):
    """Over gRPC: the leader points a rack-b fetch at a rack-b follower with no records; a
    follower serves a fetch that names a rack, up to the high watermark, and answers
    OFFSET_OUT_OF_RANGE past its log end; a fetch naming no rack is the leader's alone."""
    asyncio.run(cluster.create_topic("placed", assignments=[[LEADER, 102, 103]]))
    produce(cluster, "placed", range(10))

    def fetch(offset: int, rack: str | None) -> bpb.FetchRequest:
        r = bpb.FetchRequest(replica_id=-1, max_wait_ms=0, topics=[bpb.FetchTopic(name="placed", partitions=[
            bpb.FetchPartition(partition=0, fetch_offset=offset)])])
        if rack is not None:
            r.rack_id = rack
        return r

    async def go() -> None:
        async with _stub(cluster.address(LEADER)) as s:
            async def pointed() -> bpb.FetchPartitionResponse | None:
                a = (await s.Fetch(fetch(0, "b"))).topics[0].partitions[0]
                return a if a.preferred_read_replica in (102, 103) else None
            a = await eventually(pointed, 20, what="the leader to name a rack-b follower")
            assert (a.error_code, a.records, a.high_watermark) == (0, b"", 10)
            same_rack = (await s.Fetch(fetch(0, "a"))).topics[0].partitions[0]
            assert same_rack.preferred_read_replica == -1 and same_rack.records
        async with _stub(cluster.address(a.preferred_read_replica)) as s:
            async def caught_up() -> bpb.FetchPartitionResponse | None:
                a = (await s.Fetch(fetch(0, "b"))).topics[0].partitions[0]
                return a if a.error_code or a.high_watermark == 10 else None
            served = await eventually(caught_up, 20, what="the follower to learn the high watermark")
            assert (served.error_code, served.preferred_read_replica) == (0, -1) and served.records
            past = (await s.Fetch(fetch(11, "b"))).topics[0].partitions[0]
            assert past.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            leader_only = (await s.Fetch(fetch(0, None))).topics[0].partitions[0]
            assert leader_only.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    asyncio.run(asyncio.wait_for(go(), 60))


def test_our_consumer_with_a_client_rack_reads_from_the_follower_its_leader_names(cluster):
    from clients import Consumer as OurConsumer

    asyncio.run(cluster.create_topic("ours", assignments=[[LEADER, 102, 103]]))
    produce(cluster, "ours", range(50))

    async def go() -> None:
        async with OurConsumer(cluster.bootstrap_servers, client_rack="b", fetch_max_wait_ms=100) as c:
            await c.assign([("ours", 0)])
            c.seek_to_beginning(("ours", 0))
            got: list[int] = []
            while len(got) < 50:
                got += [int(r.value) for r in await c.poll(500)]
            assert sorted(got) == list(range(50))
    asyncio.run(asyncio.wait_for(go(), 60))
    served = {bid: bytes_out(cluster, bid, "ours") for bid in RACKS}
    assert served[LEADER] == 0 and served[102] + served[103] > 0, served


def test_followers_replicate_over_the_leaders_kafka_listener(cluster):
    """replica.fetch.protocol=kafka (this module's brokers): a new partition's followers ask the leader's
    Kafka listener where their epoch ends (OffsetsForLeaderEpoch) and fetch there as replicas
    (Fetch with their broker ids), in a fetch session; none of it goes to the leader's gRPC
    listener, and every replica ends with the leader's batches byte for byte."""
    count = "kafka_network_requestmetrics_total_time_seconds_count"

    def counts() -> tuple[float, float, float]:
        return (metric(cluster, LEADER, count, request="Fetch", listener="KAFKA"),
                metric(cluster, LEADER, count, request="OffsetForLeaderEpoch", listener="KAFKA"),
                metric(cluster, LEADER, count, request="Fetch", listener="PLAINTEXT")
                + metric(cluster, LEADER, count, request="OffsetsForLeaderEpoch", listener="PLAINTEXT"))

    kafka_fetches, kafka_epochs, grpc_calls = counts()
    asyncio.run(cluster.create_topic("replicated", assignments=[[LEADER, 102, 103]]))
    produce(cluster, "replicated", range(300))  # acks=all: both followers fetched every batch

    after = counts()
    assert after[0] > kafka_fetches and after[1] >= kafka_epochs + 2, (kafka_fetches, kafka_epochs, after)
    assert after[2] == grpc_calls, "followers replicated over the leader's gRPC listener"
    sessions = metric(cluster, LEADER, "kafka_server_fetchsessioncache_numincrementalfetchsessions")
    assert sessions >= 2, f"{sessions} fetch sessions on the leader: each follower should hold one"

    async def stored(bid: int) -> bytes:
        """The stored batches broker ``bid`` serves (a follower: a fetch naming a rack)."""
        async with _stub(cluster.address(bid)) as stub:
            r = await stub.Fetch(bpb.FetchRequest(replica_id=-1, max_bytes=1 << 20, topics=[bpb.FetchTopic(
                name="replicated", partitions=[bpb.FetchPartition(partition=0, fetch_offset=0)])],
                **({} if bid == LEADER else {"rack_id": RACKS[bid]})))
        return r.topics[0].partitions[0].records

    leaders = asyncio.run(stored(LEADER))
    assert len(batches(leaders)) > 0 and sum(b.record_count for b in batches(leaders)) == 300
    for bid in (102, 103):  # a follower serves up to the high watermark it learned in its next fetch
        asyncio.run(eventually(lambda b=bid: _same(stored(b), leaders), 20,
                               what=f"broker {bid} to serve the leader's batches byte for byte"))


async def _same(got: Awaitable[bytes], want: bytes) -> bool:
    return await got == want
