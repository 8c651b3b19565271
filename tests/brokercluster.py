"""Clusters of real processes for broker tests: a DevQuorum of three controllers and N brokers
run as ``python -m brokerd.main FILE``, each with its own properties file and formatted log
directory, killed and stopped with real signals."""
from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from metadata.client import ControllerClient, QuorumUnreachable
from metadata.ids import random_id
from kraft.dev_quorum import DevQuorum
from protos import broker_pb2 as bpb
from protos import broker_pb2_grpc
from protos import controller_pb2 as cpb
from common.tls import TLSConfig
from raft.storage import format_storage
from common.channels import dial
from tests.eventually import eventually
from tests.kvcluster import consecutive_ports
from tests.logs import assert_no_tracebacks

REPO = Path(__file__).resolve().parent.parent


class BrokerCluster:
    """Controllers 1-3 and brokers 101, 102, ... on loopback."""

    def __init__(self, base_dir: Path, brokers: int = 3, *, session_timeout_ms: int = 3000,
                 heartbeat_ms: int = 300, broker_props: dict[str, str] | None = None,
                 controller_props: dict[str, str] | None = None,
                 node_props: dict[int, dict[str, str]] | None = None, client_tls: TLSConfig | None = None,
                 dynamic: bool = False, log_dirs: int = 1) -> None:
        """``node_props[id]``: properties of controller or broker ``id`` alone; ``client_tls``:
        what the test's own clients dial the controllers and brokers with (TLS listeners).
        ``dynamic``: a quorum formatted with --initial-controllers, found through bootstrap
        servers (KIP-853). ``log_dirs``: how many directories each broker's ``log.dirs`` lists."""
        self.base = base_dir
        self.client_tls = client_tls
        self.node_props = node_props or {}
        ports = consecutive_ports(3 + 2 * brokers)
        self.quorum = DevQuorum(str(base_dir / "quorum"), ports, election_timeout_ms=500,
                                session_timeout_ms=session_timeout_ms,
                                extra={"broker.heartbeat.interval.ms": str(heartbeat_ms), **(controller_props or {})},
                                node_extra=self.node_props, dynamic=dynamic)
        self.ids = [101 + i for i in range(brokers)]
        self.ports = {bid: ports + 3 + i for i, bid in enumerate(self.ids)}
        self.kafka_ports = {bid: ports + 3 + brokers + i for i, bid in enumerate(self.ids)}
        self.heartbeat_ms = heartbeat_ms
        self.props = broker_props or {}
        self.procs: dict[int, subprocess.Popen] = {}
        self.dirs_per_broker = log_dirs

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    @property
    def kafka_bootstrap_servers(self) -> str:
        """bootstrap.servers for a Kafka client: the brokers' Kafka listeners."""
        return ",".join(f"127.0.0.1:{p}" for p in self.kafka_ports.values())

    def address(self, bid: int) -> str:
        return f"127.0.0.1:{self.ports[bid]}"

    def log_dir(self, bid: int) -> Path:
        return self.base / f"broker-{bid}"

    def log_dirs(self, bid: int) -> list[Path]:
        """Its ``log.dirs``: ``log_dir(bid)`` first."""
        return [self.log_dir(bid)] + [self.base / f"broker-{bid}-dir{i}" for i in range(1, self.dirs_per_broker)]

    def config_path(self, bid: int) -> Path:
        return self.base / f"broker-{bid}.properties"

    def log_path(self, bid: int) -> Path:
        return self.base / f"broker-{bid}.log"

    def write_config(self, bid: int, **extra: str) -> Path:
        props = {"node.id": str(bid), "process.roles": "broker", **self.quorum.quorum_props(),
                 "listeners": f"PLAINTEXT://127.0.0.1:{self.ports[bid]},KAFKA://127.0.0.1:{self.kafka_ports[bid]}",
                 "log.dirs": ",".join(str(d) for d in self.log_dirs(bid)),
                 "broker.heartbeat.interval.ms": str(self.heartbeat_ms), "replica.fetch.backoff.ms": "100",
                 "metadata.log.max.snapshot.interval.ms": "500", **self.props, **self.node_props.get(bid, {}),
                 **extra}
        path = self.config_path(bid)
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        return path

    def start(self) -> "BrokerCluster":
        if not (self.quorum.base_dir / "cluster.id").exists():
            format_controllers(self.quorum)
        self.quorum.start()
        for bid in self.ids:
            self.write_config(bid)
            for d in self.log_dirs(bid):
                format_storage(str(d), self.quorum.cluster_id, bid)
            self.start_broker(bid)
        return self

    def start_broker(self, bid: int) -> subprocess.Popen:
        out = open(self.log_path(bid), "a")
        self.procs[bid] = subprocess.Popen([sys.executable, "-m", "brokerd.main", str(self.config_path(bid))],
                                           cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self.procs[bid]

    def signal(self, bid: int, sig: int) -> None:
        self.procs[bid].send_signal(sig)

    def kill(self, bid: int) -> None:
        p = self.procs[bid]
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def stop_broker(self, bid: int, timeout: float = 40) -> int:
        p = self.procs[bid]
        p.send_signal(signal.SIGTERM)
        return p.wait(timeout)

    def controller(self, **kw: float) -> ControllerClient:
        return ControllerClient(self.quorum.bootstrap, timeout=kw.get("timeout", 20), attempt_timeout=2,
                                tls=self.client_tls)

    async def wait_unfenced(self, ids: list[int] | None = None, timeout: float = 45) -> None:
        ids = ids or [b for b in self.ids if self.procs.get(b) and self.procs[b].poll() is None]
        async with self.controller() as c:
            async def all_up() -> bool:
                try:
                    r = await c.describe_cluster(cpb.DescribeClusterRequest())
                except QuorumUnreachable:  # controllers still starting (slow on a loaded machine): ask again
                    return False
                return set(ids) <= {b.id for b in r.brokers if not b.fenced}

            await eventually(all_up, timeout, interval=0.1,
                             what=f"brokers {ids} unfenced (see {self.base}/broker-*.log)")

    async def create_topic(self, name: str, partitions: int = 1, rf: int = 3, configs: dict[str, str] | None = None,
                           assignments: list[list[int]] | None = None) -> None:
        t = cpb.CreatableTopic(name=name, num_partitions=-1 if assignments else partitions,
                               replication_factor=-1 if assignments else rf, configs=configs or {})
        for i, replicas in enumerate(assignments or []):
            t.assignments.add(partition=i, replicas=replicas)
        async with self.controller() as c:
            r = await c.create_topics(cpb.CreateTopicsRequest(topics=[t]))
            assert r.topics[0].error_code == 0, r.topics[0].error_message
        await self.wait_topic(name, partitions if not assignments else len(assignments))

    async def wait_topic(self, name: str, partitions: int, timeout: float = 20) -> None:
        """Until every live broker knows the topic and every partition has a leader that knows it leads."""
        async def ready() -> bool:
            for bid in self.ids:
                if self.procs[bid].poll() is not None:
                    continue
                try:
                    md = await self.broker_metadata(bid, [name])
                except Exception:
                    return False
                t = md.topics[0]
                if t.error_code or len(t.partitions) != partitions or any(p.leader < 0 for p in t.partitions):
                    return False
            return True

        await eventually(ready, timeout, interval=0.1, what=f"topic {name} ready on every broker")

    async def broker_metadata(self, bid: int, topics: list[str]) -> bpb.MetadataResponse:
        async with _stub(self.address(bid), self.client_tls) as stub:
            return await stub.Metadata(bpb.MetadataRequest(topics=topics), timeout=5)

    async def describe_broker(self, bid: int) -> bpb.DescribeBrokerResponse:
        async with _stub(self.address(bid), self.client_tls) as stub:
            return await stub.DescribeBroker(bpb.DescribeBrokerRequest(), timeout=5)

    async def describe_topic(self, name: str) -> cpb.TopicDescription:
        async with self.controller() as c:
            r = await c.describe_topics(cpb.DescribeTopicsRequest(names=[name]))
            return r.topics[0]

    def restart_all(self) -> None:
        """Stop every broker (a controlled shutdown each) and controller, then start them all
        again, and wait until the brokers are unfenced."""
        for bid in self.ids:
            assert self.stop_broker(bid) == 0, f"broker {bid} did not stop cleanly"
        self.quorum.stop()
        self.quorum.start()
        for bid in self.ids:
            self.start_broker(bid)
        asyncio.run(self.wait_unfenced(timeout=60))

    def close(self) -> None:
        """Brokers, then controllers, each given its controlled shutdown; each runs in a session
        of its own, so whatever cuts this short (a test's timeout raised into a wait) still has
        every one that is left killed (tests/processes.py)."""
        try:
            for p in self.procs.values():
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGCONT)
                    except OSError:
                        pass
                    p.send_signal(signal.SIGTERM)
            for p in self.procs.values():
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        finally:
            for p in self.procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                    p.wait()
            self.quorum.stop()


def format_controllers(q: DevQuorum) -> None:
    """``kraft storage format`` for each controller of ``q``, as DevQuorum.start runs it but in
    this process: three Python start-ups fewer per cluster (~1.3 s of CPU). DevQuorum.start
    then finds the cluster id and only starts the servers."""
    from kraft.cli.storage import storage_format
    q.write_configs()
    cluster_id = random_id()
    voters = ["--initial-controllers", q.initial_controllers] if q.directory_ids else []
    for nid in q.ports:
        with contextlib.redirect_stdout(io.StringIO()):
            storage_format.main(["--cluster-id", cluster_id, "--config", str(q.config_path(nid)), *voters],
                                standalone_mode=False)
    (q.base_dir / "cluster.id").write_text(cluster_id)


async def write_acked(bootstrap_servers: str, topic: str, stop: asyncio.Event, acked: list[int],
                      prefix: bytes = b"live-") -> None:
    """acks=all writes of ``prefix`` + a sequence number until ``stop``, through failovers
    (requests retried for up to 90 s); ``acked`` gets each number once its write is acknowledged."""
    from clients.producer import Producer
    async with Producer(bootstrap_servers, linger_ms=2, request_timeout_ms=3000,
                        delivery_timeout_ms=90000, retry_backoff_ms=50) as p:
        n = 0
        while not stop.is_set():
            futures = [(n + i, await p.send(topic, prefix + b"%d" % (n + i))) for i in range(10)]
            n += 10
            for seq, f in futures:
                await f
                acked.append(seq)


class _stub:
    """``async with _stub(address) as stub``: a Broker stub on a channel closed afterwards."""

    def __init__(self, address: str, tls: TLSConfig | None = None) -> None:
        self.channel = dial(address, tls, [("grpc.max_receive_message_length", 256 << 20)])

    async def __aenter__(self) -> broker_pb2_grpc.BrokerStub:
        return broker_pb2_grpc.BrokerStub(self.channel)

    async def __aexit__(self, *exc: object) -> None:
        await self.channel.close()


@contextlib.contextmanager
def running_cluster(base: Path, broker_props: dict[str, str], node_props: dict[int, dict[str, str]] | None = None,
                    *, brokers: int = 3, **kw: Any) -> Iterator[BrokerCluster]:
    """Three brokers (sessions of 3 s, heartbeats every 300 ms) unfenced, then closed; their
    logs must hold no traceback. ``kw``: BrokerCluster's other settings (controller_props,
    client_tls)."""
    c = BrokerCluster(base, brokers, session_timeout_ms=3000, heartbeat_ms=300, broker_props=broker_props,
                      node_props=node_props, **kw)
    c.start()
    try:
        asyncio.run(c.wait_unfenced(timeout=60))
        yield c
    finally:
        c.close()
    assert_no_tracebacks(c.base)
