"""``console-producer`` and ``console-consumer`` (kafka-console-producer.sh and
kafka-console-consumer.sh), as click commands to mount in the ``kraft`` CLI; ``python -m
brokerd.cli`` runs them standalone.

The producer reads lines from stdin (``KEY<sep>VALUE`` with ``--key-separator``) and prints
each failed send as one line on stderr, the way Kafka's ErrorLoggingCallback does; it exits 1
if any send failed. The consumer prints values (and, with ``--property print.key=true`` etc.,
keys, offsets, partitions, timestamps) until ``--max-messages`` or ``--timeout-ms`` without a
message, then reports ``Processed a total of N messages`` on stderr.
"""
from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from . import ACKS, Consumer, ConsumerRecord, Producer, producer_config
from .accumulator import RecordFuture
from .cluster_view import CLIENT_ERRORS
from .config import from_properties, read_config_file
from .consumer_groups import consumer_groups

T = TypeVar("T")

FORMATTER_PROPERTIES = {"print.key", "print.value", "print.offset", "print.partition", "print.timestamp",
                        "key.separator", "line.separator", "null.literal"}


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


def _pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, found, value = item.partition("=")
        if not found:
            _fail(f"{option} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _describe(b: bytes | None) -> str:
    return "null" if b is None else f"{len(b)} bytes"


@click.command("console-producer")
@click.option("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...] of any brokers")
@click.option("--topic", required=True)
@click.option("--acks", type=click.Choice(["all", "-1", "1", "0"]), default="all", show_default=True)
@click.option("--key-separator", default=None,
              help="parse each line as KEY<separator>VALUE; a line without it is an error, as in Kafka")
@click.option("--linger-ms", type=int, default=5, show_default=True)
@click.option("--max-block-ms", type=int, default=60000, show_default=True)
@click.option("--request-timeout-ms", type=int, default=30000, show_default=True)
@click.option("--sync", is_flag=True, help="wait for each record's answer before reading the next line")
@click.option("--compression-codec", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default=None,
              help="compress batches (compression.type)")
@click.option("--producer-property", "properties", multiple=True, metavar="KEY=VALUE",
              help="any producer setting by its Kafka name, e.g. enable.idempotence=false (repeatable)")
@click.option("--producer.config", "config_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="a properties file of producer settings (security.protocol, ssl.*, ...); "
                   "--producer-property wins over it")
def console_producer(bootstrap_server: str, topic: str, acks: str, key_separator: str | None, linger_ms: int,
                     max_block_ms: int, request_timeout_ms: int, sync: bool, compression_codec: str | None,
                     properties: tuple[str, ...], config_file: str | None) -> None:
    """Send the lines of stdin to TOPIC."""
    sep = key_separator.encode() if key_separator else None
    settings: dict[str, object] = {"acks": ACKS[acks], "linger_ms": linger_ms, "max_block_ms": max_block_ms,
                                   "request_timeout_ms": request_timeout_ms}
    if compression_codec:
        settings["compression_type"] = compression_codec
    try:
        settings.update(producer_config({**(read_config_file(config_file) if config_file else {}),
                                         **_pairs(properties, "--producer-property")}))
    except CLIENT_ERRORS as e:
        _fail(str(e))

    async def run() -> int:
        failures = 0

        def report(key: bytes | None, value: bytes | None, error: BaseException) -> None:
            nonlocal failures
            failures += 1
            click.echo(f"Error when sending message to topic {topic} with key: {_describe(key)}, value: "
                       f"{_describe(value)} with error: {error}", err=True)

        try:
            producer = await Producer(bootstrap_server, **settings).start()  # type: ignore[arg-type]
        except CLIENT_ERRORS as e:
            _fail(str(e))
        loop = asyncio.get_running_loop()
        number = 0
        try:
            while True:
                line = await loop.run_in_executor(None, sys.stdin.buffer.readline)
                if not line:
                    break
                number += 1
                value = line.rstrip(b"\r\n")
                key = None
                if sep is not None:
                    key, found, rest = value.partition(sep)
                    if not found:
                        click.echo(f"Error: No key separator found on line number {number}: "
                                   f"'{value.decode(errors='replace')}'", err=True)
                        return 1
                    value = rest
                try:
                    fut = await producer.send(topic, value, key)
                except CLIENT_ERRORS as e:
                    report(key, value, e)
                    continue
                if sync:
                    try:
                        await fut
                    except CLIENT_ERRORS as e:
                        report(key, value, e)
                else:
                    def failed(f: RecordFuture, k: bytes | None = key, v: bytes = value) -> None:
                        if (error := f.exception()) is not None:
                            report(k, v, error)
                    fut.add_done_callback(failed)
        finally:
            await producer.close()
        return 1 if failures else 0

    sys.exit(asyncio.run(run()))


def _formatter(props: dict[str, str]) -> Callable[[ConsumerRecord], bytes]:
    print_key = props.get("print.key", "false").lower() == "true"
    print_value = props.get("print.value", "true").lower() == "true"
    print_offset = props.get("print.offset", "false").lower() == "true"
    print_partition = props.get("print.partition", "false").lower() == "true"
    print_ts = props.get("print.timestamp", "false").lower() == "true"
    key_sep = props.get("key.separator", "\t").encode()
    line_sep = props.get("line.separator", "\n").encode()
    null = props.get("null.literal", "null").encode()

    def fmt(r: ConsumerRecord) -> bytes:
        parts = []
        if print_ts:
            parts.append(f"CreateTime:{r.timestamp}".encode())
        if print_partition:
            parts.append(f"Partition:{r.partition}".encode())
        if print_offset:
            parts.append(f"Offset:{r.offset}".encode())
        if print_key:
            parts.append(null if r.key is None else r.key)
        if print_value:
            parts.append(null if r.value is None else r.value)
        return key_sep.join(parts) + line_sep
    return fmt


@click.command("console-consumer")
@click.option("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...] of any brokers")
@click.option("--topic", required=True)
@click.option("--from-beginning", is_flag=True, help="start with the earliest message, not the latest")
@click.option("--partition", type=int, default=None, help="consume this partition only")
@click.option("--offset", default=None, help="earliest, latest, or an offset (needs --partition)")
@click.option("--max-messages", type=int, default=None, help="exit after this many messages")
@click.option("--timeout-ms", type=int, default=None, help="exit when no message came for this long")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="formatter: print.key, print.offset, print.partition, print.timestamp, key.separator, ...")
@click.option("--group", default=None, help="consume as a member of this consumer group, committing its position "
                                           "in every assigned partition (what it printed)")
@click.option("--consumer-property", "consumer_properties", multiple=True, metavar="KEY=VALUE",
              help="any consumer setting by its Kafka name, e.g. session.timeout.ms=6000 (repeatable)")
@click.option("--consumer.config", "config_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="a properties file of consumer settings (security.protocol, ssl.*, ...); "
                   "--consumer-property wins over it")
def console_consumer(bootstrap_server: str, topic: str, from_beginning: bool, partition: int | None,
                     offset: str | None, max_messages: int | None, timeout_ms: int | None,
                     properties: tuple[str, ...], group: str | None, consumer_properties: tuple[str, ...],
                     config_file: str | None) -> None:
    """Print the messages of TOPIC to stdout. With --group, partitions are shared with the
    group's other members and a second run resumes after what the first printed."""
    if offset is not None and partition is None:
        _fail("The partition is required when offset is specified.")
    if offset is not None and from_beginning:
        _fail("Options from-beginning and offset cannot be specified together.")
    if offset is not None and offset not in ("earliest", "latest") and not offset.isdigit():
        _fail(f"The offset {offset} is not a number, earliest or latest.")
    props = {}
    for p in properties:
        k, found, v = p.partition("=")
        if not found or k not in FORMATTER_PROPERTIES:
            _fail(f"Invalid property {p!r}: use KEY=VALUE with KEY one of {', '.join(sorted(FORMATTER_PROPERTIES))}")
        props[k] = v
    fmt = _formatter(props)

    if group is not None and partition is not None:
        _fail("Options group and partition cannot be specified together.")
    settings: dict[str, object] = {"auto_offset_reset": "earliest" if from_beginning else "latest"}
    try:
        settings.update(from_properties(Consumer.__init__, {**(read_config_file(config_file) if config_file else {}),
                                                            **_pairs(consumer_properties, "--consumer-property")},
                                        "consumer"))
    except CLIENT_ERRORS as e:
        _fail(str(e))

    async def run() -> int:
        # With --group, the consumer commits its positions (auto commit, on by default as in
        # Kafka's console consumer): every few seconds, when partitions are revoked, and on
        # close, for every assigned partition, including those it printed nothing from.
        consumer = Consumer(bootstrap_server, **{**settings, "group_id": group})  # type: ignore[arg-type]
        await consumer.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        main_task = asyncio.current_task()
        assert main_task is not None

        def interrupted() -> None:
            """Ctrl-C stops whatever the consumer waits for (Kafka's consumer.wakeup()) and
            closes it; a second one does not wait for the close either."""
            if stop.is_set():
                main_task.cancel()
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupted)
        count = 0
        out = sys.stdout.buffer
        # waiting for the topic's metadata is bounded by --timeout-ms too
        wait_ms = min(timeout_ms, 60000) if timeout_ms is not None else 60000
        try:
            if partition is None:
                await _unless_stopped(consumer.subscribe(topic, wait_ms), stop, None)
            else:
                await _unless_stopped(consumer.assign([(topic, partition)], wait_ms), stop, None)
                if offset == "earliest":
                    consumer.seek_to_beginning()
                elif offset == "latest":
                    consumer.seek_to_end()
                elif offset is not None:
                    consumer.seek(topic, partition, int(offset))
            idle_since = loop.time()
            while not stop.is_set():
                idle_left = None if timeout_ms is None else max(0.0, timeout_ms / 1000 - (loop.time() - idle_since))
                # a poll may wait for a rebalance
                records = await _unless_stopped(consumer.poll(200), stop, idle_left) or []
                for i, r in enumerate(records):
                    out.write(fmt(r))
                    count += 1
                    if max_messages is not None and count >= max_messages:
                        stop.set()
                        _rewind(consumer, records[i + 1:])
                        break
                out.flush()
                if records:
                    idle_since = loop.time()
                elif not stop.is_set() and timeout_ms is not None and (loop.time() - idle_since) * 1000 >= timeout_ms:
                    click.echo("Error processing message, terminating consumer process: TimeoutException", err=True)
                    break
        except CLIENT_ERRORS as e:
            click.echo(f"Error processing message, terminating consumer process: {e}", err=True)
            return 1
        finally:
            try:
                await consumer.close()
            finally:
                click.echo(f"Processed a total of {count} messages", err=True)
        return 0

    try:
        sys.exit(asyncio.run(run()))
    except asyncio.CancelledError:  # a second Ctrl-C while closing
        sys.exit(1)


async def _unless_stopped(aw: Awaitable[T], stop: asyncio.Event, timeout_s: float | None) -> T | None:
    """``aw``'s result; None, with ``aw`` cancelled, once ``stop`` is set or after ``timeout_s``."""
    task = asyncio.ensure_future(aw)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    return None if task.cancelled() else task.result()


def _rewind(consumer: Consumer, unprinted: list[ConsumerRecord]) -> None:
    """Put each partition back at its first record that was returned but not printed, so that
    the commit on close covers what was printed and no more."""
    for r in reversed(unprinted):
        consumer.seek(r.topic, r.partition, r.offset)


@click.group()
def main() -> None:
    """Console producer and consumer for the brokers."""


main.add_command(console_producer)
main.add_command(console_consumer)
main.add_command(consumer_groups)

__all__ = ["console_producer", "console_consumer", "consumer_groups", "main"]

if __name__ == "__main__":
    main()
