"""The client library for the brokers, apart from the brokers as Kafka keeps ``clients/``:
the producer, the consumer, the console tools, and what the brokers share with them (the
record batch format, ``records``; Kafka's error codes and ``KafkaError`` are the floor's,
``common.errors``). It depends on nothing in
``brokerd``, ``metadata`` or ``raft`` (tests/test_layering.py).

The names below are imported when first used (PEP 562), not with the package: every
``clients.X`` import (the error codes, an address parser) would otherwise load the producer
and the consumer too, a quarter of a second of each ``kraft`` call (bench/cli_startup.py)."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cluster_view import ClientError, KafkaTimeoutError
    from .consumer import Consumer
    from .producer import ACKS, Producer, RecordMetadata, RecordTooLargeError, producer_config
    from .records import ConsumerRecord, ProducerRecord
    from .serialization import RecordDeserializationError, SerializationError
    from .consumer_coordinator import ConsumerGroupMetadata
    from .transactions import (ProducerFencedError, TransactionAbortableError, TransactionAbortedError,
                               TransactionFatalError)

_HOME = {"ClientError": "cluster_view", "KafkaTimeoutError": "cluster_view",
         "Consumer": "consumer", "ACKS": "producer", "Producer": "producer",
         "RecordMetadata": "producer", "RecordTooLargeError": "producer", "producer_config": "producer",
         "ConsumerRecord": "records", "ProducerRecord": "records",
         "SerializationError": "serialization", "RecordDeserializationError": "serialization",
         "ConsumerGroupMetadata": "consumer_coordinator", "ProducerFencedError": "transactions",
         "TransactionAbortableError": "transactions", "TransactionAbortedError": "transactions",
         "TransactionFatalError": "transactions"}

__all__ = ["Producer", "Consumer", "RecordMetadata", "ConsumerRecord", "ProducerRecord", "ClientError",
           "KafkaTimeoutError", "RecordTooLargeError",
           "SerializationError", "RecordDeserializationError", "ACKS", "producer_config",
           "ConsumerGroupMetadata", "ProducerFencedError", "TransactionAbortableError", "TransactionAbortedError",
           "TransactionFatalError"]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value
