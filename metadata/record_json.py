"""Metadata records as JSON, the way operators read them in tools (the log dump, the shell's
``changes``): Kafka's layout ``{"type": ..., "version": ..., "data": {...}}`` with camelCase
field names, ids as UUID strings and enums by name.

Generic protobuf JSON would print ids as base64 and drop fields at their default (a leader of
0, ``fenced: false``), which hides exactly what an operator is looking for. Fields with
presence that are absent (a PartitionChangeRecord's ``leader``) stay absent: there, absence
means "unchanged".
"""
from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from .records import MetadataRecord, type_name

JsonValue = Any  # None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]

_UUID_FIELDS = frozenset({"topic_id", "incarnation_id", "id"})  # "id": an ACL's
#: A SCRAM credential's secrets, printed as Kafka's dump prints them: redacted. What an operator
#: needs (that the user has a credential, its mechanism and iterations) is shown.
_SECRET_FIELDS = frozenset({"salt", "stored_key", "server_key"})
REDACTED = "(redacted)"


def record_to_dict(record: MetadataRecord) -> dict[str, JsonValue]:
    """``{"type": "PartitionRecord", "version": 1, "data": {...}}``."""
    which = record.WhichOneof("record")
    data = message_to_dict(getattr(record, which)) if which else {}
    return {"type": type_name(record), "version": record.version, "data": data}


def message_to_dict(message: Message) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {}
    for field in message.DESCRIPTOR.fields:
        repeated = field.is_repeated
        if not repeated and field.has_presence and not message.HasField(field.name):
            continue
        value = getattr(message, field.name)
        if field.name in _SECRET_FIELDS:
            out[field.json_name] = REDACTED
        elif repeated:
            out[field.json_name] = [_value(field, v) for v in value]
        else:
            out[field.json_name] = _value(field, value)
    return out


def _value(field: FieldDescriptor, value: Any) -> JsonValue:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.name == "BrokerIds":  # a list whose presence matters: the list
            return list(value.ids)
        return message_to_dict(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if field.type == FieldDescriptor.TYPE_BYTES:
        if field.name in _UUID_FIELDS and len(value) == 16:
            return str(uuid.UUID(bytes=value))
        return value.hex()
    return value


def format_time(ms: int) -> str:
    """An append time as ISO-8601 UTC with milliseconds; ``unknown`` for 0 (not recorded)."""
    if ms <= 0:
        return "unknown"
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms (out of range)"
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
