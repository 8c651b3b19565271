"""SASL on the Kafka listeners (issue 29 item 1): PLAIN and SCRAM-SHA-256/512 over
SASL_PLAINTEXT and SASL_SSL with real clients (librdkafka, kafka-python, aiokafka); the
principal User:<name> is what the ACLs see; a failed login is refused at once; a credential
removed with `kraft configs` stops new logins; before a login only ApiVersions and the SASL
exchange are served."""
from __future__ import annotations

import asyncio
import shutil
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, KafkaError, Producer

from kraft.cli import main as kraft
from kraft.users import alter_request
from metadata.acls import AclOperation, AclPermissionType, AclResourceType, PatternType
from metadata.client import ControllerClient
from protos import controller_pb2 as pb
from tests.acl_node import CombinedNode
from tests.brokercluster import REPO

ADMIN, ALICE = ("admin", "admin-secret"), ("alice", "alice-secret")
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
        'user_admin="admin-secret" user_alice="alice-secret";')
#: The session lifetime of the KAFKA_REAUTH listener (KIP-368).
REAUTH_MS = 1500
#: A refused login must be told well within this (the clients' own timeouts are 30 s and more).
AT_ONCE_S = 5.0


def acl(rtype: AclResourceType, name: str, op: AclOperation, principal: str = "User:alice") -> pb.AclBinding:
    return pb.AclBinding(resource_type=rtype, resource_name=name, pattern_type=PatternType.LITERAL,
                         principal=principal, host="*", operation=op, permission_type=AclPermissionType.ALLOW)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sasl-certs")
    subprocess.run([sys.executable, str(REPO / "deploy" / "make_certs.py"), "--out", str(d), "broker"], check=True,
                   capture_output=True)
    return d


@pytest.fixture(scope="module")
def node(tmp_path_factory, certs: Path) -> Iterator[CombinedNode]:
    n = CombinedNode(tmp_path_factory.mktemp("sasl"), extra_listeners=("KAFKA_SSL", "KAFKA_REAUTH"), **{
        "super.users": "User:ANONYMOUS;User:admin",  # the node's own plaintext gRPC requests, and the admin
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,KAFKA:SASL_PLAINTEXT,"
                                          "KAFKA_SSL:SASL_SSL,KAFKA_REAUTH:SASL_PLAINTEXT",
        "kafka.listener.names": "KAFKA,KAFKA_SSL,KAFKA_REAUTH",
        "listener.name.kafka_reauth.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.kafka_reauth.plain.sasl.jaas.config": JAAS,
        "listener.name.kafka_reauth.connections.max.reauth.ms": str(REAUTH_MS),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.kafka.plain.sasl.jaas.config": JAAS,
        "listener.name.kafka_ssl.plain.sasl.jaas.config": JAAS,
        "listener.name.kafka_ssl.ssl.keystore.location": str(certs / "broker.keystore.pem"),
        "connection.failed.authentication.delay.ms": "100"})
    for user, password in (ADMIN, ALICE):
        r = n.run(n.call(ControllerClient.alter_user_scram_credentials, alter_request(
            user, f"SCRAM-SHA-256=[password={password}],SCRAM-SHA-512=[iterations=8192,password={password}]", None)))
        assert all(x.error_code == 0 for x in r.results), r
    n.run(n.call(ControllerClient.create_topics, pb.CreateTopicsRequest(topics=[
        pb.CreatableTopic(name=t, num_partitions=1, replication_factor=1) for t in ("a", "b")])))
    r = n.run(n.call(ControllerClient.create_acls, pb.CreateAclsRequest(creations=[
        acl(AclResourceType.TOPIC, "a", AclOperation.WRITE), acl(AclResourceType.TOPIC, "a", AclOperation.READ),
        acl(AclResourceType.GROUP, "alice-group", AclOperation.READ),
        acl(AclResourceType.TOPIC, "b", AclOperation.ALL, "User:bob"),
        acl(AclResourceType.GROUP, "bob-group", AclOperation.READ, "User:bob")])))
    assert all(x.error_code == 0 for x in r.results), r
    yield n
    n.close()


def sasl(node: CombinedNode, mechanism: str, user: tuple[str, str], **extra: str) -> dict[str, str]:
    return {"bootstrap.servers": node.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user[0], "sasl.password": user[1], **extra}


def produce_and_consume(config: dict[str, str], topic: str, group: str) -> None:
    value = uuid.uuid4().hex.encode()
    p = Producer(config)
    p.produce(topic, value)
    assert p.flush(20) == 0
    c = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None and m.value() == value:
                return
            assert m is None or m.error() is None or m.error().code() == KafkaError._PARTITION_EOF, m.error()
        raise AssertionError(f"{value!r} not consumed")
    finally:
        c.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_librdkafka_produces_and_consumes_with_each_mechanism(node: CombinedNode, mechanism: str):
    produce_and_consume(sasl(node, mechanism, ADMIN), "a", f"admin-{mechanism}")


def test_librdkafka_over_sasl_ssl(node: CombinedNode, certs: Path):
    config = sasl(node, "SCRAM-SHA-512", ADMIN, **{"security.protocol": "SASL_SSL", "ssl.ca.location":
                                                   str(certs / "ca.crt")})
    config["bootstrap.servers"] = f"127.0.0.1:{node.ports['KAFKA_SSL']}"
    produce_and_consume(config, "a", "admin-ssl")


def test_kafka_python_and_aiokafka(node: CombinedNode):
    from kafka import KafkaConsumer, KafkaProducer
    p = KafkaProducer(bootstrap_servers=node.kafka_bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ADMIN[0], sasl_plain_password=ADMIN[1])
    p.send("b", b"from kafka-python").get(timeout=20)
    p.close()
    c = KafkaConsumer("b", bootstrap_servers=node.kafka_bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="PLAIN", sasl_plain_username=ADMIN[0], sasl_plain_password=ADMIN[1],
                      auto_offset_reset="earliest", consumer_timeout_ms=20000)
    assert b"from kafka-python" in [m.value for m in c]
    c.close()

    async def aio() -> None:
        from aiokafka import AIOKafkaProducer
        ap = AIOKafkaProducer(bootstrap_servers=node.kafka_bootstrap, security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=ADMIN[0],
                              sasl_plain_password=ADMIN[1])
        await ap.start()
        try:
            await ap.send_and_wait("b", b"from aiokafka")
        finally:
            await ap.stop()
    asyncio.run(aio())


def auth_error(config: dict[str, str]) -> tuple[KafkaError, float]:
    """The first error librdkafka reports for ``config``, and how long it took."""
    errors: list[KafkaError] = []
    p = Producer({**config, "error_cb": errors.append})
    began = time.monotonic()
    while not errors and time.monotonic() - began < 30:
        p.poll(0.1)
    took = time.monotonic() - began
    assert errors, "no error in 30 s"
    return errors[0], took


@pytest.mark.parametrize("mechanism,user,message", [
    ("SCRAM-SHA-512", ("alice", "wrong"), "Authentication failed during authentication due to invalid credentials "
                                          "with SASL mechanism SCRAM-SHA-512"),
    ("SCRAM-SHA-256", ("nobody", "x"), "Authentication failed during authentication due to invalid credentials "
                                       "with SASL mechanism SCRAM-SHA-256"),
    ("PLAIN", ("alice", "wrong"), "Authentication failed: Invalid username or password"),
])
def test_a_failed_login_is_refused_at_once(node: CombinedNode, mechanism: str, user: tuple[str, str], message: str):
    error, took = auth_error(sasl(node, mechanism, user))
    assert error.code() == KafkaError._AUTHENTICATION and message in error.str(), error.str()
    assert took < AT_ONCE_S, f"refused after {took:.1f}s"


def test_kafka_python_wrong_password_is_refused_at_once(node: CombinedNode, caplog: pytest.LogCaptureFixture):
    """kafka-python hears SASL_AUTHENTICATION_FAILED on its first connection (it then backs off
    and retries until its bootstrap timeout, as it does against Kafka)."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PyKafkaError
    began = time.time()
    with caplog.at_level("WARNING", logger="kafka"), pytest.raises(PyKafkaError):
        KafkaProducer(bootstrap_servers=node.kafka_bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice", sasl_plain_password="wrong",
                      bootstrap_timeout_ms=3000)
    refused = [r for r in caplog.records if "SaslAuthenticationFailedError" in r.getMessage()]
    assert refused, [r.getMessage() for r in caplog.records]
    assert ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-512") in refused[0].getMessage()
    assert refused[0].created - began < AT_ONCE_S, f"refused after {refused[0].created - began:.1f}s"


def test_acls_bind_to_the_sasl_principal(node: CombinedNode):
    produce_and_consume(sasl(node, "SCRAM-SHA-512", ALICE), "a", "alice-group")
    p = Producer(sasl(node, "SCRAM-SHA-512", ALICE))
    outcome: list[KafkaError | None] = []
    p.produce("b", b"refused", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(20)
    assert outcome and outcome[0] is not None and outcome[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_user_removed_with_kraft_configs_can_no_longer_log_in(node: CombinedNode):
    def configs(*args: str) -> str:
        r = CliRunner().invoke(kraft, ["configs", "--bootstrap-controller", node.bootstrap, "--entity-type", "users",
                                       *args])
        assert r.exit_code == 0, r.output
        return r.output
    configs("--alter", "--entity-name", "bob", "--add-config", "SCRAM-SHA-512=[password=bob-secret]")
    bob = sasl(node, "SCRAM-SHA-512", ("bob", "bob-secret"))
    produce_and_consume(bob, "b", "bob-group")
    configs("--alter", "--entity-name", "bob", "--delete-config", "SCRAM-SHA-512")
    error, took = auth_error(bob)  # a new connection
    assert error.code() == KafkaError._AUTHENTICATION and took < AT_ONCE_S


def request(api_key: int, version: int, body: bytes, client_id: bytes = b"t") -> bytes:
    header = struct.pack(">hhih", api_key, version, 1, len(client_id)) + client_id
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_only_the_sasl_exchange_is_served_before_a_login(node: CombinedNode, tmp_path: Path):
    host, port = node.kafka_bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request(18, 0, b""))  # ApiVersions v0: served
        size = struct.unpack(">i", s.recv(4))[0]
        assert size > 0
        while size > 0:
            size -= len(s.recv(size))
        s.sendall(request(3, 1, struct.pack(">i", -1)))  # Metadata v1, every topic: closes the connection
        assert s.recv(4) == b""


def test_admin_clients_manage_credentials_over_sasl(node: CombinedNode):
    """AlterUserScramCredentials / DescribeUserScramCredentials on the Kafka listener, forwarded
    to the controller: librdkafka's AdminClient salts the password itself, as Kafka's does.
    (Its answers with an error, librdkafka 2.x's binding crashes on: kafka-python reads those.)"""
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)
    from kafka import KafkaAdminClient
    from kafka.errors import ClusterAuthorizationFailedError
    admin = AdminClient(sasl(node, "SCRAM-SHA-512", ADMIN))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion("carol", info, b"carol-secret")]).values():
        f.result(20)
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(20)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    assert Producer(sasl(node, "SCRAM-SHA-256", ("carol", "carol-secret"))).list_topics(timeout=20).brokers
    for f in admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)
                                                 ]).values():
        f.result(20)

    def kafka_python(user: tuple[str, str]) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=node.kafka_bootstrap, security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user[0],
                                sasl_plain_password=user[1])
    py = kafka_python(ADMIN)
    assert py.describe_user_scram_credentials(["carol"]) == {"carol": {
        "error": "Attempt to describe a user credential that does not exist", "credential_infos": []}}
    py.close()
    alice = kafka_python(ALICE)
    with pytest.raises(ClusterAuthorizationFailedError, match="User:alice may not DESCRIBE the cluster"):
        alice.describe_user_scram_credentials(["carol"])
    alice.close()


def exchange(s: socket.socket, api_key: int, version: int, body: bytes) -> bytes:
    """One request and its response body (non-flexible versions: a v0 response header)."""
    s.sendall(request(api_key, version, body))
    head = s.recv(4)
    if not head:
        return b""
    size = struct.unpack(">i", head)[0]
    data = b""
    while len(data) < size:
        chunk = s.recv(size - len(data))
        assert chunk, "closed mid-response"
        data += chunk
    return data[4:]  # after the correlation id


def plain_login(s: socket.socket, user: str, password: str) -> tuple[int, int]:
    """SaslHandshake v1 and SaslAuthenticate v1 with PLAIN: (error code, session lifetime ms)."""
    mechanism = b"PLAIN"
    handshake = exchange(s, 17, 1, struct.pack(">h", len(mechanism)) + mechanism)
    assert struct.unpack_from(">h", handshake)[0] == 0
    token = b"\0" + user.encode() + b"\0" + password.encode()
    answer = exchange(s, 36, 1, struct.pack(">i", len(token)) + token)
    code, message_len = struct.unpack_from(">hh", answer)
    at = 4 + max(message_len, 0)
    token_len = struct.unpack_from(">i", answer, at)[0]
    lifetime = struct.unpack_from(">q", answer, at + 4 + token_len)[0]
    return code, lifetime


def test_sessions_expire_unless_the_client_re_authenticates(node: CombinedNode):
    """KIP-368: SaslAuthenticate v1+ tells the session lifetime (connections.max.reauth.ms); a
    client that logs in again on its connection goes on, one that does not is disconnected at
    its next request after the lifetime."""
    with socket.create_connection(("127.0.0.1", node.ports["KAFKA_REAUTH"]), timeout=10) as s:
        assert plain_login(s, *ADMIN) == (0, REAUTH_MS)
        logged_in = time.monotonic()
        metadata_v1 = struct.pack(">i", -1)
        assert exchange(s, 3, 1, metadata_v1)  # served
        while time.monotonic() < logged_in + REAUTH_MS / 2000:  # half the lifetime gone: re-authenticate
            time.sleep(0.05)
        assert plain_login(s, *ADMIN) == (0, REAUTH_MS)
        while time.monotonic() < logged_in + REAUTH_MS / 1000 + 0.1:  # the first session's lifetime is over
            time.sleep(0.05)
        assert exchange(s, 3, 1, metadata_v1)  # still served: the second login's session goes on
        assert plain_login(s, *ALICE)[0] == 58  # another principal on the same connection: refused, closed
    with socket.create_connection(("127.0.0.1", node.ports["KAFKA_REAUTH"]), timeout=10) as s:
        assert plain_login(s, *ADMIN) == (0, REAUTH_MS)
        logged_in = time.monotonic()
        while time.monotonic() < logged_in + REAUTH_MS / 1000 + 0.1:  # the lifetime is over
            time.sleep(0.05)
        assert exchange(s, 3, 1, metadata_v1) == b""  # closed instead of served


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_kcat_logs_in(node: CombinedNode, mechanism: str):
    """kcat's librdkafka (2.0 on Debian) sends its client nonce twice in the client-final
    message, which Kafka accepts (the nonce must end with the server's); so must this broker."""
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is not installed (make test installs it)"
    p = subprocess.run([kcat, "-b", node.kafka_bootstrap, "-X", "security.protocol=SASL_PLAINTEXT", "-X",
                        f"sasl.mechanism={mechanism}", "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret",
                        "-L", "-t", "a", "-m", "10"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and 'topic "a" with 1 partitions' in p.stdout, p.stderr
