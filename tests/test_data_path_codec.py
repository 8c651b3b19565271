"""The hand-written data path codec (brokerd/kafka/data_path_codec.py) against kio, the
reference: many random Fetch and Produce answers and Fetch requests, every specialised
version, encoded byte for byte as kio encodes them (answers: what ``build`` makes of them),
and read back by kio as what was meant."""
from __future__ import annotations

import random
from typing import Any

import pytest

from brokerd.kafka import codec
from brokerd.kafka.apis import JOIN_GROUP, METADATA
from brokerd.kafka.codec import (RequestHeader, UnknownField, build, encode_response, frame_request, frame_request_by_kio,
                                 frame_response, read_request, read_response, request_schema, response_schema)
from brokerd.kafka.data_path_codec import (FETCH, FETCH_VERSIONS, PRODUCE, PRODUCE_VERSIONS, EncodedResponse,
                                          RecordParts)
from kio.schema.errors import ErrorCode as KioErrorCode

CASES = 300  # per version: ~0.5 s in all
ERROR_CODES = [c.value for c in KioErrorCode]


def _maybe(rng: random.Random, d: dict[str, Any], key: str, value: Any) -> None:
    """Sometimes leave a key out: the schema's default (or zero) stands in, as ``build`` does."""
    if rng.random() < 0.8:
        d[key] = value


def _text(rng: random.Random) -> str:
    return "".join(rng.choice("abcXYZ-_.é€𝄞") for _ in range(rng.choice([0, 1, 5, 40, 200])))


def _records(rng: random.Random) -> bytes | None:
    size = rng.choice([0, 1, 61, 126, 127, 128, 16383, 16384, 70_000, 300_000])
    return None if rng.random() < 0.1 else rng.randbytes(size)


def _pair(rng: random.Random, a: str, b: str) -> dict[str, int]:
    d: dict[str, int] = {}
    _maybe(rng, d, a, rng.choice([-1, 0, 7, 2**31 - 1]))
    _maybe(rng, d, b, rng.choice([-1, 0, 9, 2**31 - 1]))
    return d


def fetch_answer(rng: random.Random) -> dict[str, Any]:
    answer: dict[str, Any] = {}
    _maybe(rng, answer, "throttle_time", rng.choice([0, 1, 1000, 2**31 - 1]))
    _maybe(rng, answer, "error_code", rng.choice(ERROR_CODES))
    _maybe(rng, answer, "session_id", rng.randint(-2**31, 2**31 - 1))
    topics = []
    for _ in range(rng.choice([0, 1, 2, 5])):
        partitions = []
        for _ in range(rng.choice([0, 1, 3, 130])):
            p: dict[str, Any] = {}
            _maybe(rng, p, "partition_index", rng.randint(0, 2**31 - 1))
            _maybe(rng, p, "error_code", rng.choice(ERROR_CODES))
            _maybe(rng, p, "high_watermark", rng.choice([-1, 0, 2**63 - 1, rng.randint(0, 2**40)]))
            _maybe(rng, p, "last_stable_offset", rng.choice([-1, rng.randint(0, 2**40)]))
            _maybe(rng, p, "log_start_offset", rng.choice([-1, rng.randint(0, 2**40)]))
            _maybe(rng, p, "aborted_transactions", None if rng.random() < 0.4 else [
                {"producer_id": rng.randint(0, 2**62), "first_offset": rng.randint(0, 2**40)}
                for _ in range(rng.choice([0, 1, 4]))])
            _maybe(rng, p, "preferred_read_replica", rng.choice([-1, 0, 102]))
            _maybe(rng, p, "records", _records(rng) if rng.random() < 0.3 else rng.randbytes(rng.choice([0, 5])))
            for name, a, b in (("current_leader", "leader_id", "leader_epoch"),
                               ("diverging_epoch", "epoch", "end_offset"), ("snapshot_id", "end_offset", "epoch")):
                if rng.random() < 0.3:
                    p[name] = _pair(rng, a, b)
            partitions.append(p)
        t: dict[str, Any] = {"partitions": partitions}
        _maybe(rng, t, "topic", _text(rng))
        topics.append(t)
    _maybe(rng, answer, "responses", topics)
    return answer


def produce_answer(rng: random.Random) -> dict[str, Any]:
    answer: dict[str, Any] = {}
    _maybe(rng, answer, "throttle_time", rng.choice([0, 5, 2**31 - 1]))
    topics = []
    for _ in range(rng.choice([0, 1, 3])):
        partitions = []
        for _ in range(rng.choice([0, 1, 6])):
            p: dict[str, Any] = {}
            _maybe(rng, p, "index", rng.randint(0, 2**31 - 1))
            _maybe(rng, p, "error_code", rng.choice(ERROR_CODES))
            _maybe(rng, p, "base_offset", rng.choice([-1, 0, rng.randint(0, 2**50)]))
            _maybe(rng, p, "log_append_time", rng.choice([None, 0, 1_700_000_000_123]))
            _maybe(rng, p, "log_start_offset", rng.choice([-1, rng.randint(0, 2**40)]))
            _maybe(rng, p, "error_message", rng.choice([None, "", _text(rng)]))
            _maybe(rng, p, "record_errors", [{"batch_index": rng.randint(0, 1000),
                                              "batch_index_error_message": rng.choice([None, _text(rng)])}
                                             for _ in range(rng.choice([0, 1, 3]))])
            partitions.append(p)
        t: dict[str, Any] = {"partition_responses": partitions}
        _maybe(rng, t, "name", _text(rng))
        topics.append(t)
    _maybe(rng, answer, "responses", topics)
    return answer


def _both(api_key: int, version: int, answer: dict[str, Any]) -> tuple[bytes, bytes]:
    header = RequestHeader(api_key, version, 12345, "c", version >= (12 if api_key == FETCH else 9))
    fast = encode_response(header, answer)
    assert isinstance(fast, EncodedResponse)
    return frame_response(header, fast), frame_response(header, build(response_schema(api_key, version), answer))


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_responses_are_encoded_as_kio_encodes_them(version: int) -> None:
    rng = random.Random(version)
    for i in range(CASES // (10 if version < 11 else 3)):
        answer = fetch_answer(rng)
        fast, kio = _both(FETCH, version, answer)
        assert fast == kio, (version, i, answer)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_produce_responses_are_encoded_as_kio_encodes_them(version: int) -> None:
    rng = random.Random(100 + version)
    for i in range(CASES):
        answer = produce_answer(rng)
        fast, kio = _both(PRODUCE, version, answer)
        assert fast == kio, (version, i, answer)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_responses_are_read_back_by_kio_as_built(version: int) -> None:
    rng = random.Random(200 + version)
    for _ in range(CASES // 10):
        answer = fetch_answer(rng)
        header = RequestHeader(FETCH, version, 77, "c", version >= 12)
        correlation, read = read_response(frame_response(header, encode_response(header, answer))[4:], FETCH, version)
        assert (correlation, read) == (77, build(response_schema(FETCH, version), answer))


@pytest.mark.parametrize("version", (4, 11, 12))
def test_records_in_parts_are_written_as_they_are_and_encode_as_their_bytes(version: int) -> None:
    """A Fetch answer's records given as ``RecordParts`` (the leader's stored batches as packed
    headers and views of the stored records) go into the response uncopied, the very views, and
    the response is byte for byte the one of the same records joined."""
    rng = random.Random(300 + version)
    for i in range(CASES // 10):
        answer = fetch_answer(rng)
        _, kio = _both(FETCH, version, answer)
        views = []
        for t in answer.get("responses", ()):
            for p in t.get("partitions", ()):
                records = p.get("records")
                if records:
                    cuts = sorted(rng.sample(range(len(records) + 1), min(3, len(records) + 1)))
                    parts = [memoryview(records)[a:b] for a, b in zip([0, *cuts], [*cuts, len(records)], strict=True)]
                    p["records"] = RecordParts.of(parts)
                    assert len(p["records"]) == len(records)
                    views += [v for v in parts if len(v)]
        header = RequestHeader(FETCH, version, 12345, "c", version >= 12)
        encoded = encode_response(header, answer)
        assert frame_response(header, encoded) == kio, (version, i, answer)
        assert all(any(v is part for part in encoded.parts) for v in views)


def fetch_request(rng: random.Random) -> dict[str, Any]:
    request: dict[str, Any] = {}
    _maybe(rng, request, "replica_id", rng.choice([-1, 101, 2**31 - 1]))
    _maybe(rng, request, "max_wait", rng.choice([0, 500, 2**31 - 1]))
    _maybe(rng, request, "min_bytes", rng.choice([0, 1, 2**31 - 1]))
    _maybe(rng, request, "max_bytes", rng.choice([1, 52_428_800, 2**31 - 1]))
    _maybe(rng, request, "isolation_level", rng.choice([0, 1]))
    _maybe(rng, request, "session_id", rng.randint(-2**31, 2**31 - 1))
    _maybe(rng, request, "session_epoch", rng.choice([-1, 0, 2**31 - 1]))
    _maybe(rng, request, "rack_id", _text(rng))
    _maybe(rng, request, "cluster_id", rng.choice([None, "", _text(rng)]))
    request["topics"] = [{"topic": _text(rng), "partitions": [
        {k: v for k, v in (("partition", rng.randint(0, 2**31 - 1)),
                           ("current_leader_epoch", rng.choice([-1, 0, 5])),
                           ("fetch_offset", rng.choice([0, 2**63 - 1, rng.randint(0, 2**40)])),
                           ("last_fetched_epoch", rng.choice([-1, 3])),
                           ("log_start_offset", rng.choice([-1, 0, rng.randint(0, 2**40)])),
                           ("partition_max_bytes", rng.choice([1, 1 << 20]))) if rng.random() < 0.9}
        for _ in range(rng.choice([0, 1, 3, 200]))]} for _ in range(rng.choice([0, 1, 4]))]
    request["forgotten_topics_data"] = [{"topic": _text(rng), "partitions": rng.sample(range(1000), rng.choice([0, 1, 7]))}
                                        for _ in range(rng.choice([0, 1, 3]))]
    return request


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_requests_are_encoded_as_kio_encodes_them(version: int) -> None:
    """The follower's Fetch (a kio entity, built from its fields) on the wire: byte for byte
    kio's, and read back by kio as the same request."""
    rng = random.Random(400 + version)
    requests = [build(request_schema(FETCH, version), fetch_request(rng)) for _ in range(CASES // 3)]
    fast = [frame_request(FETCH, version, i, rng.choice(["", "broker-101-replica-fetcher", "é"]), r)
            for i, r in enumerate(requests)]
    for i, (r, wire) in enumerate(zip(requests, fast, strict=True)):
        client_id = wire[14:14 + int.from_bytes(wire[12:14], "big")].decode()  # after size, key, version, id
        assert wire == frame_request_by_kio(FETCH, version, i, client_id, r), (version, i, r)
        header, read = read_request(wire[4:], FETCH, version)
        assert (header.correlation_id, header.client_id, read) == (i, client_id, r)


def test_the_followers_fetch_made_without_build_is_kios_request_of_the_same_fields() -> None:
    """The follower makes its Fetch straight from the fetcher's request (no kio ``build``): on
    the wire it is kio's encoding of what ``build`` makes of the same fields, forgotten topics
    named, and kio reads it back as that request."""
    import uuid

    from brokerd.kafka.replica_client import FETCH_VERSION, KafkaLeaderClient
    from protos import broker_pb2 as pb

    rng = random.Random(7)
    ids = {rng.randbytes(16): _text(rng) or "t" for _ in range(5)}
    client = KafkaLeaderClient("127.0.0.1:1", None, 102)
    for i in range(CASES // 3):
        named = rng.sample(sorted(ids), rng.choice([0, 1, 3]))
        req = pb.FetchRequest(
            replica_id=rng.choice([0, 102, 2**31 - 1]), replica_epoch=rng.randint(0, 99),
            max_wait_ms=rng.choice([0, 500, 30_000]), min_bytes=rng.choice([0, 1, 1 << 20]),
            max_bytes=rng.choice([1, 10 << 20]), session_id=rng.choice([0, 7, 2**31 - 1]),
            session_epoch=rng.choice([-1, 0, 5]),
            topics=[pb.FetchTopic(name=ids[t], topic_id=t, partitions=[pb.FetchPartition(
                partition=rng.randint(0, 999), current_leader_epoch=rng.choice([-1, 0, 4]),
                fetch_offset=rng.choice([0, rng.randint(0, 2**40)]), log_start_offset=rng.choice([-1, 0, 12]),
                partition_max_bytes=rng.choice([1, 1 << 20])) for _ in range(rng.choice([0, 1, 3, 50]))])
                for t in named],
            forgotten_topics=[pb.ForgottenTopic(topic_id=t, partitions=rng.sample(range(1000), rng.choice([0, 1, 4])))
                              for t in named[:rng.choice([0, 1])]] + (
                [pb.ForgottenTopic(topic_id=uuid.uuid4().bytes, partitions=[1])] if rng.random() < 0.2 else []))
        wire = frame_request(FETCH, FETCH_VERSION, i, client.client_id, client.fetch_request(req))
        kio = build(request_schema(FETCH, FETCH_VERSION), {  # what the follower built before
            "replica_id": req.replica_id, "max_wait": req.max_wait_ms, "min_bytes": req.min_bytes,
            "max_bytes": req.max_bytes, "isolation_level": 0, "session_id": req.session_id,
            "session_epoch": req.session_epoch,
            "topics": [{"topic": t.name, "partitions": [
                {"partition": p.partition, "current_leader_epoch": p.current_leader_epoch,
                 "fetch_offset": p.fetch_offset, "log_start_offset": p.log_start_offset,
                 "partition_max_bytes": p.partition_max_bytes} for p in t.partitions]} for t in req.topics],
            "forgotten_topics_data": [{"topic": ids.get(t.topic_id, ""), "partitions": list(t.partitions)}
                                      for t in req.forgotten_topics]})
        assert wire == frame_request_by_kio(FETCH, FETCH_VERSION, i, client.client_id, kio), (i, req)
        assert read_request(wire[4:], FETCH, FETCH_VERSION)[1] == kio


def test_a_misspelt_name_in_an_answer_encoded_by_hand_raises_as_build_does() -> None:
    """The hand encoders read the names they know; a name no version of the message has (a
    handler's typo) raises UnknownField, as ``build`` does, instead of vanishing."""
    header = RequestHeader(FETCH, 12, 1, "c", True)
    good = {"responses": [{"topic": "t", "partitions": [{"partition_index": 0, "records": b"",
                                                         "current_leader": {"leader_id": 1}}]}]}
    encode_response(header, good)
    for bad in ({**good, "sesion_id": 1},
                {"responses": [{"topic": "t", "partitions": [{"partition": 0}]}]},
                {"responses": [{"topic": "t", "partitions": [{"current_leader": {"leader": 1}}]}]}):
        with pytest.raises(UnknownField):
            encode_response(header, bad)
    with pytest.raises(UnknownField):
        encode_response(RequestHeader(PRODUCE, 9, 1, "c", True),
                        {"responses": [{"name": "t", "partition_responses": [{"idx": 0}]}]})
    # a name another version has is left out, as build leaves it out
    assert encode_response(RequestHeader(FETCH, 4, 1, "c", False), {**good, "session_id": 5}).parts


def test_an_answer_with_a_newer_versions_names_loads_one_more_version_not_all() -> None:
    """A handler answers with every version's fields (JoinGroup's ``skip_assignment`` is v9's)
    whatever version was asked; the newest version's names settle that, so the first such answer
    no longer imports every version of the message (a fresh process's first JoinGroup v5 answer
    58.6 -> 15.3 ms of CPU, docs/brokers.md "librdkafka's consume per broker core"). What the
    newest version lacks is still looked up in every version: a name only older versions have is
    left out, and one no version has raises."""
    codec._names_in_any_version.cache_clear()
    answer = {"error_code": 0, "generation_id": 1, "protocol_type": "consumer", "protocol_name": "range",
              "leader": "m", "member_id": "m", "skip_assignment": False,
              "members": [{"member_id": "m", "metadata": b"", "group_instance_id": None}]}
    assert build(response_schema(JOIN_GROUP, 5), answer).members[0].member_id == "m"
    assert codec._names_in_any_version.cache_info().currsize == 0  # every version's names not needed
    # Metadata's cluster_authorized_operations went in v11 (KIP-700): older versions' alone
    built = build(response_schema(METADATA, 12), {"cluster_authorized_operations": 0, "brokers": [], "topics": []})
    assert not hasattr(built, "cluster_authorized_operations")
    with pytest.raises(UnknownField, match="'skip_asignment'"):
        build(response_schema(JOIN_GROUP, 5), {**answer, "skip_asignment": False})


@pytest.mark.parametrize("version", [1, 9, 12])
def test_a_metadata_answer_loads_no_more_than_its_own_and_the_newest_version(version: int) -> None:
    """The Metadata handler names ``cluster_authorized_operations`` only in v8-v10, the versions
    that have it: a broker's first Metadata v11+ answer (librdkafka's, at every producer's start)
    imported all 13 versions of the answer's schema for the encoder's name check, 147 ms of CPU
    (docs/brokers.md "The produce path per request, again")."""
    import asyncio
    import types

    from brokerd.kafka.apis import KafkaApis
    from metadata.authorizer import Access
    from metadata.image import MetadataImage
    from metadata.principal import ANONYMOUS, Session

    rm = types.SimpleNamespace(image=MetadataImage.empty("c"), broker_id=1)
    apis = KafkaApis(rm, "PLAINTEXT", None, None, None)  # type: ignore[arg-type]
    fields = {"topics": []}
    if version >= 4:
        fields["allow_auto_topic_creation"] = False
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = True
    request = build(request_schema(METADATA, version), fields)
    answer = asyncio.run(apis.metadata(request, version, Access(None, Session(ANONYMOUS, "127.0.0.1"))))
    codec._names_in_any_version.cache_clear()
    response = encode_response(RequestHeader(METADATA, version, 1, "c", version >= 9), answer)
    assert codec._names_in_any_version.cache_info().currsize == 0  # every version's names not needed
    if 8 <= version <= 10:  # asked for, and answered
        assert response.cluster_authorized_operations != -2147483648
