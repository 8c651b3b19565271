"""Which protocol a listener speaks, for a client that cannot reach a broker through it.

A broker has two kinds of client listeners: gRPC (``PLAINTEXT``/``SSL`` in ``listeners``),
which our clients and tools talk, and the Kafka protocol (``KAFKA``), which Kafka's clients
talk. Given the wrong one, gRPC only sees "Socket closed": a Kafka listener reads gRPC's
HTTP/2 preface as a request of about 1.3 GB and hangs up without a byte. So when a connection
is closed before the first answer, the client asks the same address a Kafka ApiVersions v0
(the request every Kafka client sends first); an answer carrying the request's correlation id
means the address is a Kafka listener, and the user is told which listener to use instead of
waiting for metadata that cannot come.
"""
from __future__ import annotations

import asyncio
import struct

API_VERSIONS, CORRELATION_ID = 18, 0x6B726166  # "kraf"
_CLIENT_ID = b"kraft-listener-probe"
#: ApiVersions v0 with request header v1: api key, api version, correlation id, client id.
_REQUEST = struct.pack(">hhih", API_VERSIONS, 0, CORRELATION_ID, len(_CLIENT_ID)) + _CLIENT_ID


async def speaks_kafka(address: str, timeout_s: float = 2.0) -> bool:
    """True when ``address`` answers a Kafka ApiVersions request (a Kafka-protocol listener)."""
    host, _, port = address.rpartition(":")
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host.strip("[]"), int(port))
            writer.write(struct.pack(">i", len(_REQUEST)) + _REQUEST)
            await writer.drain()
            size, correlation_id = struct.unpack(">ii", await reader.readexactly(8))
            return size >= 4 and correlation_id == CORRELATION_ID
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
        return False
    finally:
        if writer is not None:
            writer.close()


def kafka_listener(address: str) -> str:
    """What to tell a user who gave a Kafka listener where a gRPC one is needed."""
    return (f"{address} is a broker's Kafka-protocol listener (KAFKA in its listeners); this client talks gRPC: "
            f"use the broker's PLAINTEXT (or SSL) listener, or a Kafka client for this one")


def not_a_broker(address: str) -> str:
    """What to tell a user who gave a gRPC listener without the broker API (a controller's)."""
    return (f"{address} does not serve the broker API (a controller's listener?): give a broker's PLAINTEXT "
            f"(or SSL) listener as the bootstrap server")
