"""Client semantics where Kafka's are the specification (issue 25): what a group member
commits when it stops or loses partitions, and how our client's API behaves where Kafka's
does. One broker process (offsets topic of one replica) keeps it quick."""
from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid

import pytest

from clients import ClientError, Consumer, KafkaTimeoutError, Producer
from clients.cluster_view import ClusterView
from protos import broker_pb2 as bpb
from protos import controller_pb2 as cpb
from tests.brokercluster import REPO, BrokerCluster, _stub, running_cluster
from tests.eventually import eventually

PROPS = {"offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1",
         "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}
FAST_GROUP = dict(session_timeout_ms=3000, heartbeat_interval_ms=300, fetch_max_wait_ms=100)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("semantics"), PROPS, brokers=1) as c:
        yield c


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def produce(c: BrokerCluster, topic: str, n: int) -> None:
    async with Producer(c.bootstrap_servers, linger_ms=5) as p:
        futures = [await p.send(topic, b"%d" % i, key=b"%d" % i) for i in range(n)]
        for f in futures:
            await f


def console_consumer(c: BrokerCluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clients.console", "console-consumer", "--bootstrap-server",
                           c.bootstrap_servers, *args], cwd=REPO, capture_output=True, text=True, timeout=90)


def test_a_console_consumer_group_run_again_reads_what_the_first_run_did_not_print(cluster):
    """Issue 25 item 1: the first run commits what it printed and, for the partitions it printed
    nothing from, where it had reset them to (the beginning), so the second run, without
    --from-beginning, reads the other 45 records instead of starting those at latest."""
    async def go():
        await cluster.create_topic("fifty", partitions=5, rf=1)
        await produce(cluster, "fifty", 50)
    run(go())
    first = console_consumer(cluster, "--topic", "fifty", "--group", "g1", "--from-beginning", "--max-messages", "5",
                             "--timeout-ms", "15000")
    assert "Processed a total of 5 messages" in first.stderr, first.stderr
    second = console_consumer(cluster, "--topic", "fifty", "--group", "g1", "--max-messages", "45",
                              "--timeout-ms", "5000")
    assert "Processed a total of 45 messages" in second.stderr, second.stderr
    assert sorted(int(v) for v in first.stdout.split() + second.stdout.split()) == list(range(50))


def test_a_consumer_commits_every_assigned_partitions_position_on_close_and_on_revocation(cluster):
    """Kafka commits every assigned partition's position (auto commit) on close and before
    giving partitions up, including partitions it only reset (here to latest) and read nothing
    from."""
    async def go():
        await cluster.create_topic("positions", partitions=4, rf=1)
        await produce(cluster, "positions", 40)
        tps = [("positions", p) for p in range(4)]
        async with Consumer(cluster.bootstrap_servers, group_id="closers", auto_offset_reset="latest",
                            auto_commit_interval_ms=60000, **FAST_GROUP) as probe:
            ends = {}
            for tp in tps:
                await probe.assign([tp])
                probe.seek_to_end()
                await probe.poll(0)
                ends[tp] = probe.position(*tp)
        assert sum(ends.values()) == 40

        # close: nothing was read, every partition was reset to its end, and that is committed
        async with Consumer(cluster.bootstrap_servers, group_id="closers", auto_offset_reset="latest",
                            auto_commit_interval_ms=60000, **FAST_GROUP) as c:
            await c.subscribe(["positions"])
            await eventually(lambda: _polled(c, 4, tps), 20, what="four partitions assigned and their positions reset")
        async with Consumer(cluster.bootstrap_servers, group_id="closers", enable_auto_commit=False) as reader:
            assert {tp: await reader.committed(*tp) for tp in tps} == ends

        # revocation: a second member joins, the first gives two partitions up and commits them first
        settings = dict(group_id="revokers", auto_offset_reset="latest", auto_commit_interval_ms=60000, **FAST_GROUP)
        async with Consumer(cluster.bootstrap_servers, **settings) as a:
            await a.subscribe(["positions"])
            await eventually(lambda: _polled(a, 4, tps), 20, what="the first member owning every partition")
            async with Consumer(cluster.bootstrap_servers, **{**settings, "enable_auto_commit": False}) as b:
                await b.subscribe(["positions"])
                polling = [asyncio.create_task(_keep_polling(m)) for m in (a, b)]  # each member in its own task
                try:
                    await eventually(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 30,
                                     what="the partitions split between two members")
                finally:
                    for t in polling:
                        t.cancel()
                    await asyncio.gather(*polling, return_exceptions=True)
                for tp in b.assignment():  # given up by a, which committed where it was
                    assert await b.committed(*tp) == ends[tp]
    run(go())


async def _polled(c: Consumer, n: int, tps: list[tuple[str, int]]) -> bool:
    await c.poll(50)
    return len(c.assignment()) == n and all(c.position(*tp) is not None for tp in tps)


async def _keep_polling(c: Consumer) -> None:
    while True:
        await c.poll(50)


def _handles_sigterm(pid: int) -> bool:
    """The console tool has installed its signal handlers (Python itself catches SIGINT from
    the start, but SIGTERM only once the tool asks): a caught-signals mask with SIGTERM."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def test_waiting_for_a_missing_topic_ends_at_timeout_ms(cluster):
    """Issue 25 item 4: --timeout-ms bounds the wait for the topic's metadata (it waited 60 s)."""
    for group in ([], ["--group", "waiters"]):
        began = time.monotonic()
        out = console_consumer(cluster, "--topic", "missing", "--timeout-ms", "2000", *group)
        took = time.monotonic() - began
        assert took < 12, (group, took, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert lines[-1] == "Processed a total of 0 messages" and len(lines) == 2, out.stderr
        assert lines[0].startswith("Error processing message, terminating consumer process: "), out.stderr


def test_ctrl_c_ends_the_wait_for_a_missing_topic(cluster):
    """Issue 25 item 4: Ctrl-C ends the wait for metadata at once (two were ignored for 60 s)."""
    proc = subprocess.Popen([sys.executable, "-m", "clients.console", "console-consumer", "--bootstrap-server",
                             cluster.bootstrap_servers, "--topic", "missing"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run(eventually(lambda: _handles_sigterm(proc.pid), 30, what="the consumer's signal handlers"))
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < 10 and proc.returncode == 0, (took, err)
    assert err.strip().splitlines() == ["Processed a total of 0 messages"]


def test_a_kafka_listener_or_a_controller_given_as_bootstrap_server_is_named(cluster):
    """Issue 25 item 4: gRPC to a Kafka listener only sees the connection closed, and a
    controller answers "Method not found!"; the tools say which listener to use instead of
    waiting for the topic's metadata and calling the topic missing."""
    kafka = f"127.0.0.1:{next(iter(cluster.kafka_ports.values()))}"
    began = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "clients.console", "console-consumer", "--bootstrap-server", kafka,
                          "--topic", "anything"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - began < 20
    assert out.returncode == 1, out.stderr
    assert out.stderr.splitlines()[0] == (
        f"Error processing message, terminating consumer process: {kafka} is a broker's Kafka-protocol listener "
        f"(KAFKA in its listeners); this client talks gRPC: use the broker's PLAINTEXT (or SSL) listener, or a "
        f"Kafka client for this one"), out.stderr

    out = subprocess.run([sys.executable, "-m", "clients.console", "console-producer", "--bootstrap-server", kafka,
                          "--topic", "anything"], input="x\n", cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "is a broker's Kafka-protocol listener" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr

    controller = cluster.quorum.bootstrap.split(",")[0]
    out = subprocess.run([sys.executable, "-m", "clients.console", "console-consumer", "--bootstrap-server",
                          controller, "--topic", "anything", "--group", "g"], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1 and f"{controller} does not serve the broker API" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_a_member_rejoins_when_its_topic_gains_partitions_or_a_topic_matching_its_pattern_appears(cluster):
    """Issue 25 item 7, Kafka's metadata-change rebalance: new partitions of a subscribed topic
    and new topics matching subscribe(pattern=...) are assigned without a member joining or
    leaving (noticed at the next metadata refresh, every metadata.max.age.ms)."""
    async def go():
        await cluster.create_topic("growing", partitions=2, rf=1)
        settings = dict(auto_offset_reset="earliest", metadata_max_age_ms=300, **FAST_GROUP)
        async with Consumer(cluster.bootstrap_servers, group_id="growers", **settings) as c:
            await c.subscribe(["growing"])
            await eventually(lambda: _polled(c, 2, []), 20, what="the topic's two partitions assigned")
            async with cluster.controller() as admin:
                r = await admin.create_partitions(cpb.CreatePartitionsRequest(
                    topics=[cpb.CreatePartitionsRequest.Topic(name="growing", count=3)]))
                assert r.topics[0].error_code == 0, r.topics[0].error_message
            await eventually(lambda: _polled(c, 3, []), 20, what="the new partition assigned")

        async with Consumer(cluster.bootstrap_servers, group_id="matchers", **settings) as m:
            await m.subscribe(pattern=r"match-.*")
            await m.poll(50)
            assert m.assignment() == []
            await cluster.create_topic("match-a", partitions=1, rf=1)
            await cluster.create_topic("unmatched-match-b", partitions=1, rf=1)
            await eventually(lambda: _polled(m, 1, [("match-a", 0)]), 20, what="the matching topic assigned")
            await cluster.create_topic("match-b", partitions=2, rf=1)
            await produce(cluster, "match-b", 4)
            seen: list[int] = []

            async def read_all() -> bool:
                seen.extend(int(r.value) for r in await m.poll(100))
                return (sorted(m.assignment()) == [("match-a", 0), ("match-b", 0), ("match-b", 1)]
                        and sorted(seen) == [0, 1, 2, 3])
            await eventually(read_all, 20, what="the second matching topic assigned and its records read")
    run(go())


def test_subscribe_to_nothing_unsubscribes_and_blank_topics_are_refused(cluster):
    """Kafka: subscribe([]) is unsubscribe() (partitions given up, the group left), and a
    blank topic name is refused before anything is sent."""
    async def go():
        await cluster.create_topic("left", partitions=2, rf=1)
        async with Consumer(cluster.bootstrap_servers, group_id="leavers", **FAST_GROUP) as c:
            for bad in ([""], ["left", "  "], [None]):
                with pytest.raises(ClientError, match="cannot contain null or empty topic"):
                    await c.subscribe(bad)
            revoked: list = []
            await c.subscribe(["left"], on_revoked=revoked.extend)
            await eventually(lambda: _polled(c, 2, []), 20, what="both partitions assigned")
            await c.subscribe([])
            assert c.assignment() == [] and sorted(revoked) == [("left", 0), ("left", 1)]
            assert await c.poll(100) == []
            async with _stub(cluster.address(cluster.ids[0])) as s:
                async def empty() -> bool:
                    r = await s.DescribeGroups(bpb.DescribeGroupsRequest(groups=["leavers"]), timeout=5)
                    return r.groups[0].state == "Empty" and not r.groups[0].members
                await eventually(empty, 10, what="the group left at once")
    run(go())


def test_commit_async_commits_in_order():
    """Kafka: commits complete in the order they were made, so an earlier commit that is slow
    (retried while the coordinator moved) never overwrites a later one."""
    class SlowFirstCoordinator:
        def __init__(self) -> None:
            self.landed: list[dict] = []

        async def commit(self, offsets, managed):
            await asyncio.sleep(0.3 if offsets[("t", 0)] == 1 else 0)  # the first one asked for is slow
            self.landed.append(offsets)

    async def go():
        c = Consumer("127.0.0.1:1", group_id="ordered")
        c.group = SlowFirstCoordinator()
        tasks = [c.commit_async({("t", 0): n}) for n in (1, 2, 3)]
        await c.commit({("t", 0): 4})
        await asyncio.gather(*tasks)
        assert [o[("t", 0)] for o in c.group.landed] == [1, 2, 3, 4]
    run(go())


def test_client_metadata_never_goes_back_to_an_older_leader_epoch():
    """Kafka's Metadata keeps a partition's newer leader epoch when a broker that is behind
    answers with an older one; a recreated topic (another topic id) starts over."""
    first, second = uuid.uuid4().bytes, uuid.uuid4().bytes

    def answer(topic_id: bytes, leader: int, epoch: int) -> bpb.MetadataResponse:
        return bpb.MetadataResponse(brokers=[bpb.BrokerEndpoint(node_id=n, host="127.0.0.1", port=n) for n in (1, 2)],
                                    topics=[bpb.TopicMetadata(name="t", topic_id=topic_id, partitions=[
                                        bpb.PartitionMetadata(partition=0, leader=leader, leader_epoch=epoch)])])

    class Brokers:
        """Stands in for Connections: each Metadata request gets the next answer."""
        def __init__(self, answers: list[bpb.MetadataResponse]) -> None:
            self.answers = answers

        def stub(self, address: str):
            return self

        async def Metadata(self, request, timeout):
            return self.answers.pop(0)

    async def go():
        answers = [answer(first, 2, 5), answer(first, 1, 4), answer(first, 3, 6), answer(second, 1, 0)]
        view = ClusterView(["127.0.0.1:1"], Brokers(answers))  # type: ignore[arg-type]
        seen = []
        for _ in range(4):
            await view.refresh()
            seen.append((view.leader_for("t", 0), view.partition("t", 0).leader_epoch))
        assert seen == [(2, 5), (2, 5), (3, 6), (1, 0)]
    run(go())


class Stamp:
    """A producer interceptor: adds a header, records every acknowledgement."""

    def __init__(self) -> None:
        self.acked: list[tuple[int, int, BaseException | None]] = []
        self.closed = False

    def on_send(self, record):
        return record._replace(headers=record.headers + (("stamped", b"yes"),))

    def on_acknowledgement(self, metadata, exception):
        self.acked.append((metadata.partition, metadata.offset, exception))

    def close(self):
        self.closed = True


class Broken:
    """An interceptor that fails: logged and skipped, as in Kafka."""

    def on_send(self, record):
        raise RuntimeError("boom")

    def on_consume(self, records):
        raise RuntimeError("boom")


class LastPartition:
    """A custom partitioner."""

    def partition(self, topic, key, key_bytes, value, value_bytes, cluster):
        return cluster.partition_count(topic) - 1


class Counting:
    """A consumer interceptor."""

    def __init__(self) -> None:
        self.consumed = 0
        self.commits: list[dict] = []

    def on_consume(self, records):
        self.consumed += len(records)
        return records

    def on_commit(self, offsets):
        self.commits.append(offsets)


def test_serializers_interceptors_and_a_partitioner_are_used_as_kafkas(cluster):
    """Kafka's extension points: key/value serializers and deserializers, producer and
    consumer interceptors (one that raises is skipped), and a custom partitioner."""
    async def go():
        await cluster.create_topic("extended", partitions=3, rf=1)
        stamp = Stamp()
        async with Producer(cluster.bootstrap_servers, key_serializer=lambda topic, k: k.encode(),
                            value_serializer=lambda topic, v: json.dumps(v).encode(), partitioner=LastPartition(),
                            interceptors=[Broken(), stamp]) as p:
            sent = [await (await p.send("extended", {"n": n}, key=f"k{n}")) for n in range(3)]
            with pytest.raises(ClientError, match="Error serializing value for topic extended"):
                await p.send("extended", object())
            with pytest.raises(ClientError, match="Error serializing key"):
                await p.send("extended", {"n": 9}, key=b"not a str")
        assert [md.partition for md in sent] == [2, 2, 2]
        assert stamp.acked[:3] == [(2, md.offset, None) for md in sent]
        assert [type(e).__name__ for _, _, e in stamp.acked[3:]] == ["SerializationError"] * 2
        assert stamp.closed

        class Wild:
            def partition(self, *args):
                return 7
        async with Producer(cluster.bootstrap_servers, partitioner=Wild()) as p:
            with pytest.raises(ClientError, match=r"Invalid partition given with record: 7 is not in the range \[0...3\]"):
                await p.send("extended", b"x")

        counting = Counting()
        async with Consumer(cluster.bootstrap_servers, group_id="extenders", auto_offset_reset="earliest",
                            key_deserializer=lambda topic, b: b.decode(),
                            value_deserializer=lambda topic, b: json.loads(b),
                            interceptors=[Broken(), counting]) as c:
            await c.assign([("extended", 2)])
            records = await eventually(lambda: c.poll(200), 20, what="the three records")
            assert [(r.key, r.value) for r in records] == [(f"k{n}", {"n": n}) for n in range(3)]
            assert all(("stamped", b"yes") in r.headers for r in records)
            assert counting.consumed == 3
            await c.commit()
            assert counting.commits == [{("extended", 2): 3}]
    run(go())


def test_a_record_that_does_not_deserialize_stops_the_consumer_at_it(cluster):
    """Kafka's RecordDeserializationException: the records before it are returned, then every
    poll raises at the bad record until the application seeks past it."""
    async def go():
        await cluster.create_topic("poisoned", partitions=1, rf=1)
        async with Producer(cluster.bootstrap_servers) as p:
            for v in (b"1", b"two", b"3"):
                await p.send_and_wait("poisoned", v)
        async with Consumer(cluster.bootstrap_servers, auto_offset_reset="earliest",
                            value_deserializer=lambda topic, b: int(b)) as c:
            await c.assign([("poisoned", 0)])
            first = await eventually(lambda: c.poll(200), 20, what="the record before the bad one")
            assert [r.value for r in first] == [1]
            for _ in range(2):
                with pytest.raises(ClientError, match="Error deserializing value for partition poisoned-0 at "
                                                      "offset 1. If needed, please seek past the record"):
                    await c.poll(200)
            assert c.position("poisoned", 0) == 1
            c.seek("poisoned", 0, 2)
            rest = await eventually(lambda: c.poll(200), 20, what="the record after the bad one")
            assert [r.value for r in rest] == [3]
    run(go())


def test_delivery_timeout_expires_batches_in_flight_and_close_is_bounded(cluster):
    """KIP-91: a batch in flight to a broker that does not answer (SIGSTOP) fails when
    delivery.timeout.ms passes, not when its request times out; close(timeout) fails what is
    unanswered then ("Producer is closed forcefully."), and the consumer's close(timeout)
    gives up its final commit and leave in time."""
    async def go():
        await cluster.create_topic("stalled", partitions=1, rf=1)
        bid = cluster.ids[0]
        async with Consumer(cluster.bootstrap_servers, group_id="stallers", **FAST_GROUP) as c:
            await c.subscribe(["stalled"])
            await eventually(lambda: _polled(c, 1, [("stalled", 0)]), 20, what="the partition assigned")
            p = await Producer(cluster.bootstrap_servers, request_timeout_ms=3000, delivery_timeout_ms=1500,
                               linger_ms=0).start()
            await p.send_and_wait("stalled", b"before")
            cluster.signal(bid, signal.SIGSTOP)
            try:
                began = time.monotonic()
                with pytest.raises(KafkaTimeoutError, match=r"Expiring 1 record\(s\) for stalled-0:"):
                    await p.send_and_wait("stalled", b"in flight")
                assert time.monotonic() - began < 3  # its request would time out after 3 + 5 s
                pending = await p.send("stalled", b"left at close")
                began = time.monotonic()
                await p.close(timeout_ms=300)
                assert time.monotonic() - began < 2
                with pytest.raises(ClientError, match="Producer is closed forcefully."):
                    await pending
                began = time.monotonic()
                await c.close(timeout_ms=500)
                assert time.monotonic() - began < 2.5
            finally:
                cluster.signal(bid, signal.SIGCONT)
        await cluster.wait_unfenced()
    run(go())
