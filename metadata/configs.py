"""The topic and broker configs the controller accepts, with Kafka's names, defaults and value
rules, so INVALID_CONFIG is answered before anything is written.

Every topic config of Kafka's TopicConfig (as of Kafka 3.8, KIP-390's compression levels
included) is accepted and validated, so that applications written for Kafka need no change;
each says what this cluster does with it (``TopicConfig.use``), since many are only stored:
a RocksDB log has no segments, indexes or preallocated files. docs/operations.md's table of
topic configs is printed from this one (``python -m metadata.configs --write docs/operations.md``).
"""
from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from itertools import dropwhile

from common.config_def import INT_MAX, LONG_MAX, ConfigKey, Validator, in_range, one_of, ratio
from common.config_docs import cell, table_command
from common.server_keys import CLEANUP_POLICIES, COMPRESSION_TYPES, SERVER_KEYS, TIMESTAMP_TYPES

from common.errors import ErrorCode, KafkaError

STORED = "stored only"
#: Kafka's answer to ``remote.storage.enable=true`` when tiered storage is off (here: always).
TIERED_STORAGE_OFF = ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with "
                      "remote log storage.")


def _throttled_replicas(v: str) -> str | None:
    """Kafka's ThrottledReplicaListValidator: '', '*', or PARTITION:BROKER,..."""
    items = [p.strip() for p in v.split(",")]
    if v.strip() in ("", "*") or all(re.fullmatch(r"\d+:\d+", p) for p in items):
        return None
    return ("must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


def _gzip_level(v: str) -> str | None:
    """-1 (zlib's default) or 1 to 9 (KIP-390)."""
    problem = in_range(-1, 9)(v)
    return problem or (f"value {v} must be -1 (the default) or between 1 and 9" if int(v) == 0 else None)


def _format_version(v: str) -> str | None:
    """A Kafka version such as 2.8 or 3.0-IV1 (ignored since 3.0, as Kafka ignores it)."""
    return None if re.fullmatch(r"\d+\.\d+(\.\d+)?(-IV\d+)?", v.strip()) else \
        f"value {v!r} is not a Kafka version such as 3.0-IV1"


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic config: the key (type, Kafka's default, rule, meaning), what this cluster does
    with it, and the broker key that is its default (Kafka's synonym), if the broker reads one."""

    key: ConfigKey
    use: str
    synonym: str | None = None


def _key(name: str, kind: str, default: object, doc: str, rule: Validator | None, use: str,
         synonym: str | None = None) -> TopicConfig:
    return TopicConfig(ConfigKey(name, kind, str(default).lower() if kind == "boolean" else str(default), doc, rule),
                       use, synonym)


_LOG_START = "retention moves the log start"
TOPIC_TABLE: dict[str, TopicConfig] = {t.key.name: t for t in [
    _key("cleanup.policy", "list", "delete", "delete old records, compact by key, or both",
         one_of(*CLEANUP_POLICIES), "broker: retention and compaction", "log.cleanup.policy"),
    _key("compression.type", "string", "producer", "the codec batches are stored in (producer: as sent)",
         one_of(*COMPRESSION_TYPES), "broker: produce recompresses", "compression.type"),
    _key("compression.gzip.level", "int", -1, "gzip's level when the topic recompresses to gzip", _gzip_level,
         STORED),
    _key("compression.lz4.level", "int", 9, "lz4's level when the topic recompresses to lz4", in_range(1, 17),
         STORED),
    _key("compression.zstd.level", "int", 3, "zstd's level when the topic recompresses to zstd",
         in_range(-131072, 22), STORED),
    _key("delete.retention.ms", "long", 86_400_000, "how long a compacted topic keeps a tombstone (a null value)",
         in_range(0), "broker: compaction", "log.cleaner.delete.retention.ms"),
    _key("file.delete.delay.ms", "long", 60_000, "the wait before a deleted segment file is removed", in_range(0),
         STORED),
    _key("flush.messages", "long", LONG_MAX, "fsync after this many messages", in_range(1),
         f"{STORED} (the broker's `log.flush.interval.messages` applies)"),
    _key("flush.ms", "long", LONG_MAX, "fsync after this many ms", in_range(0),
         f"{STORED} (the broker's `log.flush.interval.ms` applies)"),
    _key("follower.replication.throttled.replicas", "list", "", "replicas whose fetching is throttled "
         "(PARTITION:BROKER,... or *)", _throttled_replicas,
         f"{STORED} (the throttle applies to the replicas a reassignment adds)"),
    _key("index.interval.bytes", "int", 4096, "bytes between offset index entries", in_range(0, INT_MAX), STORED),
    _key("leader.replication.throttled.replicas", "list", "", "replicas a leader's sending to is throttled "
         "(PARTITION:BROKER,... or *)", _throttled_replicas,
         f"{STORED} (the throttle applies to the replicas a reassignment adds)"),
    _key("local.retention.bytes", "long", -2, "tiered storage: local bytes to keep (-2: retention.bytes)",
         in_range(-2), f"{STORED} (no tiered storage)"),
    _key("local.retention.ms", "long", -2, "tiered storage: how long to keep locally (-2: retention.ms)",
         in_range(-2), f"{STORED} (no tiered storage)"),
    _key("max.compaction.lag.ms", "long", LONG_MAX, "the longest a record may stay uncompacted", in_range(1),
         STORED),
    _key("max.message.bytes", "int", 1048588, "the largest record batch accepted", in_range(0, INT_MAX),
         "broker: produce refuses larger batches", "message.max.bytes"),
    _key("message.downconversion.enable", "boolean", True, "down-convert batches for old fetch versions", None,
         f"{STORED} (fetches older than v4 are not served)"),
    _key("message.format.version", "string", "3.0-IV1", "deprecated: ignored since Kafka 3.0", _format_version,
         STORED),
    _key("message.timestamp.after.max.ms", "long", LONG_MAX, "how far a CreateTime timestamp may be ahead of "
         "the broker's clock (KIP-937)", in_range(0), STORED),
    _key("message.timestamp.before.max.ms", "long", LONG_MAX, "how far a CreateTime timestamp may be behind the "
         "broker's clock (KIP-937)", in_range(0), STORED),
    _key("message.timestamp.difference.max.ms", "long", LONG_MAX, "deprecated by the two above: the largest "
         "difference either way", in_range(0), STORED),
    _key("message.timestamp.type", "string", "CreateTime", "the producer's time, or the leader's on append",
         one_of(*TIMESTAMP_TYPES), "broker: the leader stamps LogAppendTime batches", "log.message.timestamp.type"),
    _key("min.cleanable.dirty.ratio", "double", 0.5, "compact once this share of the log was written since the "
         "last compaction", ratio, "broker: compaction", "log.cleaner.min.cleanable.ratio"),
    _key("min.compaction.lag.ms", "long", 0, "the least time a record stays uncompacted", in_range(0), STORED),
    _key("min.insync.replicas", "int", 1, "acks=all writes need at least this many in-sync replicas",
         in_range(1, INT_MAX), "broker: acks=all produce; controller: reassignments", "min.insync.replicas"),
    _key("preallocate", "boolean", False, "preallocate segment files", None, f"{STORED} (no segment files)"),
    _key("remote.storage.enable", "boolean", False, "tiered storage (refused: it is off)", None,
         "refused when true: there is no tiered storage"),
    _key("retention.bytes", "long", -1, "the largest a partition grows before old records go (-1: unlimited)",
         in_range(-1), f"broker: {_LOG_START}", "log.retention.bytes"),
    _key("retention.ms", "long", 604_800_000, "how long records are kept (-1: forever)", in_range(-1),
         f"broker: {_LOG_START}", "log.retention.ms"),
    _key("segment.bytes", "int", 1_073_741_824, "segment file size", in_range(14, INT_MAX),
         f"{STORED} (no segment files)"),
    _key("segment.index.bytes", "int", 10_485_760, "offset index size", in_range(4, INT_MAX),
         f"{STORED} (no segment files)"),
    _key("segment.jitter.ms", "long", 0, "random jitter of segment.ms", in_range(0), f"{STORED} (no segment files)"),
    _key("segment.ms", "long", 604_800_000, "roll a segment after this long", in_range(1),
         f"{STORED} (no segment files)"),
    _key("unclean.leader.election.enable", "boolean", False,
         "elect a leader outside the ISR when no ISR member is alive (may lose data)", None,
         "controller: leader election"),
]}
TOPIC_CONFIGS: dict[str, ConfigKey] = {name: t.key for name, t in TOPIC_TABLE.items()}
#: topic key -> the broker key whose value is its default (topic, then dynamic broker configs,
#: then the properties file), for the keys the broker acts on.
BROKER_SYNONYMS: dict[str, str] = {name: t.synonym for name, t in TOPIC_TABLE.items() if t.synonym}

#: The broker configs ``kraft configs`` may set, per broker or cluster-wide: the dynamic keys of
#: the servers' table, checked by the same rules as the properties file.
BROKER_CONFIGS = SERVER_KEYS.dynamic()


class ConfigSource(IntEnum):
    """Where a described value comes from, numbered as Kafka's DescribeConfigs answers it (KIP-226)."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """One place a config's value could come from, and the value there (KIP-226's synonyms)."""

    name: str
    value: str | None
    source: ConfigSource


#: A broker key and the older names read after it, in Kafka's order (DynamicBrokerConfig's
#: brokerConfigSynonyms). As in Kafka, only the last name has a default: the others default to it.
_RETENTION = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
BROKER_KEY_SYNONYMS: dict[str, tuple[str, ...]] = {name: _RETENTION for name in _RETENTION}
#: (source, values) of the broker configs a key is looked up in, first to last, before Kafka's
#: default: the broker's dynamic config, the cluster-wide dynamic default, the properties file.
ConfigLayers = Sequence[tuple[ConfigSource, Mapping[str, str]]]


def broker_config_synonyms(key: str, layers: ConfigLayers) -> list[ConfigSynonym]:
    """Broker key ``key``'s synonyms, the one that applies first: each layer's values of the
    key's names, then Kafka's default. As Kafka's list, it starts at ``key`` itself, so a value
    that only an older name holds (e.g. ``log.retention.hours`` for ``log.retention.ms``) is left out."""
    names = BROKER_KEY_SYNONYMS.get(key, (key,))
    found = [ConfigSynonym(n, values[n], source) for source, values in layers for n in names if n in values]
    last = SERVER_KEYS.get(names[-1])
    if last is not None and last.default is not None:
        found.append(ConfigSynonym(last.name, last.default, ConfigSource.DEFAULT_CONFIG))
    return list(dropwhile(lambda s: s.name != key, found))


def topic_config_synonyms(key: str, topic_configs: Mapping[str, str], layers: ConfigLayers) -> list[ConfigSynonym]:
    """Topic key ``key``'s synonyms: the topic's own value, then its broker key's (``BROKER_SYNONYMS``;
    a key the broker does not read has none), as Kafka's ConfigHelper lists them."""
    own = [ConfigSynonym(key, topic_configs[key], ConfigSource.DYNAMIC_TOPIC_CONFIG)] if key in topic_configs else []
    broker = BROKER_SYNONYMS.get(key)
    return own + (broker_config_synonyms(broker, layers) if broker else [])


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


def validate_topic(configs: Mapping[str, str]) -> None:
    """The rules between a topic's keys, over the configs it would have (each key already
    valid), as Kafka's LogConfig checks them: INVALID_CONFIG."""
    if configs.get("remote.storage.enable", "false").strip().lower() == "true":
        raise KafkaError(ErrorCode.INVALID_CONFIG, TIERED_STORAGE_OFF)
    least, most = (int(topic_config(configs, k)) for k in ("min.compaction.lag.ms", "max.compaction.lag.ms"))
    if least > most:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"conflict topic config setting min.compaction.lag.ms ({least}) "
                                                   f"> max.compaction.lag.ms ({most})")


def topic_config(configs: Mapping[str, str] | None, key: str, broker_defaults: dict[str, str] | None = None) -> str:
    """A topic config's effective value: the topic's, else the cluster default, else Kafka's."""
    if configs and key in configs:
        return configs[key]
    fallback = BROKER_SYNONYMS.get(key, key)
    if broker_defaults and fallback in broker_defaults:
        return broker_defaults[fallback]
    default = TOPIC_CONFIGS[key].default
    assert default is not None, f"every topic config has a default; {key} has none"
    return default


START = "<!-- topic-config-table: printed by python -m metadata.configs from metadata/configs.py; do not edit -->"
END = "<!-- topic-config-table end -->"


def topic_table() -> str:
    """The topic configs as a Markdown table: key, type, Kafka's default, meaning, what we do."""
    rows = ["| key | type | default | meaning | here |", "|---|---|---|---|---|"]
    for t in TOPIC_TABLE.values():
        k = t.key
        default = f"`{k.default}`" if k.default else "empty"
        rows.append(f"| `{k.name}` | {k.type} | {default} | {cell(k.doc)} | {cell(t.use)} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    return table_command(argv, "metadata.configs", START, END, topic_table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
