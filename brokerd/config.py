"""A broker's settings: the Kafka keys a broker reads from its properties file, with Kafka's
defaults, and the per-topic log settings resolved the way Kafka resolves them (topic config,
then the broker's dynamic config, then the cluster-wide dynamic default, then the properties
file, then Kafka's default)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from clients.security import ListenerSecurity, listener_props
from common.config_def import ConfigError
from common.server_keys import RACK_AWARE_REPLICA_SELECTOR, SERVER_KEYS
from common.tls import TLSConfig
from metadata.config import ServerConfig
from metadata.configs import BROKER_SYNONYMS, ConfigLayers, ConfigSource
from metadata.image import ConfigResource, MetadataImage, ResourceType

from .auto_topics import AutoCreateConfig
from .log_store import FlushPolicy
from .quotas import QuotaWindow

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
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type: CreateTime or LogAppendTime

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy


def replica_listener_problem(security: Mapping[str, ListenerSecurity], inter_broker: str, name: str) -> str | None:
    """Why followers may not fetch over Kafka listener ``name``, or None when they may: it must
    be as safe as the inter-broker listener (the same protocol, and client certificates required
    when that listener requires them, so that the leader sees the follower's certificate
    principal) and have no SASL (a broker has no SASL credentials of its own)."""
    s, ours = security[name], security[inter_broker]
    if s.sasl is not None:
        return f"it is a {s.protocol} listener and a broker has no SASL credentials of its own"
    if s.protocol != ours.protocol:
        return f"it speaks {s.protocol} and the inter-broker listener {inter_broker} {ours.protocol}"
    if ours.client_auth == "required" and s.client_auth != "required":
        return (f"it does not require client certificates as the inter-broker listener {inter_broker} does "
                f"(ssl.client.auth=required), so a leader could not tell a follower's principal")
    return None


def replica_kafka_listener(security: Mapping[str, ListenerSecurity], inter_broker: str,
                           kafka: tuple[str, ...], named: str | None = None) -> str | None:
    """The Kafka listener followers fetch over (replica.fetch.protocol=kafka): ``named``
    (replica.fetch.listener.name) when set, a ConfigError when it is not an eligible Kafka
    listener; else the first eligible one (``replica_listener_problem``); None: none is."""
    if named:
        if named not in kafka:
            raise ConfigError(f"replica.fetch.listener.name={named} is not one of the broker's Kafka listeners "
                              f"(kafka.listener.names: {', '.join(kafka) or 'none'})")
        problem = replica_listener_problem(security, inter_broker, named)
        if problem is not None:
            raise ConfigError(f"replica.fetch.listener.name={named}: followers cannot fetch over it: {problem}")
        return named
    return next((n for n in kafka if replica_listener_problem(security, inter_broker, n) is None), None)


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
    transaction_state_num_partitions: int = 50  # transaction.state.log.num.partitions
    transaction_state_replication_factor: int = 3  # transaction.state.log.replication.factor
    transaction_state_min_isr: int = 2  # transaction.state.log.min.isr
    transaction_max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transaction_abort_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    transaction_expire_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
    rack_aware_reads: bool = False  # replica.selector.class is the RackAwareReplicaSelector (KIP-392)
    quota_window: QuotaWindow = QuotaWindow()  # quota.window.num, quota.window.size.seconds
    max_connections: int = 2 ** 31 - 1  # max.connections
    max_connections_per_ip: int = 2 ** 31 - 1  # max.connections.per.ip
    max_connections_per_ip_overrides: str = ""  # max.connections.per.ip.overrides
    max_connection_creation_rate: int = 2 ** 31 - 1  # max.connection.creation.rate (KIP-612)
    #: listener.name.<l>.max.connection.creation.rate of the Kafka listeners that set one
    listener_connection_creation_rates: dict[str, int] = field(default_factory=dict)
    fetch_session_cache_slots: int = 1000  # max.incremental.fetch.session.cache.slots
    #: replica.fetch.protocol=kafka: the Kafka listener followers fetch over (replica.fetch.listener.name,
    #: or the first eligible), and the TLS material they dial it with; None: over the gRPC inter-broker listener
    replica_listener: str | None = None
    replica_tls: TLSConfig | None = None
    static_configs: Mapping[str, str] = field(default_factory=dict)  # the properties file, as written

    def security_protocol(self, listener: str) -> str:
        return self.security[listener].protocol

    @classmethod
    def from_server(cls, cfg: ServerConfig) -> "BrokerConfig":
        listeners = cfg.broker_listeners()
        kafka_names = {n.upper() for n in cfg.list("kafka.listener.names")}
        kafka = tuple(n for n in listeners if n in kafka_names)
        grpc_listeners = [n for n in listeners if n not in kafka_names]
        if not grpc_listeners:
            raise ConfigError(f"the broker needs a gRPC listener besides its Kafka listeners ({', '.join(kafka)}), "
                              f"for replication and the kraft tools, e.g. PLAINTEXT://:9092")
        name = (cfg.value("inter.broker.listener.name") or "").upper() or grpc_listeners[0]
        if name not in listeners:
            raise ConfigError(f"inter.broker.listener.name={name} is not one of the broker listeners "
                              f"({', '.join(listeners)})")
        if name in kafka:
            raise ConfigError(f"inter.broker.listener.name={name} speaks Kafka's protocol (kafka.listener.names); "
                              f"it names the brokers' gRPC listener: name the Kafka listener followers fetch "
                              f"over with replica.fetch.listener.name")
        for n in grpc_listeners:
            cfg.security[n].check_grpc(n)
        replica_listener = replica_kafka_listener(  # checked even under grpc: a mistake shows at once
            cfg.security, name, kafka, (cfg.value("replica.fetch.listener.name") or "").upper() or None)
        if cfg.str("replica.fetch.protocol") != "kafka":
            replica_listener = None
        return cls(
            replica_listener=replica_listener,
            replica_tls=cfg.security[replica_listener].tls if replica_listener else None,
            node_id=cfg.node_id,
            rack=cfg.str("broker.rack"),
            listener=name,
            kafka_listeners=kafka,
            security={n: cfg.security[n] for n in listeners},
            inter_broker_tls=cfg.security[name].tls,  # what it serves that listener with, to dial the others
            heartbeat_interval_ms=cfg.int("broker.heartbeat.interval.ms"),
            replica_lag_time_max_ms=cfg.int("replica.lag.time.max.ms"),
            replica_fetch_wait_max_ms=cfg.int("replica.fetch.wait.max.ms"),
            replica_fetch_min_bytes=cfg.int("replica.fetch.min.bytes"),
            replica_fetch_max_bytes=cfg.int("replica.fetch.max.bytes"),
            replica_fetch_response_max_bytes=cfg.int("replica.fetch.response.max.bytes"),
            replica_fetch_backoff_ms=cfg.int("replica.fetch.backoff.ms"),
            retention_check_interval_ms=cfg.int("log.retention.check.interval.ms"),
            hw_checkpoint_interval_ms=cfg.int("replica.high.watermark.checkpoint.interval.ms"),
            metadata_snapshot_interval_ms=cfg.int("metadata.log.max.snapshot.interval.ms"),
            request_max_bytes=cfg.int("socket.request.max.bytes"),
            producer_id_expiration_ms=cfg.int("producer.id.expiration.ms"),
            producer_id_expiration_check_interval_ms=cfg.int("producer.id.expiration.check.interval.ms"),
            log_cleaner_enable=cfg.bool("log.cleaner.enable"),
            log_cleaner_backoff_ms=cfg.int("log.cleaner.backoff.ms"),
            offsets_topic_num_partitions=cfg.int("offsets.topic.num.partitions"),
            offsets_topic_replication_factor=cfg.int("offsets.topic.replication.factor"),
            transaction_state_num_partitions=cfg.int("transaction.state.log.num.partitions"),
            transaction_state_replication_factor=cfg.int("transaction.state.log.replication.factor"),
            transaction_state_min_isr=cfg.int("transaction.state.log.min.isr"),
            transaction_max_timeout_ms=cfg.int("transaction.max.timeout.ms"),
            transaction_abort_interval_ms=cfg.int("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            transactional_id_expiration_ms=cfg.int("transactional.id.expiration.ms"),
            transaction_expire_interval_ms=cfg.int("transaction.remove.expired.transaction.cleanup.interval.ms"),
            rack_aware_reads=(cfg.value("replica.selector.class") or "") == RACK_AWARE_REPLICA_SELECTOR,
            group_min_session_timeout_ms=cfg.int("group.min.session.timeout.ms"),
            group_max_session_timeout_ms=cfg.int("group.max.session.timeout.ms"),
            group_initial_rebalance_delay_ms=cfg.int("group.initial.rebalance.delay.ms"),
            fetch_session_cache_slots=cfg.int("max.incremental.fetch.session.cache.slots"),
            static_configs=dict(cfg.props),
            offset_metadata_max_bytes=cfg.int("offset.metadata.max.bytes"),
            quota_window=QuotaWindow(cfg.int("quota.window.num"), cfg.int("quota.window.size.seconds")),
            max_connections=cfg.int("max.connections"),
            max_connections_per_ip=cfg.int("max.connections.per.ip"),
            max_connections_per_ip_overrides=cfg.str("max.connections.per.ip.overrides") or "",
            max_connection_creation_rate=cfg.int("max.connection.creation.rate"),
            listener_connection_creation_rates=_listener_creation_rates(cfg, kafka),
            auto_create=AutoCreateConfig(
                enable=cfg.bool("auto.create.topics.enable"),
                num_partitions=cfg.int("num.partitions"),
                replication_factor=cfg.int("default.replication.factor")),
            flush=FlushPolicy(cfg.int("log.flush.interval.messages"),
                              cfg.int("log.flush.interval.ms")),
            static_log=LogConfig(
                retention_ms=_retention_ms(cfg),
                retention_bytes=cfg.int("log.retention.bytes"),
                max_message_bytes=cfg.int("message.max.bytes"),
                min_insync_replicas=cfg.int("min.insync.replicas"),
                compression_type=cfg.str("compression.type"),
                cleanup_policy=cfg.value("log.cleanup.policy"),  # a list, read as one normalized string
                delete_retention_ms=cfg.int("log.cleaner.delete.retention.ms"),
                min_cleanable_dirty_ratio=cfg.float("log.cleaner.min.cleanable.ratio"),
                message_timestamp_type=cfg.str("log.message.timestamp.type")))

    def config_layers(self, image: MetadataImage, broker: str) -> ConfigLayers:
        """Where broker ``broker``'s keys are looked up, first to last, as this broker knows them
        (DescribeConfigs' synonyms): its dynamic config, the cluster-wide default, and this
        broker's properties file when it is this broker; "" is the cluster-wide default alone."""
        default = (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, dict(image.config(ConfigResource(ResourceType.BROKER, ""))))
        if not broker:
            return [default]
        return [(ConfigSource.DYNAMIC_BROKER_CONFIG, dict(image.config(ConfigResource(ResourceType.BROKER, broker)))),
                default,
                (ConfigSource.STATIC_BROKER_CONFIG, self.static_configs if broker == str(self.node_id) else {})]

    def log_config(self, image: MetadataImage, topic: str) -> LogConfig:
        """The effective log settings of ``topic`` in ``image``."""
        layers = [dict(image.config(ConfigResource(ResourceType.TOPIC, topic))),
                  dict(image.config(ConfigResource(ResourceType.BROKER, str(self.node_id)))),
                  dict(image.config(ConfigResource(ResourceType.BROKER, "")))]
        static = self.static_log

        def pick(key: str, fallback: T) -> T:
            """The first layer's value that parses by the broker key's rule (common.server_keys);
            the controller validates, so an unreadable one is rare and falls through."""
            parse = SERVER_KEYS[BROKER_SYNONYMS[key]].parse
            for i, layer in enumerate(layers):
                value = layer.get(key if i == 0 else BROKER_SYNONYMS[key])
                if value is not None:
                    try:
                        return parse(value)
                    except ConfigError:
                        pass
            return fallback

        return LogConfig(pick("retention.ms", static.retention_ms),
                         pick("retention.bytes", static.retention_bytes),
                         pick("max.message.bytes", static.max_message_bytes),
                         pick("min.insync.replicas", static.min_insync_replicas),
                         pick("compression.type", static.compression_type),
                         pick("cleanup.policy", static.cleanup_policy),
                         pick("delete.retention.ms", static.delete_retention_ms),
                         pick("min.cleanable.dirty.ratio", static.min_cleanable_dirty_ratio),
                         pick("message.timestamp.type", static.message_timestamp_type))


def _retention_ms(cfg: ServerConfig) -> int:
    """log.retention.ms, else log.retention.minutes, else log.retention.hours (Kafka's order)."""
    if "log.retention.ms" in cfg.props:
        return cfg.int("log.retention.ms")
    minutes = cfg.value("log.retention.minutes")
    if minutes is not None:
        return -1 if minutes < 0 else minutes * 60_000
    hours = cfg.int("log.retention.hours")
    return -1 if hours < 0 else hours * HOUR_MS


def _listener_creation_rates(cfg: ServerConfig, kafka_listeners: tuple[str, ...]) -> dict[str, int]:
    """``listener.name.<l>.max.connection.creation.rate`` of each Kafka listener that sets one,
    checked by the key's rule (a listener's own limit, beside the broker's, as KIP-612's)."""
    key = "max.connection.creation.rate"
    out = {}
    for name in kafka_listeners:
        if f"listener.name.{name.lower()}.{key}" in cfg.props:
            try:
                out[name] = SERVER_KEYS.value(listener_props(cfg.props, name), key)
            except ConfigError as e:
                raise ConfigError(f"{e} (listener.name.{name.lower()}.{key})") from None
    return out
