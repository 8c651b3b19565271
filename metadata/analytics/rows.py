"""Rows of the data source's tables, built column by column into Arrow record batches.

Spark takes a Python data source's Arrow batches as they are, whereas tuples are converted
value by value; at a million partitions that difference is most of the read time. The same
adders serve rows read from snapshot records and rows taken from an image (a log directory
replayed to an offset), so both give identical rows.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from metadata.image import BrokerRegistration, MetadataImage
from metadata.record_json import message_to_dict
from metadata.records import MetadataRecord, type_name
from protos import metadata_pb2 as pb

from .schemas import TABLES

#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 32_768

Racks = Mapping[int, "str | None"]


class Rows:
    """The columns of one table being filled; ``take`` turns them into a record batch of
    exactly the schema Spark expects for the table (it refuses any other)."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.schema = to_arrow_schema(TABLES[table], timezone="UTC")
        self.cols: list[list] = [[] for _ in self.schema]

    def __len__(self) -> int:
        return len(self.cols[0])

    def full(self) -> bool:
        return len(self.cols[0]) >= BATCH_ROWS

    def take(self) -> pa.RecordBatch:
        batch = pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(self.cols, self.schema)],
            schema=self.schema)
        self.cols = [[] for _ in self.schema]
        return batch


def add_topic(rows: Rows, name: str, topic_id: str) -> None:
    rows.cols[0].append(name)
    rows.cols[1].append(topic_id)


def add_partition(rows: Rows, topic: str, topic_id: str, partition: int,
                  replicas: Sequence[int], isr: Sequence[int], leader: int,
                  leader_epoch: int, partition_epoch: int) -> None:
    c = rows.cols
    c[0].append(topic)
    c[1].append(topic_id)
    c[2].append(partition)
    c[3].append(replicas)
    c[4].append(isr)
    c[5].append(leader)
    c[6].append(leader_epoch)
    c[7].append(partition_epoch)


def add_replicas(rows: Rows, topic: str, topic_id: str, partition: int,
                 replicas: Sequence[int], isr: Sequence[int], leader: int, racks: Racks) -> None:
    c = rows.cols
    in_sync = set(isr)
    for position, broker in enumerate(replicas):
        c[0].append(topic)
        c[1].append(topic_id)
        c[2].append(partition)
        c[3].append(broker)
        c[4].append(position)
        c[5].append(broker == leader)
        c[6].append(broker in in_sync)
        c[7].append(racks.get(broker))


def add_broker(rows: Rows, broker: int, incarnation_id: str, epoch: int, rack: str | None,
               fenced: bool, in_controlled_shutdown: bool, endpoints: list[dict]) -> None:
    for col, value in zip(rows.cols, (broker, incarnation_id, epoch, rack, fenced,
                                      in_controlled_shutdown, endpoints)):
        col.append(value)


def add_config(rows: Rows, resource_type: str, resource_name: str, key: str, value: str) -> None:
    for col, value in zip(rows.cols, (resource_type, resource_name, key, value)):
        col.append(value)


# -- from records ------------------------------------------------------------------------------

def broker_from_record(rows: Rows, r: pb.RegisterBrokerRecord) -> None:
    add_broker(rows, r.broker_id, str(uuid.UUID(bytes=r.incarnation_id)), r.broker_epoch,
               r.rack if r.HasField("rack") else None, r.fenced, r.in_controlled_shutdown,
               [{"name": e.name, "host": e.host, "port": e.port,
                 "security_protocol": pb.Endpoint.SecurityProtocol.Name(e.security_protocol)}
                for e in r.endpoints])


def config_from_record(rows: Rows, r: pb.ConfigRecord) -> None:
    if r.HasField("value"):  # a snapshot holds no removals; a log's are not configs
        add_config(rows, pb.ConfigRecord.ResourceType.Name(r.resource_type), r.resource_name,
                   r.name, r.value)


def racks_of_records(records: Iterator[MetadataRecord]) -> dict[int, str | None]:
    """Each registered broker's rack, from RegisterBrokerRecords (the last one wins)."""
    racks: dict[int, str | None] = {}
    for record in records:
        if record.WhichOneof("record") == "register_broker":
            b = record.register_broker
            racks[b.broker_id] = b.rack if b.HasField("rack") else None
    return racks


# Per record type: the field naming its topic id, partition and broker, if any.
_KEYS: dict[str, tuple[str | None, str | None, str | None]] = {
    "register_broker": (None, None, "broker_id"),
    "unregister_broker": (None, None, "broker_id"),
    "fence_broker": (None, None, "id"),
    "unfence_broker": (None, None, "id"),
    "broker_registration_change": (None, None, "broker_id"),
    "topic": ("topic_id", None, None),
    "remove_topic": ("topic_id", None, None),
    "partition": ("topic_id", "partition_id", None),
    "partition_change": ("topic_id", "partition_id", None),
    "producer_ids": (None, None, "broker_id"),
}


def add_record(rows: Rows, source: str, offset: int, term: int, time_ms: int, index: int,
               record: MetadataRecord) -> None:
    which = record.WhichOneof("record")
    inner = getattr(record, which)
    topic_field, partition_field, broker_field = _KEYS.get(which, (None, None, None))
    raw = getattr(inner, topic_field) if topic_field else b""
    values = (source, offset, term, time_ms * 1000 if time_ms > 0 else None, index,
              type_name(record), record.version,
              str(uuid.UUID(bytes=raw)) if len(raw) == 16 else None,
              getattr(inner, partition_field) if partition_field else None,
              getattr(inner, broker_field) if broker_field else None,
              json.dumps(message_to_dict(inner), separators=(",", ":")))
    for col, value in zip(rows.cols, values):
        col.append(value)


# -- from an image -----------------------------------------------------------------------------

def broker_from_image(rows: Rows, b: BrokerRegistration) -> None:
    add_broker(rows, b.id, str(b.incarnation_id), b.epoch, b.rack, b.fenced,
               b.in_controlled_shutdown,
               [{"name": e.name, "host": e.host, "port": e.port,
                 "security_protocol": e.security_protocol.name} for e in b.endpoints])


def image_rows(table: str, image: MetadataImage,
               topic_ids: Collection[uuid.UUID] | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of ``table`` in ``image``; topics, partitions and replicas only of the
    topics in ``topic_ids`` (None: all)."""
    rows = Rows(table)
    topics = [t for t in image.topics_by_id.values() if topic_ids is None or t.id in topic_ids]
    racks = {b.id: b.rack for b in image.brokers.values()}
    if table == "brokers":
        for _, b in sorted(image.brokers.items()):
            broker_from_image(rows, b)
    elif table == "configs":
        for resource in sorted(image.configs):
            for key, value in sorted(image.configs[resource].items()):
                add_config(rows, resource.type.name, resource.name, key, value)
    elif table == "topics":
        for t in topics:
            add_topic(rows, t.name, str(t.id))
    elif table in ("partitions", "replicas"):
        for t in topics:
            tid = str(t.id)
            for pid, p in sorted(t.partitions.items()):
                if table == "partitions":
                    add_partition(rows, t.name, tid, pid, p.replicas, p.isr, p.leader,
                                  p.leader_epoch, p.partition_epoch)
                else:
                    add_replicas(rows, t.name, tid, pid, p.replicas, p.isr, p.leader, racks)
                if rows.full():
                    yield rows.take()
    else:
        raise ValueError(f"no image rows for table {table!r}")
    if len(rows):
        yield rows.take()
