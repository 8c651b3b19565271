"""brokerd.kafka.framing in one process: frames cut from whatever chunks the socket delivers,
a size refused after the frames before it, the end of the stream, and reading paused while
frames wait (the back-pressure a StreamReader gave the listener)."""
from __future__ import annotations

import asyncio
import random

import pytest

from brokerd.kafka.codec import MalformedRequest
from brokerd.kafka.framing import (FIRST_FRAME_BYTES, HIGH_WATER, KEPT_FRAME_BYTES, SCRATCH_BYTES, FrameConnection,
                                   SpareBuffers)


class _Transport(asyncio.Transport):
    """What FrameConnection calls on its transport, recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def write(self, data) -> None:  # type: ignore[no-untyped-def]
        self.written.append(bytes(data))


def _framed(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def _deliver(conn: FrameConnection, data: bytes, chunks: list[int]) -> None:
    """``data`` as the event loop hands it to a BufferedProtocol: into the buffers it asks for,
    at most ``chunks[i]`` bytes at a time."""
    at, i = 0, 0
    while at < len(data):
        buf = conn.get_buffer(-1)
        n = min(len(buf), chunks[i % len(chunks)], len(data) - at)
        buf[:n] = data[at:at + n]
        conn.buffer_updated(n)
        at, i = at + n, i + 1


def _connection(check=lambda size: None) -> tuple[FrameConnection, _Transport]:  # type: ignore[no-untyped-def]
    conn, transport = FrameConnection(check), _Transport()
    conn.connection_made(transport)
    return conn, transport


@pytest.mark.parametrize("chunks", [[1], [3, 7], [4096], [SCRATCH_BYTES], [1 << 20], [5, 70_000, 13]])
def test_frames_are_cut_the_same_whatever_the_chunks(chunks):
    """Small frames, frames around the scratch buffer's size and far larger ones, back to back,
    come out whole and in order however the stream is split."""
    rng = random.Random(len(chunks) * 31 + chunks[0])
    sizes = [8, 0, 100, SCRATCH_BYTES - 5, SCRATCH_BYTES - 4, SCRATCH_BYTES - 3, SCRATCH_BYTES + 1, 300_000, 9, 1]
    bodies = [rng.randbytes(n) for n in sizes]

    async def go() -> list[bytes]:
        conn, _ = _connection()
        _deliver(conn, b"".join(map(_framed, bodies)), chunks)
        conn.eof_received()
        out = [await conn.frame() for _ in bodies]
        with pytest.raises(asyncio.IncompleteReadError):
            await conn.frame()
        return out
    out = asyncio.run(go())
    assert out == bodies and all(type(b) is bytes for b in out)


def test_a_large_frame_is_allocated_as_it_arrives():
    """A size prefix alone (socket.request.max.bytes allows 100 MiB) does not allocate the
    frame; its buffer grows with what arrives, and a frame of several MiB comes out whole."""
    async def go() -> None:
        conn, _ = _connection()
        _deliver(conn, (100 << 20).to_bytes(4, "big") + bytes(10), [1 << 16])
        assert len(conn.get_buffer(-1)) < FIRST_FRAME_BYTES
        body = random.Random(1).randbytes(5 * FIRST_FRAME_BYTES + 3)
        conn, _ = _connection()
        _deliver(conn, _framed(body) + _framed(b"next"), [200_000])
        assert await conn.frame() == body and await conn.frame() == b"next"
    asyncio.run(go())


def test_a_servers_connections_share_a_few_large_buffers():
    """What a server keeps for large frames is bounded by its spare buffers, not by how many
    connections it has: a buffer one connection is done with is the next one's."""
    async def go() -> None:
        spares = SpareBuffers(2)
        conns = [FrameConnection(lambda size: None, spares=spares) for _ in range(5)]
        for conn in conns:
            conn.connection_made(_Transport())
            _deliver(conn, _framed(bytes(100_000)), [1 << 20])
            assert await conn.frame() == bytes(100_000)
        assert len(spares.buffers) == 1  # one buffer went round all five
        conn = conns[0]
        _deliver(conn, _framed(bytes(KEPT_FRAME_BYTES + 1)), [1 << 20])
        assert len(await conn.frame()) == KEPT_FRAME_BYTES + 1
        assert all(len(b) <= KEPT_FRAME_BYTES for b in spares.buffers)  # a very large one is not kept
        growing = FrameConnection(lambda size: None)  # a client's: one buffer of its own
        growing.connection_made(_Transport())
        kept = []
        for size in (100_000, 300_000, 280_000, 310_000, 200_000):
            _deliver(growing, _framed(bytes(size)), [1 << 20])
            assert len(await growing.frame()) == size
            kept.append(growing._spares.buffers[0])
        assert [len(b) for b in kept] == [1 << 17] + [1 << 19] * 4  # grown once, to a power of two
        assert all(b is kept[1] for b in kept[1:])  # then the same buffer
    asyncio.run(go())


def test_a_refused_size_ends_reading_after_the_frames_before_it():
    """The size prefix is checked before its body is read (a client cannot make the listener
    buffer a body over socket.request.max.bytes); what came before it is still served."""
    async def go() -> None:
        conn, transport = _connection(lambda size: None if size <= 100 else f"a request of {size} bytes")
        _deliver(conn, _framed(b"a" * 10) + (1 << 30).to_bytes(4, "big") + b"junk", [3])
        assert await conn.frame() == b"a" * 10
        with pytest.raises(MalformedRequest, match="a request of 1073741824 bytes"):
            await conn.frame()
        assert not transport.reading
    asyncio.run(go())


def test_a_frame_cut_short_by_the_end_of_the_stream():
    async def go() -> None:
        conn, _ = _connection()
        _deliver(conn, _framed(b"x" * 200_000)[:150_000], [65_536])
        conn.eof_received()
        with pytest.raises(asyncio.IncompleteReadError):
            await conn.frame()
        conn2, _ = _connection()
        conn2.connection_lost(ConnectionResetError("reset by peer"))
        with pytest.raises(ConnectionResetError):
            await conn2.frame()
        with pytest.raises(ConnectionResetError):
            await conn2.drain()
    asyncio.run(go())


def test_reading_pauses_while_frames_wait_and_resumes_as_they_are_taken():
    async def go() -> None:
        conn, transport = _connection()
        body = bytes(300_000)
        waiting = 0
        while transport.reading:
            _deliver(conn, _framed(body), [1 << 20])
            waiting += 1
        assert waiting * len(body) > HIGH_WATER
        while not transport.reading:
            await conn.frame()
            waiting -= 1
        assert waiting * len(body) <= HIGH_WATER // 2
    asyncio.run(go())


def test_drain_waits_while_the_transport_is_paused():
    async def go() -> None:
        conn, _ = _connection()
        await conn.drain()  # not paused: at once
        conn.pause_writing()
        draining = asyncio.ensure_future(conn.drain())
        await asyncio.sleep(0)
        assert not draining.done()
        conn.resume_writing()
        await draining
    asyncio.run(go())


def test_parts_reach_the_socket_in_order_unjoined_or_buffered():
    """``write_parts`` over a real socket: answers of many parts (more than one writev takes,
    views among them, empty ones) arrive byte for byte and in order, also when the socket is
    full mid-part (the rest goes to the transport's buffer) and when an answer is written
    while an earlier one is still buffered."""
    import socket

    from brokerd.kafka.framing import IOV_MAX

    rng = random.Random(7)

    def answer(n: int) -> list[bytes | memoryview]:
        parts: list[bytes | memoryview] = []
        for _ in range(n):
            blob = rng.randbytes(rng.choice([0, 1, 61, 4096, 30_000]))
            parts.append(memoryview(blob)[rng.randrange(0, len(blob) + 1):] if rng.random() < 0.5 else blob)
        return parts

    async def main() -> None:
        ours, theirs = socket.socketpair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 << 10)
        loop = asyncio.get_running_loop()
        conn = FrameConnection(lambda size: None)
        await loop.connect_accepted_socket(lambda: conn, ours)
        answers = [answer(IOV_MAX + 40), answer(30), answer(200)]
        for parts in answers:  # the second and third while the first is still buffered
            conn.write_parts(parts)
        assert conn.transport is not None and conn.transport.get_write_buffer_size() > 0
        expected = b"".join(b"".join(p) for p in answers)
        theirs.setblocking(False)
        got = bytearray()
        while len(got) < len(expected):
            got += await loop.sock_recv(theirs, 1 << 20)
        assert bytes(got) == expected
        conn.write_parts(answer(5))  # nothing buffered now: straight to the socket
        conn.close()
        theirs.close()

    asyncio.run(main())
