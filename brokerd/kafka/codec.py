"""Kafka's wire framing and message schemas.

A request is ``int32 size`` then a request header (api key, api version, correlation id,
client id, and tagged fields when the API version is flexible) then the body; a response is
``int32 size``, the correlation id (and tagged fields when flexible, except for ApiVersions,
whose response header is always v0 so that a client can read it before it knows our versions)
and the body. The bodies' schemas come from ``kio``, generated from Kafka's own message JSON
files (clients/src/main/resources/common/message), one dataclass per API version; the data
path's messages (Fetch and Produce responses, a follower's Fetch requests) are encoded by hand
in ``data_path_codec``, byte for byte as kio encodes them, and kio reads everything.

Handlers answer with plain dicts of field names (``build``): a field the version does not
have is left out, one it has but the dict does not is its schema default or zero, so one
handler serves every version of its API; a name no version of the message has (a misspelt
one) raises at once, instead of vanishing from the answer.
"""
from __future__ import annotations

import datetime
import io
import struct
import uuid
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import cache
from types import NoneType, UnionType
from typing import Any, get_args, get_origin

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from .data_path_codec import REQUEST_ENCODERS, RESPONSE_ENCODERS, EncodedResponse
from .tagged_fields import without_unknown_tags

API_VERSIONS_KEY = 18
_KEY_VERSION = struct.Struct(">hh")
_SIZE_CORRELATION = struct.Struct(">ii")
_SIZE = struct.Struct(">i")
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.timezone.utc)


class MalformedRequest(Exception):
    """A request that cannot be read: the connection it came on is closed."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    flexible: bool


def peek_api(body: bytes) -> tuple[int, int]:
    """The api key and version of a request body (the listener admits no body under 8 bytes)."""
    return _KEY_VERSION.unpack_from(body)


@cache
def request_schema(api_key: int, version: int) -> Any:
    return load_request_schema(api_key, version)


@cache
def response_schema(api_key: int, version: int) -> Any:
    return load_response_schema(api_key, version)


@cache
def _reader(cls: type) -> Any:
    return entity_reader(cls)


@cache
def _writer(cls: type) -> Any:
    return entity_writer(cls)


def read_request(body: bytes, api_key: int, version: int) -> tuple[RequestHeader, Any]:
    """The header and body of a request whose API and version we serve; MalformedRequest if
    the bytes do not hold that. Bytes after the body are ignored, as Kafka's brokers ignore
    them (librdkafka's Metadata v12 carries three)."""
    cls = request_schema(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    try:
        header, request = _read_entities(body, 0, (header_cls, cls))
    except Exception as e:  # kio raises its own errors, ValueError and UnicodeDecodeError
        raise MalformedRequest(f"{cls.__name__} v{version} cannot be read: {type(e).__name__}: {e}") from None
    return RequestHeader(api_key, version, header.correlation_id, header.client_id, cls.__flexible__), request


def _read_entities(body: bytes, offset: int, classes: tuple[type, ...]) -> list[Any]:
    """The entities of ``classes``, one after the other from ``offset``. A tag a schema does not
    have is skipped, as Kafka's readers skip it (``tagged_fields``); kio raises KeyError on it."""
    try:
        return _read_in_turn(body, offset, classes)
    except KeyError:
        return _read_in_turn(without_unknown_tags(body, offset, classes), offset, classes)


def _read_in_turn(body: bytes, offset: int, classes: tuple[type, ...]) -> list[Any]:
    out = []
    for cls in classes:
        entity, used = _reader(cls)(body, offset)
        out.append(entity)
        offset += used
    return out


def correlation_id(body: bytes) -> int:
    """The correlation id of a request body, read without its schema (api key, version, id)."""
    return struct.unpack_from(">i", body, 4)[0]


def _framed(head: bytes, entity: Any) -> bytes:
    """``head`` (an encoded header) and ``entity``, behind their int32 size, written once."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(head)
    # a class is Hashable, but mypy does not see it for type[Any] (functools.cache's argument)
    _writer(type(entity))(out, entity)  # type: ignore[arg-type]
    data = out.getbuffer()
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def encode_response(header: RequestHeader, answer: dict[str, Any]) -> Any:
    """The response to a request from its handler's answer: the data path's messages
    (Fetch, Produce) encoded by hand at once (``data_path_codec``), any other a kio entity
    built from it (``build``), encoded when framed."""
    fast = RESPONSE_ENCODERS.get((header.api_key, header.api_version))
    if fast is not None:
        _check_first_names(response_schema(header.api_key, header.api_version), answer)
        return fast(answer, header.api_version)
    return build(response_schema(header.api_key, header.api_version), answer)


def _check_first_names(cls: type, data: dict[str, Any]) -> None:
    """UnknownField for a name no version of ``cls`` has, as ``build`` checks, in ``data`` and
    the first item of each list of entities in it (a handler builds the items of a list alike),
    for what is encoded without ``build``."""
    _check_names(cls, data)
    for name, target, many in _nested(cls):
        if (value := data.get(name)) is not None and (not many or value):
            _check_first_names(target, value[0] if many else value)


@cache
def _nested(cls: type) -> tuple[tuple[str, type, bool], ...]:
    """The fields of ``cls`` that hold entities: (name, their schema, a list of them or not)."""
    return tuple((f.name, f.target, f.kind == "entities") for f in _fields(cls) if f.kind in ("entity", "entities"))


def frame_response(header: RequestHeader, response: Any) -> bytes:
    """The response's bytes on the wire, size prefix included."""
    return b"".join(response_parts(header, response))


def response_parts(header: RequestHeader, response: Any) -> list[bytes | memoryview]:
    """The response on the wire, size prefix included, as parts to be written back to back
    (``FrameConnection.write_parts``): a hand-encoded response's parts as they are (a Fetch
    answer's records are views of the stored frames), kio's in one."""
    no_tags = b"\0" if header.flexible and header.api_key != API_VERSIONS_KEY else b""  # flexible: no tagged fields
    if isinstance(response, EncodedResponse):
        size = 4 + len(no_tags) + sum(map(len, response.parts))
        return [_SIZE_CORRELATION.pack(size, header.correlation_id) + no_tags, *response.parts]
    return [_framed(struct.pack(">i", header.correlation_id) + no_tags, response)]


# -- the client's side: for tools (kraft broker-api-versions) and followers (replica_client) ------

def frame_request(api_key: int, version: int, correlation: int, client_id: str, request: Any) -> bytes:
    """A request's bytes on the wire, size prefix included: a follower's Fetch encoded by hand
    (``data_path_codec``), any other by kio."""
    fast = REQUEST_ENCODERS.get((api_key, version))
    if fast is not None:
        parts = fast(request, version, correlation, client_id)
        return b"".join((_SIZE.pack(sum(map(len, parts))), *parts))
    return frame_request_by_kio(api_key, version, correlation, client_id, request)


def frame_request_by_kio(api_key: int, version: int, correlation: int, client_id: str, request: Any) -> bytes:
    """Any request encoded by kio: the reference the hand encoders are tested and measured against."""
    header_cls = RequestHeaderV2 if request_schema(api_key, version).__flexible__ else RequestHeaderV1
    head = io.BytesIO()
    _writer(header_cls)(head, header_cls(request_api_key=i16(api_key), request_api_version=i16(version),
                                         correlation_id=i32(correlation), client_id=client_id))
    return _framed(head.getvalue(), request)


def read_response(body: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """The correlation id and response in ``body`` (a response without its size prefix)."""
    cls = response_schema(api_key, version)
    try:
        if cls.__flexible__ and api_key != API_VERSIONS_KEY:
            header, response = _read_entities(body, 0, (ResponseHeaderV1, cls))
            return header.correlation_id, response
        [response] = _read_entities(body, 4, (cls,))
        return struct.unpack_from(">i", body)[0], response
    except Exception as e:
        raise MalformedRequest(f"{cls.__name__} v{version} cannot be read: {type(e).__name__}: {e}") from None


# -- building responses from dicts ----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: str            # "entity", "entities", "value", "values"
    target: Any          # the nested schema class, or the kafka type
    nullable: bool
    has_default: bool


@cache
def _fields(cls: type) -> tuple[_Field, ...]:
    out = []
    for f in fields(cls):
        t, nullable = f.type, False
        if get_origin(t) is UnionType:
            args = [a for a in get_args(t) if a is not NoneType]
            t, nullable = args[0], True
        many = get_origin(t) is tuple
        inner = get_args(t)[0] if many else t
        target: Any
        if is_dataclass(inner):
            kind, target = ("entities" if many else "entity"), inner
        else:
            kind, target = ("values" if many else "value"), f.metadata.get("kafka_type")
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        out.append(_Field(f.name, kind, target, nullable, has_default))
    return tuple(out)


def entity_fields(cls: type) -> tuple[_Field, ...]:
    """The fields of schema ``cls``: name, kind ("entity", "entities", "value", "values"),
    nested schema or Kafka type (for ``error_answers``, which walks a response's schema)."""
    return _fields(cls)


def _zero(f: _Field) -> Any:
    if f.nullable:
        return None
    if f.kind in ("entities", "values"):
        return ()
    if f.kind == "entity":
        return build(f.target, {})
    return _value(f.target, 0 if f.target not in ("string", "bytes", "records", "bool", "uuid") else None)


def _value(kafka_type: str, v: Any) -> Any:
    match kafka_type:
        case "error_code":
            return KioErrorCode(int(v))
        case "timedelta_i32" | "timedelta_i64":
            return datetime.timedelta(milliseconds=v)
        case "datetime_i64":
            return _EPOCH + datetime.timedelta(milliseconds=v)
        case "uuid":
            return uuid.UUID(bytes=v) if v else uuid.UUID(int=0)
        case "string":
            return v if v is not None else ""
        case "bytes" | "records":
            return v if v is not None else b""
        case "bool":
            return bool(v)
        case _:
            return v


_KIO_VERSIONS = range(0, 32)  # wider than any API's versions: the ones kio lacks are skipped


class UnknownField(ValueError):
    """A name that no version of a Kafka message has: a bug in the handler that built it."""


@cache
def _names_in_any_version(api_key: int, kind: str) -> dict[str, frozenset[str]]:
    """Entity name -> the field names it has in any version of ``api_key``'s request or
    response (``kind``), nested entities included."""
    return _names_in(api_key, kind, _KIO_VERSIONS, newest_only=False)


@cache
def _names_in_newest_version(api_key: int, kind: str) -> dict[str, frozenset[str]]:
    """As ``_names_in_any_version``, of the newest version kio has alone: one schema module
    imported where all versions' are a dozen (each import runs ``dataclass`` over its
    entities: 3-20 ms apiece), which a broker paid on the first answer of each such API, e.g.
    a consumer's first LeaveGroup inside a benchmark's read (docs/brokers.md, "librdkafka's
    consume per broker core")."""
    return _names_in(api_key, kind, reversed(_KIO_VERSIONS), newest_only=True)


def _names_in(api_key: int, kind: str, versions: Iterable[int], newest_only: bool) -> dict[str, frozenset[str]]:
    load = load_request_schema if kind == "request" else load_response_schema
    names: dict[str, set[str]] = {}

    def walk(cls: type) -> None:
        known = names.setdefault(cls.__qualname__, set())
        for f in _fields(cls):
            known.add(f.name)
            if f.kind in ("entity", "entities"):
                walk(f.target)
    for version in versions:
        try:
            cls = load(api_key, version)
        except Exception:  # kio has no schema for that version
            continue
        walk(cls)
        if newest_only:
            break
    return {name: frozenset(n) for name, n in names.items()}


@cache
def _own_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in _fields(cls))


def _check_names(cls: type, data: dict[str, Any]) -> None:
    """UnknownField unless every name in ``data`` is a field of ``cls`` in some version."""
    extra = data.keys() - _own_names(cls)
    if not extra:
        return
    kind = cls.__module__.rsplit(".", 1)[-1]  # kio.schema.<api>.v<N>.request or .response
    # Mostly the names are a newer version's (a handler answers with every version's fields):
    # the newest version's names settle that; only what it lacks needs every version's.
    if not extra - _names_in_newest_version(cls.__api_key__, kind).get(cls.__qualname__, frozenset()):  # type: ignore[attr-defined]
        return
    names = _names_in_any_version(cls.__api_key__, kind)  # type: ignore[attr-defined]
    anywhere = names.get(cls.__qualname__, frozenset())
    unknown = sorted(extra - anywhere)
    if unknown:
        raise UnknownField(f"{cls.__module__}.{cls.__qualname__} has no field {', '.join(map(repr, unknown))} "
                           f"in any version")


def build(cls: type, data: dict[str, Any]) -> Any:
    """An instance of schema ``cls`` from ``data`` (field name -> plain value, dicts for
    nested entities); names only other versions of the message have are left out, names no
    version has raise UnknownField."""
    _check_names(cls, data)
    kwargs: dict[str, Any] = {}
    for f in _fields(cls):
        if f.name not in data:
            if not f.has_default:
                kwargs[f.name] = _zero(f)
            continue
        v = data[f.name]
        if v is None and f.nullable:
            kwargs[f.name] = None
        elif f.kind == "entities":
            kwargs[f.name] = tuple(build(f.target, d) for d in v)
        elif f.kind == "entity":
            kwargs[f.name] = build(f.target, v)
        elif f.kind == "values":
            kwargs[f.name] = tuple(v)
        else:
            kwargs[f.name] = _value(f.target, v)
    return cls(**kwargs)


def ms(v: Any) -> int:
    """A request field that kio reads as a timedelta or datetime, in milliseconds."""
    if isinstance(v, datetime.timedelta):
        return round(v.total_seconds() * 1000)
    if isinstance(v, datetime.datetime):
        return round(v.timestamp() * 1000)
    return int(v)
