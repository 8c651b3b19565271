"""A connection's size-prefixed frames (Kafka's requests and answers), read by an asyncio
``BufferedProtocol``: the Kafka listener's connections and a follower's to its leader.

Why: asyncio's StreamReader copied a frame four times (a fresh 256 KiB buffer per ``recv``,
appended to its own buffer, sliced, the slice copied to bytes) and moved what followed it; for
the 200 KB Produce requests librdkafka sends, that was most of the listener's own CPU
(docs/brokers.md, "Data path performance"). Here the socket is read into one fixed scratch
buffer (size prefixes, small frames) or, for a frame larger than it, straight into that frame's
own buffer (kept for the next one: a fresh buffer of that size per frame cost more in page
faults than the copies saved; a server's connections share a few, ``SpareBuffers``, so that
memory does not grow with the number of connections), and each frame is copied once, into the
``bytes`` it is handed on as.

Reading is paused, as a StreamReader pauses it, while more than ``HIGH_WATER`` bytes of frames
wait to be taken, so a connection whose requests are not read (in-flight bound, a throttled
client muted) pushes back on its client through TCP.
"""
from __future__ import annotations

import asyncio
import collections
import os
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from .codec import MalformedRequest

#: Frames up to this size (and every size prefix) are read into one reused buffer.
SCRATCH_BYTES = 16 << 10
#: A larger frame's buffer starts at this size (or the frame's, if smaller) and doubles as its
#: bytes arrive: a size prefix alone (up to socket.request.max.bytes) never allocates much.
FIRST_FRAME_BYTES = 1 << 20
#: A larger frame's buffer is kept for the next frame up to this size.
KEPT_FRAME_BYTES = 4 << 20


class SpareBuffers:
    """Large frames' buffers a server's connections (on one event loop) pass on to each other,
    at most ``count`` of them."""

    def __init__(self, count: int = 8) -> None:
        self.count = count
        self.buffers: list[bytearray] = []

    def take(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes, a spare one if there is one; else a new one
        (a power of two: frames of about one size share it) in place of the smallest spare, so
        that the spares grow to the frames' sizes instead of staying too small for them."""
        for i, buffer in enumerate(self.buffers):
            if len(buffer) >= size:
                return self.buffers.pop(i)
        if len(self.buffers) >= self.count:
            self.buffers.remove(min(self.buffers, key=len))
        return bytearray(1 << (size - 1).bit_length())

    def give(self, buffer: bytearray) -> None:
        if len(buffer) <= KEPT_FRAME_BYTES and len(self.buffers) < self.count:
            self.buffers.append(buffer)


#: The most parts one ``os.writev`` takes (the kernel refuses more).
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024

#: Reading pauses while more than this many bytes of frames wait, and resumes at half of it
#: (a StreamReader of limit 1 MiB, as the listener used, pauses at 2 MiB and resumes at 1).
HIGH_WATER = 2 << 20


class FrameConnection(asyncio.BufferedProtocol):
    """One connection: ``frame()`` the next frame's body (without its size prefix), ``write``
    and ``drain`` as a StreamWriter's. ``check(size)`` says what is wrong with a size prefix
    (None: nothing): the frames before it are still handed on, then ``frame()`` raises
    MalformedRequest with that reason, and nothing more is read. The end of the stream raises
    ``asyncio.IncompleteReadError`` and a reset the OSError, as a StreamReader's
    ``readexactly`` does. ``connected``: called with the connection once it is made (a server's
    serving task starts there). ``spares``: where a large frame's buffer comes from and goes
    back to (a server's, shared by its connections); without, the connection keeps its own."""

    def __init__(self, check: Callable[[int], str | None],
                 connected: Callable[[FrameConnection], None] | None = None,
                 spares: SpareBuffers | None = None) -> None:
        self.check = check
        self.connected = connected
        self._spares = spares if spares is not None else SpareBuffers(1)
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(SCRATCH_BYTES)
        self._view = memoryview(self._scratch)
        self._start = self._end = 0  # what of the scratch buffer is read and not yet cut into frames
        self._large = bytearray()  # where a frame larger than the scratch buffer is read
        self._size = 0  # that frame's size (0: none being read)
        self._got = 0  # and how much of it is read
        self._frames: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._reading_paused = False
        self._error: BaseException | None = None
        self._eof = False
        self._over_ssl = False
        self._waiter: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._lost = False
        self._fd = -1  # the socket's, for write_parts on plain TCP

    # -- asyncio's side --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1
        if self.connected is not None:
            self.connected(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._size:
            if self._got == len(self._large):  # a new buffer (the last view handed out may still be held)
                grown = bytearray(self._capacity(2 * self._got))
                grown[:self._got] = self._large
                self._large = grown
            return memoryview(self._large)[self._got:self._size + SCRATCH_BYTES]
        if self._end == SCRATCH_BYTES:  # what is left of an unfinished frame moves to the front
            left = self._end - self._start
            self._view[:left] = bytes(self._view[self._start:self._end])
            self._start, self._end = 0, left
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._error is not None:
            return  # a size refused: nothing after it is read
        if self._size:
            self._got += nbytes
            if self._got >= self._size:  # what was read past its end goes to the scratch buffer
                large, size = memoryview(self._large), self._size
                self._push(bytes(large[:size]))
                left = self._got - size
                self._view[:left] = large[size:self._got]
                self._start, self._end, self._size = 0, left, 0
                self._spares.give(self._large)
                self._large = bytearray()
                self._cut()
            return
        self._end += nbytes
        self._cut()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return not self._over_ssl  # as StreamReaderProtocol: answers still pending are written

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if exc is not None and self._error is None:
            self._error = exc
        self._eof = True
        self._wake()
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(exc or ConnectionResetError("Connection lost"))
        self._drain_waiter = None

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        self._drain_waiter = None

    # -- the connection's user -------------------------------------------------------------------

    async def frame(self) -> bytes:
        """The next frame's body, in the order they came."""
        while not self._frames:
            if self._error is not None:
                raise self._error
            if self._eof:
                raise asyncio.IncompleteReadError(b"", None)
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame = self._frames.popleft()
        self._queued -= len(frame)
        if self._reading_paused and self._queued <= HIGH_WATER // 2 and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        return frame

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def write_parts(self, parts: Sequence[bytes | memoryview]) -> None:
        """Write ``parts`` back to back (a Fetch answer's: packed fields and views of the
        stored records) without joining them first: while the transport has nothing buffered
        and the connection is plain TCP, they go to the socket in ``os.writev`` calls, and
        only what the socket does not take is joined and handed to the transport (which
        sends it when the socket has room, and meets a failed connection as for any write).
        Joining all of it first copied every answer once more in this process, and the
        transport copied what the socket did not take once again."""
        transport = self.transport
        assert transport is not None
        i, n = 0, len(parts)
        if (self._fd >= 0 and not self._over_ssl and not transport.is_closing()
                and not transport.get_write_buffer_size()):
            while i < n:
                batch = parts[i:i + IOV_MAX]
                try:
                    sent = os.writev(self._fd, batch)
                except OSError:  # full (BlockingIOError), or failed: the transport takes it from here
                    break
                full = sent < sum(map(len, batch))
                while i < n and len(parts[i]) <= sent:
                    sent -= len(parts[i])
                    i += 1
                if sent:  # the socket took the start of a part
                    transport.write(b"".join((memoryview(parts[i])[sent:], *parts[i + 1:])))
                    return
                if full:
                    break
        if i < n:
            transport.write(b"".join(parts[i:]))

    async def drain(self) -> None:
        """Until the transport's buffer is below its high-water mark (StreamWriter.drain);
        ConnectionResetError once the connection is lost."""
        if self._lost:
            raise ConnectionResetError("Connection lost")
        if not self._writing_paused:
            return
        if self._drain_waiter is None:
            self._drain_waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drain_waiter)

    async def start_tls(self, context: ssl.SSLContext, handshake_timeout: float) -> None:
        """The server's side of a TLS handshake on this connection, before any frame."""
        assert self.transport is not None
        self.transport = await asyncio.get_running_loop().start_tls(
            self.transport, self, context, server_side=True, ssl_handshake_timeout=handshake_timeout)
        self._over_ssl = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default) if self.transport is not None else default

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # -- cutting frames --------------------------------------------------------------------------

    def _cut(self) -> None:
        """The complete frames in the scratch buffer handed on; a larger frame's start moved to
        its own buffer, read into from then on."""
        view, start, end = self._view, self._start, self._end
        while end - start >= 4:
            size = int.from_bytes(view[start:start + 4], "big", signed=True)
            if (problem := self.check(size)) is not None:
                self._error = MalformedRequest(problem)
                self._wake()
                if self.transport is not None:
                    self.transport.pause_reading()
                return
            if end - start - 4 >= size:
                self._push(bytes(view[start + 4:start + 4 + size]))
                start += 4 + size
            elif size > SCRATCH_BYTES - 4:
                got = end - start - 4
                self._size, self._got = size, got
                self._large = self._spares.take(self._capacity(FIRST_FRAME_BYTES))
                self._large[:got] = view[start + 4:end]
                start = end = 0
                break
            else:
                break
        if start == end:
            start = end = 0
        self._start, self._end = start, end

    def _capacity(self, wanted: int) -> int:
        """A large frame's buffer: ``wanted`` bytes, or once that covers the frame, the frame
        and room for what follows it (one read takes its end and the next size prefix)."""
        return wanted if wanted < self._size else self._size + SCRATCH_BYTES

    def _push(self, frame: bytes) -> None:
        self._frames.append(frame)
        self._queued += len(frame)
        if self._queued > HIGH_WATER and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
