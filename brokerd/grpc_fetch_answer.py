"""The gRPC Fetch answer (protos/broker.proto's ``FetchResponse``) written onto protobuf's wire
once, from the domain's answer (``requests.FetchResponse``): the partitions' stored frames are
placed in the one ``bytes`` that grpc sends, between the fields protobuf writes around them.

Why: built as a protobuf message, each partition's frames were joined for its ``records``
field, copied into protobuf's arena and serialized: the records went through four buffers per
answer before grpc copied them into its own, and while our consumer read, glibc's ``memmove``
was a third of the brokers' CPU (docs/brokers.md, "Our client's consume (gRPC)"). Here the
frames are copied once, by the ``b"".join`` that makes the answer (tests count the buffers). The bytes are those
``FetchResponse.SerializeToString`` writes for the same message (fields in number order, zeros
left out as proto3 does, a negative int32 or int64 in ten bytes), which
tests/test_grpc_fetch_answer.py checks field by field; the client parses them with the
generated ``FetchResponse`` as before.

The service's Fetch returns a ``FetchAnswer`` (the domain's answer and the fields the request
boundary sets: session, error, throttle), which the request-time quota's interceptor may still
replace with a throttled empty one (``grpc_throttling``); the Fetch method is registered with
``serialized`` as its response serializer (``add_broker_servicer``), which writes it.
"""
from __future__ import annotations

from dataclasses import dataclass

import grpc

from clients.records import varint
from protos import broker_pb2 as pb
from protos import broker_pb2_grpc
from raft.transport import HandlersRewritten

from .requests import FetchPartitionResponse, FetchResponse, FetchTopicResponse

_U64 = (1 << 64) - 1
_METHOD = "Fetch"


def _int(tag: bytes, n: int) -> bytes:
    """A varint field (int32 or int64) that is not zero: a negative one as protobuf writes it,
    its 64-bit two's complement (ten bytes)."""
    return tag + varint(n if n >= 0 else n & _U64)


def _text(tag: bytes, s: str) -> bytes:
    data = s.encode()
    return tag + varint(len(data)) + data


def _blob(tag: bytes, data: bytes) -> bytes:
    return tag + varint(len(data)) + data


def _partition(p: FetchPartitionResponse, pieces: list[bytes | memoryview]) -> int:
    """Append the partition's message (its key and length included) to ``pieces``; its bytes."""
    head = b""
    if p.partition:
        head += _int(b"\x08", p.partition)
    if p.error_code:
        head += _int(b"\x10", p.error_code)
    if p.error_message:
        head += _text(b"\x1a", p.error_message)
    if p.high_watermark:
        head += _int(b"\x20", p.high_watermark)
    if p.log_start_offset:
        head += _int(b"\x28", p.log_start_offset)
    frames = p.frames
    records = sum(map(len, frames)) if frames else 0
    if records:
        head += b"\x32" + varint(records)
    tail = b""
    if p.leader_id:
        tail += _int(b"\x38", p.leader_id)
    if p.leader_epoch:
        tail += _int(b"\x40", p.leader_epoch)
    if p.last_stable_offset:
        tail += _int(b"\x48", p.last_stable_offset)
    for a in p.aborted_transactions:
        txn = (_int(b"\x08", a.producer_id) if a.producer_id else b"") + \
              (_int(b"\x10", a.first_offset) if a.first_offset else b"")
        tail += b"\x52" + varint(len(txn)) + txn
    if p.preferred_read_replica:
        tail += _int(b"\x58", p.preferred_read_replica)
    size = len(head) + records + len(tail)
    key = b"\x1a" + varint(size)
    pieces.append(key + head)
    if records:
        pieces.extend(frames)
    if tail:
        pieces.append(tail)
    return len(key) + size


def _topic(t: FetchTopicResponse, pieces: list[bytes | memoryview]) -> None:
    """Append the topic's message (key, length, name, id, partitions) to ``pieces``."""
    at = len(pieces)
    pieces.append(b"")  # the topic's key, length, name and id, once its partitions' size is known
    size = sum(_partition(p, pieces) for p in t.partitions)
    head = (_text(b"\x0a", t.name) if t.name else b"") + (_blob(b"\x12", t.topic_id) if t.topic_id else b"")
    pieces[at] = b"\x0a" + varint(len(head) + size) + head


def encode(resp: FetchResponse | None = None, *, session_id: int = 0, error_code: int = 0,
           throttle_time_ms: int = 0) -> bytes:
    """The ``FetchResponse`` with ``resp``'s topics (None: none) as protobuf serializes it;
    ``throttle_time_ms`` over ``resp.throttle_time_ms``'s when given."""
    pieces: list[bytes | memoryview] = []
    throttle = throttle_time_ms
    if resp is not None:
        for t in resp.topics:
            _topic(t, pieces)
        throttle = throttle or resp.throttle_time_ms
    if throttle:
        pieces.append(_int(b"\x10", throttle))
    if session_id:
        pieces.append(_int(b"\x18", session_id))
    if error_code:
        pieces.append(_int(b"\x20", error_code))
    return b"".join(pieces)


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    """The broker's answer to a gRPC Fetch, before it is written (``serialized``): ``resp``'s
    topics (None: none) and the fields of ``FetchResponse`` the request boundary sets."""
    resp: FetchResponse | None = None
    session_id: int = 0
    error_code: int = 0
    throttle_time_ms: int = 0  # 0: ``resp``'s own

    @property
    def throttle(self) -> int:
        """The throttle time the answer carries."""
        return self.throttle_time_ms or (self.resp.throttle_time_ms if self.resp is not None else 0)

    @property
    def records_size(self) -> int:
        """The bytes of stored batches answered (what a consumer's byte rate counts)."""
        return sum(a.records_size for t in self.resp.topics for a in t.partitions) if self.resp is not None else 0

    def emptied(self, throttle_time_ms: int) -> FetchAnswer:
        """Answered empty, as a fetch over a quota is (fetched again after the throttle): the
        longer of ``throttle_time_ms`` and the answer's own."""
        return FetchAnswer(throttle_time_ms=max(throttle_time_ms, self.throttle))


def serialized(answer: FetchAnswer | pb.FetchResponse) -> bytes:
    """The Fetch method's response serializer: a ``FetchAnswer`` written by ``encode``; a
    ``FetchResponse`` message serialized as the generated code would."""
    if isinstance(answer, FetchAnswer):
        return encode(answer.resp, session_id=answer.session_id, error_code=answer.error_code,
                      throttle_time_ms=answer.throttle_time_ms)
    return answer.SerializeToString()


def _fetch_written(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """Fetch's handler with ``serialized`` as its response serializer; the others as they are."""
    return handler._replace(response_serializer=serialized) if method.rsplit("/", 1)[-1] == _METHOD else handler


def add_broker_servicer(servicer: object, server: object) -> None:
    """``broker_pb2_grpc.add_BrokerServicer_to_server``, with Fetch's ``FetchAnswer`` written by
    ``serialized`` (what ``raft.transport.add_service`` takes as its ``add_to_server``)."""
    broker_pb2_grpc.add_BrokerServicer_to_server(servicer, HandlersRewritten(server, _fetch_written))
