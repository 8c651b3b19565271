"""Tagged fields a schema does not name (KIP-482), skipped as Kafka's readers skip them.

A flexible message ends each struct (the headers too) with a tagged section: a count, then
per field its tag, its size and its bytes. A newer client, or a leader of a newer version,
may send tags our schemas do not have; Kafka's generated readers keep those aside
(``_unknownTaggedFields``) and read on, which is how newer clients talk to older brokers.
kio's readers raise KeyError on such a tag instead and have no option to skip it, so the codec
asks ``without_unknown_tags`` for a copy of the message with those tags left out and has kio
read that. Only a message kio refused takes this path (the data path's reads stay compiled).

The walk is bounded by the bytes it was given: a tag count, tag size or array length beyond
what is left is refused before anything is read for it, and each step consumes at least one
byte, so a malformed message costs at most a pass over its own bytes.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import Field, fields
from functools import cache
from typing import Any

from kio.serial._introspect import (EntityField, EntityTupleField, classify_field, get_field_tag,
                                    is_optional)
from kio.serial._parse import get_field_reader
from kio.serial.readers import (read_compact_array_length, read_int8, read_legacy_array_length,
                                read_unsigned_varint)
from kio.static.constants import EntityType

from clients.records import varint


Parts = list[bytes | memoryview]


def without_unknown_tags(buf: bytes, offset: int, classes: Sequence[type]) -> bytes:
    """``buf`` with the entities of ``classes`` (read one after the other from ``offset``)
    copied without the tags their schemas do not have; the bytes before ``offset`` and after
    the last entity as they are. ValueError (or kio's BufferUnderflow) when the bytes do not
    hold those entities."""
    view = memoryview(buf)
    out: Parts = [view[:offset]]
    pos = offset
    for cls in classes:
        pos = _entity(view, pos, cls, out)
    out.append(view[pos:])
    return b"".join(out)


@cache
def _schema(cls: type) -> tuple[tuple[Field[Any], ...], dict[int, Field[Any]]]:
    """The fields of ``cls`` in wire order, and its tagged fields by tag."""
    plain, tagged = [], {}
    for f in fields(cls):
        tag = get_field_tag(f)
        if tag is None:
            plain.append(f)
        else:
            tagged[int(tag)] = f
    return tuple(plain), tagged


def _entity(buf: memoryview, pos: int, cls: type, out: Parts) -> int:
    plain, tagged = _schema(cls)
    for f in plain:
        pos = _field(buf, pos, cls, f, False, out)
    return _tagged_section(buf, pos, cls, tagged, out) if cls.__flexible__ else pos  # type: ignore[attr-defined]


def _field(buf: memoryview, pos: int, cls: type, f: Field[Any], is_tag: bool, out: Parts) -> int:
    """Copies one field of ``cls`` at ``pos`` into ``out``; where it ends."""
    kind = classify_field(f)
    if isinstance(kind, EntityField):
        if is_optional(f) and not is_tag:  # a nullable struct: an int8 marker first (KIP-893)
            marker, n = read_int8(buf, pos)
            out.append(buf[pos:pos + n])
            pos += n
            if marker < 0:
                return pos
        return _entity(buf, pos, kind.type_, out)
    if isinstance(kind, EntityTupleField):
        flexible = cls.__flexible__  # type: ignore[attr-defined]
        length, n = (read_compact_array_length if flexible else read_legacy_array_length)(buf, pos)
        out.append(buf[pos:pos + n])
        pos += n
        count = max(length or 0, 0)  # null: None (compact) or -1 (legacy)
        if count > len(buf) - pos:
            raise ValueError(f"an array of {count} in {len(buf) - pos} bytes")
        for _ in range(count):
            pos = _entity(buf, pos, kind.type_, out)
        return pos
    is_header = getattr(cls, "__type__", None) is EntityType.header  # RequestHeader's client_id: legacy
    _, n = get_field_reader(cls, f, is_header, is_tag)(buf, pos)
    out.append(buf[pos:pos + n])
    return pos + n


def _tagged_section(buf: memoryview, pos: int, cls: type, tagged: dict[int, Field[Any]], out: Parts) -> int:
    """Copies the tagged section at ``pos``, keeping the tags ``cls`` names; where it ends."""
    count, n = read_unsigned_varint(buf, pos)
    pos += n
    if count > (len(buf) - pos) // 2:  # a tag and its size: at least two bytes each
        raise ValueError(f"{count} tagged fields in {len(buf) - pos} bytes")
    known = []
    for _ in range(count):
        tag, n = read_unsigned_varint(buf, pos)
        pos += n
        size, n = read_unsigned_varint(buf, pos)
        pos += n
        if size > len(buf) - pos:
            raise ValueError(f"tagged field {tag} of {size} bytes in {len(buf) - pos}")
        if tag in tagged:
            known.append((tag, pos, size))
        pos += size
    out.append(varint(len(known)))
    for tag, start, size in known:  # a known tag's value may hold structs with tags of their own
        value: Parts = []
        if _field(buf[start:start + size], 0, cls, tagged[tag], True, value) != size:
            raise ValueError(f"tagged field {tag} is not {size} bytes long")
        data = b"".join(value)
        out += (varint(tag), varint(len(data)), data)
    return pos
