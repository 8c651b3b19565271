"""The controller quorum as operators run it: `kraft` processes from properties files, the CLI,
and `kill -9` of the active controller in the middle of a stream of CreateTopics."""
import asyncio
import json
import subprocess
import sys
import threading
import time

import pytest

from metadata.client import ControllerClient, QuorumUnreachable
from common.errors import ErrorCode as E, KafkaError
from kraft.dev_quorum import DevQuorum
from common.config_def import ConfigError
from protos import controller_pb2 as pb
from tests.controllers import TestBroker
from tests.kvcluster import REPO, consecutive_ports
from tests.eventually import eventually
from tests.logs import assert_no_tracebacks


def kraft(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "kraft.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError(f"kraft {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


@pytest.fixture
def quorum(tmp_path):
    q = DevQuorum(str(tmp_path / "q"), consecutive_ports(3), session_timeout_ms=3000)
    q.start()
    yield q
    q.stop()
    assert_no_tracebacks(tmp_path / "q")


async def _brokers(q, n=3):
    return [await TestBroker(q.bootstrap, q.cluster_id, 100 + i).start() for i in range(n)]


def test_cli_create_describe_alter_delete_and_errors(quorum):
    async def setup():
        await quorum.wait_for_leader()
        return await _brokers(quorum)
    loop = asyncio.new_event_loop()
    brokers = loop.run_until_complete(setup())
    # the brokers keep heartbeating (3 s sessions) while each CLI process runs in the foreground
    beating = threading.Thread(target=loop.run_forever, daemon=True)
    beating.start()
    try:
        b = quorum.bootstrap
        assert kraft("topics", "--bootstrap-controller", b, "create", "--topic", "payments", "--partitions", "3",
                     "--replication-factor", "2", "--config", "retention.ms=60000").stdout.strip() == "Created topic payments."
        out = kraft("topics", "--bootstrap-controller", b, "describe", "--topic", "payments").stdout
        lines = out.strip().splitlines()
        assert lines[0].startswith("Topic: payments\tTopicId: ") and "PartitionCount: 3" in lines[0]
        assert "ReplicationFactor: 2" in lines[0] and "retention.ms=60000" in lines[0]
        assert len(lines) == 4 and all("Leader: 10" in line and "Isr: " in line for line in lines[1:])
        assert kraft("topics", "--bootstrap-controller", b, "list").stdout.split() == ["payments"]
        kraft("topics", "--bootstrap-controller", b, "alter", "--topic", "payments", "--partitions", "5")
        assert "PartitionCount: 5" in kraft("topics", "--bootstrap-controller", b, "describe", "--topic", "payments").stdout
        # errors: one line, the code, exit 1
        for args, code in [
            (("create", "--topic", "payments"), "TOPIC_ALREADY_EXISTS"),
            (("create", "--topic", "a b"), "INVALID_TOPIC_EXCEPTION"),
            (("create", "--topic", "big", "--replication-factor", "4"), "INVALID_REPLICATION_FACTOR"),
            (("create", "--topic", "zero", "--partitions", "0"), "INVALID_PARTITIONS"),
            (("create", "--topic", "asg", "--replica-assignment", "100:100"), "INVALID_REPLICA_ASSIGNMENT"),
            (("create", "--topic", "cfg", "--config", "bogus=1"), "INVALID_CONFIG"),
            (("alter", "--topic", "payments", "--partitions", "2"), "INVALID_PARTITIONS"),
            (("delete", "--topic", "ghost"), "UNKNOWN_TOPIC_OR_PARTITION"),
        ]:
            p = kraft("topics", "--bootstrap-controller", b, *args, check=False)
            assert p.returncode == 1 and p.stderr.startswith(f"Error: {code}") and p.stderr.count("\n") == 1, (args, p.stderr)
            assert "Traceback" not in p.stderr
        assert kraft("topics", "--bootstrap-controller", b, "delete", "--topic", "payments").returncode == 0
        assert kraft("topics", "--bootstrap-controller", b, "list").stdout.strip() == ""
        # quorum and cluster descriptions
        st = kraft("quorum", "--bootstrap-controller", b, "describe", "--status").stdout
        assert f"ClusterId:              {quorum.cluster_id}" in st
        fields = dict(line.split(":", 1) for line in st.splitlines())
        assert json.loads(fields["CurrentVoters"]) == [  # static voters: no directory ids (Kafka's null)
            {"id": i, "directoryId": None, "endpoints": [f"CONTROLLER://127.0.0.1:{quorum.ports[i]}"]} for i in (1, 2, 3)]
        assert json.loads(fields["CurrentObservers"]) == [{"id": i, "directoryId": None} for i in (100, 101, 102)]
        rep = kraft("quorum", "--bootstrap-controller", b, "describe", "--replication").stdout.splitlines()
        assert rep[0].startswith("NodeId\tDirectoryId\tLogEndOffset") and rep[1].endswith("\tLeader")
        assert sum("Leader" in row for row in rep) == 1
        cl = kraft("cluster", "--bootstrap-controller", b, "describe").stdout
        assert "Brokers (3):" in cl and "PLAINTEXT://127.0.0.1:9100" in cl
        # an unreachable quorum: one line, non-zero, at once when nothing accepts a connection
        p = kraft("topics", "--bootstrap-controller", "127.0.0.1:1", "--command-timeout", "2", "list", check=False)
        assert p.returncode == 1 and "connection refused" in p.stderr and p.stderr.count("\n") == 1
    finally:
        for br in brokers:
            asyncio.run_coroutine_threadsafe(br.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        beating.join(10)
        loop.close()


def test_kill_9_of_the_active_controller_during_create_topics(quorum):
    async def go():
        await quorum.wait_for_leader()
        brokers = await _brokers(quorum)
        acked: dict[str, bytes] = {}
        unknown: set[str] = set()
        refused: set[str] = set()
        c = ControllerClient(quorum.bootstrap, timeout=30, attempt_timeout=2)

        async def creator(w: int) -> None:
            for i in range(40):
                name = f"w{w}-{i}"
                try:
                    r = await c.create_topics(pb.CreateTopicsRequest(topics=[
                        pb.CreatableTopic(name=name, num_partitions=4, replication_factor=2)]))
                except QuorumUnreachable:
                    refused.add(name)  # every attempt was refused: nothing was written
                    continue
                except KafkaError as e:
                    assert e.code == E.REQUEST_TIMED_OUT, e
                    unknown.add(name)  # the client says so, and does not retry a create
                    continue
                t = r.topics[0]
                # TOPIC_ALREADY_EXISTS would mean the client re-sent a create that committed.
                assert t.error_code == E.NONE, f"{name}: {E(t.error_code).name} {t.error_message}"
                acked[name] = t.topic_id

        writers = [asyncio.create_task(creator(w)) for w in range(4)]
        await eventually(lambda: len(acked) >= 20, 20, what="creates acknowledged before the kill")
        leader = await quorum.wait_for_leader()
        quorum.kill(leader)
        killed_at = time.monotonic()
        await asyncio.gather(*writers)
        assert len(acked) >= 100
        d = await c.describe_topics(pb.DescribeTopicsRequest())
        found = {t.name: t for t in d.topics}
        assert len(found) == len(d.topics)  # no name twice
        for name, tid in acked.items():
            assert name in found, f"acknowledged topic {name} was lost"
            assert found[name].topic_id == tid, f"{name} exists, but not the acknowledged one"
        assert not refused & set(found), "a create answered as not applied was applied"
        for t in found.values():
            assert t.name in acked or t.name in unknown
            assert [p.partition for p in t.partitions] == [0, 1, 2, 3], f"{t.name} is half-made"
        new_leader = (await c.describe_quorum(pb.DescribeQuorumRequest())).leader_id
        assert new_leader != leader
        quorum.start_node(leader)  # it comes back as a standby with the same metadata
        await c.close()
        for b in brokers:
            await b.stop()
        return time.monotonic() - killed_at
    asyncio.run(go())


def test_a_broker_that_exits_at_start_is_named_at_once_with_its_error(tmp_path):
    """DevQuorum.wait_for_brokers (``make demo``, the benchmarks) stops waiting as soon as a
    broker it waits for has exited, with that broker's one-line error, instead of waiting out
    its timeout for a registration that cannot come."""
    import socket
    ports = consecutive_ports(5)
    q = DevQuorum(str(tmp_path / "q"), ports, brokers=1)
    holder = socket.socket()
    holder.bind(("127.0.0.1", q.kafka_ports[101]))  # another server on the broker's Kafka port
    holder.listen()
    try:
        q.start()
        began = time.monotonic()
        with pytest.raises(ConfigError) as e:
            asyncio.run(q.wait_for_brokers(timeout=120))
        assert time.monotonic() - began < 60, "waited out the timeout"
        assert str(e.value).startswith("broker 101 exited (code 1): cannot listen on 127.0.0.1:"), e.value
    finally:
        holder.close()
        q.stop()
