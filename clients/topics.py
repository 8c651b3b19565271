"""Kafka's internal topics, which clients and brokers both need to know by name: only the
brokers write them (a client's produce is refused, ``brokerd.produce``), and a pattern
subscription leaves them out (Kafka's ``exclude.internal.topics``, ``clients.consumer``)."""
from __future__ import annotations

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Kafka's ``Topic.INTERNAL_TOPICS``.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
