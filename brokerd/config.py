"""A broker's settings: the Kafka keys a broker reads from its properties file, with Kafka's
defaults, and the per-topic log settings resolved the way Kafka resolves them (topic config,
then the broker's dynamic config, then the cluster-wide dynamic default, then the properties
file, then Kafka's default)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from metadata.config import ServerConfig
from metadata.image import ConfigResource, MetadataImage, ResourceType
from raft.config import ConfigError, TLSConfig

from clients.security import ListenerSecurity

from clients.compression import Codec

from .auto_topics import AutoCreateConfig
from .log_store import LONG_MAX, FlushPolicy

HOUR_MS = 3_600_000
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The settings a partition log and its produce path obey."""

    retention_ms: int = 168 * HOUR_MS  # retention.ms: 7 days; -1 keeps forever
    retention_bytes: int = -1          # retention.bytes: unlimited
    max_message_bytes: int = 1048588   # max.message.bytes: the largest batch
    min_insync_replicas: int = 1       # min.insync.replicas
    compression_type: str = "producer"  # compression.type: keep the producer's codec, or this one
    cleanup_policy: str = "delete"     # cleanup.policy: delete (retention), compact, or both
    delete_retention_ms: int = 86_400_000  # delete.retention.ms: how long tombstones stay
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy


# topic key -> the broker key that is its default
_BROKER_KEY = {"retention.ms": "log.retention.ms", "retention.bytes": "log.retention.bytes",
               "max.message.bytes": "message.max.bytes", "min.insync.replicas": "min.insync.replicas",
               "compression.type": "compression.type", "cleanup.policy": "log.cleanup.policy",
               "delete.retention.ms": "log.cleaner.delete.retention.ms",
               "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio"}


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    node_id: int
    rack: str
    listener: str                       # the gRPC listener our clients and other brokers use
    kafka_listeners: tuple[str, ...]    # the listeners speaking Kafka's protocol (kafka.listener.names)
    security: dict[str, ListenerSecurity]  # listener.security.protocol.map and ssl.*, per listener
    inter_broker_tls: TLSConfig | None  # how this broker dials the leaders it replicates from
    heartbeat_interval_ms: int          # broker.heartbeat.interval.ms
    replica_lag_time_max_ms: int        # replica.lag.time.max.ms
    replica_fetch_wait_max_ms: int      # replica.fetch.wait.max.ms
    replica_fetch_min_bytes: int        # replica.fetch.min.bytes
    replica_fetch_max_bytes: int        # replica.fetch.max.bytes (per partition)
    replica_fetch_response_max_bytes: int  # replica.fetch.response.max.bytes
    replica_fetch_backoff_ms: int       # replica.fetch.backoff.ms
    retention_check_interval_ms: int    # log.retention.check.interval.ms
    hw_checkpoint_interval_ms: int      # replica.high.watermark.checkpoint.interval.ms
    metadata_snapshot_interval_ms: int  # metadata.log.max.snapshot.interval.ms
    request_max_bytes: int              # socket.request.max.bytes
    producer_id_expiration_ms: int      # producer.id.expiration.ms
    producer_id_expiration_check_interval_ms: int  # producer.id.expiration.check.interval.ms
    log_cleaner_enable: bool            # log.cleaner.enable
    log_cleaner_backoff_ms: int         # log.cleaner.backoff.ms: between compaction passes
    offsets_topic_num_partitions: int   # offsets.topic.num.partitions
    offsets_topic_replication_factor: int  # offsets.topic.replication.factor
    group_min_session_timeout_ms: int   # group.min.session.timeout.ms
    group_max_session_timeout_ms: int   # group.max.session.timeout.ms
    group_initial_rebalance_delay_ms: int  # group.initial.rebalance.delay.ms
    offset_metadata_max_bytes: int      # offset.metadata.max.bytes
    flush: FlushPolicy
    static_log: LogConfig               # log defaults from the properties file
    auto_create: AutoCreateConfig = AutoCreateConfig()  # auto.create.topics.enable, num.partitions, ...

    def security_protocol(self, listener: str) -> str:
        return self.security[listener].protocol

    @classmethod
    def from_server(cls, cfg: ServerConfig) -> "BrokerConfig":
        listeners = cfg.broker_listeners()
        kafka_names = {n.strip().upper() for n in cfg.props.get("kafka.listener.names", "KAFKA").split(",")}
        kafka = tuple(n for n in listeners if n in kafka_names)
        grpc_listeners = [n for n in listeners if n not in kafka_names]
        if not grpc_listeners:
            raise ConfigError(f"the broker needs a gRPC listener besides its Kafka listeners ({', '.join(kafka)}), "
                              f"for replication and the kraft tools, e.g. PLAINTEXT://:9092")
        name = cfg.props.get("inter.broker.listener.name", "").strip().upper() or grpc_listeners[0]
        if name not in listeners:
            raise ConfigError(f"inter.broker.listener.name={name} is not one of the broker listeners "
                              f"({', '.join(listeners)})")
        if name in kafka:
            raise ConfigError(f"inter.broker.listener.name={name} speaks Kafka's protocol (kafka.listener.names); "
                              f"brokers replicate over a gRPC listener")
        for n in grpc_listeners:
            cfg.security[n].check_grpc(n)
        return cls(
            node_id=cfg.node_id,
            rack=cfg.props.get("broker.rack", "").strip(),
            listener=name,
            kafka_listeners=kafka,
            security={n: cfg.security[n] for n in listeners},
            inter_broker_tls=cfg.security[name].tls,  # what it serves that listener with, to dial the others
            heartbeat_interval_ms=cfg.int("broker.heartbeat.interval.ms", 2000, 1),
            replica_lag_time_max_ms=cfg.int("replica.lag.time.max.ms", 30000, 1),
            replica_fetch_wait_max_ms=cfg.int("replica.fetch.wait.max.ms", 500, 0),
            replica_fetch_min_bytes=cfg.int("replica.fetch.min.bytes", 1, 0),
            replica_fetch_max_bytes=cfg.int("replica.fetch.max.bytes", 1048576, 1),
            replica_fetch_response_max_bytes=cfg.int("replica.fetch.response.max.bytes", 10485760, 1),
            replica_fetch_backoff_ms=cfg.int("replica.fetch.backoff.ms", 1000, 0),
            retention_check_interval_ms=cfg.int("log.retention.check.interval.ms", 300000, 1),
            hw_checkpoint_interval_ms=cfg.int("replica.high.watermark.checkpoint.interval.ms", 5000, 1),
            metadata_snapshot_interval_ms=cfg.int("metadata.log.max.snapshot.interval.ms", HOUR_MS, 1),
            request_max_bytes=cfg.int("socket.request.max.bytes", 104857600, 1024),
            producer_id_expiration_ms=cfg.int("producer.id.expiration.ms", 86_400_000, 1),
            producer_id_expiration_check_interval_ms=cfg.int("producer.id.expiration.check.interval.ms",
                                                             600_000, 1),
            log_cleaner_enable=cfg.props.get("log.cleaner.enable", "true").strip().lower() == "true",
            log_cleaner_backoff_ms=cfg.int("log.cleaner.backoff.ms", 15_000, 1),
            offsets_topic_num_partitions=cfg.int("offsets.topic.num.partitions", 50, 1),
            offsets_topic_replication_factor=cfg.int("offsets.topic.replication.factor", 3, 1),
            group_min_session_timeout_ms=cfg.int("group.min.session.timeout.ms", 6000, 1),
            group_max_session_timeout_ms=cfg.int("group.max.session.timeout.ms", 1_800_000, 1),
            group_initial_rebalance_delay_ms=cfg.int("group.initial.rebalance.delay.ms", 3000, 0),
            offset_metadata_max_bytes=cfg.int("offset.metadata.max.bytes", 4096, 0),
            auto_create=AutoCreateConfig(
                enable=_bool(cfg, "auto.create.topics.enable", True),
                num_partitions=cfg.int("num.partitions", 1, 1),
                replication_factor=cfg.int("default.replication.factor", 1, 1)),
            flush=FlushPolicy(cfg.int("log.flush.interval.messages", LONG_MAX, 1),
                              cfg.int("log.flush.interval.ms", LONG_MAX, 1)),
            static_log=LogConfig(
                retention_ms=_retention_ms(cfg),
                retention_bytes=cfg.int("log.retention.bytes", -1, -1),
                max_message_bytes=cfg.int("message.max.bytes", 1048588, 0),
                min_insync_replicas=cfg.int("min.insync.replicas", 1, 1),
                compression_type=_compression_type(cfg.props.get("compression.type", "producer")),
                cleanup_policy=_cleanup_policy(cfg.props.get("log.cleanup.policy", "delete")),
                delete_retention_ms=cfg.int("log.cleaner.delete.retention.ms", 86_400_000, 0),
                min_cleanable_dirty_ratio=_ratio(cfg.props.get("log.cleaner.min.cleanable.ratio", "0.5"))))

    def log_config(self, image: MetadataImage, topic: str) -> LogConfig:
        """The effective log settings of ``topic`` in ``image``."""
        layers = [dict(image.config(ConfigResource(ResourceType.TOPIC, topic))),
                  dict(image.config(ConfigResource(ResourceType.BROKER, str(self.node_id)))),
                  dict(image.config(ConfigResource(ResourceType.BROKER, "")))]
        static = self.static_log

        def pick(key: str, parse: Callable[[str], T], fallback: T) -> T:
            """The first layer's value that parses; the controller validates, so an unreadable
            one is rare and falls through to the next layer."""
            for i, layer in enumerate(layers):
                value = layer.get(key if i == 0 else _BROKER_KEY[key])
                if value is not None:
                    try:
                        return parse(value)
                    except ValueError:  # ConfigError is one
                        pass
            return fallback

        return LogConfig(pick("retention.ms", int, static.retention_ms),
                         pick("retention.bytes", int, static.retention_bytes),
                         pick("max.message.bytes", int, static.max_message_bytes),
                         pick("min.insync.replicas", int, static.min_insync_replicas),
                         pick("compression.type", _compression_type, static.compression_type),
                         pick("cleanup.policy", _cleanup_policy, static.cleanup_policy),
                         pick("delete.retention.ms", int, static.delete_retention_ms),
                         pick("min.cleanable.dirty.ratio", _ratio, static.min_cleanable_dirty_ratio))


def _bool(cfg: ServerConfig, key: str, default: bool) -> bool:
    value = cfg.props.get(key, str(default)).strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"Invalid value {value} for configuration {key}: Expected value to be either true or false")
    return value == "true"


def _cleanup_policy(value: str) -> str:
    """``delete``, ``compact`` or ``compact,delete``."""
    parts = set(value.replace(" ", "").lower().split(","))
    if not value.strip() or not parts <= {"delete", "compact"}:
        raise ConfigError(f"Invalid value {value} for configuration log.cleanup.policy: must be delete, compact "
                          f"or compact,delete")
    return ",".join(sorted(parts))


def _ratio(value: str) -> float:
    try:
        ratio = float(value)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"Invalid value {value} for configuration log.cleaner.min.cleanable.ratio: must be "
                          f"a number between 0 and 1")
    return ratio


def _compression_type(value: str) -> str:
    """``producer`` or a codec name (``uncompressed`` is ``none``)."""
    value = value.strip().lower()
    if value == "producer":
        return value
    try:
        return Codec.named(value).name.lower()
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _retention_ms(cfg: ServerConfig) -> int:
    """log.retention.ms, else log.retention.minutes, else log.retention.hours (Kafka's order)."""
    if "log.retention.ms" in cfg.props:
        return cfg.int("log.retention.ms", 168 * HOUR_MS, -1)
    if "log.retention.minutes" in cfg.props:
        minutes = cfg.int("log.retention.minutes", 0, -1)
        return -1 if minutes < 0 else minutes * 60_000
    hours = cfg.int("log.retention.hours", 168, -1)
    return -1 if hours < 0 else hours * HOUR_MS
