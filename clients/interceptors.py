"""Producer and consumer interceptors (Kafka's ProducerInterceptor and ConsumerInterceptor,
``interceptor.classes``): the application's hooks around every record sent and every batch of
records polled, for tracing, metrics or stamping headers.

An interceptor implements any of the methods below; they run in the order given, each on the
previous one's result. As in Kafka, an interceptor that raises is logged and skipped (the
record goes on as the previous interceptor left it), never failing the send or the poll.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .accumulator import RecordMetadata
from .records import ConsumerRecord, ProducerRecord

log = logging.getLogger("clients.interceptors")

TopicPartition = tuple[str, int]


class ProducerInterceptor(Protocol):
    """Any subset of: ``on_send(record) -> record`` before the record is serialized and
    partitioned; ``on_acknowledgement(metadata, exception)`` when it was written (exception
    None) or failed (metadata then has the topic, the partition if chosen, and offset -1);
    ``close()`` when the producer closes."""


class ConsumerInterceptor(Protocol):
    """Any subset of: ``on_consume(records) -> records`` before ``poll`` returns them;
    ``on_commit(offsets)`` once the coordinator accepted a commit; ``close()``."""


def on_send(interceptors: Sequence[Any], record: ProducerRecord) -> ProducerRecord:
    for i in interceptors:
        if hasattr(i, "on_send"):
            try:
                record = i.on_send(record)
            except Exception as e:
                log.warning("Error executing interceptor onSend callback: %s", e)
    return record


def on_acknowledgement(interceptors: Sequence[Any], metadata: RecordMetadata,
                       exception: BaseException | None) -> None:
    for i in interceptors:
        if hasattr(i, "on_acknowledgement"):
            try:
                i.on_acknowledgement(metadata, exception)
            except Exception as e:
                log.warning("Error executing interceptor onAcknowledgement callback: %s", e)


def on_consume(interceptors: Sequence[Any], records: list[ConsumerRecord]) -> list[ConsumerRecord]:
    for i in interceptors:
        if hasattr(i, "on_consume"):
            try:
                records = list(i.on_consume(records))
            except Exception as e:
                log.warning("Error executing interceptor onConsume callback: %s", e)
    return records


def on_commit(interceptors: Sequence[Any], offsets: Mapping[TopicPartition, int]) -> None:
    for i in interceptors:
        if hasattr(i, "on_commit"):
            try:
                i.on_commit(dict(offsets))
            except Exception as e:
                log.warning("Error executing interceptor onCommit callback: %s", e)


def close(interceptors: Sequence[Any]) -> None:
    for i in interceptors:
        if hasattr(i, "close"):
            try:
                i.close()
            except Exception as e:
                log.warning("Failed to close interceptor %s: %s", type(i).__name__, e)
