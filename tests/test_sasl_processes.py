"""SCRAM credentials across a cluster of real processes (issue 29): a credential added with
`kraft configs` lets its user log in on every broker without a restart, survives kill -9 of
every node, and once removed refuses new logins on every broker."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.brokercluster import REPO, BrokerCluster, running_cluster
from tests.eventually import eventually

SASL = {"listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,KAFKA:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("sasl-processes"), SASL) as c:
        yield c


def kraft_users(c: BrokerCluster, *args: str) -> None:
    p = subprocess.run([sys.executable, "-m", "kraft.cli", "configs", "--bootstrap-controller", c.quorum.bootstrap,
                        "--entity-type", "users", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def login(port: int, password: str) -> KafkaError | None:
    """None when ``alice`` logs in on this broker alone (a Metadata answered), else the error."""
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": password,
                  "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            p.list_topics(timeout=0.5)
            return None
        except KafkaException:
            p.poll(0.1)  # serves error_cb: the authentication error, if that was it
            if errors:
                return errors[0]
    return KafkaError(KafkaError._TRANSPORT)


async def every_broker(c: BrokerCluster, password: str, refused: bool) -> None:
    for bid, port in c.kafka_ports.items():
        async def settled(port: int = port) -> bool:
            error = await asyncio.to_thread(login, port, password)
            if refused:
                return error is not None and error.code() == KafkaError._AUTHENTICATION
            return error is None
        await eventually(settled, 30, what=f"broker {bid} {'refusing' if refused else 'accepting'} alice")


def test_a_credential_reaches_every_broker_survives_kill_9_and_is_removed_everywhere(cluster: BrokerCluster):
    c = cluster
    asyncio.run(every_broker(c, "alice-secret", refused=True))  # no credential yet
    kraft_users(c, "--alter", "--entity-name", "alice", "--add-config",
                "SCRAM-SHA-512=[iterations=8192,password=alice-secret]")
    asyncio.run(every_broker(c, "alice-secret", refused=False))
    # kill -9 every node, then start them again: the credential comes back from the log
    for bid in c.ids:
        c.kill(bid)
    for nid in list(c.quorum.procs):
        c.quorum.kill(nid, signal.SIGKILL)
    for nid in list(c.quorum.procs):
        c.quorum.start_node(nid)
    for bid in c.ids:
        c.start_broker(bid)
    asyncio.run(c.wait_unfenced(timeout=60))
    asyncio.run(every_broker(c, "alice-secret", refused=False))
    assert login(c.kafka_ports[c.ids[0]], "wrong") is not None
    kraft_users(c, "--alter", "--entity-name", "alice", "--delete-config", "SCRAM-SHA-512")
    asyncio.run(every_broker(c, "alice-secret", refused=True))
