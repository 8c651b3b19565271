"""The topic and broker configs the controller accepts, with Kafka's names, defaults and value
rules, so INVALID_CONFIG is answered before anything is written."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from raft.config import bounded_int

from .errors import ApiError, ErrorCode

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


def _int(lo: int, hi: int) -> Callable[[str], str | None]:
    def check(v: str) -> str | None:
        try:
            bounded_int(v, lo, hi)
        except ValueError as e:
            return f"value {e}"
        return None
    return check


def _ratio(v: str) -> str | None:
    try:
        n = float(v)
    except ValueError:
        return f"value {v!r} is not a number"
    return None if 0.0 <= n <= 1.0 else f"value {n} must be between 0 and 1"


def _choice(*options: str) -> Callable[[str], str | None]:
    def check(v: str) -> str | None:
        return None if v in options else f"value {v!r} must be one of {', '.join(options)}"
    return check


def _bool(v: str) -> str | None:
    return None if v.lower() in ("true", "false") else f"value {v!r} must be true or false"


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    default: str
    check: Callable[[str], str | None]
    doc: str


TOPIC_CONFIGS = {k.name: k for k in [
    ConfigKey("cleanup.policy", "delete", _choice("delete", "compact", "compact,delete", "delete,compact"),
              "delete old segments, compact by key, or both"),
    ConfigKey("retention.ms", "604800000", _int(-1, LONG_MAX), "how long to keep records (-1: forever)"),
    ConfigKey("retention.bytes", "-1", _int(-1, LONG_MAX), "maximum partition size (-1: unlimited)"),
    ConfigKey("min.insync.replicas", "1", _int(1, INT_MAX),
              "acks=all writes need at least this many in-sync replicas"),
    ConfigKey("max.message.bytes", "1048588", _int(0, INT_MAX), "largest record batch accepted"),
    ConfigKey("segment.bytes", "1073741824", _int(14, INT_MAX), "log segment size"),
    ConfigKey("unclean.leader.election.enable", "false", _bool,
              "elect a leader outside the ISR when no ISR member is alive (may lose data)"),
    ConfigKey("compression.type", "producer",
              _choice("producer", "none", "gzip", "snappy", "lz4", "zstd", "uncompressed"), "codec"),
    ConfigKey("delete.retention.ms", "86400000", _int(0, LONG_MAX),
              "how long a compacted topic keeps a tombstone (a null value)"),
    ConfigKey("min.cleanable.dirty.ratio", "0.5", _ratio,
              "compact once this share of the log was written since the last compaction"),
]}

BROKER_CONFIGS = {k.name: k for k in [
    ConfigKey("log.retention.ms", "604800000", _int(-1, LONG_MAX), "default retention.ms"),
    ConfigKey("log.retention.bytes", "-1", _int(-1, LONG_MAX), "default retention.bytes"),
    ConfigKey("min.insync.replicas", "1", _int(1, INT_MAX), "default min.insync.replicas"),
    ConfigKey("message.max.bytes", "1048588", _int(0, INT_MAX), "default max.message.bytes"),
    ConfigKey("unclean.leader.election.enable", "false", _bool, "default for topics"),
    ConfigKey("replica.lag.time.max.ms", "30000", _int(0, LONG_MAX),
              "a follower behind for longer leaves the ISR"),
    ConfigKey("compression.type", "producer",
              _choice("producer", "none", "gzip", "snappy", "lz4", "zstd", "uncompressed"),
              "default compression.type of topics"),
    ConfigKey("log.cleanup.policy", "delete", _choice("delete", "compact", "compact,delete", "delete,compact"),
              "default cleanup.policy of topics"),
    ConfigKey("log.cleaner.delete.retention.ms", "86400000", _int(0, LONG_MAX), "default delete.retention.ms"),
    ConfigKey("log.cleaner.min.cleanable.ratio", "0.5", _ratio, "default min.cleanable.dirty.ratio"),
    ConfigKey("leader.replication.throttled.rate", "0", _int(0, LONG_MAX),
              "bytes/s a leader sends to replicas a reassignment is adding (0: unthrottled)"),
    ConfigKey("follower.replication.throttled.rate", "0", _int(0, LONG_MAX),
              "bytes/s a replica being added by a reassignment fetches (0: unthrottled)"),
]}


def validate(kind: str, key: str, value: str) -> None:
    """Raise INVALID_CONFIG for an unknown key or a bad value."""
    known = TOPIC_CONFIGS if kind == "topic" else BROKER_CONFIGS
    spec = known.get(key)
    if spec is None:
        raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {key}")
    problem = spec.check(value)
    if problem:
        raise ApiError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {key}: {problem}")


def topic_config(configs: dict[str, str] | None, key: str, broker_defaults: dict[str, str] | None = None) -> str:
    """A topic config's effective value: the topic's, else the cluster default, else Kafka's."""
    if configs and key in configs:
        return configs[key]
    fallback = {"retention.ms": "log.retention.ms", "retention.bytes": "log.retention.bytes",
                "max.message.bytes": "message.max.bytes"}.get(key, key)
    if broker_defaults and fallback in broker_defaults:
        return broker_defaults[fallback]
    return TOPIC_CONFIGS[key].default
