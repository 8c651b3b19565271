"""Metadata records: builders, the bytes of one Raft entry, and refusing what cannot be read."""
from __future__ import annotations

import uuid

import pytest

from metadata import records as R
from metadata.acls import AclOperation, AclPermissionType, AclResourceType, PatternType, StandardAcl
from metadata.image import ResourceType
from metadata.records import RecordError
from metadata.scram import ScramCredential
from protos import metadata_pb2 as pb

TID = uuid.UUID("00000000-0000-0000-0000-0000000000aa")
INC = uuid.UUID("11111111-2222-3333-4444-555555555555")


def one_of_each() -> list[pb.MetadataRecord]:
    return [
        R.register_broker(1, INC, 7, [R.endpoint("PLAINTEXT", "h1", 9092),
                                      R.endpoint("SSL", "h1", 9093, pb.Endpoint.SSL)],
                          rack="r1", fenced=False),
        R.unregister_broker(1, 7),
        R.fence_broker(1, 7),
        R.unfence_broker(1, 7),
        R.broker_registration_change(1, 7, in_controlled_shutdown=True),
        R.topic("orders", TID),
        R.remove_topic(TID),
        R.partition(TID, 0, [1, 2, 3]),
        R.partition_change(TID, 0, leader=2, isr=[2, 3]),
        R.config(ResourceType.TOPIC, "orders", "retention.ms", "1000"),
        R.feature_level("metadata.version", 3),
        R.producer_ids(1, 7, 1000),
        R.access_control_entry(INC, StandardAcl(AclResourceType.TOPIC, "orders", PatternType.PREFIXED, "User:alice",
                                                "*", AclOperation.WRITE, AclPermissionType.ALLOW)),
        R.remove_access_control_entry(INC),
        R.user_scram_credential("alice", 2, ScramCredential(b"salt", b"stored", b"server", 8192)),
        R.remove_user_scram_credential("alice", 2),
        R.client_quota((("client-id", None), ("user", "alice")), "producer_byte_rate", 1048576.0),
        R.no_op(),
    ]


def test_every_record_type_round_trips_through_a_batch() -> None:
    recs = one_of_each()
    assert sorted(r.WhichOneof("record") for r in recs) == sorted(
        f.name for f in pb.MetadataRecord.DESCRIPTOR.oneofs_by_name["record"].fields)
    data = R.encode_batch(recs, append_time_ms=1234)
    batch = R.decode_batch(data)
    assert batch.append_time_ms == 1234
    assert list(batch.records) == recs
    assert all(r.version == R.RECORD_VERSION for r in batch.records)
    assert R.encode_batch(recs, append_time_ms=1234) == data  # deterministic bytes


def test_single_record_round_trip_and_type_names() -> None:
    for r in one_of_each():
        back = R.decode_record(R.encode_record(r))
        assert back == r
        assert R.type_name(back).endswith("Record")
    assert R.type_name(R.partition(TID, 0, [1])) == "PartitionRecord"
    assert R.type_name(pb.MetadataRecord(version=1)) == "record"


def test_builders_set_only_what_is_given() -> None:
    p = R.partition(TID, 3, [4, 5, 6]).partition
    assert (list(p.isr), p.leader, p.leader_epoch, p.partition_epoch) == ([4, 5, 6], 4, 0, 0)
    assert R.partition(TID, 0, []).partition.leader == R.NO_LEADER

    change = R.partition_change(TID, 3, isr=[4]).partition_change
    assert change.HasField("isr") and list(change.isr.ids) == [4]
    assert not change.HasField("leader") and not change.HasField("replicas")
    empty_isr = R.partition_change(TID, 3, isr=[]).partition_change
    assert empty_isr.HasField("isr") and list(empty_isr.isr.ids) == []
    assert R.partition_change(TID, 3, leader=R.NO_LEADER).partition_change.HasField("leader")

    brc = R.broker_registration_change(1, 2, fenced=False).broker_registration_change
    assert brc.HasField("fenced") and not brc.fenced
    assert not brc.HasField("in_controlled_shutdown")

    assert not R.config(ResourceType.BROKER, "", "k", None).config.HasField("value")
    assert R.config(ResourceType.BROKER, "", "k", "").config.HasField("value")
    assert not R.register_broker(1, INC, 1).register_broker.HasField("rack")
    assert R.register_broker(1, INC, 1).register_broker.fenced  # brokers register fenced
    assert uuid.UUID(bytes=R.topic("t", TID).topic.topic_id) == TID


def test_malformed_bytes_give_one_clear_line() -> None:
    with pytest.raises(RecordError) as e:
        R.decode_batch(b"\x12\x10abc")  # a record of 16 bytes, 3 present
    assert "malformed record batch (5 bytes)" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(RecordError, match="malformed record"):
        R.decode_record(b"\x12\x10abc")


def test_unknown_versions_are_refused_naming_version_and_type() -> None:
    newer = R.partition(TID, 0, [1])
    newer.version = 2
    with pytest.raises(RecordError) as e:
        R.decode_record(newer.SerializeToString())
    assert str(e.value) == ("unsupported version 2 of PartitionRecord "
                            "(this reader supports version 1)")
    batch = pb.RecordBatch(records=[R.no_op(), newer]).SerializeToString()
    with pytest.raises(RecordError, match="record 1 of batch: unsupported version 2 of "
                                          "PartitionRecord"):
        R.decode_batch(batch)
    unversioned = R.topic("t", TID)
    unversioned.version = 0
    with pytest.raises(RecordError, match="TopicRecord has no version"):
        R.decode_record(unversioned.SerializeToString())
    with pytest.raises(RecordError, match="TopicRecord has no version"):
        R.encode_batch([unversioned])


def test_a_record_of_an_unknown_type_is_refused() -> None:
    # A newer writer's record type arrives as an unknown field: no known type is set.
    data = pb.MetadataRecord(version=1).SerializeToString() + b"\xfa\x01\x00"  # field 31
    with pytest.raises(RecordError, match="no known type"):
        R.decode_record(data)


def test_ids_must_be_16_bytes() -> None:
    assert R.uuid_of(TID.bytes, "topic_id") == TID
    with pytest.raises(RecordError, match="topic_id must be 16 bytes, got 3"):
        R.uuid_of(b"abc", "topic_id")
