"""Rows of the data source's tables, built column by column into Arrow record batches.

Spark takes a Python data source's Arrow batches as they are, whereas tuples are converted
value by value; at a million partitions that difference is most of the read time. The same
adders serve rows read from snapshot records and rows taken from an image (a log directory
replayed to an offset), so both give identical rows.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Hashable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from metadata.acls import StandardAcl
from metadata.delta.acls import acl_of_record
from metadata.image import BrokerRegistration, MetadataImage
from metadata.record_json import message_to_dict
from metadata.records import MetadataRecord, type_name, uuid_of
from protos import metadata_pb2 as pb

from .schemas import TABLES

#: Rows per Arrow batch handed to Spark.
BATCH_ROWS = 32_768

Racks = Mapping[int, "str | None"]
#: Arrow's type for a broker id list column (Spark's array<int> without nulls).
_BROKER_LIST = to_arrow_schema(TABLES["partitions"], timezone="UTC").field("replicas").type


Shape = tuple[tuple[int, ...], tuple[int, ...], int, int, int]  # replicas, isr, leader, epochs


class PartitionRows:
    """Rows of the partitions or replicas table for one batch, held as references: to the
    batch's topics and to its distinct *shapes* (replicas, isr, leader, leader epoch,
    partition epoch), of which a cluster has few. Arrow builds the columns with ``take``
    from the references, instead of converting a million lists value by value; the replicas
    table is the same references exploded by Arrow."""

    def __init__(self, table: str, racks: Racks) -> None:
        assert table in ("partitions", "replicas")
        self.table = table
        self.schema = to_arrow_schema(TABLES[table], timezone="UTC")
        self.racks = racks
        self._topic: tuple[str, str] | None = None
        self._reset()

    def _reset(self) -> None:
        self._names: list[str] = []
        self._ids: list[str] = []
        self._topic_ref: int | None = None
        self._shapes: dict[Hashable, int] = {}
        self._shape_list: list[Shape] = []
        self._topic_refs: list[int] = []
        self._partitions: list[int] = []
        self._shape_refs: list[int] = []

    def __len__(self) -> int:
        return len(self._partitions)

    def full(self) -> bool:
        return len(self._partitions) >= BATCH_ROWS

    def topic(self, name: str, topic_id: str) -> None:
        """The topic of the partitions added next."""
        self._topic = (name, topic_id)
        self._topic_ref = None

    def add(self, partition: int, key: Hashable, shape: Shape) -> None:
        """A partition of the current topic; ``key`` identifies ``shape`` (equal keys, equal
        shapes): its record bytes, or the shape itself."""
        ref = self._shapes.get(key)
        if ref is None:
            ref = self._shapes[key] = len(self._shape_list)
            self._shape_list.append(shape)
        if self._topic_ref is None:
            assert self._topic is not None, "a partition before its topic"
            self._topic_ref = len(self._names)
            self._names.append(self._topic[0])
            self._ids.append(self._topic[1])
        self._topic_refs.append(self._topic_ref)
        self._partitions.append(partition)
        self._shape_refs.append(ref)

    def take(self) -> pa.RecordBatch:
        topic_refs = pa.array(self._topic_refs, pa.int32())
        shape_refs = pa.array(self._shape_refs, pa.int32())
        partitions = pa.array(self._partitions, pa.int32())
        names = pa.array(self._names, pa.string())
        ids = pa.array(self._ids, pa.string())
        shapes = self._shape_list
        replicas = pa.array([s[0] for s in shapes], type=_BROKER_LIST)
        if self.table == "partitions":
            columns = [names.take(topic_refs), ids.take(topic_refs), partitions,
                       replicas.take(shape_refs),
                       pa.array([s[1] for s in shapes], type=_BROKER_LIST).take(shape_refs),
                       *(pa.array([s[k] for s in shapes], pa.int32()).take(shape_refs)
                         for k in (2, 3, 4))]
        else:
            per_replica = replicas.take(shape_refs)
            parent = pc.list_parent_indices(per_replica)
            of_partition = topic_refs.take(parent)

            def flat(values: list[list], kind: pa.DataType) -> pa.Array:
                return pc.list_flatten(pa.array(values, pa.list_(kind)).take(shape_refs))

            columns = [names.take(of_partition), ids.take(of_partition), partitions.take(parent),
                       pc.list_flatten(per_replica),
                       flat([list(range(len(s[0]))) for s in shapes], pa.int32()),
                       flat([[b == s[2] for b in s[0]] for s in shapes], pa.bool_()),
                       flat([[b in s[1] for b in s[0]] for s in shapes], pa.bool_()),
                       flat([[self.racks.get(b) for b in s[0]] for s in shapes], pa.string())]
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self._reset()
        return batch


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
            [pa.array(c, type=f.type) for c, f in zip(self.cols, self.schema, strict=True)],
            schema=self.schema)
        self.cols = [[] for _ in self.schema]
        return batch


def add_topic(rows: Rows, name: str, topic_id: str) -> None:
    rows.cols[0].append(name)
    rows.cols[1].append(topic_id)


def add_broker(rows: Rows, broker: int, incarnation_id: str, epoch: int, rack: str | None,
               fenced: bool, in_controlled_shutdown: bool, endpoints: list[dict]) -> None:
    for col, value in zip(rows.cols, (broker, incarnation_id, epoch, rack, fenced,
                                      in_controlled_shutdown, endpoints), strict=True):
        col.append(value)


def add_config(rows: Rows, resource_type: str, resource_name: str, key: str, value: str) -> None:
    for col, cell in zip(rows.cols, (resource_type, resource_name, key, value), strict=True):
        col.append(cell)


def add_acl(rows: Rows, acl_id: uuid.UUID, acl: StandardAcl) -> None:
    for col, value in zip(rows.cols, (acl.resource_type.name, acl.resource_name, acl.pattern_type.name,
                                      acl.principal, acl.host, acl.operation.name,
                                      acl.permission_type.name, str(acl_id)), strict=True):
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


def acl_from_record(rows: Rows, r: pb.AccessControlEntryRecord) -> None:
    """A row as the image would give it; values no controller writes raise RecordError."""
    add_acl(rows, uuid_of(r.id, "ACL id"), acl_of_record(r))


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
    for col, value in zip(rows.cols, values, strict=True):
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
    topics = [t for t in image.topics_by_id.values() if topic_ids is None or t.id in topic_ids]
    if table in ("partitions", "replicas"):
        parts = PartitionRows(table, {b.id: b.rack for b in image.brokers.values()})
        for t in topics:
            parts.topic(t.name, str(t.id))
            for pid, p in sorted(t.partitions.items()):
                shape = (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch)
                parts.add(pid, shape, shape)
                if parts.full():
                    yield parts.take()
        if len(parts):
            yield parts.take()
        return
    rows = Rows(table)
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
    elif table == "acls":
        for acl_id, acl in sorted(image.acls.by_id.items()):
            add_acl(rows, acl_id, acl)
    else:
        raise ValueError(f"no image rows for table {table!r}")
    if len(rows):
        yield rows.take()
