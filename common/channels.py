"""Dialling a gRPC channel, plaintext or with TLS settings, with the options every channel of
the project shares (message sizes, keepalives, quick reconnects)."""
from __future__ import annotations

import grpc

from .tls import TLSConfig, channel_credentials

_kept_up = False


def keep_grpc_aio_up() -> None:
    """Keep gRPC's asyncio runtime up for the life of the process. Otherwise it is torn down
    each time its last channel or server goes, and that teardown can hang forever joining its
    poller thread (grpc/grpc#40989; the workaround from grpc/grpc#22365): seen here as a test
    run that froze in asyncio.run after many clusters came and went. Done when this module is
    imported, or, when that happens after an ``asyncio.run`` left no current event loop (which
    the runtime's start needs), by the first dial."""
    global _kept_up
    if not _kept_up:
        try:
            grpc.aio.init_grpc_aio()
        except RuntimeError:  # no current event loop here: the first dial, inside one, does it
            return
        _kept_up = True


keep_grpc_aio_up()


def channel_options(max_bytes: int) -> list[tuple[str, int]]:
    return [("grpc.max_send_message_length", max_bytes * 4),
            ("grpc.max_receive_message_length", max_bytes * 4),
            ("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
            ("grpc.initial_reconnect_backoff_ms", 50), ("grpc.max_reconnect_backoff_ms", 500)]


def open_channel(address: str, tls: TLSConfig | None, max_bytes: int) -> grpc.aio.Channel:
    return dial(address, tls, channel_options(max_bytes))


def dial(address: str, tls: TLSConfig | None, options: list[tuple[str, int]]) -> grpc.aio.Channel:
    """A channel to ``address``: plaintext, or TLS with ``tls``."""
    keep_grpc_aio_up()
    if tls is None:
        return grpc.aio.insecure_channel(address, options=options)
    opts: list = list(options)
    if tls.server_name:
        opts.append(("grpc.ssl_target_name_override", tls.server_name))
    return grpc.aio.secure_channel(address, channel_credentials(tls), options=opts)
