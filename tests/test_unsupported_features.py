"""What the cluster lacks fails at once with the error Kafka gives when the feature is off
(issue 27 item 4), so that real clients stop with a clear message instead of retrying to
their timeout: KIP-848's consumer protocol (ConsumerGroupHeartbeat answered
UNSUPPORTED_VERSION) and SASL on a listener that is not SASL (ILLEGAL_SASL_STATE).
Transactions, once refused here, are served (tests/test_transactions.py)."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from tests.brokercluster import BrokerCluster, running_cluster

#: "At once": a round trip or two, with room for a loaded machine; the clients' own timeouts
#: (what they waited for before) are 10 s and more.
AT_ONCE_S = 5.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("unsupported"),
                         {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}) as c:
        yield c


def test_librdkafka_kip848_consumer_stops_at_once(cluster):
    """group.protocol=consumer: ConsumerGroupHeartbeat is listed in ApiVersions and answered
    UNSUPPORTED_VERSION, which librdkafka raises as a fatal error (unlisted, it retried silently)."""
    c = Consumer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "group.id": "kip848",
                  "group.protocol": "consumer"})
    c.subscribe(["kip848-topic"])
    began = time.monotonic()
    error = None
    while error is None and time.monotonic() - began < AT_ONCE_S:
        m = c.poll(0.2)
        if m is not None and m.error():
            error = m.error()
    c.close()
    assert error is not None, f"no error within {AT_ONCE_S}s"
    assert error.code() == KafkaError._FATAL and "API version not supported" in error.str()


def test_librdkafka_sasl_on_a_plaintext_listener_is_refused_at_once(cluster):
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": cluster.kafka_bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "secret",
                  "error_cb": errors.append})
    began = time.monotonic()
    while not errors and time.monotonic() - began < AT_ONCE_S:
        p.poll(0.2)
    assert errors, f"no error within {AT_ONCE_S}s"
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "Request not valid in current SASL state" in errors[0].str()
