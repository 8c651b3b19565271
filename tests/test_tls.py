"""TLS on every listener (issue 17, part 1): three controllers and three brokers whose
controller, broker gRPC and Kafka listeners all require client certificates (mutual TLS), used
end to end by the kraft tools (``--command-config``), our producer and consumer, librdkafka's
kcat and the metadata shell; clients with the wrong certificates, no certificate, an expired
one, one from another CA or no TLS at all are refused with one line and write nothing; a server
with a bad TLS configuration stops at once with one line."""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from clients.security import client_tls, listener_security
from protos import controller_pb2 as cpb
from protos import controller_pb2_grpc
from common.config_def import ConfigError
from common.tls import TLSConfig
from common.channels import dial
from tests.brokercluster import REPO, BrokerCluster, running_cluster
from tests.eventually import eventually

NODES = ["controller-1", "controller-2", "controller-3", "broker-101", "broker-102", "broker-103"]


def make_certs(out: Path, *names: str, days: int = 365) -> None:
    subprocess.run([sys.executable, str(REPO / "deploy" / "make_certs.py"), "--out", str(out),
                    "--days", str(days), *names], check=True, capture_output=True)


def write_props(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def client_props(certs: Path, name: str | None, *, ca: Path | None = None) -> dict[str, str]:
    props = {"security.protocol": "SSL", "ssl.truststore.location": str(ca or certs / "ca.crt")}
    if name is not None:
        props["ssl.keystore.location"] = str(certs / f"{name}.keystore.pem")
    return props


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    """The cluster's CA with every node, an admin and an expired client; another CA's client."""
    d = tmp_path_factory.mktemp("certs")
    make_certs(d / "ca", *NODES, "admin")
    make_certs(d / "ca", "stale", days=-1)
    make_certs(d / "other", "mallory")
    return d


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, certs: Path) -> Iterator[BrokerCluster]:
    ca = certs / "ca"
    tls = {"listener.security.protocol.map": "CONTROLLER:SSL,PLAINTEXT:SSL,KAFKA:SSL",
           "ssl.truststore.location": str(ca / "ca.crt"), "ssl.client.auth": "required"}
    node = {int(n.split("-")[1]): {"ssl.keystore.location": str(ca / f"{n}.keystore.pem")} for n in NODES}
    with running_cluster(tmp_path_factory.mktemp("tls"), tls, node, controller_props=tls,
                         client_tls=client_tls(client_props(ca, "admin"))) as c:
        yield c


def kraft(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft.cli", *args], cwd=REPO, capture_output=True, text=True,
                          input=stdin, timeout=timeout)


def one_line_error(p: subprocess.CompletedProcess) -> str:
    """A refused command: exit 1 and exactly one line on stderr, no traceback."""
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), p.stderr
    return lines[0]


def test_mutual_tls_end_to_end_with_the_tools_and_kafka_clients(cluster: BrokerCluster, certs: Path, tmp_path: Path):
    ca = certs / "ca"
    admin = str(write_props(tmp_path / "admin.properties", client_props(ca, "admin")))
    bc = cluster.quorum.bootstrap

    p = kraft("topics", "--bootstrap-controller", bc, "--command-config", admin, "create", "--topic", "secure",
              "--partitions", "3", "--replication-factor", "3")
    assert p.returncode == 0 and "Created topic secure." in p.stdout, p.stderr
    asyncio.run(cluster.wait_topic("secure", 3))

    # Our producer and consumer over the brokers' TLS gRPC listener; acks=all means every record
    # was also copied by the followers, over TLS, with the brokers' own certificates.
    lines = [f"m{i}" for i in range(200)]
    p = kraft("console-producer", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "secure",
              "--producer.config", admin, stdin="\n".join(lines) + "\n")
    assert p.returncode == 0, p.stderr
    p = kraft("console-consumer", "--bootstrap-server", cluster.bootstrap_servers, "--topic", "secure",
              "--from-beginning", "--max-messages", "200", "--timeout-ms", "20000", "--consumer.config", admin)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.split()) == sorted(lines)

    async def replicated() -> bool:
        t = await cluster.describe_topic("secure")
        return all(len(part.isr) == 3 for part in t.partitions)
    asyncio.run(eventually(replicated, 30, what="every replica of secure in sync over TLS"))

    # librdkafka (kcat) over the Kafka listener with a client certificate.
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (make venv installs Debian's kcat)"
    ssl_args = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={ca / 'ca.crt'}",
                "-X", f"ssl.certificate.location={ca / 'admin.crt'}", "-X", f"ssl.key.location={ca / 'admin.key'}"]
    p = subprocess.run([kcat, "-b", cluster.kafka_bootstrap_servers, *ssl_args, "-t", "secure", "-P", "-p", "0"],
                       input="from-kcat\n", capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([kcat, "-b", cluster.kafka_bootstrap_servers, *ssl_args, "-t", "secure", "-C", "-p", "0",
                        "-o", "beginning", "-e", "-q"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "from-kcat" in p.stdout.split(), p.stderr

    p = kraft("broker-api-versions", "--bootstrap-server", cluster.kafka_bootstrap_servers.split(",")[0],
              "--command-config", admin)
    assert p.returncode == 0 and "Produce(0): 3 to 9" in p.stdout, p.stderr
    p = subprocess.run([sys.executable, "-m", "metadata.shell.main", "--bootstrap-controller", bc,
                        "--command-config", admin, "ls", "/topics"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "secure" in p.stdout.split(), p.stderr
    for node in ("controller-1", "broker-101"):
        p = kraft("health", "--config", str(cluster.quorum.config_path(1) if node == "controller-1"
                                            else cluster.config_path(101)))
        assert p.returncode == 0 and p.stdout.strip() == "healthy", (node, p.stdout, p.stderr)


def test_refused_clients_get_one_line_and_nothing_is_written(cluster: BrokerCluster, certs: Path, tmp_path: Path):
    ca, bc = certs / "ca", cluster.quorum.bootstrap

    def create(topic: str, *config: str) -> subprocess.CompletedProcess:
        return kraft("topics", "--bootstrap-controller", bc, "--command-timeout", "3", *config, "create",
                     "--topic", topic)

    plaintext = one_line_error(create("refused-plaintext"))
    assert "a TLS listener closes connections that do not speak TLS" in plaintext
    for name, props in [("other-ca", client_props(certs / "other", "mallory", ca=ca / "ca.crt")),
                        ("no-cert", client_props(ca, None))]:
        error = one_line_error(create(f"refused-{name}", "--command-config",
                                      str(write_props(tmp_path / f"{name}.properties", props))))
        assert "whose client certificate it does not accept" in error, (name, error)
    # A client that does not trust the servers' CA fails at once: retrying cannot help.
    untrusting = write_props(tmp_path / "untrusting.properties", client_props(ca, "admin", ca=certs / "other" / "ca.crt"))
    error = one_line_error(create("refused-untrusting", "--command-config", str(untrusting)))
    assert "TLS handshake failed: the server's certificate is not signed by a trusted CA" in error
    # Our clients refuse to present an expired certificate at all ...
    stale = write_props(tmp_path / "stale.properties", client_props(ca, "stale"))
    error = one_line_error(create("refused-stale", "--command-config", str(stale)))
    assert "the certificate CN=stale expired on" in error

    # ... and a client that does present one (gRPC directly) is refused by the controller.
    async def raw_create() -> grpc.StatusCode:
        tls = TLSConfig(str(ca / "stale.crt"), str(ca / "stale.key"), str(ca / "ca.crt"))
        async with dial(bc.split(",")[0], tls, []) as ch:
            try:
                await controller_pb2_grpc.ControllerStub(ch).CreateTopics(cpb.CreateTopicsRequest(
                    topics=[cpb.CreatableTopic(name="refused-raw", num_partitions=1, replication_factor=1)]), timeout=3)
            except grpc.aio.AioRpcError as e:
                return e.code()
        return grpc.StatusCode.OK
    assert asyncio.run(raw_create()) == grpc.StatusCode.UNAVAILABLE

    # The Kafka listener: kcat with no TLS, an expired certificate, another CA's certificate.
    kcat = shutil.which("kcat")
    assert kcat
    kafka = cluster.kafka_bootstrap_servers.split(",")[0]
    attempts = {"plaintext": [],
                "expired": ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={ca / 'ca.crt'}",
                            "-X", f"ssl.certificate.location={ca / 'stale.crt'}", "-X", f"ssl.key.location={ca / 'stale.key'}"],
                "other CA": ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={ca / 'ca.crt'}",
                             "-X", f"ssl.certificate.location={certs / 'other' / 'mallory.crt'}",
                             "-X", f"ssl.key.location={certs / 'other' / 'mallory.key'}"]}
    for what, args in attempts.items():
        p = subprocess.run([kcat, "-b", kafka, *args, "-L", "-m", "3"], capture_output=True, text=True, timeout=30)
        assert p.returncode != 0, (what, p.stdout)
    log = cluster.log_path(101).read_text()
    for reason in ("the client does not speak TLS", "certificate has expired", "certificate signature failure"):
        assert f"on listener KAFKA: TLS handshake failed: {reason}" in log, reason

    p = kraft("topics", "--bootstrap-controller", bc, "--command-config",
              str(write_props(tmp_path / "admin.properties", client_props(ca, "admin"))), "list")
    assert p.returncode == 0, p.stderr
    assert not [t for t in p.stdout.split() if t.startswith("refused-")], p.stdout


def test_a_bad_tls_configuration_stops_a_server_with_one_line(certs: Path, tmp_path: Path):
    ca = certs / "ca"
    base = {"node.id": "1", "process.roles": "controller", "controller.quorum.voters": "1@127.0.0.1:1",
            "listeners": "CONTROLLER://127.0.0.1:1", "metadata.log.dir": str(tmp_path / "meta"),
            "listener.security.protocol.map": "CONTROLLER:SSL", "ssl.truststore.location": str(ca / "ca.crt"),
            "ssl.keystore.location": str(ca / "controller-1.keystore.pem")}
    mismatched = tmp_path / "mismatched.pem"
    mismatched.write_text((ca / "admin.key").read_text() + (ca / "controller-1.crt").read_text())
    cases = {
        "cannot read ssl.keystore.location=": {"ssl.keystore.location": str(tmp_path / "missing.pem")},
        "the certificate CN=stale expired on": {"ssl.keystore.location": str(ca / "stale.keystore.pem")},
        "the private key does not belong to the certificate CN=controller-1": {"ssl.keystore.location": str(mismatched)},
        "ssl.keystore.type=JKS is not supported": {"ssl.keystore.type": "JKS"},
        "SASL is not supported": {"listener.security.protocol.map": "CONTROLLER:SASL_SSL"},
        "gRPC listeners take required or none": {"ssl.client.auth": "requested"},
        "needs a key store": {"ssl.keystore.location": ""},
        "Invalid value sometimes for configuration ssl.client.auth": {"ssl.client.auth": "sometimes"},
        # a misspelt listener: Kafka refuses it; served in plaintext it would betray the operator
        "No security protocol defined for listener CONTROLLER": {"listener.security.protocol.map": "CONTROLER:SSL"},
    }
    for expected, change in cases.items():
        config = write_props(tmp_path / "server.properties", {**base, **change})
        p = kraft("server-start", str(config), timeout=30)
        error = one_line_error(p)
        assert expected in error, (expected, error)


def test_kafka_keys_read_as_kafka_reads_them(certs: Path, tmp_path: Path):
    """Inline PEM written over several properties lines, per-listener keys, an encrypted key."""
    ca = certs / "ca"
    chain = (ca / "broker-101.crt").read_text()
    key = (ca / "broker-101.key").read_text()
    continued = lambda pem: " \\\n".join(pem.strip().splitlines())  # noqa: E731 (Kafka's docs write it so)
    path = tmp_path / "inline.properties"
    path.write_text(f"ssl.keystore.certificate.chain={continued(chain)}\nssl.keystore.key={continued(key)}\n"
                    f"ssl.truststore.certificates={continued((ca / 'ca.crt').read_text())}\n"
                    "listener.security.protocol.map=INTERNAL:SSL,EXTERNAL:PLAINTEXT\n"
                    "listener.name.internal.ssl.client.auth=required\n")
    from common.properties import read_properties
    props = read_properties(str(path))
    internal = listener_security(props, "INTERNAL")
    assert internal.is_tls and internal.client_auth == "required" and internal.tls.require_client_auth
    assert internal.tls.cert == chain and "BEGIN CERTIFICATE" in internal.tls.ca
    assert not listener_security(props, "EXTERNAL").is_tls
    with pytest.raises(ConfigError, match="needs a key store"):  # a listener named SSL is SSL (Kafka's default map)
        listener_security({}, "SSL")

    from cryptography.hazmat.primitives import serialization
    encrypted = serialization.load_pem_private_key(key.encode(), None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret")).decode()
    store = tmp_path / "encrypted.pem"
    store.write_text(encrypted + chain)
    opened = client_tls({"security.protocol": "SSL", "ssl.keystore.location": str(store), "ssl.key.password": "s3cret"})
    assert opened is not None and "ENCRYPTED" not in (opened.key or "")
    for password, expected in ((None, "set ssl.key.password"), ("wrong", "a wrong ssl.key.password")):
        props = {"security.protocol": "SSL", "ssl.keystore.location": str(store)}
        if password:
            props["ssl.key.password"] = password
        with pytest.raises(ConfigError, match=expected):
            client_tls(props)
    assert client_tls({"security.protocol": "plaintext", "ssl.keystore.location": "ignored"}) is None
    with pytest.raises(ConfigError, match="use PLAINTEXT or SSL"):
        client_tls({"security.protocol": "TLS"})


def test_a_refused_handshake_is_final_for_that_endpoint_only(certs: Path):
    """Of two endpoints, one serves a certificate the client does not trust: a write that starts
    there moves on to the other and succeeds; only when every endpoint refuses is the failure
    final, at once and in one line."""
    from raft.client import LeaderClient
    from raft.transport import add_port

    async def ok(request: bytes, context: object) -> bytes:
        return b"applied"

    async def go() -> tuple[bytes, str]:
        servers, ports = [], []
        for ca in (certs / "other", certs / "ca"):  # a stranger's certificate, then the cluster's
            server = grpc.aio.server()
            server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
                "t.T", {"Write": grpc.unary_unary_rpc_method_handler(ok)})])
            name = "mallory" if ca.name == "other" else "broker-101"
            ports.append(add_port(server, "127.0.0.1:0", TLSConfig(str(ca / f"{name}.crt"), str(ca / f"{name}.key"))))
            await server.start()
            servers.append(server)
        trust = TLSConfig(ca=str(certs / "ca" / "ca.crt"))
        try:
            client = LeaderClient([f"localhost:{p}" for p in ports], timeout=10, tls=trust)
            answer = await client.call(lambda ch, t: ch.unary_unary("/t.T/Write")(b"x", timeout=t), idempotent=False)
            await client.close()
            lone = LeaderClient([f"localhost:{ports[0]}"], timeout=10, tls=trust)
            try:
                await lone.call(lambda ch, t: ch.unary_unary("/t.T/Write")(b"x", timeout=t), idempotent=False)
                error = ""
            except RuntimeError as e:
                error = str(e)
            await lone.close()
            return answer, error
        finally:
            for server in servers:
                await server.stop(None)
    answer, error = asyncio.run(go())
    assert answer == b"applied"
    assert error.endswith("TLS handshake failed: the server's certificate is not signed by a trusted CA (the trust store)")
