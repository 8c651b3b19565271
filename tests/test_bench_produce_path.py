"""bench.produce_path's measures over a transport: each path's client gets an answer to every
request it sends and the leader appends every request's batch (a request refused or answered
with an error would make the figure a measure of something else), through the Kafka listener
and through gRPC's ProduceStream."""
from __future__ import annotations

import asyncio

import pytest

from bench import produce_path


@pytest.mark.parametrize("path", ["kafka-transport", "kafka-noop", "grpc-stream"])
def test_a_transport_path_answers_every_request(path):
    over = produce_path.over_kafka_listener if path.startswith("kafka") else produce_path.over_transport
    row = asyncio.run(over(path, 30, 5, 1, 50, 256))
    # (not its CPU per request: /proc counts the process's CPU in 10 ms ticks, which 30 requests
    # answered at once may not reach, so 0.0 is a right answer there)
    assert row["path"] == path and row["requests"] == 30 and "us_per_request" in row
    assert row["appended"] == (0 if path.endswith("noop") else 30 * 50)


def test_the_kafka_client_fails_when_the_listener_closes_the_connection():
    # a listener that answers nothing and closes: the client's failure fails the measure
    import socket
    import threading
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def close_at_once() -> None:
        conn, _ = server.accept()
        conn.close()
    threading.Thread(target=close_at_once, daemon=True).start()
    with pytest.raises((RuntimeError, ConnectionError)):  # closed, or reset under the unread request
        produce_path.send_framed(server.getsockname()[1], b"\0\0\0\0", 3, 1)
    server.close()
