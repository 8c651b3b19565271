"""Kafka's textual form of UUIDs (topic ids, cluster ids): URL-safe base64 without padding,
22 characters, as ``kafka-storage.sh random-uuid`` and ``kafka-topics.sh --describe`` print
them. Both that form and the usual hyphenated one are accepted as input."""
from __future__ import annotations

import base64
import uuid


def format_uuid(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def parse_uuid(text: str) -> uuid.UUID:
    text = text.strip()
    if len(text) == 22:
        try:
            return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
        except (ValueError, TypeError):
            pass
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a UUID (22-character base64 or hyphenated hex)") from None


def random_id() -> str:
    """A new cluster id, like ``kafka-storage.sh random-uuid``."""
    return format_uuid(uuid.uuid4())
