"""A follower's connection to its leader's Kafka listener (Kafka's ReplicaFetcherThread and
its NetworkClient): Fetch and OffsetsForLeaderEpoch sent as replica ``replica_id``, one request
at a time on one connection (TLS when the listener is SSL, the broker's certificate making it
the principal the leader authorizes CLUSTER_ACTION for).

Why: replicating over the broker gRPC service cost a fixed amount per call in gRPC's native
code and its poller thread, most of the brokers' CPU under load (docs/brokers.md, "Data path
performance"); a request on a plain socket the leader's listener already serves costs its
codec and one read and write (the answer read by ``framing.FrameConnection``, copied once).
OffsetsForLeaderEpoch answers with the gRPC service's messages; Fetch takes the Kafka request
the fetcher makes (``FetchRequestFields``) and answers with ``PartitionAnswer``s, as the
fetcher reads a gRPC answer too, so that the fetch session, truncation and append logic
(``replica_fetcher``) is one for both transports, with no protobuf message made per fetch;
each partition's batches come with the stored frame the follower appends
(``batches.wire_to_frames``), byte for byte what the leader stored.
"""
from __future__ import annotations

import asyncio
import datetime
import ssl
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from common.tls import TLSConfig, ssl_context
from protos import broker_pb2 as pb

from .batches import FetchedBatch, wire_to_frames
from .codec import MalformedRequest, build, frame_request, read_response, request_schema
from .framing import FrameConnection

FETCH, OFFSET_FOR_LEADER_EPOCH = 1, 23
#: The versions a follower sends: the newest the listener serves that still name topics
#: (Fetch v13+ names them by id), both with replica_id and KIP-227's sessions.
FETCH_VERSION, OFFSETS_VERSION = 12, 4


# The follower's Fetch request as ``data_path_codec.encode_fetch_request`` reads a kio entity
# (its field names, kio's defaults): made straight from the fetcher's states, without kio's
# ``build`` (its name checks and frozen dataclasses took about two thirds of the 100 us a
# follower spent on each request, docs/brokers.md "Data path performance") nor a protobuf
# request converted (about two fifths of an idle fetch's CPU: "The follower's receive path").

@dataclass(slots=True)
class FetchPartitionFields:
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int
    last_fetched_epoch: int = -1


@dataclass(slots=True)
class FetchTopicFields:
    topic: str
    partitions: list[FetchPartitionFields]
    topic_id: bytes = b""  # not sent (Fetch v12 names topics): how the answer's topic is named back


class PartitionAnswer(NamedTuple):
    """A partition of a leader's Fetch answer as the follower applies it, over either protocol.
    ``batches``: over Kafka's, its batches CRC checked with their stored frames
    (``wire_to_frames``); over gRPC None, and ``records`` the stored frames as they came."""
    topic_id: bytes
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    error_message: str = ""
    batches: list[FetchedBatch] | None = None
    records: bytes = b""


@dataclass(slots=True)
class ForgottenTopicFields:
    topic: str
    partitions: list[int]


@dataclass(slots=True)
class FetchRequestFields:
    replica_id: int
    max_wait: datetime.timedelta
    min_bytes: int
    max_bytes: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopicFields]
    forgotten_topics_data: list[ForgottenTopicFields] = field(default_factory=list)
    isolation_level: int = 0
    rack_id: str = ""
    cluster_id: str | None = None


class LeaderUnreachable(ConnectionError):
    """The leader's listener could not be reached or its answer read: the connection is
    dropped and the next request dials again. ``dropped``: the leader closed a connection that
    had served earlier requests (it is stopping or restarting, e.g. at the end of its
    controlled shutdown), not an address this broker cannot reach."""

    def __init__(self, why: str, dropped: bool = False) -> None:
        super().__init__(why)
        self.dropped = dropped


class KafkaLeaderClient:
    def __init__(self, address: str, tls: TLSConfig | None, node_id: int) -> None:
        self.address = address
        self.host, _, port = address.rpartition(":")
        self.port = int(port)
        self.tls = tls
        self.server_name = (tls.server_name if tls is not None else None) or self.host.strip("[]")
        self.node_id = node_id
        self.client_id = f"broker-{node_id}-replica-fetcher"
        self._conn: FrameConnection | None = None
        self._correlation = 0
        #: Topic names by id and ids by name: the fetcher names topics by id (its session's
        #: keys), Fetch v12 by name.
        self._names: dict[bytes, str] = {}
        self._ids: dict[str, bytes] = {}

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def _call(self, api_key: int, version: int, request: Any, timeout: float) -> Any:
        """One request (a kio entity, or what ``frame_request`` encodes by hand) and its answer;
        LeaderUnreachable (the connection closed) on any failure, so that a late answer can
        never be taken for the next request's."""
        established = self._conn is not None  # it has answered before
        try:
            async with asyncio.timeout(timeout):
                if self._conn is None:  # TLS material read at each dial: a renewed certificate is used
                    context = ssl_context(self.tls, server=False) if self.tls is not None else None
                    _, self._conn = await asyncio.get_running_loop().create_connection(
                        lambda: FrameConnection(_refused), self.host.strip("[]"), self.port, ssl=context,
                        server_hostname=self.server_name if context is not None else None)
                conn = self._conn
                self._correlation = (self._correlation + 1) & 0x7FFFFFFF
                conn.write(frame_request(api_key, version, self._correlation, self.client_id, request))
                correlation, response = read_response(await conn.frame(), api_key, version)
                if correlation != self._correlation:
                    raise MalformedRequest(f"the answer's correlation id {correlation} is not {self._correlation}")
                return response
        except (OSError, EOFError, TimeoutError, MalformedRequest) as e:
            await self.close()
            raise LeaderUnreachable(_why(e), established and isinstance(e, asyncio.IncompleteReadError)) from None
        except BaseException:  # cancelled mid-request: the answer may still come, on a connection we drop
            await self.close()
            raise

    def _learn(self, name: str, topic_id: bytes) -> None:
        self._names[topic_id] = name
        self._ids[name] = topic_id

    def topic_name(self, topic_id: bytes) -> str:
        """The name a topic id was last sent with ("" if never): a forgotten topic's, for Fetch v12."""
        return self._names.get(topic_id, "")

    async def fetch_partitions(self, req: FetchRequestFields, timeout: float) -> tuple[int, int, list[PartitionAnswer]]:
        """(the answer's error code, its session id, its partitions): the follower's Fetch,
        made by the fetcher without protobuf messages either way (they were about two fifths of
        an idle fetch's CPU: docs/brokers.md "The follower's receive path")."""
        for t in req.topics:
            self._learn(t.topic, t.topic_id)
        r = await self._call(FETCH, FETCH_VERSION, req, timeout)
        ids = self._ids
        answers = []
        for t in r.responses:
            topic_id = ids.get(t.topic, b"")
            for a in t.partitions:
                answers.append(PartitionAnswer(
                    topic_id, a.partition_index, a.error_code.value, a.high_watermark, a.log_start_offset, "",
                    wire_to_frames(a.records, f"{t.topic}-{a.partition_index}") if a.records else []))
        return r.error_code.value, r.session_id, answers

    def fetch_request(self, req: pb.FetchRequest) -> FetchRequestFields:
        """The Kafka Fetch a gRPC request is (topics named, as Fetch v12 names them)."""
        for t in req.topics:
            self._learn(t.name, t.topic_id)
        return FetchRequestFields(
            req.replica_id, datetime.timedelta(milliseconds=req.max_wait_ms), req.min_bytes, req.max_bytes,
            req.session_id, req.session_epoch,
            [FetchTopicFields(t.name, [FetchPartitionFields(p.partition, p.current_leader_epoch, p.fetch_offset,
                                                            p.log_start_offset, p.partition_max_bytes)
                                       for p in t.partitions], t.topic_id) for t in req.topics],
            [ForgottenTopicFields(self._names.get(t.topic_id, ""), list(t.partitions)) for t in req.forgotten_topics])

    async def OffsetsForLeaderEpoch(self, req: pb.OffsetsForLeaderEpochRequest,  # noqa: N802
                                    timeout: float) -> pb.OffsetsForLeaderEpochResponse:
        for t in req.topics:
            self._learn(t.name, t.topic_id)
        fields = {"replica_id": req.replica_id, "topics": [{"topic": t.name, "partitions": [
            {"partition": p.partition, "current_leader_epoch": p.current_leader_epoch, "leader_epoch": p.leader_epoch}
            for p in t.partitions]} for t in req.topics]}
        r = await self._call(OFFSET_FOR_LEADER_EPOCH, OFFSETS_VERSION,
                             build(request_schema(OFFSET_FOR_LEADER_EPOCH, OFFSETS_VERSION), fields), timeout)
        resp = pb.OffsetsForLeaderEpochResponse()
        for t in r.topics:
            out = resp.topics.add(name=t.topic, topic_id=self._ids.get(t.topic, b""))
            for a in t.partitions:
                out.partitions.add(partition=a.partition, error_code=a.error_code.value, leader_epoch=a.leader_epoch,
                                   end_offset=a.end_offset)
        return resp


def _refused(size: int) -> str | None:
    """What is wrong with an answer's size prefix (shorter than its correlation id)."""
    return f"an answer of {size} bytes" if size < 4 else None


def _why(e: BaseException) -> str:
    """One line on a failed request: its reason, not the exception's repr."""
    if isinstance(e, asyncio.IncompleteReadError):  # an EOFError
        return "the leader closed the connection"
    if isinstance(e, TimeoutError):
        return "no answer in time"
    if isinstance(e, ssl.SSLError):  # an OSError
        return f"TLS handshake failed: {e.reason or e}"
    if isinstance(e, MalformedRequest):
        return f"the answer cannot be read: {e}"
    return e.strerror or str(e) if isinstance(e, OSError) else str(e)
