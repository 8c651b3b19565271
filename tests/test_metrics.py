"""Prometheus metrics (issue 17, part 3): every controller and broker process serves /metrics at
its prometheus.listener, and the values follow the cluster: one active controller, the Raft
high watermark and request counts grow, produce raises bytes in and the high watermark, a
group's coordinator reports its lag, and a broker killed with kill -9 shows as fenced, offline
and under-replicated partitions. A bad prometheus.listener is one line on stderr."""
from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from clients import Producer
from protos import broker_pb2 as bpb
from tests.brokercluster import REPO, BrokerCluster, _stub, running_cluster
from tests.eventually import eventually
from tests.kvcluster import consecutive_ports

CONTROLLERS = (1, 2, 3)
BROKERS = (101, 102, 103)
VICTIM = 103

Samples = list[tuple[str, dict[str, str], float]]


def scrape(port: int) -> Samples:
    """Every sample /metrics serves, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.headers.get_content_type() == "text/plain"
        text = r.read().decode()
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples that have ``labels``."""
    return sum(v for n, ls, v in samples if n == name and all(ls.get(k) == x for k, x in labels.items()))


def has(samples: Samples, name: str) -> bool:
    return any(n == name for n, _, _ in samples)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    first = consecutive_ports(6)
    listeners = {nid: {"prometheus.listener": f"127.0.0.1:{first + i}"} for i, nid in enumerate(CONTROLLERS + BROKERS)}
    props = {"replica.lag.time.max.ms": "2000", "offsets.topic.num.partitions": "3",
             "transaction.state.log.num.partitions": "3"}
    with running_cluster(tmp_path_factory.mktemp("metrics"), props, listeners) as c:
        yield c


def ports(c: BrokerCluster) -> dict[int, int]:
    """Node id -> the port of its /metrics."""
    return {nid: int(props["prometheus.listener"].rsplit(":", 1)[1]) for nid, props in c.node_props.items()}


def active_controller(c: BrokerCluster) -> int:
    """The one controller whose ActiveControllerCount is 1 (and the sum over all is 1)."""
    async def one() -> int | None:
        counts = {n: value(scrape(ports(c)[n]), "kafka_controller_kafkacontroller_activecontrollercount")
                  for n in CONTROLLERS}
        return next(iter(n for n, v in counts.items() if v == 1)) if sum(counts.values()) == 1 else None
    return asyncio.run(eventually(one, 20, interval=0.1, what="ActiveControllerCount summing to 1"))


def test_every_node_serves_metrics_and_one_controller_is_active(cluster):
    active = active_controller(cluster)
    for nid in CONTROLLERS:
        s = scrape(ports(cluster)[nid])
        assert value(s, "kafka_server_raftmetrics_current_leader") == active
        assert value(s, "kafka_server_raftmetrics_current_state", state="leader") == (nid == active)
        assert value(s, "kafka_server_raftmetrics_current_epoch") >= 1
        assert value(s, "kafka_server_raftmetrics_high_watermark") >= 2
        assert has(s, "process_resident_memory_bytes")
    s = scrape(ports(cluster)[active])
    assert value(s, "kafka_server_raftmetrics_elections_won_total") >= 1
    assert value(s, "kafka_controller_kafkacontroller_activebrokercount") == 3
    assert value(s, "kafka_controller_kafkacontroller_fencedbrokercount") == 0
    assert value(s, "kafka_server_raftmetrics_append_latency_seconds_count") > 0
    for bid in BROKERS:
        b = scrape(ports(cluster)[bid])
        assert has(b, "kafka_server_replicamanager_underreplicatedpartitions")
        assert b and value(b, "kafka_server_brokermetadatametrics_last_applied_record_offset") > 0


def test_writes_and_requests_move_the_counters(cluster):
    active = active_controller(cluster)
    before = scrape(ports(cluster)[active])
    asyncio.run(cluster.create_topic("metered", partitions=3, rf=3))
    after = scrape(ports(cluster)[active])
    hw = "kafka_server_raftmetrics_high_watermark"
    assert value(after, hw) > value(before, hw)
    assert value(after, "kafka_server_raftmetrics_commit_latency_seconds_count") > \
        value(before, "kafka_server_raftmetrics_commit_latency_seconds_count")
    created = "kafka_network_requestmetrics_total_time_seconds_count"
    assert value(after, created, request="CreateTopics", listener="CONTROLLER") == \
        value(before, created, request="CreateTopics", listener="CONTROLLER") + 1
    assert value(after, "kafka_controller_kafkacontroller_globalpartitioncount") == 3
    # the brokers' heartbeats are requests the active controller keeps timing
    beats = value(after, created, request="BrokerHeartbeat")

    async def more_heartbeats() -> bool:
        return value(scrape(ports(cluster)[active]), created, request="BrokerHeartbeat") > beats
    asyncio.run(eventually(more_heartbeats, 10, what="BrokerHeartbeat count growing"))

    def totals(name: str, **labels: str) -> float:
        return sum(value(scrape(ports(cluster)[b]), name, **labels) for b in BROKERS)

    bytes_in = totals("kafka_server_brokertopicmetrics_bytesin_total", topic="metered")
    grpc_produces = totals(created, request="Produce", listener="PLAINTEXT")

    async def produce() -> None:
        async with Producer(cluster.bootstrap_servers, acks="all", linger_ms=2) as p:
            for i in range(90):
                await p.send("metered", f"v{i}".encode(), partition=i % 3)
            await p.flush()
        k = AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap_servers, acks="all")
        await k.start()
        try:
            for i in range(30):
                await k.send_and_wait("metered", f"k{i}".encode(), partition=i % 3)
        finally:
            await k.stop()
    asyncio.run(produce())

    async def all_counted() -> bool:
        return totals("kafka_server_brokertopicmetrics_messagesin_total", topic="metered") == 120 and \
            sum(value(scrape(ports(cluster)[b]), "kafka_log_log_highwatermark", topic="metered")
                for b in BROKERS) == 3 * 120  # three replicas of every partition, all caught up
    asyncio.run(eventually(all_counted, 20, what="120 messages in and every replica's high watermark at them"))
    assert totals("kafka_server_brokertopicmetrics_bytesin_total", topic="metered") > bytes_in
    assert totals(created, request="Produce", listener="PLAINTEXT") > grpc_produces
    assert totals(created, request="Produce", listener="KAFKA") >= 30  # one per send_and_wait
    assert totals("kafka_network_requestmetrics_total_time_seconds_count", request="Metadata",
                  listener="KAFKA") >= 1
    assert totals("kafka_server_brokertopicmetrics_replicationbytesout_total", topic="metered") > 0


def test_followers_replicate_through_fetch_sessions(cluster):
    """KIP-227 between brokers: a follower keeps one fetch session with each leader it copies
    from and fetches incrementally (only what moved), and every replica still gets every
    record; the leaders' cache metrics show the followers' sessions."""
    fsc = "kafka_server_fetchsessioncache_"
    asyncio.run(cluster.create_topic("replicated", partitions=3, rf=3))
    asyncio.run(cluster.wait_topic("replicated", 3))

    async def produce() -> None:
        async with Producer(cluster.bootstrap_servers, acks="all", linger_ms=2) as p:
            for i in range(60):
                await p.send("replicated", f"v{i}".encode(), partition=i % 3)
            await p.flush()
    asyncio.run(produce())
    leaders = {p.leader for p in asyncio.run(cluster.describe_topic("replicated")).partitions}

    async def through_sessions() -> bool:
        samples = {b: scrape(ports(cluster)[b]) for b in BROKERS}
        return sum(value(samples[b], "kafka_log_log_highwatermark", topic="replicated") for b in BROKERS) == 3 * 60 \
            and all(value(samples[b], fsc + "numincrementalfetchsessions") >= 2  # one per follower
                    and value(samples[b], fsc + "incrementalfetches_total") > 0 for b in leaders)
    asyncio.run(eventually(through_sessions, 20, what="every replica at 60 records, fetched through sessions"))


def test_the_group_coordinator_reports_consumer_lag(cluster):
    """A group's committed offset behind the high watermark, on its coordinator (which leads
    the partition here, as the lag is reported for partitions the coordinator leads)."""
    async def coordinator() -> int | None:
        async with _stub(cluster.address(BROKERS[0])) as stub:
            r = await stub.FindCoordinator(bpb.FindCoordinatorRequest(key="laggards"), timeout=5)
        return r.node_id if r.error_code == 0 else None
    coord = asyncio.run(eventually(coordinator, 30, interval=0.2, what="the coordinator of group laggards"))
    asyncio.run(cluster.create_topic("lagged", assignments=[[coord]]))

    async def produce_and_commit() -> None:
        async with Producer(cluster.bootstrap_servers, acks="all", linger_ms=2) as p:
            for i in range(10):
                await p.send("lagged", f"v{i}".encode(), partition=0)
            await p.flush()


        async def committed() -> bool:  # the coordinator may still be loading its offsets partition
            async with _stub(cluster.address(coord)) as stub:
                r = await stub.OffsetCommit(bpb.OffsetCommitRequest(group_id="laggards", generation_id=-1, topics=[
                    bpb.OffsetCommitTopic(name="lagged", partitions=[bpb.OffsetCommitPartition(partition=0, offset=4)])]),
                    timeout=5)
            return r.topics[0].partitions[0].error_code == 0
        await eventually(committed, 20, interval=0.2, what="offset 4 committed for group laggards")
    asyncio.run(produce_and_commit())

    async def lag() -> bool:
        return value(scrape(ports(cluster)[coord]), "kafka_consumergroup_lag", consumergroup="laggards",
                     topic="lagged", partition="0") == 10 - 4
    asyncio.run(eventually(lag, 20, what="a lag of 6 for group laggards"))


def test_the_transaction_coordinator_reports_transactions_by_state(cluster):
    """kafka_transaction_coordinator_transactions{state}: a transaction open is Ongoing on its
    coordinator, and CompleteCommit once committed (summed over the brokers: only the
    coordinator reports the id)."""
    from clients import Producer as OurProducer

    asyncio.run(cluster.create_topic("transacted", partitions=1, rf=3))

    def total(state: str) -> float:
        return sum(value(scrape(ports(cluster)[b]), "kafka_transaction_coordinator_transactions", state=state)
                   for b in BROKERS)

    async def go() -> None:
        async with OurProducer(cluster.bootstrap_servers, transactional_id="metered-txn", linger_ms=2) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send("transacted", b"v", partition=0)
            await eventually(lambda: total("Ongoing") == 1, 20, interval=0.2, what="one Ongoing transaction")
            await p.commit_transaction()
        await eventually(lambda: total("CompleteCommit") == 1 and total("Ongoing") == 0, 20, interval=0.2,
                         what="one CompleteCommit transaction and none Ongoing")
    asyncio.run(go())


def test_the_dashboard_and_scrape_config_name_what_the_nodes_serve(cluster):
    """Every metric the Grafana dashboard queries is one the nodes serve (their HELP lines
    name even the families that have no sample yet), and prometheus.yml scrapes every node
    of the compose file."""
    def family(name: str) -> str:
        return re.sub(r"_(bucket|count|sum|total)$", "", name)
    served = set()
    for port in ports(cluster).values():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            served |= {family(m) for m in re.findall(r"^# HELP (\S+)", r.read().decode(), re.M)}
    dashboard = json.loads((REPO / "deploy" / "grafana" / "kraft-dashboard.json").read_text())
    queried = {family(m) for p in dashboard["panels"] for t in p["targets"]
               for m in re.findall(r"\b(kafka_[a-z_]+)", t["expr"])}
    assert len(queried) >= 15 and queried <= served, sorted(queried - served)
    compose = (REPO / "deploy" / "docker-compose.yml").read_text()
    nodes = set(re.findall(r"^  ((?:controller|broker)-\d+):", compose, re.M))  # services and volumes
    scrape_config = (REPO / "deploy" / "prometheus.yml").read_text()
    assert len(nodes) == 6 and all(f'"{n}:9404"' in scrape_config for n in nodes)


def test_a_killed_broker_shows_as_fenced_offline_and_under_replicated(cluster):
    asyncio.run(cluster.create_topic("only-on-victim", assignments=[[VICTIM]]))
    asyncio.run(cluster.create_topic("everywhere", partitions=3, rf=3))
    active = active_controller(cluster)
    s = scrape(ports(cluster)[active])
    assert value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0

    async def only_on_victim() -> int:
        """Partitions whose one replica is the victim: the one made here, and the earlier
        test's if its group coordinator was the victim."""
        topics = [await cluster.describe_topic(name) for name in ("only-on-victim", "lagged")]
        return sum(1 for t in topics for p in t.partitions if list(p.replicas) == [VICTIM])
    offline = asyncio.run(only_on_victim())
    cluster.kill(VICTIM)

    async def fenced() -> bool:
        s = scrape(ports(cluster)[active])
        return (value(s, "kafka_controller_kafkacontroller_fencedbrokercount") == 1
                and value(s, "kafka_controller_kafkacontroller_activebrokercount") == 2
                and value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == offline)
    asyncio.run(eventually(fenced, 30, interval=0.1, what="the killed broker fenced and its partitions offline"))

    async def under_replicated() -> bool:
        """Every partition with more than one replica (all include the victim: three brokers)
        lost the victim from its ISR and is under-replicated on its leader, a survivor."""
        expected = 0
        made = ("everywhere", "metered", "replicated", "transacted", "__consumer_offsets",  # earlier tests'
                "__transaction_state")
        for name in made:
            t = await cluster.describe_topic(name)
            expected += sum(1 for p in t.partitions if len(p.replicas) > 1 and p.leader >= 0)
        survivors = [scrape(ports(cluster)[b]) for b in BROKERS if b != VICTIM]
        urp = sum(value(s, "kafka_server_replicamanager_underreplicatedpartitions") for s in survivors)
        return urp >= 3 and urp == expected
    asyncio.run(eventually(under_replicated, 30, interval=0.1, what="under-replicated partitions on the survivors"))

    # back again: the leaders take it into their ISRs (ISR expands), and nothing is missing
    cluster.start_broker(VICTIM)

    async def healed() -> bool:
        s = scrape(ports(cluster)[active])
        try:
            brokers = [scrape(ports(cluster)[b]) for b in BROKERS]
        except OSError:  # the restarted broker is not listening yet
            return False
        return (value(s, "kafka_controller_kafkacontroller_fencedbrokercount") == 0
                and value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
                and sum(value(b, "kafka_server_replicamanager_underreplicatedpartitions") for b in brokers) == 0
                and sum(value(b, "kafka_server_replicamanager_isrexpands_total") for b in brokers) >= 3)
    asyncio.run(eventually(healed, 60, interval=0.2, what="the restarted broker back in every ISR"))


def test_the_controller_event_queue_counts_the_writes_waiting_and_times_their_wait(tmp_path: Path):
    """Kafka's EventQueueSize and EventQueueTimeMs of the active controller (in one process, so
    that a write can be held mid-build): writes that arrive while one is built wait for it,
    counted as they wait, and each one's wait from arrival to the start of its build is timed."""
    from tests.controllers import InProcessQuorum
    queue = "kafka_controller_controllereventmanager_"

    async def go() -> None:
        q = InProcessQuorum(tmp_path)
        await q.start()
        release = threading.Event()
        try:
            server = await q.active()
            c, registry = server.controller, server.metrics.registry

            def sample(name: str) -> float | None:
                return registry.get_sample_value(queue + name)
            # its first write (metadata.version) done: nothing waits
            await eventually(lambda: c.sm.image.metadata_version and sample("eventqueuesize") == 0, 10,
                             what="an idle event queue")
            count, total = sample("event_queue_time_seconds_count"), sample("event_queue_time_seconds_sum")

            def held(view: object) -> tuple[list, None]:  # built in the worker thread until released
                release.wait(30)
                return [], None
            writes = [asyncio.create_task(c.write(held, in_thread=True))]
            writes += [asyncio.create_task(c.write(lambda view: ([], None))) for _ in range(2)]
            await eventually(lambda: sample("eventqueuesize") == 3, 10, what="one write built, two waiting")
            seen = time.monotonic()
            await eventually(lambda: sample("event_queue_time_seconds_count") == count + 1, 10,
                             what="the first write's build started, the others' not")
            held_for = time.monotonic() - seen
            release.set()
            await asyncio.gather(*writes)
            assert sample("eventqueuesize") == 0
            assert sample("event_queue_time_seconds_count") == count + 3
            # the two that waited, waited at least from when they were seen waiting until released
            assert sample("event_queue_time_seconds_sum") - total >= 2 * held_for
        finally:
            release.set()
            await q.stop()
    asyncio.run(go())


def _one_line_failure(cmd: list[str], expected: str) -> None:
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("bad", ["9404", "host:0", "host:99999", "http://x:1", "a b:1"])
def test_a_bad_prometheus_listener_is_one_line(tmp_path: Path, bad: str):
    props = tmp_path / "server.properties"
    props.write_text(f"node.id=1\nprocess.roles=controller\ncontroller.quorum.voters=1@127.0.0.1:19999\n"
                     f"listeners=CONTROLLER://127.0.0.1:19999\nmetadata.log.dir={tmp_path / 'meta'}\n"
                     f"prometheus.listener={bad}\n")
    _one_line_failure([sys.executable, "-m", "kraft.cli", "server-start", str(props)],
                      f"bad prometheus.listener={bad!r}: expected HOST:PORT")


@pytest.mark.parametrize("role", ["controller", "broker", "broker,controller"])
def test_a_prometheus_port_in_use_is_one_line(tmp_path: Path, role: str):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    raft_port = consecutive_ports(2)
    broker_port = raft_port + 1
    listeners = [f"CONTROLLER://127.0.0.1:{raft_port}"] if "controller" in role else []
    if "broker" in role:
        listeners.append(f"PLAINTEXT://127.0.0.1:{broker_port}")
    props = tmp_path / "server.properties"
    props.write_text(f"node.id=1\nprocess.roles={role}\ncontroller.quorum.voters=1@127.0.0.1:{raft_port}\n"
                     f"listeners={','.join(listeners)}\nlog.dirs={tmp_path / 'data'}\n"
                     f"metadata.log.dir={tmp_path / 'meta'}\nprometheus.listener=127.0.0.1:{port}\n")
    kraft = [sys.executable, "-m", "kraft.cli"]
    fmt = subprocess.run([*kraft, "storage", "format", "--cluster-id", "MkU3OEVBNTcwNTJENDM2Qk", "--config",
                          str(props)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert fmt.returncode == 0, fmt.stderr
    try:
        _one_line_failure([*kraft, "server-start", str(props)],
                          f"cannot listen on 127.0.0.1:{port} (prometheus.listener)")
        if role == "broker":
            _one_line_failure([sys.executable, "-m", "brokerd.main", str(props)],
                              f"cannot listen on 127.0.0.1:{port} (prometheus.listener)")
    finally:
        taken.close()


def test_the_request_timing_interceptor_wraps_a_method_once_and_times_every_call():
    """gRPC runs a server's interceptors on every call: the request metrics' interceptor makes
    a method's timed handler at its first call and hands out the same one after (a new one
    only if the service answers the method with another handler), and observes every call."""
    import grpc
    from prometheus_client import CollectorRegistry

    from common.metrics import RequestMetrics

    registry = CollectorRegistry()
    interceptor = RequestMetrics(registry).interceptor("CONTROLLER")

    async def heartbeat(request: object, context: object) -> str:
        return "answer"

    handler = grpc.unary_unary_rpc_method_handler(heartbeat)
    another = grpc.unary_unary_rpc_method_handler(heartbeat)

    class Details:
        method = "/kraft.controller.Controller/BrokerHeartbeat"

    async def go() -> None:
        async def continuation(details: object) -> object:
            return handler

        async def replaced(details: object) -> object:
            return another

        timed = await interceptor.intercept_service(continuation, Details())
        assert await interceptor.intercept_service(continuation, Details()) is timed
        for _ in range(3):
            assert await timed.unary_unary(None, None) == "answer"
        assert await interceptor.intercept_service(replaced, Details()) is not timed

    asyncio.run(go())
    count = registry.get_sample_value("kafka_network_requestmetrics_total_time_seconds_count",
                                      {"request": "BrokerHeartbeat", "listener": "CONTROLLER"})
    assert count == 3
