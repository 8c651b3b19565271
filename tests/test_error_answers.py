"""The answer to a request whose handler failed (brokerd/kafka/error_answers.py, Kafka's
getErrorResponse): for every API and version ApiVersions advertises it encodes and reads back
with the error on every item the request named; and a real Kafka client (librdkafka) whose
request a broker's handler fails hears UNKNOWN_SERVER_ERROR on the same connection, which
then serves its next request."""
from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from dataclasses import fields, is_dataclass
from typing import Any

import pytest

from brokerd.kafka import apis as A
from brokerd.kafka.codec import (RequestHeader, build, encode_response, entity_fields, frame_response, read_response,
                                 request_schema)
from brokerd.kafka.error_answers import error_answer
from common.errors import ErrorCode, KafkaError
from tests.eventually import eventually

#: Where Kafka's error response has no place for the error: DescribeLogDirs before v3 (no
#: top-level error code; its error response lists no log dir), answered with no results.
_NOWHERE = {(A.DESCRIBE_LOG_DIRS, 1), (A.DESCRIBE_LOG_DIRS, 2)}
_ADVERTISED = [(key, version) for key, (lo, hi) in sorted(A.VERSIONS.items()) for version in range(lo, hi + 1)]


def _sample(cls: type, counter: itertools.count) -> dict[str, Any]:
    """A request of schema ``cls`` with two items in every list and distinct values."""
    def value(kafka_type: str) -> Any:
        i = next(counter) % 100 + 1
        return {"string": f"s{i}", "bytes": b"", "records": b"", "bool": True, "uuid": bytes([i]) * 16,
                "float64": 1.0}.get(kafka_type, i)
    out: dict[str, Any] = {}
    for f in entity_fields(cls):
        if f.kind == "entities":
            out[f.name] = [_sample(f.target, counter) for _ in range(2)]
        elif f.kind == "entity":
            out[f.name] = _sample(f.target, counter)
        elif f.kind == "values":
            out[f.name] = [value(f.target) for _ in range(2)]
        else:
            out[f.name] = value(f.target)
    return out


def _error_codes(entity: Any) -> list[int]:
    """Every error code in a read response, nested entities included."""
    found: list[int] = []
    for f in fields(entity):
        v = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            found.append(int(v))
        for item in (v if isinstance(v, tuple) else (v,)):
            if is_dataclass(item):
                found += _error_codes(item)
    return found


def _answer(api_key: int, version: int, request: dict[str, Any], e: BaseException) -> Any:
    cls = request_schema(api_key, version)
    header = RequestHeader(api_key, version, 7, "t", cls.__flexible__)
    encoded = error_answer(header, build(cls, request), e)
    correlation, response = read_response(frame_response(header, encoded)[4:], api_key, version)
    assert correlation == 7
    return response


@pytest.mark.parametrize(("api_key", "version"), _ADVERTISED)
def test_every_advertised_api_and_version_has_an_error_answer(api_key, version):
    """Each error answer encodes, reads back as that version's response, and carries the
    error on every error code it has, and at least one."""
    request = _sample(request_schema(api_key, version), itertools.count())
    if api_key == A.PRODUCE:
        request["acks"] = -1  # acks=0 has no answer (below)
    response = _answer(api_key, version, request, RuntimeError("boom"))
    codes = _error_codes(response)
    assert set(codes) == {ErrorCode.UNKNOWN_SERVER_ERROR} or (api_key, version) in _NOWHERE and not codes, \
        (response, codes)
    assert not getattr(response, "error_message", None)  # nothing of what failed inside leaks


def test_error_answers_name_every_item_the_request_named():
    """As Kafka's getErrorResponse: the topics and partitions (groups, keys, resources) the
    request named, each with the error and Kafka's placeholders beside it."""
    def partitions(response: Any, topics: str, parts: str, key: str) -> dict[str, list[int]]:
        return {t.name if hasattr(t, "name") else t.topic: [getattr(p, key) for p in getattr(t, parts)]
                for t in getattr(response, topics)}
    e = KafkaError(ErrorCode.NOT_CONTROLLER, "moved")
    produce = _answer(A.PRODUCE, 9, {"acks": -1, "topic_data": [
        {"name": "a", "partition_data": [{"index": 0}, {"index": 3}]}, {"name": "b", "partition_data": [{"index": 1}]}]},
        e)
    assert partitions(produce, "responses", "partition_responses", "index") == {"a": [0, 3], "b": [1]}
    p = produce.responses[0].partition_responses[1]
    assert (int(p.error_code), p.error_message, p.base_offset, p.log_start_offset) == (41, "moved", -1, -1)
    fetch = _answer(A.FETCH, 12, {"session_id": 5, "topics": [
        {"topic": "a", "partitions": [{"partition": 2}, {"partition": 4}]}]}, RuntimeError())
    assert partitions(fetch, "responses", "partitions", "partition_index") == {"a": [2, 4]}
    assert int(fetch.error_code) == -1 and fetch.session_id == 5
    assert [(int(p.error_code), p.high_watermark) for p in fetch.responses[0].partitions] == [(-1, -1)] * 2
    offsets = _answer(A.LIST_OFFSETS, 8, {"topics": [{"name": "a", "partitions": [{"partition_index": 1}]}]}, e)
    assert [(int(p.error_code), p.offset, p.timestamp) for p in offsets.topics[0].partitions] == [(41, -1, -1)]
    metadata = _answer(A.METADATA, 12, {"topics": [{"name": "a"}, {"name": "b"}]}, RuntimeError())
    assert [(t.name, int(t.error_code), t.partitions) for t in metadata.topics] == [("a", -1, ()), ("b", -1, ())]
    commit = _answer(A.OFFSET_COMMIT, 8, {"topics": [{"name": "a", "partitions": [{"partition_index": 2}]}]}, e)
    assert partitions(commit, "topics", "partitions", "partition_index") == {"a": [2]}
    old_fetch = _answer(A.OFFSET_FETCH, 1, {"group_id": "g", "topics": [{"name": "a", "partition_indexes": [0, 1]}]}, e)
    assert [(p.partition_index, int(p.error_code), p.committed_offset) for p in old_fetch.topics[0].partitions] == \
        [(0, 41, -1), (1, 41, -1)]
    assert _answer(A.OFFSET_FETCH, 7, {"group_id": "g", "topics": [{"name": "a", "partition_indexes": [0]}]},
                   e).topics == ()  # v2+: the top-level error alone, as Kafka's
    coordinators = _answer(A.FIND_COORDINATOR, 4, {"coordinator_keys": ["g1", "g2"]}, e).coordinators
    assert [(c.key, int(c.error_code), c.node_id, c.port) for c in coordinators] == [("g1", 41, -1, -1),
                                                                                      ("g2", 41, -1, -1)]
    groups = _answer(A.DESCRIBE_GROUPS, 5, {"groups": ["g1", "g2"]}, e).groups
    assert [(g.group_id, int(g.error_code)) for g in groups] == [("g1", 41), ("g2", 41)]
    configs = _answer(A.DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": 2, "resource_name": "a"}]}, e)
    assert [(r.resource_type, r.resource_name, int(r.error_code)) for r in configs.results] == [(2, "a", 41)]
    users = _answer(A.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [{"name": "u2"}], "upsertions": [
        {"name": "u1"}, {"name": "u2"}]}, e).results
    assert [(r.user, int(r.error_code)) for r in users] == [("u1", 41), ("u2", 41)]
    dirs = _answer(A.ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [{"path": "/d1", "topics": [{"name": "a", "partitions": [0]}]},
                                                          {"path": "/d2", "topics": [{"name": "b", "partitions": [1]}]}]},
                   e).results
    assert [(t.topic_name, [p.partition_index for p in t.partitions]) for t in dirs] == [("a", [0]), ("b", [1])]


def test_an_acks_0_produce_has_no_error_answer():
    """Kafka's ProduceRequest.getErrorResponse is null for acks=0: the listener closes the
    connection instead (tests/test_broker_units.py)."""
    cls = request_schema(A.PRODUCE, 9)
    header = RequestHeader(A.PRODUCE, 9, 1, "t", True)
    assert error_answer(header, build(cls, {"acks": 0}), RuntimeError()) is None


class _FailingDescribeConfigs:
    """A stub KafkaApis for a real client: ApiVersions and Metadata (this one broker) answered,
    DescribeConfigs failing in its handler the first time, answered after; each connection
    that a request came on is recorded."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.describes: list[Any] = []  # the connection of each DescribeConfigs
        self.failed = False

    def session(self, writer: Any) -> Any:
        return writer

    def api_name(self, api_key: int) -> str:
        return str(api_key)

    async def handle(self, header: RequestHeader, request: Any, session: Any) -> Any:
        if header.api_key == A.API_VERSIONS:
            return encode_response(header, {"error_code": 0, "api_keys": A.api_version_list()})
        if header.api_key == A.METADATA:
            return encode_response(header, {
                "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.port}], "cluster_id": "c",
                "controller_id": 1, "topics": []})
        if header.api_key == A.DESCRIBE_CONFIGS:
            self.describes.append(session)
            if not self.failed:
                self.failed = True
                raise RuntimeError("injected failure")
            return encode_response(header, {"results": [
                {"error_code": 0, "resource_type": r.resource_type, "resource_name": r.resource_name, "configs": []}
                for r in request.resources]})
        raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "not in this stub")


def test_a_real_client_hears_unknown_server_error_and_keeps_its_connection(caplog):
    """librdkafka's admin client: a DescribeConfigs whose handler fails gets
    UNKNOWN_SERVER_ERROR (librdkafka's KafkaError.UNKNOWN, -1) for the resource it named, and
    the next DescribeConfigs comes on the same connection and is answered; the broker logs
    one line. (Before error_answers the connection was closed: librdkafka reported a
    transport failure and reconnected for the next one: this failed.)"""
    from confluent_kafka import KafkaError as ClientError
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    from brokerd.kafka.listener import KafkaListener

    async def go() -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        apis = _FailingDescribeConfigs(port)
        listener = KafkaListener("KAFKA", "127.0.0.1", port, apis, 1 << 20)  # type: ignore[arg-type]
        await listener.bind()
        await listener.start()
        loop = asyncio.get_running_loop()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})

        def describe() -> Any:
            [future] = admin.describe_configs([ConfigResource("topic", "t")], request_timeout=20).values()
            return future.result(timeout=30)
        try:
            with pytest.raises(KafkaException) as failed:
                await loop.run_in_executor(None, describe)
            assert failed.value.args[0].code() == ClientError.UNKNOWN, failed.value
            assert await loop.run_in_executor(None, describe) == {}
            await eventually(lambda: len(apis.describes) == 2, 5, what="the second DescribeConfigs")
            assert apis.describes[0] is apis.describes[1]  # the same connection
        finally:
            await listener.stop()
    with caplog.at_level(logging.INFO, logger="brokerd.kafka"):
        asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "brokerd.kafka"]
    assert len(lines) == 1, lines
    assert lines[0].startswith("answered UNKNOWN_SERVER_ERROR to api key 32 v"), lines
    assert lines[0].endswith("its handler failed: RuntimeError: injected failure"), lines
