"""Metadata records: building them, and the bytes of one Raft entry (a ``RecordBatch``).

Records are the protobuf messages of ``protos/metadata.proto``, each wrapped in a
``MetadataRecord`` carrying its version. Readers refuse versions they do not know rather than
guess at them: a misread record would make this node's image silently diverge from the
others'. The builders here take Python values (``uuid.UUID`` ids, ``None`` for "absent") so
that callers never handle raw proto plumbing.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from google.protobuf.message import DecodeError

from protos import metadata_pb2 as pb

if TYPE_CHECKING:
    from .acls import StandardAcl
    from .scram import ScramCredential

#: The only record version this code reads and writes.
RECORD_VERSION = 1
#: ``leader`` of a partition without one (Kafka's LeaderConstants.NO_LEADER).
NO_LEADER = -1
#: records copied into a batch per C call (encode_batch)
COPY_CHUNK = 500

MetadataRecord = pb.MetadataRecord
RecordBatch = pb.RecordBatch

# oneof field name -> Kafka's record type name ("partition" -> "PartitionRecord").
_TYPE_NAMES: dict[str, str] = {
    f.name: f.message_type.name
    for f in pb.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"].fields
}


class RecordError(ValueError):
    """A record or batch that cannot be read or applied: malformed bytes, an unknown version,
    or a reference to something that does not exist. The log is corrupt or was written by
    newer code; applying past it would make this node's metadata diverge."""


def type_name(record: MetadataRecord) -> str:
    """Kafka's name for the record's type, e.g. ``"PartitionRecord"``; ``"record"`` if unset."""
    which = record.WhichOneof("record")
    return _TYPE_NAMES[which] if which else "record"


def check(record: MetadataRecord) -> str:
    """Raise RecordError unless the record has a type and a version this code reads; return
    the oneof field name of its type (``"partition"``, ``"topic"``, ...)."""
    which = record.WhichOneof("record")
    if which is None:
        raise RecordError(f"record (version {record.version}) has no known type; "
                          "was it written by a newer version?")
    if record.version != RECORD_VERSION:
        if record.version == 0:
            raise RecordError(f"{_TYPE_NAMES[which]} has no version")
        raise RecordError(f"unsupported version {record.version} of {_TYPE_NAMES[which]} "
                          f"(this reader supports version {RECORD_VERSION})")
    return which


def encode_record(record: MetadataRecord) -> bytes:
    check(record)
    return record.SerializeToString(deterministic=True)


def decode_record(data: bytes) -> MetadataRecord:
    """Parse and check one record; RecordError on malformed bytes or an unknown version."""
    try:
        record = pb.MetadataRecord.FromString(data)
    except DecodeError as e:
        raise RecordError(f"malformed record ({len(data)} bytes): {e}") from None
    check(record)
    return record


def encode_batch(records: Iterable[MetadataRecord], append_time_ms: int = 0) -> bytes:
    """The data of one Raft entry: records that are applied together or not at all."""
    records = list(records)
    for r in records:
        check(r)
    batch = pb.RecordBatch(append_time_ms=append_time_ms)
    # A few hundred at a time: one extend copies its records in a C call that holds the GIL
    # throughout (15 ms of CPU for 10,000 partitions), while the controller's event loop waits.
    for start in range(0, len(records), COPY_CHUNK):
        batch.records.extend(records[start:start + COPY_CHUNK])
    return batch.SerializeToString(deterministic=True)


def decode_batch(data: bytes) -> RecordBatch:
    """Parse one Raft entry's data; every record is checked before any is returned, so a
    batch is refused whole (it is atomic) rather than half-applied."""
    try:
        batch = pb.RecordBatch.FromString(data)
    except DecodeError as e:
        raise RecordError(f"malformed record batch ({len(data)} bytes): {e}") from None
    for i, r in enumerate(batch.records):
        try:
            check(r)
        except RecordError as e:
            raise RecordError(f"record {i} of batch: {e}") from None
    return batch


def uuid_of(raw: bytes, what: str) -> uuid.UUID:
    """A 16-byte id field as a UUID; RecordError naming the field otherwise."""
    if len(raw) != 16:
        raise RecordError(f"{what} must be 16 bytes, got {len(raw)}")
    return uuid.UUID(bytes=raw)


# -- builders: one per record type, returning the versioned wrapper --------------------------

def _wrap(**kw: Any) -> MetadataRecord:
    return pb.MetadataRecord(version=RECORD_VERSION, **kw)


def endpoint(name: str, host: str, port: int,
             security_protocol: int = pb.Endpoint.PLAINTEXT) -> pb.Endpoint:
    return pb.Endpoint(name=name, host=host, port=port,
                       security_protocol=pb.Endpoint.SecurityProtocol.Name(security_protocol))


def register_broker(broker_id: int, incarnation_id: uuid.UUID, broker_epoch: int,
                    endpoints: Sequence[pb.Endpoint] = (), rack: str | None = None,
                    fenced: bool = True, in_controlled_shutdown: bool = False) -> MetadataRecord:
    """Brokers register fenced (Kafka's default) and are unfenced once caught up."""
    r = pb.RegisterBrokerRecord(broker_id=broker_id, incarnation_id=incarnation_id.bytes,
                                broker_epoch=broker_epoch, endpoints=endpoints, fenced=fenced,
                                in_controlled_shutdown=in_controlled_shutdown)
    if rack is not None:
        r.rack = rack
    return _wrap(register_broker=r)


def unregister_broker(broker_id: int, broker_epoch: int) -> MetadataRecord:
    return _wrap(unregister_broker=pb.UnregisterBrokerRecord(broker_id=broker_id,
                                                             broker_epoch=broker_epoch))


def fence_broker(broker_id: int, broker_epoch: int) -> MetadataRecord:
    return _wrap(fence_broker=pb.FenceBrokerRecord(id=broker_id, epoch=broker_epoch))


def unfence_broker(broker_id: int, broker_epoch: int) -> MetadataRecord:
    return _wrap(unfence_broker=pb.UnfenceBrokerRecord(id=broker_id, epoch=broker_epoch))


def broker_registration_change(broker_id: int, broker_epoch: int, *, fenced: bool | None = None,
                               in_controlled_shutdown: bool | None = None) -> MetadataRecord:
    """Only the fields given (not None) change."""
    r = pb.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch)
    if fenced is not None:
        r.fenced = fenced
    if in_controlled_shutdown is not None:
        r.in_controlled_shutdown = in_controlled_shutdown
    return _wrap(broker_registration_change=r)


def topic(name: str, topic_id: uuid.UUID) -> MetadataRecord:
    return _wrap(topic=pb.TopicRecord(name=name, topic_id=topic_id.bytes))


def remove_topic(topic_id: uuid.UUID) -> MetadataRecord:
    return _wrap(remove_topic=pb.RemoveTopicRecord(topic_id=topic_id.bytes))


def partition(topic_id: uuid.UUID, partition_id: int, replicas: Sequence[int],
              isr: Sequence[int] | None = None, leader: int | None = None,
              leader_epoch: int = 0, partition_epoch: int = 0) -> MetadataRecord:
    """A new partition; by default every replica is in sync and the first one leads."""
    isr = replicas if isr is None else isr
    if leader is None:
        leader = replicas[0] if replicas else NO_LEADER
    return _wrap(partition=pb.PartitionRecord(
        topic_id=topic_id.bytes, partition_id=partition_id, replicas=replicas, isr=isr,
        leader=leader, leader_epoch=leader_epoch, partition_epoch=partition_epoch))


def partition_change(topic_id: uuid.UUID, partition_id: int, *, leader: int | None = None,
                     isr: Sequence[int] | None = None, replicas: Sequence[int] | None = None,
                     adding: Sequence[int] | None = None,
                     removing: Sequence[int] | None = None) -> MetadataRecord:
    """Only the fields given (not None) change; ``leader=NO_LEADER`` clears the leader."""
    r = pb.PartitionChangeRecord(topic_id=topic_id.bytes, partition_id=partition_id)
    if leader is not None:
        r.leader = leader
    for ids, field in ((isr, r.isr), (replicas, r.replicas), (adding, r.adding_replicas),
                       (removing, r.removing_replicas)):
        if ids is not None:
            field.SetInParent()
            field.ids.extend(ids)
    return _wrap(partition_change=r)


def config(resource_type: int, resource_name: str, name: str,
           value: str | None) -> MetadataRecord:
    """Set ``name`` on the resource, or remove it when ``value`` is None."""
    r = pb.ConfigRecord(resource_type=pb.ConfigRecord.ResourceType.Name(resource_type),
                        resource_name=resource_name, name=name)
    if value is not None:
        r.value = value
    return _wrap(config=r)


def feature_level(name: str, level: int) -> MetadataRecord:
    return _wrap(feature_level=pb.FeatureLevelRecord(name=name, feature_level=level))


def producer_ids(broker_id: int, broker_epoch: int, next_producer_id: int) -> MetadataRecord:
    return _wrap(producer_ids=pb.ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                                   next_producer_id=next_producer_id))


def no_op() -> MetadataRecord:
    return _wrap(no_op=pb.NoOpRecord())


def access_control_entry(acl_id: uuid.UUID, acl: StandardAcl) -> MetadataRecord:
    return _wrap(access_control_entry=pb.AccessControlEntryRecord(
        # the same ids as the wire's enums, typed as protoc's stubs type enum fields
        id=acl_id.bytes, resource_type=cast(pb.AclResourceType.Value, int(acl.resource_type)),
        resource_name=acl.resource_name, pattern_type=cast(pb.PatternType.Value, int(acl.pattern_type)),
        principal=acl.principal, host=acl.host, operation=cast(pb.AclOperation.Value, int(acl.operation)),
        permission_type=cast(pb.AclPermissionType.Value, int(acl.permission_type))))


def remove_access_control_entry(acl_id: uuid.UUID) -> MetadataRecord:
    return _wrap(remove_access_control_entry=pb.RemoveAccessControlEntryRecord(id=acl_id.bytes))


def user_scram_credential(user: str, mechanism: int, credential: ScramCredential) -> MetadataRecord:
    return _wrap(user_scram_credential=pb.UserScramCredentialRecord(
        name=user, mechanism=int(mechanism), salt=credential.salt, stored_key=credential.stored_key,
        server_key=credential.server_key, iterations=credential.iterations))


def remove_user_scram_credential(user: str, mechanism: int) -> MetadataRecord:
    return _wrap(remove_user_scram_credential=pb.RemoveUserScramCredentialRecord(name=user, mechanism=int(mechanism)))


def client_quota(entity: Sequence[tuple[str, str | None]], key: str, value: float | None) -> MetadataRecord:
    """Set ``key`` of the quota entity to ``value``, or remove it when ``value`` is None."""
    parts = [pb.ClientQuotaEntityPart(entity_type=t) if n is None else pb.ClientQuotaEntityPart(entity_type=t,
                                                                                                 entity_name=n)
             for t, n in entity]
    return _wrap(client_quota=pb.ClientQuotaRecord(entity=parts, key=key, value=value or 0.0, remove=value is None))
