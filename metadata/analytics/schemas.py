"""The Spark schemas of the tables the ``kraft`` data source serves (see docs/analytics.md).

Ids are strings (topic ids as UUID text, the way Kafka's tools print them), broker ids and
partition numbers ints, epochs and offsets longs. Columns that every row has are NOT NULL,
so that a schema mismatch in a reader fails loudly instead of filling in nulls.
"""
from __future__ import annotations

from pyspark.sql.types import (ArrayType, BooleanType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)


def _f(name: str, kind, nullable: bool = False) -> StructField:
    return StructField(name, kind, nullable)


_BROKER_IDS = ArrayType(IntegerType(), containsNull=False)

ENDPOINT = StructType([_f("name", StringType()), _f("host", StringType()),
                       _f("port", IntegerType()), _f("security_protocol", StringType())])

BROKERS = StructType([
    _f("broker", IntegerType()),
    _f("incarnation_id", StringType()),
    _f("epoch", LongType()),
    _f("rack", StringType(), True),
    _f("fenced", BooleanType()),
    _f("in_controlled_shutdown", BooleanType()),
    _f("endpoints", ArrayType(ENDPOINT, containsNull=False)),
])

TOPICS = StructType([_f("topic", StringType()), _f("topic_id", StringType())])

PARTITIONS = StructType([
    _f("topic", StringType()),
    _f("topic_id", StringType()),
    _f("partition", IntegerType()),
    _f("replicas", _BROKER_IDS),
    _f("isr", _BROKER_IDS),
    _f("leader", IntegerType()),  # -1: no leader
    _f("leader_epoch", IntegerType()),
    _f("partition_epoch", IntegerType()),
])

REPLICAS = StructType([
    _f("topic", StringType()),
    _f("topic_id", StringType()),
    _f("partition", IntegerType()),
    _f("broker", IntegerType()),
    _f("position", IntegerType()),  # in the replica list; 0 is the preferred leader
    _f("is_leader", BooleanType()),
    _f("in_isr", BooleanType()),
    _f("rack", StringType(), True),  # null: no rack, or the broker is not registered
])

CONFIGS = StructType([
    _f("resource_type", StringType()),  # TOPIC or BROKER
    _f("resource_name", StringType()),  # a topic, a broker id, or "" (the cluster default)
    _f("key", StringType()),
    _f("value", StringType()),
])

ACLS = StructType([
    _f("resource_type", StringType()),    # TOPIC, GROUP or CLUSTER
    _f("resource_name", StringType()),
    _f("pattern_type", StringType()),     # LITERAL or PREFIXED
    _f("principal", StringType()),        # e.g. User:alice, User:*
    _f("host", StringType()),             # an IP address or *
    _f("operation", StringType()),        # READ, WRITE, ..., ALL
    _f("permission_type", StringType()),  # ALLOW or DENY
    _f("id", StringType()),
])

RECORDS = StructType([
    _f("source", StringType()),       # "snapshot" or "log"
    _f("offset", LongType()),         # the Raft entry; a snapshot's records all carry its offset
    _f("term", LongType()),
    _f("timestamp", TimestampType(), True),  # the batch's append time; the snapshot's creation
    _f("position", IntegerType()),    # in the batch (in the snapshot, for its records)
    _f("record_type", StringType()),  # Kafka's name, e.g. PartitionRecord
    _f("version", IntegerType()),
    _f("topic_id", StringType(), True),
    _f("partition", IntegerType(), True),
    _f("broker", IntegerType(), True),
    _f("fields", StringType()),       # the record's fields as JSON, as the log dump prints them
])

TABLES: dict[str, StructType] = {
    "brokers": BROKERS,
    "topics": TOPICS,
    "partitions": PARTITIONS,
    "replicas": REPLICAS,
    "configs": CONFIGS,
    "acls": ACLS,
    "records": RECORDS,
}
