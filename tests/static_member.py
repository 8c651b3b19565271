"""A confluent-kafka (librdkafka) group member with a ``group.instance.id`` as its own process,
for the static membership tests, which restart it, kill it with SIGKILL or start a duplicate. It
prints one JSON line per event: ``{"assigned": [...]}``, ``{"revoked": [...]}``, ``{"v": ...}``
per record, ``{"error": NAME, "text": ...}`` (it stops on ``_FATAL``); SIGTERM closes the
consumer (which, for a static member, sends no LeaveGroup) and exits.

    python -m tests.static_member KAFKA_BOOTSTRAP GROUP TOPIC INSTANCE_ID SESSION_TIMEOUT_MS
"""
from __future__ import annotations

import json
import signal
import sys

from confluent_kafka import Consumer, KafkaError


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def main(bootstrap: str, group: str, topic: str, instance: str, session_ms: str) -> None:
    stopping: list[bool] = []  # SIGTERM, or a fatal error (FENCED_INSTANCE_ID)
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))

    def error(e: KafkaError) -> None:
        say(error=e.name(), text=e.str())
        if e.code() == KafkaError._FATAL:
            stopping.append(True)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
                  "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": 300,
                  "auto.offset.reset": "earliest", "auto.commit.interval.ms": 200, "error_cb": error})
    c.subscribe([topic], on_assign=lambda _, tps: say(assigned=sorted(tp.partition for tp in tps)),
                on_revoke=lambda _, tps: say(revoked=sorted(tp.partition for tp in tps)))
    while not stopping:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            error(m.error())
        else:
            say(p=m.partition(), v=m.value().decode())
    c.close()


if __name__ == "__main__":
    main(*sys.argv[1:6])
