"""The one frame format of every file here: ``[u32 body length][u32 crc32(body)][body]``,
big-endian. The write-ahead log frames its records with it (``wal``), and metadata snapshots
frame theirs (docs/metadata-snapshot-format.md); each reader adds what its file means.
"""
from __future__ import annotations

import struct
import zlib

FRAME = struct.Struct(">II")
HEADER_BYTES = FRAME.size


class FrameError(Exception):
    """The frame at ``offset`` cannot be read. ``short`` is True when the buffer merely ends
    inside it (read more, or it is a torn tail); otherwise it is damaged."""

    def __init__(self, offset: int, problem: str, *, short: bool = False,
                 length: int = 0, stored: int = 0, computed: int | None = None) -> None:
        super().__init__(problem)
        self.offset, self.problem, self.short = offset, problem, short
        self.length, self.stored, self.computed = length, stored, computed


def encode_frame(body: bytes) -> bytes:
    return FRAME.pack(len(body), zlib.crc32(body)) + body


def read_frame(buf: bytes | memoryview, at: int, max_length: int) -> tuple[bytes, int]:
    """The body of the frame at ``buf[at]`` and where the next frame starts; raises
    FrameError if the buffer ends inside it, its length exceeds ``max_length`` or its
    checksum fails."""
    if len(buf) - at < HEADER_BYTES:
        raise FrameError(at, "frame header cut short", short=True)
    length, crc = FRAME.unpack_from(buf, at)
    if length > max_length:
        raise FrameError(at, f"length {length} exceeds {max_length}", length=length, stored=crc)
    start = at + HEADER_BYTES
    end = start + length
    if end > len(buf):
        raise FrameError(at, f"record of {length} bytes cut short at {len(buf) - start}",
                         short=True, length=length, stored=crc)
    body = bytes(buf[start:end])
    computed = zlib.crc32(body)
    if computed != crc:
        raise FrameError(at, f"CRC mismatch (stored {crc:#010x}, computed {computed:#010x})",
                         length=length, stored=crc, computed=computed)
    return body, end
