"""The topic and broker configs the controller accepts, with Kafka's names, defaults and value
rules, so INVALID_CONFIG is answered before anything is written."""
from __future__ import annotations

from common.config_def import INT_MAX, LONG_MAX, ConfigKey, boolean, in_range, one_of, ratio
from common.server_keys import CLEANUP_POLICIES, COMPRESSION_TYPES, SERVER_KEYS, TIMESTAMP_TYPES

from common.errors import ErrorCode, KafkaError

TOPIC_CONFIGS = {k.name: k for k in [
    ConfigKey("cleanup.policy", "string", "delete", "delete old segments, compact by key, or both",
              one_of(*CLEANUP_POLICIES)),
    ConfigKey("retention.ms", "int", "604800000", "how long to keep records (-1: forever)", in_range(-1)),
    ConfigKey("retention.bytes", "int", "-1", "maximum partition size (-1: unlimited)", in_range(-1)),
    ConfigKey("min.insync.replicas", "int", "1", "acks=all writes need at least this many in-sync replicas",
              in_range(1, INT_MAX)),
    ConfigKey("max.message.bytes", "int", "1048588", "largest record batch accepted", in_range(0, INT_MAX)),
    ConfigKey("segment.bytes", "int", "1073741824", "log segment size", in_range(14, INT_MAX)),
    ConfigKey("unclean.leader.election.enable", "boolean", "false",
              "elect a leader outside the ISR when no ISR member is alive (may lose data)", boolean),
    ConfigKey("compression.type", "string", "producer", "codec", one_of(*COMPRESSION_TYPES)),
    ConfigKey("message.timestamp.type", "string", "CreateTime",
              "the records' timestamps: the producer's (CreateTime) or the leader's clock (LogAppendTime)",
              one_of(*TIMESTAMP_TYPES)),
    ConfigKey("delete.retention.ms", "int", "86400000", "how long a compacted topic keeps a tombstone (a null value)",
              in_range(0, LONG_MAX)),
    ConfigKey("min.cleanable.dirty.ratio", "double", "0.5",
              "compact once this share of the log was written since the last compaction", ratio),
]}

#: The broker configs ``kraft configs`` may set, per broker or cluster-wide: the dynamic keys of
#: the servers' table, checked by the same rules as the properties file.
BROKER_CONFIGS = SERVER_KEYS.dynamic()


def validate(kind: str, key: str, value: str | None) -> None:
    """Raise INVALID_CONFIG for an unknown key or a bad value (None: a deleted key, which
    reads its default again, so only the key is checked)."""
    known = TOPIC_CONFIGS if kind == "topic" else BROKER_CONFIGS
    spec = known.get(key)
    if spec is None:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown {kind} config name: {key}")
    problem = spec.problem(value) if value is not None else None
    if problem:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {key}: {problem}")


def topic_config(configs: dict[str, str] | None, key: str, broker_defaults: dict[str, str] | None = None) -> str:
    """A topic config's effective value: the topic's, else the cluster default, else Kafka's."""
    if configs and key in configs:
        return configs[key]
    fallback = {"retention.ms": "log.retention.ms", "retention.bytes": "log.retention.bytes",
                "max.message.bytes": "message.max.bytes",
                "message.timestamp.type": "log.message.timestamp.type"}.get(key, key)
    if broker_defaults and fallback in broker_defaults:
        return broker_defaults[fallback]
    default = TOPIC_CONFIGS[key].default
    assert default is not None, f"every topic config has a default; {key} has none"
    return default
