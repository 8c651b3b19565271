"""Batch compression (Kafka's ``compression.type``): the codecs, their ids in a batch's
attributes, and decompression that is bounded, because a batch is untrusted input.

Codec ids are Kafka's (``CompressionType``): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd. gzip is
the standard library's zlib; lz4 (frame format) and zstd are the ``lz4`` and ``zstandard``
packages; snappy is ``cramjam``'s raw snappy (what librdkafka writes), and batches in the
xerial framing that Java's and kafka-python's producers write are read too. Each
decompressor stops at ``limit`` bytes of output: a small batch that expands without end (a
decompression bomb) is refused as corrupt instead of filling the broker's memory.
"""
from __future__ import annotations

import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

#: The most a batch may expand to; larger is taken for corruption (or an attack).
MAX_UNCOMPRESSED_BYTES = 64 << 20
CODEC_MASK = 0x07  # the attribute bits that hold the codec, as in Kafka's RecordBatch


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def named(cls, name: str) -> "Codec":
        """A ``compression.type`` value (``uncompressed`` is Kafka's topic-side spelling of none)."""
        key = "NONE" if name.lower() == "uncompressed" else name.upper()
        if key not in cls.__members__:
            raise ValueError(f"Invalid value {name} for configuration compression.type: String must be "
                             f"one of: none, gzip, snappy, lz4, zstd")
        return cls[key]


class CompressionError(ValueError):
    """A payload that does not decompress, or expands past the limit."""


_ZSTD_C = zstandard.ZstdCompressor(level=3)
_ZSTD_D = zstandard.ZstdDecompressor()


def compress(codec: Codec, data: bytes) -> bytes:
    if codec == Codec.NONE:
        return data
    if codec == Codec.GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: the gzip format, as Kafka writes
        return c.compress(data) + c.flush()
    if codec == Codec.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Codec.LZ4:
        return lz4.frame.compress(data)
    if codec == Codec.ZSTD:
        return _ZSTD_C.compress(data)
    raise CompressionError(f"unknown compression codec {int(codec)}")


def decompress(codec: int, data: bytes, limit: int = MAX_UNCOMPRESSED_BYTES) -> bytes:
    """The payload, at most ``limit`` bytes; raises CompressionError otherwise."""
    try:
        if codec == Codec.NONE:
            return data
        if codec == Codec.GZIP:
            d = zlib.decompressobj(31)
            out = d.decompress(data, limit + 1)
            if not d.eof:
                raise CompressionError("the gzip stream is truncated" if len(out) <= limit else _too_big(limit))
            return _checked(out, limit)
        if codec == Codec.SNAPPY:
            if data[:8] == _XERIAL_MAGIC:
                return _xerial(data, limit)
            if _snappy_length(data) > limit:
                raise CompressionError(_too_big(limit))
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec == Codec.LZ4:
            d = lz4.frame.LZ4FrameDecompressor()
            out = d.decompress(data, max_length=limit + 1)
            if not d.eof:
                raise CompressionError("the lz4 frame is truncated" if len(out) <= limit else _too_big(limit))
            return _checked(out, limit)
        if codec == Codec.ZSTD:
            if zstandard.frame_content_size(data) > limit:  # -1: not declared
                raise CompressionError(_too_big(limit))
            return _ZSTD_D.decompress(data, max_output_size=limit)
    except CompressionError:
        raise
    except Exception as e:  # each library has its own error types; all mean "corrupt"
        raise CompressionError(f"the {Codec(codec).name.lower()} payload does not decompress: {e}") from None
    raise CompressionError(f"unknown compression codec {codec}")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, then int32 version and int32 compatible version


def _xerial(data: bytes, limit: int) -> bytes:
    """xerial's snappy-java framing: after the header, blocks of int32 length + raw snappy."""
    out: list[bytes] = []
    pos, total = _XERIAL_HEADER, 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError("the snappy (xerial) payload ends inside a block length")
        n = int.from_bytes(data[pos:pos + 4], "big")
        block = data[pos + 4:pos + 4 + n]
        if len(block) != n:
            raise CompressionError("the snappy (xerial) payload ends inside a block")
        total += _snappy_length(block)
        if total > limit:
            raise CompressionError(_too_big(limit))
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += 4 + n
    return b"".join(out)


def _checked(out: bytes, limit: int) -> bytes:
    if len(out) > limit:
        raise CompressionError(_too_big(limit))
    return out


def _too_big(limit: int) -> str:
    return f"the payload expands past {limit} bytes"


def _snappy_length(data: bytes) -> int:
    """Raw snappy starts with the uncompressed length as a varint."""
    value = shift = 0
    for b in data[:5]:
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        shift += 7
    raise CompressionError("the snappy payload has no valid length")
