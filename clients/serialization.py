"""Serializers and deserializers (Kafka's ``key.serializer``, ``value.serializer``,
``key.deserializer``, ``value.deserializer``): the producer turns the application's keys and
values into bytes with them, and the consumer turns bytes back. Each is a callable taking the
topic, as Kafka's ``serialize(topic, data)`` does; None stays None (a null key, a tombstone).
Without one, the producer takes bytes (or str, as UTF-8) and the consumer returns bytes."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.config_def import ConfigError

from .cluster_view import ClientError

Serializer = Callable[[str, Any], bytes | None]
Deserializer = Callable[[str, bytes | None], Any]


class SerializationError(ClientError):
    """Kafka's SerializationException: a serializer failed; nothing was sent."""


class RecordDeserializationError(ClientError):
    """Kafka's RecordDeserializationException: the consumer stays at the record, so every
    poll raises this again until the application seeks past it."""

    def __init__(self, part: str, topic: str, partition: int, offset: int, cause: Exception) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        super().__init__(f"Error deserializing {part} for partition {topic}-{partition} at offset {offset}. If "
                         f"needed, please seek past the record to continue consumption. Cause: {cause}")


def checked(fn: object, name: str) -> Any:
    """A serializer setting: None or a callable (a string, e.g. from a properties file, names
    a Java class, which this client cannot load)."""
    if fn is not None and not callable(fn):
        raise ConfigError(f"Invalid value {fn} for configuration {name}: expected a callable (topic, data)")
    return fn


def serialize(fn: Serializer | None, topic: str, data: Any, part: str) -> bytes | None:
    if fn is None or data is None:
        if data is None or isinstance(data, bytes):
            return data
        if isinstance(data, str):
            return data.encode()
        if isinstance(data, (bytearray, memoryview)):
            return bytes(data)
        raise SerializationError(f"Can't convert {part} of class {type(data).__name__} to bytes: set "
                                 f"{part}_serializer")
    try:
        out = fn(topic, data)
    except Exception as e:
        raise SerializationError(f"Error serializing {part} for topic {topic}: {e}") from None
    if out is not None and not isinstance(out, bytes):
        raise SerializationError(f"The {part} serializer returned {type(out).__name__}, not bytes")
    return out
