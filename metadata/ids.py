"""Kafka's textual form of UUIDs (topic ids, cluster ids): URL-safe base64 without padding,
22 characters, as ``kafka-storage.sh random-uuid`` and ``kafka-topics.sh --describe`` print
them. Both that form and the usual hyphenated one are accepted as input."""
from __future__ import annotations

import base64
import uuid


def format_uuid(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def random_id() -> str:
    """A new cluster id, like ``kafka-storage.sh random-uuid``."""
    return format_uuid(uuid.uuid4())


def parse_uuid(text: str) -> uuid.UUID:
    """A UUID in either form; ValueError for anything else."""
    text = text.strip()
    if len(text) == 22:
        raw = base64.urlsafe_b64decode(text + "==")
        if len(raw) == 16:
            return uuid.UUID(bytes=raw)
    return uuid.UUID(text)
