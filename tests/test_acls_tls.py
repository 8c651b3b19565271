"""Authorization over mutual TLS (issue 17, part 2), with real processes: three controllers and
two brokers whose every listener requires client certificates, the authorizer on, the nodes
and an admin in super.users, principals User:<CN> by ssl.principal.mapping.rules. A client
certificate without ACLs (User:alice) is refused for produce, fetch, create and describe, over
gRPC (the kraft tools, our producer and consumer) and the Kafka listener (kcat), each with one
line; after `kraft acls --add` the same commands succeed; the ACLs hold through a `kill -9` of
the active controller and a restart of every node. A follower's Fetch on the Kafka listener is
served to a broker's certificate only (CLUSTER_ACTION)."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from brokerd.kafka.replica_client import KafkaLeaderClient
from clients.security import client_tls
from common.errors import ErrorCode
from common.tls import TLSConfig
from metadata.authorizer import STANDARD_AUTHORIZER
from protos import broker_pb2 as bpb
from protos import controller_pb2 as cpb
from tests.brokercluster import BrokerCluster, running_cluster
from tests.eventually import eventually
from tests.test_tls import client_props, kraft, make_certs, one_line_error, write_props

NODES = ["controller-1", "controller-2", "controller-3", "broker-101", "broker-102"]
MAPPING = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"
DENIED = "Not authorized to access topics: [{}] (User:alice may not {} it)"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    make_certs(d, *NODES, "admin", "alice")
    return d


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[BrokerCluster]:
    security = {"listener.security.protocol.map": "CONTROLLER:SSL,PLAINTEXT:SSL,KAFKA:SSL",
                "ssl.truststore.location": str(certs / "ca.crt"), "ssl.client.auth": "required",
                "ssl.principal.mapping.rules": MAPPING, "authorizer.class.name": STANDARD_AUTHORIZER,
                "super.users": ";".join(f"User:{n}" for n in [*NODES, "admin"])}
    node: dict[int, dict[str, str]] = {int(n.split("-")[1]): {"ssl.keystore.location": str(certs / f"{n}.keystore.pem")}
                                       for n in NODES}
    for bid in (101, 102):  # followers replicate over the leader's Kafka listener, with their certificates
        node[bid]["replica.fetch.protocol"] = "kafka"
    with running_cluster(tmp_path_factory.mktemp("acls-tls"), security, node, brokers=2, controller_props=security,
                         client_tls=client_tls(client_props(certs, "admin"))) as c:
        yield c


def ok(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0 and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    return p.stdout


def test_a_certificate_without_acls_is_refused_then_allowed(cluster: BrokerCluster, certs: Path,
                                                            tmp_path: Path) -> None:
    admin = str(write_props(tmp_path / "admin.properties", client_props(certs, "admin")))
    alice = str(write_props(tmp_path / "alice.properties", client_props(certs, "alice")))
    bc, bs = cluster.quorum.bootstrap, cluster.bootstrap_servers
    ok(kraft("topics", "--bootstrap-controller", bc, "--command-config", admin, "create", "--topic", "orders",
             "--partitions", "2", "--replication-factor", "2"))
    asyncio.run(cluster.wait_topic("orders", 2))

    def create(topic: str) -> subprocess.CompletedProcess:
        return kraft("topics", "--bootstrap-controller", bc, "--command-config", alice, "create", "--topic", topic,
                     "--replication-factor", "2")

    def describe() -> subprocess.CompletedProcess:
        return kraft("topics", "--bootstrap-controller", bc, "--command-config", alice, "describe", "--topic",
                     "orders")

    def produce(*values: str) -> subprocess.CompletedProcess:
        return kraft("console-producer", "--bootstrap-server", bs, "--topic", "orders", "--producer.config", alice,
                     "--max-block-ms", "10000", stdin="".join(f"{v}\n" for v in values))

    def consume(n: int) -> subprocess.CompletedProcess:
        return kraft("console-consumer", "--bootstrap-server", bs, "--topic", "orders", "--from-beginning",
                     "--max-messages", str(n), "--timeout-ms", "15000", "--consumer.config", alice)

    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (make venv installs Debian's kcat)"
    kcat_tls = ["-b", cluster.kafka_bootstrap_servers, "-X", "security.protocol=ssl",
                "-X", f"ssl.ca.location={certs / 'ca.crt'}", "-X", f"ssl.certificate.location={certs / 'alice.crt'}",
                "-X", f"ssl.key.location={certs / 'alice.key'}", "-t", "orders"]

    def kcat_produce(value: str) -> subprocess.CompletedProcess:
        return subprocess.run([kcat, *kcat_tls, "-P", "-p", "0"], input=f"{value}\n", capture_output=True, text=True,
                              timeout=60)

    # no ACLs: refused, each with one line
    assert one_line_error(create("alice-1")) == f"Error: TOPIC_AUTHORIZATION_FAILED: {DENIED.format('alice-1', 'CREATE')}"
    assert one_line_error(describe()) == f"Error: TOPIC_AUTHORIZATION_FAILED: {DENIED.format('orders', 'DESCRIBE')}"
    sent = produce("refused")
    assert sent.returncode == 1 and sent.stderr.splitlines() == [
        "Error when sending message to topic orders with key: null, value: 7 bytes with error: "
        "TOPIC_AUTHORIZATION_FAILED: Not authorized to access topics: [orders]"]
    fetched = consume(1)
    assert fetched.returncode == 1 and fetched.stderr.splitlines()[0] == (
        "Error processing message, terminating consumer process: TOPIC_AUTHORIZATION_FAILED: Not authorized to "
        "access topics: [orders]")
    librdkafka = kcat_produce("refused")
    assert librdkafka.returncode != 0 and "authorization failed" in librdkafka.stderr.lower(), librdkafka.stderr

    # the admin grants alice her ACLs
    acls = ["acls", "--bootstrap-controller", bc, "--command-config", admin, "--add", "--allow-principal", "User:alice"]
    ok(kraft(*acls, "--operation", "Write", "--operation", "Read", "--topic", "orders"))
    ok(kraft(*acls, "--operation", "Create", "--topic", "alice-", "--resource-pattern-type", "prefixed"))

    async def allowed_everywhere() -> None:
        """Until both brokers act on the new ACLs (they apply the metadata log shortly after)."""
        from tests.eventually import eventually
        await eventually(lambda: produce("hello").returncode == 0, 30, interval=0.5, what="alice may produce")
    asyncio.run(allowed_everywhere())
    assert "Created topic alice-1." in ok(create("alice-1"))
    assert "Topic: orders" in ok(describe())
    ok(kcat_produce("from-kcat"))
    assert {"hello", "from-kcat"} <= set(ok(consume(2)).split())

    # kill -9 of the active controller, then a restart of every node: the ACLs hold
    async def active_controller() -> int:
        async with cluster.controller() as c:
            return (await c.describe_quorum(cpb.DescribeQuorumRequest())).leader_id
    leader = asyncio.run(active_controller())
    cluster.quorum.kill(leader)
    assert "Topic: orders" in ok(describe())
    assert "Created topic alice-2." in ok(create("alice-2"))
    cluster.quorum.start_node(leader)
    cluster.restart_all()
    ok(produce("after-restart"))
    assert "after-restart" in ok(consume(4)).split()
    assert one_line_error(create("bob-1")) == f"Error: TOPIC_AUTHORIZATION_FAILED: {DENIED.format('bob-1', 'CREATE')}"
    listed = ok(kraft("acls", "--bootstrap-controller", bc, "--command-config", admin, "--list",
                      "--principal", "User:alice"))
    assert listed.count("principal=User:alice") == 3


def test_only_a_broker_certificate_fetches_as_a_replica_on_the_kafka_listener(cluster: BrokerCluster, certs: Path,
                                                                             tmp_path: Path) -> None:
    """Followers fetch over the leader's Kafka listener (replica.fetch.protocol=kafka): a Fetch
    naming a replica id needs CLUSTER_ACTION on the cluster (a broker's certificate here), as in
    Kafka, whose answer to anyone else is TOPIC_AUTHORIZATION_FAILED; READ on the topic lets a
    client fetch as a consumer, not as a replica."""
    admin = str(write_props(tmp_path / "admin.properties", client_props(certs, "admin")))
    asyncio.run(cluster.create_topic("replicated", partitions=1, rf=2))
    asyncio.run(cluster.wait_topic("replicated", 1))
    ok(kraft("acls", "--bootstrap-controller", cluster.quorum.bootstrap, "--command-config", admin, "--add",
             "--allow-principal", "User:alice", "--operation", "Read", "--topic", "replicated"))
    p = asyncio.run(cluster.describe_topic("replicated")).partitions[0]
    follower = next(b for b in p.replicas if b != p.leader)

    async def fetch_as(name: str, replica_id: int) -> int:
        tls = TLSConfig(cert=str(certs / f"{name}.crt"), key=str(certs / f"{name}.key"), ca=str(certs / "ca.crt"))
        leader = KafkaLeaderClient(f"127.0.0.1:{cluster.kafka_ports[p.leader]}", tls, follower)
        try:
            _, _, answers = await leader.fetch_partitions(leader.fetch_request(bpb.FetchRequest(
                replica_id=replica_id, max_wait_ms=0, session_epoch=-1, topics=[bpb.FetchTopic(
                    name="replicated", partitions=[bpb.FetchPartition(partition=0, fetch_offset=0,
                                                                      current_leader_epoch=p.leader_epoch)])])),
                timeout=10)
        finally:
            await leader.close()
        return answers[0].error_code

    async def alice_reads() -> bool:
        return await fetch_as("alice", -1) == ErrorCode.NONE
    asyncio.run(eventually(alice_reads, 30, interval=0.5, what="the leader to apply alice's READ"))
    assert asyncio.run(fetch_as("alice", follower)) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert asyncio.run(fetch_as(f"broker-{follower}", follower)) == ErrorCode.NONE
