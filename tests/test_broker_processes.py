"""Brokers as operators run them: three controller processes and three `python -m brokerd.main`
processes on loopback, killed, stopped and frozen with real signals. Short timeouts keep the
file quick: broker session 3 s, heartbeats every 300 ms, replica.lag.time.max.ms 1 s."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import grpc
import pytest

from clients import Consumer, KafkaTimeoutError, Producer
from common.errors import ErrorCode, KafkaError
from clients.compression import Codec
from clients.records import batch_crc, batches, build_batch
from protos import broker_pb2 as bpb
from protos import controller_pb2 as cpb
from raft.storage import format_storage
from tests.brokercluster import REPO, BrokerCluster, _stub, running_cluster
from tests.eventually import eventually
from tests.kvcluster import consecutive_ports
from tests.logs import assert_no_tracebacks

LAG_MS = 1000
#: A caught-up follower's fetch waits at the leader up to replica.fetch.wait.max.ms (500 by default),
#: and the leader counts it caught up from that fetch's arrival (Kafka's lastCaughtUpTimeMs), so a
#: follower stopped just before its next fetch leaves the ISR LAG_MS after that arrival: up to
#: FETCH_WAIT_MS sooner than LAG_MS after the stop.
FETCH_WAIT_MS = 500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # auto.create.topics.enable=false: these tests check what clients see of a topic that does not exist
    props = {"replica.lag.time.max.ms": str(LAG_MS), "log.retention.check.interval.ms": "300",
             "log.cleaner.backoff.ms": "300", "auto.create.topics.enable": "false"}
    with running_cluster(tmp_path_factory.mktemp("brokers"), props) as c:
        yield c


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def consume_all(bootstrap: str, topic: str, expected: int | None = None, idle_ms: int = 2500):
    """Every record of ``topic`` from the beginning, until ``expected`` or nothing new for a while."""
    out = []
    async with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=200) as c:
        await c.subscribe(topic)
        idle = time.monotonic()
        while time.monotonic() - idle < idle_ms / 1000 and (expected is None or len(out) < expected):
            got = await c.poll(200)
            if got:
                out.extend(got)
                idle = time.monotonic()
    return out


async def leader_of(c: BrokerCluster, topic: str, partition: int = 0) -> tuple[int, int, list[int]]:
    t = await c.describe_topic(topic)
    p = t.partitions[partition]
    return p.leader, p.leader_epoch, list(p.isr)


def produce_request(topic: str, batch, acks=1, partition=0, timeout_ms=5000) -> bpb.ProduceRequest:
    return bpb.ProduceRequest(acks=acks, timeout_ms=timeout_ms, topics=[bpb.ProduceTopicData(
        name=topic, partitions=[bpb.ProducePartitionData(partition=partition, batch=batch)])])


def one_batch(*values: bytes):
    return build_batch([(None, v, int(time.time() * 1000), ()) for v in values])


# -- produce and consume ----------------------------------------------------------------------

def test_produce_and_consume_with_each_acks(cluster):
    async def go():
        await cluster.create_topic("acks", partitions=3, rf=3)
        sent = {}
        for acks in ("all", 1, 0):
            async with Producer(cluster.bootstrap_servers, acks=acks, linger_ms=2) as p:
                futs = [await p.send("acks", f"{acks}-{i}".encode(), key=f"k{i % 7}".encode()) for i in range(300)]
                await p.flush()
                mds = [await f for f in futs]
            assert all(m.offset >= 0 for m in mds) if acks != 0 else all(m.offset == -1 for m in mds)
            sent[acks] = mds
        records = await consume_all(cluster.bootstrap_servers, "acks", expected=900)
        values = sorted(r.value for r in records)
        assert values == sorted(f"{a}-{i}".encode() for a in ("all", 1, 0) for i in range(300))
        # keys go where Kafka's default partitioner sends them; offsets answer where records are
        from clients.partitioner import partition_for_key
        for r in records:
            assert r.partition == partition_for_key(r.key, 3)
        by_offset = {(r.partition, r.offset): r.value for r in records}
        for acks in ("all", 1):
            for i, m in enumerate(sent[acks]):
                assert by_offset[(m.partition, m.offset)] == f"{acks}-{i}".encode()
        # per partition, offsets are dense and in send order
        for part in range(3):
            offsets = [r.offset for r in records if r.partition == part]
            assert offsets == list(range(len(offsets)))
    run(go())


def test_console_producer_and_consumer(cluster):
    run(cluster.create_topic("console", partitions=1, rf=3))
    cli = [sys.executable, "-m", "clients.console"]
    p = subprocess.run(cli + ["console-producer", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "console",
                              "--key-separator", ":", "--acks", "all"],
                       input=b"a:one\nb:two\nc:three\n", capture_output=True, cwd=REPO, timeout=60)
    assert p.returncode == 0, p.stderr
    c = subprocess.run(cli + ["console-consumer", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "console",
                              "--from-beginning", "--max-messages", "3", "--property", "print.key=true",
                              "--property", "key.separator=="], capture_output=True, cwd=REPO, timeout=60)
    assert c.returncode == 0 and c.stdout == b"a=one\nb=two\nc=three\n"
    assert c.stderr.decode().strip().endswith("Processed a total of 3 messages")
    c = subprocess.run(cli + ["console-consumer", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "console",
                              "--partition", "0", "--offset", "1", "--timeout-ms", "1500"],
                       capture_output=True, cwd=REPO, timeout=60)
    assert c.stdout == b"two\nthree\n" and "TimeoutException" in c.stderr.decode()
    bad = subprocess.run(cli + ["console-producer", "--bootstrap-server", cluster.bootstrap_servers, "--topic",
                                "console", "--key-separator", ":"], input=b"no separator here\n",
                         capture_output=True, cwd=REPO, timeout=60)
    assert bad.returncode == 1
    assert bad.stderr.decode().strip() == "Error: No key separator found on line number 1: 'no separator here'"
    unknown = subprocess.run(cli + ["console-producer", "--bootstrap-server", cluster.bootstrap_servers, "--topic",
                                    "nope", "--max-block-ms", "800"], input=b"x\n", capture_output=True, cwd=REPO,
                             timeout=60)
    assert unknown.returncode == 1
    lines = unknown.stderr.decode().strip().splitlines()
    assert lines == ["Error when sending message to topic nope with key: null, value: 1 bytes with error: "
                     "Topic nope not present in metadata after 800 ms."]


# -- bad input ----------------------------------------------------------------------------------

def test_bad_input_gets_clear_errors(cluster):
    async def go():
        await cluster.create_topic("small", partitions=1, rf=3, configs={"max.message.bytes": "2000"})
        await cluster.create_topic("needs2", partitions=1, rf=1, configs={"min.insync.replicas": "2"})
        leader, epoch, _ = await leader_of(cluster, "small")
        follower = next(b for b in cluster.ids if b != leader)
        async with _stub(cluster.address(leader)) as s:
            async def answer(req):
                return (await s.Produce(req)).topics[0].partitions[0]
            for acks in (2, -2, 5):
                a = await answer(produce_request("small", one_batch(b"x"), acks=acks))
                assert a.error_code == ErrorCode.INVALID_REQUIRED_ACKS and a.base_offset == -1
            a = await answer(produce_request("small", one_batch(b"y" * 3000)))
            assert a.error_code == ErrorCode.RECORD_TOO_LARGE
            assert "exceeds the maximum configured value of 2000." in a.error_message
            a = await answer(produce_request("no-such-topic", one_batch(b"x")))
            assert a.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            a = await answer(produce_request("small", one_batch(b"x"), partition=7))
            assert a.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            a = await answer(produce_request("small", one_batch(b"x"), partition=-1))
            assert a.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            corrupt = one_batch(b"x", b"y")
            corrupt.crc ^= 0xFF
            a = await answer(produce_request("small", corrupt))
            assert a.error_code == ErrorCode.CORRUPT_MESSAGE
            lying = one_batch(b"x")
            lying.record_count = 5
            a = await answer(produce_request("small", lying))
            assert a.error_code == ErrorCode.INVALID_RECORD
            missing = bpb.ProduceRequest(acks=1, topics=[bpb.ProduceTopicData(
                name="small", partitions=[bpb.ProducePartitionData(partition=0)])])
            a = await answer(missing)
            assert a.error_code == ErrorCode.INVALID_REQUEST
            # fetches with a stale or future leader epoch are fenced
            for e, code in ((epoch - 1, ErrorCode.FENCED_LEADER_EPOCH), (epoch + 5, ErrorCode.UNKNOWN_LEADER_EPOCH)):
                r = await s.Fetch(bpb.FetchRequest(replica_id=-1, topics=[bpb.FetchTopic(
                    name="small", partitions=[bpb.FetchPartition(partition=0, fetch_offset=0, current_leader_epoch=e)])]))
                assert r.topics[0].partitions[0].error_code == code
            # a follower that is not a replica is refused
            r = await s.Fetch(bpb.FetchRequest(replica_id=999, topics=[bpb.FetchTopic(
                name="small", partitions=[bpb.FetchPartition(partition=0, fetch_offset=0)])]))
            assert r.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # bytes that are no request at all: a gRPC error, and the broker lives on
        async with grpc.aio.insecure_channel(cluster.address(leader)) as ch:
            call = ch.unary_unary("/kraft.broker.Broker/Produce", request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await call(b"\xff\xff\xff\xff garbage", timeout=5)
            assert e.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT,
                                      grpc.StatusCode.UNKNOWN)
        async with _stub(cluster.address(follower)) as s:
            a = (await s.Produce(produce_request("small", one_batch(b"x")))).topics[0].partitions[0]
            assert a.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert "Leader not local for partition small-0 on broker" in a.error_message
            call = s.ProduceNoAck()
            await call.write(produce_request("small", one_batch(b"x"), acks=0))
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await call.done_writing()
                await call
            assert e.value.details().startswith("NOT_LEADER_OR_FOLLOWER")
        lone, _, _ = await leader_of(cluster, "needs2")
        async with _stub(cluster.address(lone)) as s:
            a = (await s.Produce(produce_request("needs2", one_batch(b"x"), acks=-1))).topics[0].partitions[0]
            assert a.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
            assert a.error_message == (f"The size of the current ISR Set({lone}) is insufficient to satisfy the "
                                       f"min.isr requirement of 2 for partition needs2-0")
            a = (await s.Produce(produce_request("needs2", one_batch(b"x"), acks=1))).topics[0].partitions[0]
            assert a.error_code == 0
        # the client: Kafka's metadata wait message, and the broker's errors as exceptions
        async with Producer(cluster.bootstrap_servers, max_block_ms=700) as p:
            with pytest.raises(KafkaTimeoutError) as e:
                await p.send("missing-topic", b"x")
            assert str(e.value) == "Topic missing-topic not present in metadata after 700 ms."
            with pytest.raises(KafkaTimeoutError) as e:
                await p.send("small", b"x", partition=4)
            # Kafka's two messages: which one depends on whether the deadline passes during a wait
            assert str(e.value) in ("Partition 4 of topic small with partition count 1 is not present in metadata "
                                    "after 700 ms.", "Topic small not present in metadata after 700 ms.")
        async with Producer(cluster.bootstrap_servers, retries=0) as p:
            with pytest.raises(KafkaError) as e:
                await (await p.send("small", b"z" * 2500))
            assert e.value.code == ErrorCode.RECORD_TOO_LARGE
            with pytest.raises(KafkaError) as e:
                await (await p.send("needs2", b"x"))
            assert e.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert all(cluster.procs[b].poll() is None for b in cluster.ids)
    run(go())


# -- replication ----------------------------------------------------------------------------------

def test_a_lagging_follower_leaves_the_isr_and_comes_back(cluster):
    """SIGSTOP a follower for longer than replica.lag.time.max.ms but less than the session
    timeout: the leader (not the controller's fencing) shrinks the ISR, then expands it."""
    async def go():
        await cluster.create_topic("lag", partitions=1, rf=3)
        leader, _, isr = await leader_of(cluster, "lag")
        victim = next(b for b in isr if b != leader)
        async with Producer(cluster.bootstrap_servers, acks=1, linger_ms=1) as p, cluster.controller() as cc:
            await cc.describe_cluster(cpb.DescribeClusterRequest())  # find the active controller first
            cluster.signal(victim, signal.SIGSTOP)
            try:
                stopped = time.monotonic()
                seen = None
                while time.monotonic() - stopped < 2.7 and seen is None:
                    await p.send_and_wait("lag", b"while stopped")
                    t = (await cc.describe_topics(cpb.DescribeTopicsRequest(names=["lag"]))).topics[0]
                    brokers = (await cc.describe_cluster(cpb.DescribeClusterRequest())).brokers
                    fenced = next(b for b in brokers if b.id == victim).fenced
                    if victim not in t.partitions[0].isr:
                        seen = (time.monotonic() - stopped, fenced)
                    await asyncio.sleep(0.05)
            finally:
                cluster.signal(victim, signal.SIGCONT)
            assert seen is not None, "the ISR did not shrink while the follower was stopped"
            assert not seen[1], f"the follower was fenced before the ISR shrank ({seen[0]:.1f}s)"
            assert seen[0] >= (LAG_MS - FETCH_WAIT_MS) / 1000, f"the ISR shrank {seen[0]:.2f}s after the stop"
            await p.send_and_wait("lag", b"after")
        await eventually(lambda: _in_isr(cluster, "lag", victim), 15, what="the follower to rejoin the ISR")
    run(go())


async def _in_isr(c: BrokerCluster, topic: str, broker: int) -> bool:
    return broker in (await leader_of(c, topic))[2]


def test_kill_9_of_the_leader_loses_no_acknowledged_write(cluster):
    """Produce with acks=all (min.insync.replicas=2) while the partition leader is killed with
    SIGKILL: every acknowledged record is read back exactly once, in order per partition. The
    killed broker restarts from its persisted metadata offset, truncates what was never
    committed and rejoins the ISR."""
    async def go():
        await cluster.create_topic("durable", partitions=2, rf=3, configs={"min.insync.replicas": "2"})
        victim, _, _ = await leader_of(cluster, "durable", 0)
        acked: list[tuple[int, int, int]] = []  # (seq, partition, offset)
        sent = 0
        async with Producer(cluster.bootstrap_servers, acks="all", retries=0, linger_ms=1,
                            request_timeout_ms=4000, max_block_ms=10000) as p:
            pending = []
            start = time.monotonic()
            killed_at = None
            killed_seq = 0
            while time.monotonic() - start < 9:
                for _ in range(20):
                    pending.append((sent, await p.send("durable", b"%d" % sent, key=b"%d" % (sent % 10))))
                    sent += 1
                await asyncio.sleep(0.01)
                if killed_at is None and time.monotonic() - start > 1.5:
                    cluster.kill(victim)
                    killed_at = time.monotonic()
                    killed_seq = sent
                done = [x for x in pending if x[1].done()]
                pending = [x for x in pending if not x[1].done()]
                for seq, f in done:
                    if f.exception() is None:
                        acked.append((seq, f.result().partition, f.result().offset))
            await p.flush()
            for seq, f in pending:
                if f.exception() is None:
                    acked.append((seq, f.result().partition, f.result().offset))
        new_leader, _, isr = await leader_of(cluster, "durable", 0)
        assert new_leader != victim and victim not in isr
        assert len(acked) > 100 and any(seq > killed_seq for seq, _, _ in acked), "nothing acknowledged after the kill"

        records = await consume_all(cluster.bootstrap_servers, "durable")
        seqs = [int(r.value) for r in records]
        assert len(seqs) == len(set(seqs)), "a record was read twice"
        got = {int(r.value): (r.partition, r.offset) for r in records}
        for seq, part, off in acked:
            assert got.get(seq) == (part, off), f"acknowledged record {seq} at {part}:{off} is missing or moved"
        for part in (0, 1):
            in_part = [int(r.value) for r in sorted(records, key=lambda r: r.offset) if r.partition == part]
            assert in_part == sorted(in_part), "records of one partition are out of order"

        # the killed broker comes back from its persisted metadata position, converges and rejoins
        cluster.start_broker(victim)
        await cluster.wait_unfenced([victim])
        d = await cluster.describe_broker(victim)
        assert d.resumed_from_offset > 1 and d.first_metadata_fetch_offset == d.resumed_from_offset + 1
        await eventually(lambda: _in_isr(cluster, "durable", victim), 20, what="the restarted broker to rejoin the ISR")
        async with Producer(cluster.bootstrap_servers, acks="all") as p:
            await p.send_and_wait("durable", b"-1", partition=0)
        async def converged():
            ends = set()
            for b in cluster.ids:
                for r in (await cluster.describe_broker(b)).replicas:
                    if r.topic == "durable" and r.partition == 0:
                        ends.add(r.log_end_offset)
            return len(ends) == 1
        await eventually(converged, 15, what="the replicas of durable-0 to have the same log end")
    run(go(), timeout=150)


def test_a_fenced_leader_stops_accepting_writes(cluster):
    """Freeze the leader past the session timeout: the controller fences it and elects another
    leader; once thawed, the old leader refuses writes (NOT_LEADER_OR_FOLLOWER), and the
    acks=all write it took while stale is never acknowledged."""
    async def go():
        await cluster.create_topic("fenced", partitions=1, rf=3)
        old, epoch, _ = await leader_of(cluster, "fenced")
        cluster.signal(old, signal.SIGSTOP)
        try:
            async def moved():
                leader, new_epoch, _ = await leader_of(cluster, "fenced")
                return leader != old and new_epoch > epoch
            await eventually(moved, 15, what="a new leader")
        finally:
            cluster.signal(old, signal.SIGCONT)
        async with _stub(cluster.address(old)) as s:
            stale = asyncio.ensure_future(s.Produce(produce_request("fenced", one_batch(b"stale"), acks=-1,
                                                                    timeout_ms=3000)))
            async def refused():
                a = (await s.Produce(produce_request("fenced", one_batch(b"x"), acks=1))).topics[0].partitions[0]
                return a.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            await eventually(refused, 10, what="the old leader to refuse writes")
            a = (await stale).topics[0].partitions[0]
            assert a.error_code != 0, "a write to a fenced leader was acknowledged with acks=all"
        await cluster.wait_unfenced()
    run(go())


# -- lifecycle ------------------------------------------------------------------------------------

def test_controlled_shutdown_moves_leadership_first_and_restart_resumes(cluster):
    async def go():
        await cluster.create_topic("moving", partitions=3, rf=3)
        await cluster.wait_unfenced()
        victim = cluster.ids[0]
        async with Producer(cluster.bootstrap_servers, acks="all") as p:
            for i in range(30):
                await p.send("moving", b"%d" % i)
            await p.flush()

        async def full_isrs() -> bool:  # a loaded machine can drop a follower for a moment
            isrs = [(await leader_of(cluster, "moving", part))[2] for part in range(3)]
            return all(len(isr) == 3 for isr in isrs)
        await eventually(full_isrs, 20, what="every replica of 'moving' in its ISR")
        before = (await cluster.describe_broker(victim)).metadata_offset
        assert cluster.stop_broker(victim) == 0
        log = cluster.log_path(victim).read_text()
        assert "controlled shutdown complete" in log
        for part in range(3):
            leader, _, isr = await leader_of(cluster, "moving", part)
            assert leader != victim and leader >= 0 and victim not in isr
        cluster.start_broker(victim)
        await cluster.wait_unfenced([victim])
        d = await cluster.describe_broker(victim)
        assert d.resumed_from_offset >= before > 1
        assert d.first_metadata_fetch_offset == d.resumed_from_offset + 1
        records = await consume_all(cluster.bootstrap_servers, "moving", expected=30)
        assert sorted(int(r.value) for r in records) == list(range(30))
    run(go())


def test_deleted_topics_lose_their_data_and_retention_trims_logs(cluster):
    async def go():
        await cluster.create_topic("doomed", partitions=2, rf=3)
        await cluster.create_topic("trimmed", partitions=1, rf=3, configs={"retention.bytes": "2000"})
        async with Producer(cluster.bootstrap_servers, acks="all", batch_size=600, linger_ms=0) as p:
            for i in range(20):
                await p.send("doomed", b"x" * 100)
                await p.send_and_wait("trimmed", b"%03d" % i + b"y" * 300)
            await p.flush()
        async def hosted(topic):
            return [r for b in cluster.ids for r in (await cluster.describe_broker(b)).replicas if r.topic == topic]
        assert len(await hosted("doomed")) == 6
        async with cluster.controller() as c:
            r = await c.delete_topics(cpb.DeleteTopicsRequest(names=["doomed"]))
            assert r.topics[0].error_code == 0
        await eventually(lambda: _none(hosted("doomed")), 10, what="every broker to drop the deleted topic")

        async def trimmed():
            rs = await hosted("trimmed")
            # Kafka's rule: drop the oldest while what stays is still >= retention.bytes, so a
            # log keeps up to retention.bytes plus one batch (~350 bytes here)
            return rs and all(r.log_start_offset > 0 and 2000 <= r.size_bytes < 2400 for r in rs)
        await eventually(trimmed, 10, what="retention.bytes to trim the log")
        records = await consume_all(cluster.bootstrap_servers, "trimmed")
        assert records and records[0].offset > 0 and records[-1].value.startswith(b"019")
    run(go())


async def _none(coro) -> bool:
    return not await coro


def test_a_log_dir_of_another_cluster_is_refused(cluster, tmp_path):
    bid = 150
    cfg = tmp_path / "foreign.properties"
    log_dir = tmp_path / "foreign"
    cfg.write_text(f"node.id={bid}\nprocess.roles=broker\ncontroller.quorum.voters={cluster.quorum.voters}\n"
                   f"listeners=PLAINTEXT://127.0.0.1:{consecutive_ports(1)}\nlog.dirs={log_dir}\n")
    format_storage(str(log_dir), "SomeOtherCluster", bid)
    p = subprocess.run([sys.executable, "-m", "brokerd.main", str(cfg)], cwd=REPO, capture_output=True, timeout=60)
    assert p.returncode == 1
    lines = p.stderr.decode().strip().splitlines()
    assert lines[-1].startswith(f"Error: log directory {log_dir} is formatted for cluster SomeOtherCluster, but "
                                f"the controller quorum is another cluster")
    unformatted = tmp_path / "cfg2.properties"
    unformatted.write_text(cfg.read_text().replace(str(log_dir), str(tmp_path / "empty")))
    p = subprocess.run([sys.executable, "-m", "brokerd.main", str(unformatted)], cwd=REPO, capture_output=True,
                       timeout=60)
    assert p.returncode == 1 and p.stderr.decode().strip().splitlines() == [
        f"Error: log directory {tmp_path / 'empty'} is not formatted: run `kraft storage format --cluster-id ID "
        f"--config FILE` (or `raft-kv format`) first"]


def test_sigterm_without_a_reachable_controller_exits_within_seconds(tmp_path):
    """A broker whose controllers are all gone gives up its controlled shutdown after
    CONTROLLED_SHUTDOWN_S (5 s) and exits with one warning (it took 31 s before)."""
    c = BrokerCluster(tmp_path, 1)
    c.start()
    try:
        asyncio.run(c.wait_unfenced(timeout=60))
        for p in c.quorum.procs.values():
            p.kill()
            p.wait(10)
        started = time.monotonic()
        assert c.stop_broker(c.ids[0], timeout=30) == 0
        took = time.monotonic() - started
    finally:
        c.close()
    assert took < 10, f"the broker took {took:.1f}s to stop"
    log = c.log_path(c.ids[0]).read_text()
    assert "no controller confirmed the controlled shutdown within 5s; stopping anyway" in log
    assert_no_tracebacks(tmp_path)


# -- idempotence through faults ----------------------------------------------------------------

async def _produce_through_faults(c: BrokerCluster, topic: str, idempotent: bool, codec: str = "none"
                                  ) -> tuple[dict[str, list[int]], list]:
    """Two producers write numbered records for 10 s while the leader of partition 0 is
    killed with SIGKILL (and restarted) and the leader of partition 1 is frozen with SIGSTOP
    past its session (and thawed); returns what each producer had acknowledged and what a
    consumer reads back. Records go to partitions by key, each producer using all of them."""
    await c.create_topic(topic, partitions=2, rf=3, configs={"min.insync.replicas": "2"})
    acked: dict[str, list[int]] = {"a": [], "b": []}
    producers = [await Producer(c.bootstrap_servers, linger_ms=2, request_timeout_ms=2000,
                                delivery_timeout_ms=90000, retry_backoff_ms=50, enable_idempotence=idempotent,
                                compression_type=codec).start() for _ in acked]
    stop = asyncio.Event()

    async def write(name: str, p: Producer) -> None:
        n = 0
        pending = []
        while not stop.is_set():
            for _ in range(10):
                pending.append((n, await p.send(topic, f"{name}-{n}".encode(), key=b"%d" % (n % 4))))
                n += 1
            await asyncio.sleep(0.005)
        await p.flush()
        for seq, f in pending:
            try:
                await f
                acked[name].append(seq)
            except Exception as e:  # a producer error is a finding for the assertions below
                print(f"{name}-{seq}: {e}")

    writers = [asyncio.create_task(write(name, p)) for name, p in zip(acked, producers, strict=True)]

    async def progress(n: int = 300) -> None:
        """Until every producer has had ``n`` more records acknowledged."""
        target = [p.metrics["record-send-total"] + n for p in producers]
        await eventually(lambda: all(p.metrics["record-send-total"] >= t
                                      for p, t in zip(producers, target, strict=True)),
                         60, what=f"{n} more records acknowledged per producer")

    try:
        await progress()
        killed, _, _ = await leader_of(c, topic, 0)
        c.kill(killed)
        await asyncio.sleep(2.0)  # how long the killed broker stays down (the fault, not a wait)
        c.start_broker(killed)
        paused, _, _ = await leader_of(c, topic, 1)
        c.signal(paused, signal.SIGSTOP)
        try:
            await asyncio.sleep(3.5)  # frozen past the broker session (3 s): fenced, leadership moves
        finally:
            c.signal(paused, signal.SIGCONT)
        await progress()
    finally:
        stop.set()
        await asyncio.gather(*writers)
        for p in producers:
            await p.close()
    await c.wait_unfenced(timeout=60)
    total = sum(len(v) for v in acked.values())
    return acked, await consume_all(c.bootstrap_servers, topic, expected=None, idle_ms=3000) if total else []


def test_idempotent_producers_lose_and_duplicate_nothing_through_kill_9_and_sigstop(cluster):
    async def go():
        acked, records = await _produce_through_faults(cluster, "exactly-once", idempotent=True, codec="lz4")
        for name, seqs in acked.items():
            got = [int(r.value.split(b"-")[1]) for r in records if r.value.startswith(name.encode() + b"-")]
            assert len(seqs) > 500, f"producer {name} had only {len(seqs)} records acknowledged"
            assert sorted(seqs) == list(range(len(seqs))), f"producer {name}: a record failed"
            assert len(got) == len(set(got)), f"producer {name}: {len(got) - len(set(got))} records duplicated"
            assert set(got) == set(seqs), f"producer {name}: records lost: {sorted(set(seqs) - set(got))[:10]}"
            for part in (0, 1):
                in_part = [int(r.value.split(b"-")[1]) for r in sorted(records, key=lambda r: r.offset)
                           if r.partition == part and r.value.startswith(name.encode() + b"-")]
                assert in_part == sorted(in_part), f"producer {name}: partition {part} out of order"
        # The same faults without idempotence: a figure, not a failure (docs/brokers.md).
        acked, records = await _produce_through_faults(cluster, "at-least-once", idempotent=False)
        values = [r.value for r in records]
        print(f"idempotence off: {len(values) - len(set(values))} duplicates among {len(values)} records read, "
              f"{sum(len(v) for v in acked.values())} acknowledged")
    run(go(), timeout=240)


def test_every_codec_round_trips_through_produce_replication_and_fetch(cluster):
    """One topic per codec, all led by one broker; each gets JSON lines compressed with its
    codec, a topic with compression.type=zstd gets plain batches and stores them in zstd;
    then that broker is killed and the followers, now leaders, serve the same records. A
    corrupt compressed batch is refused and nothing is written."""
    async def go():
        lines = [b'{"ts": %d, "level": "INFO", "msg": "order %d accepted", "items": %d}' % (i, i, i % 7)
                 for i in range(300)]
        ids = sorted(cluster.ids)
        codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
        for codec in codecs:
            await cluster.create_topic(f"codec-{codec}", assignments=[ids])
        await cluster.create_topic("topic-zstd", assignments=[ids], configs={"compression.type": "zstd"})
        for codec in codecs:
            async with Producer(cluster.bootstrap_servers, compression_type=codec, linger_ms=20) as p:
                for line in lines:
                    await p.send(f"codec-{codec}", line, partition=0)
        async with Producer(cluster.bootstrap_servers) as p:
            for line in lines:
                await p.send("topic-zstd", line, partition=0)
        leader = ids[0]
        async with _stub(cluster.address(leader)) as s:
            for topic, want in [*((f"codec-{c}", c) for c in codecs), ("topic-zstd", "zstd")]:
                r = await s.Fetch(bpb.FetchRequest(replica_id=-1, max_bytes=1 << 20, topics=[bpb.FetchTopic(
                    name=topic, partitions=[bpb.FetchPartition(partition=0, fetch_offset=0)])]))
                stored = {Codec(b.attributes & 7).name.lower() for b in batches(r.topics[0].partitions[0].records)}
                assert stored == {want}, f"{topic}: batches stored as {stored}"
            bomb = build_batch([(None, b"x" * 1000, 1, ())] * 10, Codec.ZSTD)
            bomb.records = bomb.records[:-4]
            bomb.crc = batch_crc(bomb)
            a = (await s.Produce(produce_request("codec-zstd", bomb))).topics[0].partitions[0]
            assert a.error_code == ErrorCode.CORRUPT_MESSAGE and "does not decompress" in a.error_message
            ends = [r.log_end_offset for r in (await cluster.describe_broker(leader)).replicas
                    if r.topic == "codec-zstd"]
            assert ends == [300], f"a refused batch changed the log: {ends}"

        async def replicated() -> bool:
            ends = [r.log_end_offset for b in ids for r in (await cluster.describe_broker(b)).replicas
                    if r.topic.startswith(("codec-", "topic-"))]
            return ends == [300] * (6 * len(ids))
        await eventually(replicated, 20, what="every replica of every codec topic holding 300 records")
        cluster.kill(leader)
        try:
            for topic in [*(f"codec-{c}" for c in codecs), "topic-zstd"]:
                async def moved(t: str = topic) -> bool:
                    return (await leader_of(cluster, t))[0] not in (leader, -1)
                await eventually(moved, 20, what=f"a new leader for {topic}")
                records = await consume_all(cluster.bootstrap_servers, topic, expected=300)
                assert [r.value for r in records] == lines, f"{topic} read back differs from the followers"
        finally:
            cluster.start_broker(leader)
            await cluster.wait_unfenced([leader], timeout=60)
    run(go(), timeout=180)


def test_compaction_keeps_the_latest_value_of_every_key_on_every_replica(cluster):
    """A topic written 20 times per key is switched to cleanup.policy=compact: once the cleaner
    has run, every replica holds only each key's latest value at its original offset and a
    fraction of the bytes, the tombstone goes after delete.retention.ms, and a producer without
    a key is refused."""
    async def go():
        await cluster.create_topic("compacted", partitions=1, rf=3, configs={"delete.retention.ms": "1000"})
        latest: dict[bytes, int] = {}
        async with Producer(cluster.bootstrap_servers, linger_ms=0) as p:
            for round_ in range(20):
                for k in range(20):
                    md = await p.send_and_wait("compacted", b"v%d" % round_, key=b"k%d" % k)
                    latest[b"k%d" % k] = md.offset
            gone = await p.send_and_wait("compacted", None, key=b"k0")  # a tombstone
        del latest[b"k0"]

        async def sizes() -> dict[int, int]:
            return {b: r.size_bytes for b in cluster.ids for r in (await cluster.describe_broker(b)).replicas
                    if r.topic == "compacted"}

        async def replicated() -> bool:
            return len(set((await sizes()).values())) == 1
        await eventually(replicated, 20, what="every replica holding the whole log")
        before = await sizes()
        async with cluster.controller() as c:
            await c.incremental_alter_configs(cpb.IncrementalAlterConfigsRequest(resources=[
                cpb.AlterConfigsResource(resource_type=cpb.TOPIC, resource_name="compacted", configs=[
                    cpb.AlterableConfig(name="cleanup.policy", value="compact"),
                    # so that the tombstone's own batch, written last, is soon worth a pass
                    cpb.AlterableConfig(name="min.cleanable.dirty.ratio", value="0.01")])]))

        async def compacted() -> bool:
            now = await sizes()
            return all(now[b] < before[b] / 10 for b in before)
        await eventually(compacted, 30, what="every replica of the compacted topic to shrink tenfold")
        async with Producer(cluster.bootstrap_servers) as p:
            with pytest.raises(KafkaError) as e:
                await p.send_and_wait("compacted", b"no key")
            assert e.value.code == ErrorCode.INVALID_RECORD

        async def only_latest():
            records = await consume_all(cluster.bootstrap_servers, "compacted", idle_ms=500)
            return records if {r.key: r.offset for r in records} == latest else None
        records = await eventually(only_latest, 30, what="only each key's latest value, the tombstone gone")
        assert all(r.value == b"v19" for r in records) and gone.offset == 400
        leader, _, _ = await leader_of(cluster, "compacted")
        cluster.kill(leader)  # a follower's own compacted copy serves the same records
        try:
            async def moved() -> bool:
                return (await leader_of(cluster, "compacted"))[0] not in (leader, -1)
            await eventually(moved, 20, what="a new leader")
            # replicas compact on their own schedule: the tombstone goes there too, in time
            await eventually(only_latest, 30, what="the new leader serving only each key's latest value")
        finally:
            cluster.start_broker(leader)
            await cluster.wait_unfenced([leader], timeout=60)
    run(go(), timeout=180)



def test_an_idempotent_producers_state_survives_compaction_and_a_restart(cluster):
    """Kafka's cleaner keeps each active producer's last batch (emptied of the records that
    go): an idempotent producer's records, overwritten and compacted away while a follower was
    down, still leave its epoch and last sequence in the log, so the restarted follower, once
    it leads, accepts the producer's next sequence (not UNKNOWN_PRODUCER_ID)."""
    from clients.records import set_producer

    a, b = cluster.ids[0], cluster.ids[1]

    def keyed(value: bytes, pid: int = -1, seq: int = 0):
        batch = build_batch([(b"k%d" % i, value, int(time.time() * 1000), ()) for i in range(2)])
        if pid >= 0:
            set_producer(batch, pid, 0, seq)
        return batch

    async def replica(bid: int, role: str) -> bool:
        leader, _, isr = await leader_of(cluster, "pstate")
        return leader == bid if role == "leader" else bid in isr

    def _librdkafka_read(topic: str, until: int) -> list:
        """What librdkafka reads of partition 0 of ``topic``, up to offset ``until``."""
        from confluent_kafka import Consumer as RdConsumer, TopicPartition
        c = RdConsumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "pstate"})
        c.assign([TopicPartition(topic, 0, 0)])
        try:
            got: list = []
            deadline = time.monotonic() + 30
            while not got or got[-1].offset() < until:
                assert time.monotonic() < deadline, [m.offset() for m in got]
                got += [m for m in c.consume(10, 0.5) if not m.error()]
            return got
        finally:
            c.close()

    async def go():
        await cluster.create_topic("pstate", assignments=[[a, b]], configs={
            "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
        cluster.kill(b)
        try:
            async with _stub(cluster.address(a)) as s:
                pid = (await s.InitProducerId(bpb.InitProducerIdRequest())).producer_id
                for batch in (keyed(b"idempotent", pid, 0), keyed(b"plain")):  # offsets 0-1, then 2-3
                    r = await s.Produce(produce_request("pstate", batch))
                    assert r.topics[0].partitions[0].error_code == 0

            async def compacted() -> bool:
                return [r.offset for r in await consume_all(cluster.bootstrap_servers, "pstate", 2, 300)] == [2, 3]
            await eventually(compacted, 30, what="the idempotent producer's records compacted away")
        finally:
            cluster.start_broker(b)
        await eventually(lambda: replica(b, "in-sync"), 60, what=f"broker {b} back in the ISR")
        cluster.kill(a)  # b, which copied the compacted log, leads
        try:
            await eventually(lambda: replica(b, "leader"), 30, what=f"broker {b} leading pstate")
            async with _stub(cluster.address(b)) as s:
                r = await s.Produce(produce_request("pstate", keyed(b"next", pid, 2)))
            assert ErrorCode.of(r.topics[0].partitions[0].error_code) == ErrorCode.NONE, \
                r.topics[0].partitions[0].error_message
            # librdkafka steps over the emptied batch at offsets 0-1 as over any gap
            read = [(m.offset(), m.value()) for m in _librdkafka_read("pstate", 5)]
            assert read[-2:] == [(4, b"next"), (5, b"next")] and {o for o, _ in read[:-2]} <= {2, 3}, read
        finally:
            cluster.start_broker(a)
            await cluster.wait_unfenced(timeout=60)
    run(go(), timeout=180)
