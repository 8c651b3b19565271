"""Raft snapshot files: the state machine's bytes first, then a footer with the Raft metadata.

    [payload: meta.size bytes, written by the state machine]
    [footer: index u64, term u64, size u64, crc u32, membership (u32 length + bytes),
             context (u32 length + bytes)]
    [trailer, 18 bytes: footer length u32, footer crc32 u32, magic "RSNP", version u16,
             reserved u32]

The payload is written in one streaming pass (its size and checksum are only known at the
end, hence a footer), and it starts at byte 0, so a tool that knows the application's own
format (the metadata shell, Spark) can read it in place. Files are named
``<index:020d>-<term:020d>.snap`` and written through a temporary name, fsynced, renamed.
"""
from __future__ import annotations

import io
import os
import struct
import zlib
from typing import BinaryIO, Callable

from ..errors import StorageError
from ..messages import Membership, SnapshotMeta, SnapshotSource

MAGIC = b"RSNP"
VERSION = 1
TRAILER = struct.Struct(">II4sHI")
FOOTER_HEAD = struct.Struct(">QQQI")


class _CrcWriter:
    """A file wrapper that counts and checksums what the state machine writes."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.size = 0
        self.crc = 0

    def write(self, b: bytes) -> int:
        self.f.write(b)
        self.size += len(b)
        self.crc = zlib.crc32(b, self.crc)
        return len(b)

    def flush(self) -> None:
        self.f.flush()


def file_name(index: int, term: int) -> str:
    return f"{index:020d}-{term:020d}.snap"


def write_snapshot(directory: str, index: int, term: int, membership: Membership,
                   context: bytes, write_payload: Callable[[BinaryIO], None]) -> tuple[str, SnapshotMeta]:
    """Stream a snapshot into ``directory``; returns its path and metadata once durable."""
    path = os.path.join(directory, file_name(index, term))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        w = _CrcWriter(f)
        write_payload(w)  # type: ignore[arg-type]
        meta = SnapshotMeta(index, term, membership, w.size, w.crc, context)
        _write_footer(f, meta)
        os.fsync(f.fileno())
    _publish(tmp, path)
    return path, meta


def _write_footer(f: BinaryIO, meta: SnapshotMeta) -> None:
    footer = encode_footer(meta)
    f.write(footer + TRAILER.pack(len(footer), zlib.crc32(footer), MAGIC, VERSION, 0))
    f.flush()


def _publish(tmp: str, path: str) -> None:
    """Give a durable temporary file its name, durably."""
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class SnapshotFileReceiver:
    """Writes a snapshot arriving from the leader chunk by chunk into a temporary file beside
    the others (a :class:`~raft.messages.SnapshotReceiver`); ``publish`` makes it durable under
    its final name once the core has accepted it. Start-up deletes an unfinished one."""

    def __init__(self, directory: str, meta: SnapshotMeta) -> None:
        self.meta = meta
        self.path = os.path.join(directory, file_name(meta.index, meta.term))
        self._tmp = self.path + ".recv.tmp"
        self._f: BinaryIO | None = open(self._tmp, "wb")

    def write(self, data: bytes) -> None:
        assert self._f is not None, "write after finish or abort"
        self._f.write(data)

    def finish(self) -> "FileSnapshotSource":
        assert self._f is not None, "finish after finish or abort"
        _write_footer(self._f, self.meta)
        source = FileSnapshotSource(self._tmp, self.meta)
        source.receiver = self
        return source

    def publish(self, source: "FileSnapshotSource", fsync: bool = True) -> None:
        """fsync and rename (storage's thread, when the Ready holding it is saved)."""
        assert self._f is not None
        if fsync:
            os.fsync(self._f.fileno())
        self._f.close()
        self._f = None
        _publish(self._tmp, self.path)
        source.path = self.path

    def abort(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
            try:
                os.unlink(self._tmp)
            except FileNotFoundError:
                pass


def encode_footer(meta: SnapshotMeta) -> bytes:
    m = meta.membership.encode()
    return (FOOTER_HEAD.pack(meta.index, meta.term, meta.size, meta.crc)
            + struct.pack(">I", len(m)) + m + struct.pack(">I", len(meta.context)) + meta.context)


def read_meta(path: str) -> SnapshotMeta:
    """Read and verify a snapshot's footer (not its payload: see :func:`verify_payload`)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            if end < TRAILER.size:
                raise StorageError(f"snapshot {path} is truncated ({end} bytes): no trailer")
            f.seek(end - TRAILER.size)
            flen, fcrc, magic, version, _ = TRAILER.unpack(f.read(TRAILER.size))
            if magic != MAGIC:
                raise StorageError(f"{path} is not a Raft snapshot (bad magic at byte {end - 10})")
            if version != VERSION:
                raise StorageError(f"snapshot {path} has format version {version}; this build reads {VERSION}")
            start = end - TRAILER.size - flen
            if start < 0:
                raise StorageError(f"snapshot {path} is truncated: footer of {flen} bytes does not fit")
            f.seek(start)
            footer = f.read(flen)
    except OSError as e:
        raise StorageError(f"cannot read snapshot {path}: {e.strerror}") from None
    if zlib.crc32(footer) != fcrc:
        raise StorageError(f"snapshot {path} footer at byte {start} fails its checksum")
    try:
        index, term, size, crc = FOOTER_HEAD.unpack_from(footer)
        p = FOOTER_HEAD.size
        (mlen,) = struct.unpack_from(">I", footer, p)
        membership = Membership.decode(footer[p + 4:p + 4 + mlen])
        p += 4 + mlen
        (clen,) = struct.unpack_from(">I", footer, p)
        context = footer[p + 4:p + 4 + clen]
    except (struct.error, IndexError) as e:
        raise StorageError(f"snapshot {path} footer at byte {start} is malformed: {e}") from None
    if size != start:
        raise StorageError(f"snapshot {path}: payload of {start} bytes, footer says {size}")
    return SnapshotMeta(index, term, membership, size, crc, context)


def verify_payload(path: str, meta: SnapshotMeta) -> None:
    crc, off = 0, 0
    with open(path, "rb") as f:
        while off < meta.size:
            chunk = f.read(min(1 << 20, meta.size - off))
            if not chunk:
                break
            crc = zlib.crc32(chunk, crc)
            off += len(chunk)
    if off != meta.size or crc != meta.crc:
        raise StorageError(f"snapshot {path}: payload (bytes 0-{meta.size}) fails its checksum")


class FileSnapshotSource(SnapshotSource):
    """Reads a snapshot's payload in chunks for a leader streaming it to a follower. The open
    descriptor keeps the file readable even after a newer snapshot replaces it."""

    def __init__(self, path: str, meta: SnapshotMeta) -> None:
        self.path = path
        self.meta = meta
        self._fd = os.open(path, os.O_RDONLY)
        #: Set while the file is one received from the leader and not yet durable.
        self.receiver: SnapshotFileReceiver | None = None

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self._fd, min(size, self.meta.size - offset), offset)

    def open_payload(self) -> BinaryIO:
        """The payload as a file object, for restoring a state machine."""
        return io.BufferedReader(PayloadFile(self.path, self.meta.size))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


class PayloadFile(io.RawIOBase):
    """A read-only, seekable file object over the first ``size`` bytes of a file: the
    snapshot's payload, without the Raft footer behind it."""

    def __init__(self, path: str, size: int) -> None:
        super().__init__()
        self.name = path
        self._f = open(path, "rb")
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = min(max(0, base + offset), self._size)
        return self._pos

    def readinto(self, b) -> int:
        n = min(len(b), self._size - self._pos)
        if n <= 0:
            return 0
        self._f.seek(self._pos)
        data = self._f.read(n)
        b[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def close(self) -> None:
        self._f.close()
        super().close()


def open_payload(path: str) -> PayloadFile:
    """The payload of the Raft snapshot at ``path`` as a file object (checks the footer)."""
    return PayloadFile(path, read_meta(path).size)


def is_raft_snapshot(path: str) -> bool:
    """Whether ``path`` ends with a Raft snapshot trailer."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            if end < TRAILER.size:
                return False
            f.seek(end - TRAILER.size)
            return TRAILER.unpack(f.read(TRAILER.size))[2] == MAGIC
    except OSError:
        return False
