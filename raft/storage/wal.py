"""The write-ahead log: segment files of CRC-framed records.

A frame is ``[u32 body length][u32 crc32(body)][body]`` (``frames``); the body's first byte
is the record type. Segments are named after the first log index they were opened for
(``00000000000000000001.log``). The log is append-only: an entry whose index is at or below
the current end replaces everything from that index on, so truncating a conflicting suffix
never rewrites a byte already on disk. Every segment begins with the hard state in force when
it was opened, so older segments can be deleted as a whole once a snapshot covers their
entries.
"""
from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from typing import Iterator

from ..errors import StorageError
from ..messages import Entry, EntryType, HardState
from .frames import FRAME, FrameError, encode_frame, read_frame
ENTRY_HEAD = struct.Struct(">BQQB")
HARDSTATE = struct.Struct(">BQQQ")
BASE = struct.Struct(">BQQ")
MAX_RECORD = 1 << 30  # a length beyond this is garbage, not a record

REC_ENTRY = 1
REC_HARDSTATE = 2
REC_BASE = 3  # the log restarts after (index, term): written when a snapshot replaces the log


def encode_entry(e: Entry) -> bytes:
    return encode_frame(ENTRY_HEAD.pack(REC_ENTRY, e.index, e.term, e.type) + e.data)


def encode_hard_state(hs: HardState) -> bytes:
    return encode_frame(HARDSTATE.pack(REC_HARDSTATE, hs.term, hs.vote, hs.commit))


def encode_base(index: int, term: int) -> bytes:
    return encode_frame(BASE.pack(REC_BASE, index, term))


@dataclass(frozen=True, slots=True)
class WalRecord:
    """One decoded frame: exactly one of ``entry``, ``hard_state``, ``base`` is set."""

    offset: int
    size: int
    entry: Entry | None = None
    hard_state: HardState | None = None
    base: tuple[int, int] | None = None


class Torn(Exception):
    """The frame at ``offset`` is cut short or garbled; ``at_tail`` tells whether nothing
    readable follows it (a torn write) or valid data does (corruption)."""

    def __init__(self, offset: int, reason: str, at_tail: bool) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason
        self.at_tail = at_tail


def decode_body(body: bytes, offset: int, size: int) -> WalRecord:
    kind = body[0] if body else 0
    if kind == REC_ENTRY and len(body) >= ENTRY_HEAD.size:
        _, index, term, etype = ENTRY_HEAD.unpack_from(body)
        return WalRecord(offset, size, entry=Entry(index, term, body[ENTRY_HEAD.size:], EntryType(etype)))
    if kind == REC_HARDSTATE and len(body) == HARDSTATE.size:
        _, term, vote, commit = HARDSTATE.unpack(body)
        return WalRecord(offset, size, hard_state=HardState(term, vote, commit))
    if kind == REC_BASE and len(body) == BASE.size:
        _, index, term = BASE.unpack(body)
        return WalRecord(offset, size, base=(index, term))
    raise ValueError(f"unknown record type {kind} of {len(body)} bytes")


def read_segment(path: str) -> Iterator[WalRecord]:
    """Decode a segment front to back. Raises :class:`Torn` at the first bad frame."""
    with open(path, "rb") as f:
        data = f.read()
    yield from decode_frames(data)


def decode_frames(data: bytes) -> Iterator[WalRecord]:
    off, end = 0, len(data)
    while off < end:
        if not any(data[off:off + FRAME.size]) and not any(data[off:]):
            raise Torn(off, "zero-filled tail", at_tail=True)
        try:
            body, next_off = read_frame(data, off, MAX_RECORD)
        except FrameError as e:
            if e.short:
                raise Torn(off, e.problem, at_tail=True) from None
            if e.computed is None:
                raise Torn(off, f"implausible record length {e.length}",
                           at_tail=_rest_is_unreadable(data, off)) from None
            after = off + FRAME.size + e.length
            raise Torn(off, "checksum mismatch", at_tail=not any(data[after:])) from None
        try:
            rec = decode_body(body, off, next_off - off)
        except ValueError as e:
            raise Torn(off, str(e), at_tail=False) from None
        yield rec
        off = next_off


def _rest_is_unreadable(data: bytes, off: int) -> bool:
    """After a garbled length we cannot find the next frame; a torn tail is the kind reading
    (nothing valid is lost by truncating) only when no valid frame starts anywhere after it."""
    for start in range(off + 1, len(data) - FRAME.size):
        length, crc = FRAME.unpack_from(data, start)
        body_at = start + FRAME.size
        if 0 < length <= len(data) - body_at and zlib.crc32(data[body_at:body_at + length]) == crc:
            return False
    return True


def segment_name(first_index: int) -> str:
    return f"{first_index:020d}.log"


def list_segments(directory: str) -> list[str]:
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit())
    except FileNotFoundError:
        return []
    return [os.path.join(directory, n) for n in names]


class SegmentWriter:
    """Appends to the active segment and fsyncs once per batch (group commit)."""

    def __init__(self, path: str, truncate_at: int | None = None) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if truncate_at is not None:
            os.ftruncate(self.fd, truncate_at)
            os.fsync(self.fd)
        self.size = os.fstat(self.fd).st_size

    def write(self, buf: bytes, sync: bool) -> None:
        view = memoryview(buf)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        self.size += len(buf)
        if sync:
            os.fdatasync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def corruption(path: str, t: Torn) -> StorageError:
    return StorageError(f"corrupted write-ahead log {path} at byte {t.offset}: {t.reason}; "
                        f"this node's data cannot be trusted: wipe its data directory, format "
                        f"it again and let it catch up from the leader")
