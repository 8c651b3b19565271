"""Kafka's data path messages encoded by hand: Fetch and Produce responses written straight
from the handlers' answers (the dicts ``codec.build`` takes), and the follower's Fetch requests.

Why: kio's writer is pure Python, field by field through generic writers and a BytesIO per
entity and per tagged field, after ``build`` has made frozen dataclasses of the answer; for a
follower's fetch of 3 partitions that was about 210 of the leader's 260 us of CPU, and building
and encoding the follower's request about 140 us (docs/brokers.md, "Data path performance").
Here a message is a few pre-compiled ``struct.Struct`` packs per entity into one list of parts,
joined once when framed, the record sets passed through untouched. Only these API/version
pairs are specialised (``FETCH_VERSIONS``, ``PRODUCE_VERSIONS``: every version the listener
serves; librdkafka, kafka-python and our follower negotiate Fetch v12 and Produce v9). kio
remains the codec of every other message and the reference these equal byte for byte
(tests/test_data_path_codec.py). Requests and responses are still *read* by kio: its reader is
compiled (Rust); a hand reader in Python measured no faster for a follower's answer of 3
partitions and four times slower for 1,000.
"""
from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass
from typing import Any

from clients.records import varint

FETCH, PRODUCE = 1, 0
FETCH_VERSIONS = range(4, 13)     # v12: flexible (compact strings and arrays, tagged fields)
PRODUCE_VERSIONS = range(3, 10)   # v9: flexible
_NO_TAGS = b"\0"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64_2 = struct.Struct(">qq")
_I32_2 = struct.Struct(">ii")
_FETCH_HEAD_V7 = struct.Struct(">ihi")       # throttle_time_ms, error_code, session_id
_FETCH_PARTITION_V4 = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_FETCH_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log_start_offset
_PRODUCE_PARTITION_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PRODUCE_PARTITION_V5 = struct.Struct(">ihqqq")  # ... and log_start_offset
_TAGGED_EPOCH_OFFSET = struct.Struct(">iq")  # diverging_epoch: epoch, end_offset
_TAGGED_OFFSET_EPOCH = struct.Struct(">qi")  # snapshot_id: end_offset, epoch
_ZERO = datetime.timedelta(0)


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    """A response body already encoded (``parts``, joined once when framed); ``throttle_time``
    as kio's responses carry it, for the listener's KIP-219 mute."""
    parts: list[bytes | memoryview]
    throttle_time: datetime.timedelta


@dataclass(frozen=True, slots=True)
class RecordParts:
    """A Fetch answer's record batches as the parts they are made of (``batches.
    stored_to_wire_parts``: packed headers, views of the stored records), written as they are
    and joined once with the whole response when it is framed; ``len`` is their bytes, as the
    records' length prefix and the client quotas count them."""
    parts: list[bytes | memoryview]
    size: int

    @classmethod
    def of(cls, parts: list[bytes | memoryview]) -> RecordParts:
        return cls(parts, sum(map(len, parts)))

    def __len__(self) -> int:
        return self.size


def _string(value: str, flexible: bool) -> bytes:
    raw = value.encode()
    return (varint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _nullable_string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\0" if flexible else b"\xff\xff"
    return _string(value, flexible)


def _length(items: Any, flexible: bool) -> bytes:
    """The length prefix of a nullable array or byte string (records): compact when flexible."""
    if items is None:
        return b"\0" if flexible else b"\xff\xff\xff\xff"
    return varint(len(items) + 1) if flexible else _I32.pack(len(items))


def _fetch_partition_tags(p: dict[str, Any]) -> bytes:
    """Fetch v12+'s tagged fields of a partition, in tag order, each only when it is not its
    default (-1s): 0 diverging_epoch, 1 current_leader, 2 snapshot_id."""
    tags: list[bytes] = []
    if (d := p.get("diverging_epoch")) and (body := _TAGGED_EPOCH_OFFSET.pack(
            d.get("epoch", -1), d.get("end_offset", -1))) != _DEFAULT_EPOCH_OFFSET:
        tags += (b"\0\x0d", body, _NO_TAGS)
    if (c := p.get("current_leader")) and (body := _I32_2.pack(
            c.get("leader_id", -1), c.get("leader_epoch", -1))) != _DEFAULT_LEADER:
        tags += (b"\x01\x09", body, _NO_TAGS)
    if (s := p.get("snapshot_id")) and (body := _TAGGED_OFFSET_EPOCH.pack(
            s.get("end_offset", -1), s.get("epoch", -1))) != _DEFAULT_OFFSET_EPOCH:
        tags += (b"\x02\x0d", body, _NO_TAGS)
    if not tags:
        return _NO_TAGS
    return varint(len(tags) // 3) + b"".join(tags)


_DEFAULT_EPOCH_OFFSET = _TAGGED_EPOCH_OFFSET.pack(-1, -1)
_DEFAULT_LEADER = _I32_2.pack(-1, -1)
_DEFAULT_OFFSET_EPOCH = _TAGGED_OFFSET_EPOCH.pack(-1, -1)


def encode_fetch_response(answer: dict[str, Any], version: int) -> EncodedResponse:
    """A Fetch response (v4-v12) from the handler's answer; fields missing from the dict are
    their schema defaults, as ``codec.build`` makes them. A partition's records are bytes, or
    ``RecordParts`` written as they are."""
    flexible = version >= 12
    throttle = answer.get("throttle_time", 0)
    parts: list[bytes | memoryview] = [
        _FETCH_HEAD_V7.pack(throttle, answer.get("error_code", 0), answer.get("session_id", 0)) if version >= 7
        else _I32.pack(throttle)]
    fixed = _FETCH_PARTITION_V5 if version >= 5 else _FETCH_PARTITION_V4
    responses = answer.get("responses", ())
    parts.append(_length(responses, flexible))
    for t in responses:
        partitions = t.get("partitions", ())
        parts += (_string(t.get("topic", ""), flexible), _length(partitions, flexible))
        for p in partitions:
            parts.append(fixed.pack(p.get("partition_index", 0), p.get("error_code", 0), p.get("high_watermark", 0),
                                    p.get("last_stable_offset", -1), p.get("log_start_offset", -1))
                         if version >= 5 else
                         fixed.pack(p.get("partition_index", 0), p.get("error_code", 0), p.get("high_watermark", 0),
                                    p.get("last_stable_offset", -1)))
            aborted = p.get("aborted_transactions")
            parts.append(_length(aborted, flexible))
            if aborted:
                for a in aborted:
                    parts.append(_I64_2.pack(a.get("producer_id", 0), a.get("first_offset", 0)))
                    if flexible:
                        parts.append(_NO_TAGS)
            if version >= 11:
                parts.append(_I32.pack(p.get("preferred_read_replica", -1)))
            records = p.get("records")
            parts.append(_length(records, flexible))
            if records:
                if type(records) is RecordParts:
                    parts += records.parts
                else:
                    parts.append(records)
            if flexible:
                parts.append(_fetch_partition_tags(p))
        if flexible:
            parts.append(_NO_TAGS)
    if flexible:
        parts.append(_NO_TAGS)
    return EncodedResponse(parts, datetime.timedelta(milliseconds=throttle) if throttle else _ZERO)


def encode_produce_response(answer: dict[str, Any], version: int) -> EncodedResponse:
    """A Produce response (v3-v9) from the handler's answer, defaults as ``codec.build``'s."""
    flexible = version >= 9
    parts: list[bytes | memoryview] = []
    responses = answer.get("responses", ())
    parts.append(_length(responses, flexible))
    fixed = _PRODUCE_PARTITION_V5 if version >= 5 else _PRODUCE_PARTITION_V3
    for t in responses:
        partitions = t.get("partition_responses", ())
        parts += (_string(t.get("name", ""), flexible), _length(partitions, flexible))
        for p in partitions:
            append_time = p.get("log_append_time")
            append_time = -1 if append_time is None else append_time
            parts.append(fixed.pack(p.get("index", 0), p.get("error_code", 0), p.get("base_offset", 0), append_time,
                                    p.get("log_start_offset", -1))
                         if version >= 5 else
                         fixed.pack(p.get("index", 0), p.get("error_code", 0), p.get("base_offset", 0), append_time))
            if version >= 8:
                errors = p.get("record_errors", ())
                parts.append(_length(errors, flexible))
                for e in errors:
                    parts += (_I32.pack(e.get("batch_index", 0)),
                              _nullable_string(e.get("batch_index_error_message"), flexible))
                    if flexible:
                        parts.append(_NO_TAGS)
                parts.append(_nullable_string(p.get("error_message"), flexible))
            if flexible:
                parts.append(_NO_TAGS)
        if flexible:
            parts.append(_NO_TAGS)
    throttle = answer.get("throttle_time", 0)
    parts.append(_I32.pack(throttle))
    if flexible:
        parts.append(_NO_TAGS)
    return EncodedResponse(parts, datetime.timedelta(milliseconds=throttle) if throttle else _ZERO)


#: (api key, version) -> the encoder of that response; what is not here, kio encodes.
RESPONSE_ENCODERS = {**{(FETCH, v): encode_fetch_response for v in FETCH_VERSIONS},
                     **{(PRODUCE, v): encode_produce_response for v in PRODUCE_VERSIONS}}



# -- the follower's side: its Fetch requests --------------------------------------------------

_FETCH_REQUEST_HEAD_V4 = struct.Struct(">iiiib")     # replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
_FETCH_REQUEST_HEAD_V7 = struct.Struct(">iiiibii")   # ... session_id, session_epoch
_I32_I64_I32 = struct.Struct(">iqi")                 # partition, fetch_offset, partition_max_bytes (v4)
_FETCH_REQUEST_PARTITION_V5 = struct.Struct(">iqqi")  # partition, fetch_offset, log_start_offset, partition_max_bytes
_FETCH_REQUEST_PARTITION_V9 = struct.Struct(">iiqqi")  # partition, current_leader_epoch, fetch_offset, ...
_FETCH_REQUEST_PARTITION_V12 = struct.Struct(">iiqiqi")  # ... last_fetched_epoch after fetch_offset
_REQUEST_HEADER = struct.Struct(">hhi")              # api key, api version, correlation id


def _ms(value: datetime.timedelta) -> int:
    return round(value.total_seconds() * 1000)


def encode_fetch_request(request: Any, version: int, correlation: int, client_id: str) -> list[bytes]:
    """A Fetch request (v4-v12, a kio entity: what our follower sends) behind its request
    header, encoded as kio's writer encodes it, without its size prefix."""
    flexible = version >= 12
    raw_client = client_id.encode()
    parts = [_REQUEST_HEADER.pack(FETCH, version, correlation), _I16.pack(len(raw_client)), raw_client]
    if flexible:
        parts.append(_NO_TAGS)  # the header's tagged fields
    if version >= 7:
        parts.append(_FETCH_REQUEST_HEAD_V7.pack(request.replica_id, _ms(request.max_wait), request.min_bytes,
                                                 request.max_bytes, request.isolation_level, request.session_id,
                                                 request.session_epoch))
    else:
        parts.append(_FETCH_REQUEST_HEAD_V4.pack(request.replica_id, _ms(request.max_wait), request.min_bytes,
                                                 request.max_bytes, request.isolation_level))
    parts.append(_length(request.topics, flexible))
    for t in request.topics:
        parts += (_string(t.topic, flexible), _length(t.partitions, flexible))
        for p in t.partitions:
            if version >= 12:
                parts += (_FETCH_REQUEST_PARTITION_V12.pack(p.partition, p.current_leader_epoch, p.fetch_offset,
                                                            p.last_fetched_epoch, p.log_start_offset,
                                                            p.partition_max_bytes), _NO_TAGS)
            elif version >= 9:
                parts.append(_FETCH_REQUEST_PARTITION_V9.pack(p.partition, p.current_leader_epoch, p.fetch_offset,
                                                              p.log_start_offset, p.partition_max_bytes))
            elif version >= 5:
                parts.append(_FETCH_REQUEST_PARTITION_V5.pack(p.partition, p.fetch_offset, p.log_start_offset,
                                                              p.partition_max_bytes))
            else:
                parts.append(_I32_I64_I32.pack(p.partition, p.fetch_offset, p.partition_max_bytes))
        if flexible:
            parts.append(_NO_TAGS)
    if version >= 7:
        parts.append(_length(request.forgotten_topics_data, flexible))
        for f in request.forgotten_topics_data:
            parts += (_string(f.topic, flexible), _length(f.partitions, flexible),
                      struct.pack(f">{len(f.partitions)}i", *f.partitions))
            if flexible:
                parts.append(_NO_TAGS)
    if version >= 11:
        parts.append(_string(request.rack_id, flexible))
    if flexible:
        if request.cluster_id is None:  # tag 0, cluster_id: written only when set
            parts.append(_NO_TAGS)
        else:
            value = _string(request.cluster_id, True)
            parts.append(b"\x01\x00" + varint(len(value)) + value)
    return parts


#: (api key, version) -> the encoder of that request (with its header); what is not here, kio encodes.
REQUEST_ENCODERS = {(FETCH, v): encode_fetch_request for v in FETCH_VERSIONS}
