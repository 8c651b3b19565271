"""Broker restarts as Kafka handles them (issue 33, docs/brokers.md "Restarts"): a new
incarnation fences the previous one in the registration's own batch, so leaderships move with
a bumped leader epoch; a restarting broker serves clients only once it has caught up with the
metadata log; a leader does not retry AlterPartition without backoff."""
from __future__ import annotations

import asyncio
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import grpc
import pytest
from confluent_kafka import Producer

from brokerd.config import LogConfig
from brokerd.isr import IsrManager
from brokerd.log_store import LogStore
from brokerd.partition import Partition
from brokerd.partition_log import PartitionLog
from clients import Consumer
from clients import Producer as ClientProducer
from clients.records import build_batch
from common.errors import ErrorCode, KafkaError
from metadata import records as R
from metadata.brokers import BrokerLifecycle, Heartbeat
from metadata.delta import MetadataDelta
from metadata.image import MetadataImage, PartitionRegistration
from metadata.records import NO_LEADER
from protos import broker_pb2 as bpb
from protos import broker_pb2_grpc
from protos import controller_pb2 as cpb
from tests.brokercluster import BrokerCluster, running_cluster
from tests.eventually import eventually

TOPIC = uuid.UUID(int=7)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _image() -> MetadataImage:
    """Brokers 1-3 unfenced; t-0 led by 1 with ISR [1, 2, 3], t-1 led by 1 alone."""
    d = MetadataDelta(MetadataImage.empty("cluster"))
    d.replay_batch([R.register_broker(b, uuid.UUID(int=b), 10 + b, fenced=False) for b in (1, 2, 3)], 14, 1)
    d.replay_batch([R.topic("t", TOPIC), R.partition(TOPIC, 0, [1, 2, 3]), R.partition(TOPIC, 1, [1, 2], isr=[1])],
                   15, 1)
    return d.apply()


def _replay(image: MetadataImage, records: list, offset: int) -> MetadataImage:
    d = MetadataDelta(image)
    d.replay_batch(records, offset, 1)
    return d.apply()


def test_a_new_incarnation_fences_the_previous_one_in_the_same_batch():
    """Killed and restarted before the controller's session check fenced it: the registration
    itself ends the old incarnation (Kafka's KIP-966 unclean-shutdown handling)."""
    clock = Clock()
    lifecycle = BrokerLifecycle(3.0, clock)
    image = _image()
    lifecycle.reset(image)
    clock.now += 3.5  # broker 1's session has expired; the session check has not run yet
    records, epoch = lifecycle.register(image, 1, uuid.uuid4(), "cluster", [], None, 20)
    assert epoch == 20
    after = _replay(image, records, 20)
    assert after.brokers[1].fenced and after.brokers[1].epoch == 20
    p0, p1 = (after.partition(TOPIC, i) for i in (0, 1))
    assert p0.leader == 2 and p0.isr == (2, 3) and p0.leader_epoch == 1  # moved, with a new epoch
    # broker 1 alone was in sync: it stays the last ISR member, without leading, until unfenced
    assert p1.leader == NO_LEADER and p1.isr == (1,) and p1.leader_epoch == 1
    # caught up, it is unfenced and leads t-1 again, at yet another epoch
    records, answer = lifecycle.heartbeat(after, Heartbeat(1, 20, 20))
    assert not answer.is_fenced
    back = _replay(after, records, 21)
    assert back.partition(TOPIC, 1).leader == 1 and back.partition(TOPIC, 1).leader_epoch == 2
    assert back.partition(TOPIC, 0).leader == 2


def test_a_registration_while_the_old_session_lives_is_refused_and_a_retry_is_answered_alike():
    """As Kafka does: the old incarnation's session bounds how long a restart waits."""
    clock = Clock()
    lifecycle = BrokerLifecycle(3.0, clock)
    image = _image()
    lifecycle.reset(image)
    with pytest.raises(KafkaError) as refused:
        lifecycle.register(image, 1, uuid.uuid4(), "cluster", [], None, 20)
    assert refused.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    # the same incarnation registering again (a retried request) writes nothing
    assert lifecycle.register(image, 1, uuid.UUID(int=1), "cluster", [], None, 20) == ([], 11)


# -- real processes: kill -9 and restart at once -----------------------------------------------

SESSION_S = 3.0  # running_cluster's broker.session.timeout.ms


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("restart"), {"replica.lag.time.max.ms": "2000"}) as c:
        yield c


def _metadata(port: int, topic: str) -> tuple[int, int, int] | None:
    """A Metadata v1 request for ``topic`` to the Kafka listener at ``port``: (brokers, the
    topic's error code, its partitions), or None when the connection is refused or dropped."""
    name = topic.encode()
    body = struct.pack(">ih", 1, len(name)) + name
    header = struct.pack(">hhih", 3, 1, 7, 5) + b"probe"
    try:
        with socket.create_connection(("127.0.0.1", port), 2) as s:
            s.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
            s.settimeout(5)
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            buf = s.recv(size, socket.MSG_WAITALL)
    except (OSError, struct.error):
        return None
    pos = 4  # the correlation id

    def take(fmt: str) -> int:
        nonlocal pos
        (v,) = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v

    def skip_string() -> None:
        nonlocal pos
        n = take(">h")
        pos += max(n, 0)

    brokers = take(">i")
    for _ in range(brokers):
        take(">i"), skip_string(), take(">i"), skip_string()  # node id, host, port, rack
    take(">i")  # controller id
    assert take(">i") == 1
    error = take(">h")
    skip_string()
    take(">b")  # is_internal
    return brokers, error, take(">i")


async def _epoch(c: BrokerCluster, broker: int) -> tuple[int, bool]:
    """The broker's registration epoch and whether it is fenced, as the controller has them."""
    async with c.controller() as client:
        r = await client.describe_cluster(cpb.DescribeClusterRequest())
    return next((b.epoch, b.fenced) for b in r.brokers if b.id == broker)


async def _new_incarnation_unfenced(c: BrokerCluster, broker: int, old_epoch: int, timeout: float = 60) -> None:
    async def up() -> bool:
        epoch, fenced = await _epoch(c, broker)
        return epoch > old_epoch and not fenced
    await eventually(up, timeout, interval=0.1, what=f"broker {broker}'s new incarnation unfenced")


def _grpc_metadata(stub: broker_pb2_grpc.BrokerStub, topic: str) -> tuple[int, int, int] | None:
    """The same over the broker's gRPC listener; None for an error (UNAVAILABLE while starting)."""
    try:
        r = stub.Metadata(bpb.MetadataRequest(topics=[topic]), timeout=2)
    except grpc.RpcError:
        return None
    return len(r.brokers), r.topics[0].error_code, len(r.topics[0].partitions)


def _timed_producer(c: BrokerCluster, topic: str, stop: threading.Event, acks: list[tuple[int, float]],
                    failed: list) -> threading.Thread:
    """An idempotent acks=all librdkafka producer on the Kafka listeners, writing until ``stop``;
    ``acks`` gets (partition, when) of every acknowledged record."""
    def delivered(err: Any, msg: Any) -> None:
        (failed.append(err) if err else acks.append((msg.partition(), time.monotonic())))

    def run() -> None:
        p = Producer({"bootstrap.servers": c.kafka_bootstrap_servers, "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 120000})
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, b"%08d" % i, b"%d" % i, on_delivery=delivered)
                i += 1
            except BufferError:
                p.poll(0.05)
                continue
            if i % 20 == 0:
                p.poll(0.01)
        p.flush(120)

    t = threading.Thread(target=run)
    t.start()
    return t


class _MetadataProbe:
    """Asks brokers' Kafka and gRPC listeners for a topic's metadata, over and over in a
    thread until ``stop``, keeping every answer (refused and failed requests are skipped)."""

    def __init__(self, c: BrokerCluster, brokers: list[int], topic: str) -> None:
        self.cluster, self.brokers, self.topic = c, brokers, topic
        self.answers: list[tuple[int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        channels = {b: grpc.insecure_channel(self.cluster.address(b)) for b in self.brokers}
        try:
            while not self._stop.is_set():
                for b, channel in channels.items():
                    self.answers.extend(a for a in (_metadata(self.cluster.kafka_ports[b], self.topic),
                                                    _grpc_metadata(broker_pb2_grpc.BrokerStub(channel), self.topic))
                                        if a is not None)
                time.sleep(0.02)
        finally:
            for channel in channels.values():
                channel.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)

    def assert_never_empty(self, partitions: int) -> None:
        """Every answer listed at least two brokers (a fenced broker is not listed, as in
        Kafka) and the topic with all its partitions."""
        assert self.answers, "no listener answered"
        empty = [a for a in self.answers if a[0] < 2 or a[1:] != (0, partitions)]
        assert not empty, f"{len(empty)} of {len(self.answers)} Metadata answers lacked brokers or the topic: {empty[:3]}"


def _longest_stall(acks: list[tuple[int, float]], partition: int, since: float) -> float:
    """The longest time ``partition`` acknowledged nothing, from ``since`` to its last ack."""
    times = [since] + sorted(t for p, t in acks if p == partition and t > since)
    return max(b - a for a, b in pairwise(times))


def test_a_broker_killed_and_restarted_at_once_serves_only_once_caught_up_and_leadership_moves(cluster):
    """kill -9 of a partition leader and a restart within a second, under a librdkafka producer:
    its listeners never answer Metadata without brokers or without the topic, no delivery
    fails, the partitions it led get a new leader epoch, and acks to them stop for no longer
    than the session timeout and a little."""
    asyncio.run(cluster.create_topic("restart", partitions=3, rf=3))
    acks: list[tuple[int, float]] = []
    failed: list = []
    stop = threading.Event()
    producing = _timed_producer(cluster, "restart", stop, acks, failed)
    victim = asyncio.run(cluster.describe_topic("restart")).partitions[0].leader
    probe = None
    try:
        asyncio.run(eventually(lambda: len(acks) >= 1000, 60, what="1000 acknowledged writes"))
        before = {p.partition: p.leader_epoch for p in asyncio.run(cluster.describe_topic("restart")).partitions
                  if p.leader == victim}
        old_epoch = asyncio.run(_epoch(cluster, victim))[0]
        cluster.kill(victim)
        killed_at = time.monotonic()
        probe = _MetadataProbe(cluster, [victim], "restart")
        cluster.start_broker(victim)
        asyncio.run(_new_incarnation_unfenced(cluster, victim, old_epoch))
        at_unfence = len(acks)
        asyncio.run(eventually(lambda: len(acks) >= at_unfence + 1000, 60, what="1000 more acknowledged writes"))
    finally:
        stop.set()
        producing.join(150)
        if probe is not None:
            probe.stop()
    assert not failed, failed[:3]
    probe.assert_never_empty(3)
    after = {p.partition: p for p in asyncio.run(cluster.describe_topic("restart")).partitions}
    stalls = {part: _longest_stall(acks, part, killed_at) for part in before}
    print(f"{len(acks)} acknowledged; longest stalls after the kill of broker {victim}: {stalls}; "
          f"{len(probe.answers)} Metadata answers")
    for part, epoch in before.items():
        assert after[part].leader_epoch > epoch, f"restart-{part} kept leader epoch {epoch} across the restart"
        assert stalls[part] < SESSION_S + 4, f"restart-{part} acknowledged nothing for {stalls[part]:.1f}s"


def test_sigstop_of_a_leader_and_kill_9_of_the_active_controller_under_librdkafka(cluster):
    """The other faults of issue 33's runs, under the same producer: a leader frozen past its
    session (fenced, its leaderships moved, then thawed and unfenced again) and the active
    controller killed. No delivery fails, no listener answers Metadata without brokers or the
    topic, and no partition stops acknowledging for longer than the session timeout and a
    little."""
    asyncio.run(cluster.create_topic("faults", partitions=3, rf=3))
    acks: list[tuple[int, float]] = []
    failed: list = []
    stop = threading.Event()
    producing = _timed_producer(cluster, "faults", stop, acks, failed)
    probe = _MetadataProbe(cluster, cluster.ids, "faults")
    try:
        asyncio.run(eventually(lambda: len(acks) >= 1000, 60, what="1000 acknowledged writes"))
        first = asyncio.run(cluster.describe_topic("faults")).partitions[0]
        frozen, started = first.leader, time.monotonic()
        cluster.signal(frozen, signal.SIGSTOP)
        try:
            async def moved() -> bool:
                p = (await cluster.describe_topic("faults")).partitions[0]
                return p.leader != frozen and p.leader_epoch > first.leader_epoch
            asyncio.run(eventually(moved, 20, what=f"faults-0 led by another broker than the frozen {frozen}"))
        finally:
            cluster.signal(frozen, signal.SIGCONT)
        asyncio.run(cluster.wait_unfenced([frozen], timeout=30))
        n = len(acks)
        asyncio.run(eventually(lambda: len(acks) >= n + 1000, 60, what="1000 more acknowledged writes"))

        async def active() -> int:
            async with cluster.controller() as c:
                return (await c.describe_quorum(cpb.DescribeQuorumRequest())).leader_id
        controller = asyncio.run(active())
        cluster.quorum.kill(controller)
        n = len(acks)
        asyncio.run(eventually(lambda: len(acks) >= n + 1000, 60, what="1000 acknowledged writes after the failover"))
        cluster.quorum.start_node(controller)
    finally:
        stop.set()
        producing.join(150)
        probe.stop()
    assert not failed, failed[:3]
    probe.assert_never_empty(3)
    stalls = {part: _longest_stall(acks, part, started) for part in range(3)}
    print(f"{len(acks)} acknowledged; longest stalls from the SIGSTOP of broker {frozen} on: {stalls}; "
          f"{len(probe.answers)} Metadata answers")
    for part, stalled in stalls.items():
        assert stalled < SESSION_S + 4, f"faults-{part} acknowledged nothing for {stalled:.1f}s"


def test_a_leader_that_lost_an_unflushed_suffix_follows_and_is_repaired_not_served(cluster):
    """A leader killed and restarted at once, having lost the tail of its log (as a power loss
    with log.flush.interval.messages unset can lose it; simulated by truncating its RocksDB
    data while it is down): leadership moves with a new leader epoch, so it comes back as a
    follower, gets the lost records from the new leader, and every acknowledged record is
    read back from it once it leads again."""
    async def go() -> None:
        await cluster.create_topic("suffix", partitions=1, rf=3)
        async with ClientProducer(cluster.bootstrap_servers, acks="all", linger_ms=2) as p:
            for i in range(300):
                await p.send("suffix", b"%d" % i)
            await p.flush()
        described = await cluster.describe_topic("suffix")
        topic_id, part = uuid.UUID(bytes=described.topic_id), described.partitions[0]
        victim, epoch = part.leader, part.leader_epoch

        async def log_ends() -> set[int]:
            return {r.log_end_offset for b in cluster.ids for r in (await cluster.describe_broker(b)).replicas
                    if r.topic == "suffix"}
        await eventually(lambda: _equal(log_ends(), {300}), 20, what="every replica of suffix-0 at offset 300")
        old_epoch = (await _epoch(cluster, victim))[0]
        cluster.kill(victim)
        store = LogStore(str(cluster.log_dir(victim)))
        log = PartitionLog(store, topic_id, 0)
        assert await log.truncate_to(120) <= 120
        await store.close()
        cluster.start_broker(victim)
        await _new_incarnation_unfenced(cluster, victim, old_epoch)
        after = (await cluster.describe_topic("suffix")).partitions[0]
        assert after.leader_epoch > epoch, "the restarted broker kept leading at the old leader epoch"
        await eventually(lambda: _equal(log_ends(), {300}), 30, what="the lost records back on the restarted broker")

        async def in_isr() -> bool:
            return victim in (await cluster.describe_topic("suffix")).partitions[0].isr
        await eventually(in_isr, 30, what="the restarted broker back in the ISR")
        async with cluster.controller() as c:
            r = await c.elect_leaders(cpb.ElectLeadersRequest(topics=[
                cpb.ElectLeadersRequest.TopicPartitions(name="suffix", partitions=[0])]))
            assert r.results[0].error_code in (0, cpb.ELECTION_NOT_NEEDED), r.results[0].error_message
        assert (await cluster.describe_topic("suffix")).partitions[0].leader == victim
        async with Consumer(cluster.address(victim), auto_offset_reset="earliest") as consumer:
            await consumer.subscribe("suffix")
            got: list[bytes] = []

            async def read_all() -> bool:
                got.extend(r.value for r in await consumer.poll(200))
                return len(got) >= 300
            await eventually(read_all, 30, interval=0, what="300 records from the restarted leader")
        assert got == [b"%d" % i for i in range(300)]
    asyncio.run(asyncio.wait_for(go(), 150))


async def _equal(value: Any, expected: Any) -> bool:
    return await value == expected


# -- AlterPartition retries --------------------------------------------------------------------

class _Follower:
    log_end_offset = 10


class _LeaderPartition:
    """What IsrManager reads of a partition this broker leads, whose follower 2 has caught up."""

    name, topic_id, index = "t-0", uuid.UUID(int=7), 0
    is_leader, leader_epoch, partition_epoch = True, 3, 4
    replicas, isr = (1, 2), (1,)
    followers = {2: _Follower()}

    def __init__(self) -> None:
        self.pending_isr: tuple[int, ...] | None = None

    def can_join_isr(self, replica: int) -> bool:
        return True

    def out_of_sync_replicas(self, lag_max_ms: int) -> list[int]:
        return []


class _RefusingController:
    def __init__(self) -> None:
        self.calls = 0

    async def alter_partition(self, request: Any, **kw: Any) -> cpb.AlterPartitionResponse:
        self.calls += 1
        return cpb.AlterPartitionResponse(error_code=cpb.INELIGIBLE_REPLICA, error_message="fenced")


def test_a_refused_alter_partition_is_retried_with_backoff_and_a_fenced_follower_not_proposed():
    """A follower fetching 200 times a second that the controller refuses (INELIGIBLE_REPLICA)
    is proposed again after 100 ms, 200 ms, 400 ms, ... (Kafka's retry backoff), not on every
    fetch; one the leader's metadata shows fenced is not proposed at all (KIP-841)."""
    async def go(eligible: bool) -> int:
        controller, p = _RefusingController(), _LeaderPartition()
        isr = IsrManager(controller, 1, lambda: 5, 30000, lambda: [p],  # type: ignore[arg-type]
                         eligible=lambda replica: eligible)
        loop = asyncio.get_running_loop()
        end = loop.time() + 1.0
        while loop.time() < end:
            isr.maybe_expand(p, 2)  # type: ignore[arg-type]
            await asyncio.sleep(0.005)
        await isr.stop()
        return controller.calls

    assert 3 <= asyncio.run(go(eligible=True)) <= 6
    assert asyncio.run(go(eligible=False)) == 0


def test_an_acks_all_write_whose_leadership_moved_during_the_append_is_answered_at_once(tmp_path):
    """A broker thawed after SIGSTOP appends the produce requests queued during the pause while
    the metadata replacing it arrives: a write whose leadership moved between its append and its
    wait for the ISR is answered NOT_LEADER_OR_FOLLOWER at once (the client retries on the new
    leader), not after the request's timeout (30 s for librdkafka)."""
    async def go() -> None:
        store = LogStore(str(tmp_path))
        p = Partition(1, "t", uuid.uuid4(), 0, PartitionLog(store, uuid.uuid4(), 0), LogConfig())
        p.update(PartitionRegistration((1, 2), (1, 2), 1, 0, 0))
        info = await p.append_as_leader(build_batch([(None, b"v", 0, ())]), -1)
        p.update(PartitionRegistration((1, 2), (2,), 2, 1, 1))  # leadership moved meanwhile
        with pytest.raises(KafkaError) as refused:
            await asyncio.wait_for(p.wait_for_replication(info.last_offset + 1, 30), 2)
        assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        await store.close()
    asyncio.run(go())
