"""The keys a server (controller, broker or both) reads from its properties file: one entry per
key with Kafka's name, type, default and value rule. The servers read their settings through
it (``ServerConfig.int(key)`` and friends), ``kraft configs`` is checked against its dynamic
keys on the controller, and docs/operations.md's table of keys is printed from it
(``python -m common.config_docs``). Defaults are Kafka's unless the documentation says why."""
from __future__ import annotations

from .config_def import (BROKER, CONTROLLER, INT_MAX, LONG_MAX, ConfigDef, ConfigKey, boolean, in_range, one_of,
                         ratio)

#: Where this server serves its Prometheus metrics (``HOST:PORT``; ``:PORT`` for every interface).
PROMETHEUS_LISTENER = "prometheus.listener"
VOTERS = "controller.quorum.voters"
#: KIP-853: where servers that do not list the voters find the quorum (``HOST:PORT,...``).
BOOTSTRAP_SERVERS = "controller.quorum.bootstrap.servers"

CLEANUP_POLICIES = ("delete", "compact", "compact,delete", "delete,compact")
COMPRESSION_TYPES = ("producer", "none", "gzip", "snappy", "lz4", "zstd", "uncompressed")
#: replica.selector.class's one choice (KIP-392): Kafka's class name, kept for familiarity.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
#: message.timestamp.type: the producer's timestamps, or the leader's clock at the append.
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def cleanup_policy(value: str) -> str:
    """``delete``, ``compact`` or ``compact,delete`` (either order, one spelling)."""
    return ",".join(sorted(set(value.replace(" ", "").split(","))))


def compression_type(value: str) -> str:
    """``uncompressed`` is Kafka's topic-side spelling of ``none``."""
    value = value.strip()
    return "none" if value == "uncompressed" else value


def _int(name: str, default: int | None, doc: str, least: int, most: int = LONG_MAX, **kw) -> ConfigKey:
    return ConfigKey(name, "int", None if default is None else str(default), doc, in_range(least, most), **kw)


SERVER_KEYS = ConfigDef([
    # -- who and where: both roles --------------------------------------------------------------
    _int("node.id", None, "this server's id; a controller's must appear in `controller.quorum.voters` when "
         "that is set", 0, INT_MAX, default_doc="required"),
    ConfigKey("process.roles", "list", None, "`controller`, `broker`, or `broker,controller` (a combined node)",
              default_doc="required"),
    ConfigKey(VOTERS, "list", None, "`ID@HOST:PORT,...`, the same on every server: a static quorum, whose "
              "voters cannot change while it runs", default_doc="this or the next"),
    ConfigKey(BOOTSTRAP_SERVERS, "list", None, "`HOST:PORT,...` of any controllers: how brokers, tools and "
              "controllers find a dynamic quorum (KIP-853); see \"Changing the controller quorum\"",
              default_doc="this or the previous"),
    ConfigKey("listeners", "list", None, "`NAME://HOST:PORT,...`; a controller needs `CONTROLLER://...` with the "
              "port of its voters entry"),
    ConfigKey("advertised.listeners", "list", None, "what clients are told", default_doc="`listeners`"),
    ConfigKey("controller.listener.names", "list", "CONTROLLER", "the listener controllers serve and are dialled "
              "on (the first name)"),
    ConfigKey("metadata.log.dir", "string", None, "the Raft log and snapshots (a broker's: its metadata "
              "checkpoint)", default_doc="first of `log.dirs`"),
    ConfigKey("log.dirs", "list", None, "brokers' partition data", role=BROKER, default_doc="`log.dir`"),
    ConfigKey("log.dir", "list", None, "the same as `log.dirs`, when that is unset", role=BROKER),
    ConfigKey("listener.security.protocol.map", "string", None, "`NAME:PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL,...`: "
              "TLS and mutual TLS on each listener, with the `ssl.*` keys (see \"Security: TLS\"); SASL on Kafka "
              "listeners only (see \"Authentication (SASL)\")",
              default_doc="each listener `PLAINTEXT`"),
    ConfigKey("authorizer.class.name", "string", None, "the authorizer; unset (or empty): none; see "
              "\"Authorization\"", default_doc="unset (off)"),
    ConfigKey("super.users", "string", None, "principals allowed everything, `;`-separated",
              default_doc="none"),
    ConfigKey("allow.everyone.if.no.acl.found", "boolean", "false", "allow what no ACL of the resource mentions"),
    ConfigKey("ssl.principal.mapping.rules", "string", "DEFAULT", "how a certificate's subject becomes a "
              "principal name"),
    ConfigKey(PROMETHEUS_LISTENER, "string", None, "`HOST:PORT` (`:PORT` or `0.0.0.0:PORT` for every interface) "
              "where the server serves Prometheus metrics at `/metrics`; see \"Monitoring\"",
              default_doc="unset (off)"),
    _int("broker.heartbeat.interval.ms", 2000, "how often brokers heartbeat to the active controller", 1),
    _int("num.partitions", 1, "partitions of a topic created with -1 (or automatically)", 1, INT_MAX),
    _int("default.replication.factor", 1, "replication factor of a topic created with -1 (or automatically)",
         1, INT_MAX),
    ConfigKey("unclean.leader.election.enable", "boolean", "false", "default for topics: elect a leader outside "
              "the ISR when no ISR member is alive (may lose data)", boolean, dynamic=True),
    # -- the controller ---------------------------------------------------------------------------
    _int("controller.quorum.election.timeout.ms", 500, "a standby campaigns after a random 1-2x this without a "
         "leader", 20, role=CONTROLLER, default_doc="500 (Kafka: 1000)"),
    _int("controller.quorum.heartbeat.interval.ms", None, "the active controller's Raft heartbeats", 1,
         role=CONTROLLER, default_doc="100, at most a fifth of the election timeout"),
    _int("broker.session.timeout.ms", 9000, "a broker silent this long is fenced", 1, role=CONTROLLER),
    _int("metadata.log.max.record.bytes.between.snapshots", 20 << 20, "take a metadata snapshot after this much "
         "new log", 1, role=CONTROLLER, default_doc="20971520 (20 MiB)"),
    _int("metadata.log.max.records.between.snapshots", 100_000, "... or after this many entries", 1,
         role=CONTROLLER),
    _int("metadata.log.snapshot.trailing.records", 10_000, "entries kept after a snapshot for slightly slow "
         "standbys", 0, role=CONTROLLER),
    ConfigKey("auto.leader.rebalance.enable", "boolean", "true", "hand partitions back to their preferred "
              "replicas (see \"Leader election\")", role=CONTROLLER),
    _int("leader.imbalance.per.broker.percentage", 10, "a broker not leading more than this share of the "
         "partitions it is preferred for is rebalanced", 0, role=CONTROLLER),
    _int("leader.imbalance.check.interval.seconds", 300, "how often the active controller checks", 1,
         role=CONTROLLER),
    # -- the broker -------------------------------------------------------------------------------
    ConfigKey("broker.rack", "string", "", "the broker's rack, for rack-aware placement", role=BROKER,
              default_doc="none"),
    ConfigKey("kafka.listener.names", "list", "KAFKA", "the listeners speaking Kafka's protocol; the others "
              "speak gRPC", role=BROKER),
    ConfigKey("sasl.enabled.mechanisms", "list", "SCRAM-SHA-256,SCRAM-SHA-512", "what SASL listeners offer: "
              "`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` (also `listener.name.<l>.sasl.enabled.mechanisms`); PLAIN's "
              "users are `user_<name>=\"<password>\"` in `listener.name.<l>.plain.sasl.jaas.config`", role=BROKER,
              default_doc="SCRAM-SHA-256,SCRAM-SHA-512 (Kafka: GSSAPI, not served here)"),
    _int("connection.failed.authentication.delay.ms", 100, "how long a connection whose SASL login failed waits "
         "before it is closed", 0, INT_MAX, role=BROKER),
    _int("max.connections", INT_MAX, "connections a broker's Kafka listeners accept in all; more are closed "
         "as they are accepted", 0, INT_MAX, role=BROKER),
    _int("max.connections.per.ip", INT_MAX, "connections accepted from one address; more are closed as they are "
         "accepted (a flood from one address leaves the others served)", 0, INT_MAX, role=BROKER),
    ConfigKey("max.connections.per.ip.overrides", "string", "", "`IP:COUNT,...`: other limits for some addresses",
              role=BROKER),
    _int("max.connection.creation.rate", INT_MAX, "new connections per second a broker's Kafka listeners accept in "
         "all (KIP-612); more wait, unread, to be served (also `listener.name.<l>.max.connection.creation.rate`, "
         "one listener's own)", 1, INT_MAX, role=BROKER),
    _int("quota.window.num", 11, "samples request_percentage is measured over; byte rates allow (this - 1) windows at once (see \"Quotas\")", 1, INT_MAX,
         role=BROKER),
    _int("quota.window.size.seconds", 1, "the time span of one quota sample", 1, INT_MAX, role=BROKER),
    _int("connections.max.reauth.ms", 0, "the SASL session lifetime clients are told (KIP-368): a connection "
         "not re-authenticated by then is closed; 0: sessions do not expire", 0, role=BROKER),
    ConfigKey("inter.broker.listener.name", "string", None, "the gRPC listener brokers call each other and "
              "the tools call them on (replication too under `replica.fetch.protocol=grpc`)",
              role=BROKER, default_doc="the first gRPC listener"),
    _int("replica.lag.time.max.ms", 30_000, "a follower behind for longer leaves the ISR", 1, role=BROKER,
         dynamic=True),
    ConfigKey("replica.selector.class", "string", None, "how a partition's leader picks the replica a consumer "
              f"reads from (KIP-392): `{RACK_AWARE_REPLICA_SELECTOR}` (an in-sync replica in the consumer's "
              "`client.rack`); see \"Follower fetching\"", one_of("", RACK_AWARE_REPLICA_SELECTOR), role=BROKER,
              default_doc="unset (the leader)"),
    ConfigKey("replica.fetch.protocol", "string", "kafka", "how followers fetch from leaders: `kafka`, Kafka's "
              "Fetch and OffsetsForLeaderEpoch on the leaders' Kafka listener (`replica.fetch.listener.name`), or "
              "`grpc`, the broker gRPC service on the inter-broker listener (also what `kafka` falls back to when "
              "no Kafka listener is eligible, or a leader lacks it); see \"Replication\" in docs/brokers.md",
              one_of("kafka", "grpc"), role=BROKER),
    ConfigKey("replica.fetch.listener.name", "string", None, "the Kafka listener followers fetch over "
              "(`replica.fetch.protocol=kafka`), whose advertised address every broker must reach, like Kafka's "
              "inter-broker listener: no SASL, the inter-broker listener's protocol, and client certificates "
              "required if that listener requires them", role=BROKER,
              default_doc="the first such listener of `kafka.listener.names`"),
    _int("replica.fetch.wait.max.ms", 500, "how long a follower's fetch waits for data", 0, role=BROKER),
    _int("replica.fetch.min.bytes", 1, "bytes a follower's fetch waits for", 0, role=BROKER),
    _int("replica.fetch.max.bytes", 1 << 20, "bytes a follower fetches per partition", 1, role=BROKER),
    _int("replica.fetch.response.max.bytes", 10 << 20, "bytes a follower fetches per request", 1, role=BROKER),
    _int("replica.fetch.backoff.ms", 1000, "a follower's pause after a failed fetch", 0, role=BROKER),
    _int("max.incremental.fetch.session.cache.slots", 1000, "fetch sessions (KIP-227) the broker keeps; "
         "0 turns them off (every fetch is a full one)", 0, role=BROKER),
    _int("replica.high.watermark.checkpoint.interval.ms", 5000, "how often high watermarks are saved", 1,
         role=BROKER),
    _int("metadata.log.max.snapshot.interval.ms", 3_600_000, "how often the broker checkpoints its metadata "
         "image", 1, role=BROKER),
    _int("socket.request.max.bytes", 100 << 20, "the largest request accepted", 1024, role=BROKER),
    _int("producer.id.expiration.ms", 86_400_000, "an idle producer's state is dropped after this", 1,
         role=BROKER),
    _int("producer.id.expiration.check.interval.ms", 600_000, "how often idle producers are looked for", 1,
         role=BROKER),
    ConfigKey("auto.create.topics.enable", "boolean", "true", "create a topic on its first produce or "
              "metadata request", role=BROKER),
    _int("offsets.topic.num.partitions", 50, "partitions of `__consumer_offsets`", 1, INT_MAX, role=BROKER),
    _int("offsets.topic.replication.factor", 3, "replication factor of `__consumer_offsets`", 1, INT_MAX,
         role=BROKER),
    _int("transaction.state.log.num.partitions", 50, "partitions of `__transaction_state`", 1, INT_MAX,
         role=BROKER),
    _int("transaction.state.log.replication.factor", 3, "replication factor of `__transaction_state`", 1,
         INT_MAX, role=BROKER),
    _int("transaction.state.log.min.isr", 2, "`min.insync.replicas` of `__transaction_state` (at most its "
         "replication factor): each change of a transaction is written with acks=all", 1, INT_MAX, role=BROKER),
    _int("transaction.max.timeout.ms", 900_000, "the longest `transaction.timeout.ms` a producer may ask for", 1,
         INT_MAX, role=BROKER),
    _int("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10_000, "how often the transaction "
         "coordinator looks for transactions past their `transaction.timeout.ms`, to abort them", 1, INT_MAX,
         role=BROKER),
    _int("transactional.id.expiration.ms", 604_800_000, "how long a transactional id with no transaction open "
         "stays after its last update; then the coordinator forgets it (a tombstone in `__transaction_state`)",
         1, INT_MAX, role=BROKER),
    _int("transaction.remove.expired.transaction.cleanup.interval.ms", 3_600_000, "how often the transaction "
         "coordinator looks for transactional ids past `transactional.id.expiration.ms`", 1, INT_MAX,
         role=BROKER),
    _int("group.min.session.timeout.ms", 6000, "the shortest session a group member may ask for", 1,
         role=BROKER),
    _int("group.max.session.timeout.ms", 1_800_000, "the longest session a group member may ask for", 1,
         role=BROKER),
    _int("group.initial.rebalance.delay.ms", 3000, "how long a new group waits for more members", 0,
         role=BROKER),
    _int("offset.metadata.max.bytes", 4096, "the largest metadata of a committed offset", 0, role=BROKER),
    _int("log.flush.interval.messages", LONG_MAX, "fsync after this many messages (1: every append); see "
         "docs/brokers.md", 1, role=BROKER, default_doc="unset (the OS writes back)"),
    _int("log.flush.interval.ms", LONG_MAX, "... or every this many ms", 1, role=BROKER,
         default_doc="unset (the OS writes back)"),
    _int("log.retention.ms", 168 * 3_600_000, "default `retention.ms` of topics (-1: forever)", -1,
         role=BROKER, dynamic=True, default_doc="`log.retention.minutes`, else `log.retention.hours`"),
    _int("log.retention.minutes", None, "the same in minutes, when `log.retention.ms` is unset", -1, role=BROKER),
    _int("log.retention.hours", 168, "the same in hours, when both are unset", -1, role=BROKER),
    _int("log.retention.bytes", -1, "default `retention.bytes` of topics (-1: unlimited)", -1, role=BROKER,
         dynamic=True),
    _int("log.retention.check.interval.ms", 300_000, "how often retention is applied", 1, role=BROKER),
    _int("message.max.bytes", 1048588, "default `max.message.bytes` of topics: the largest batch", 0, INT_MAX,
         role=BROKER, dynamic=True),
    _int("min.insync.replicas", 1, "default `min.insync.replicas` of topics", 1, INT_MAX, role=BROKER,
         dynamic=True),
    ConfigKey("compression.type", "string", "producer", "default `compression.type` of topics",
              one_of(*COMPRESSION_TYPES), role=BROKER, dynamic=True, convert=compression_type),
    ConfigKey("log.message.timestamp.type", "string", "CreateTime", "default `message.timestamp.type` of topics",
              one_of(*TIMESTAMP_TYPES), role=BROKER, dynamic=True),
    ConfigKey("log.cleanup.policy", "list", "delete", "default `cleanup.policy` of topics",
              one_of(*CLEANUP_POLICIES), role=BROKER, dynamic=True, convert=cleanup_policy),
    ConfigKey("log.cleaner.enable", "boolean", "true", "compact topics with `cleanup.policy=compact`",
              role=BROKER),
    _int("log.cleaner.backoff.ms", 15_000, "the pause between compaction passes", 1, role=BROKER),
    _int("log.cleaner.delete.retention.ms", 86_400_000, "default `delete.retention.ms` of topics", 0,
         role=BROKER, dynamic=True),
    ConfigKey("log.cleaner.min.cleanable.ratio", "double", "0.5", "default `min.cleanable.dirty.ratio` of topics",
              ratio, role=BROKER, dynamic=True),
    _int("leader.replication.throttled.rate", 0, "bytes/s a leader sends to replicas a reassignment is adding "
         "(0: unthrottled)", 0, role=BROKER, dynamic=True),
    _int("follower.replication.throttled.rate", 0, "bytes/s a replica being added by a reassignment fetches "
         "(0: unthrottled)", 0, role=BROKER, dynamic=True),
    _int("replica.alter.log.dirs.io.max.bytes.per.second", 0, "bytes/s replicas moving between this broker's "
         "log dirs copy (AlterReplicaLogDirs; 0: unthrottled)", 0, role=BROKER, dynamic=True),
])
