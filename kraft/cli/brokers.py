"""Tools that ask the brokers: ``kraft get-offsets`` (kafka-get-offsets.sh), ``kraft
delete-records`` (kafka-delete-records.sh), ``kraft log-dirs`` (kafka-log-dirs.sh) and ``kraft
broker-api-versions`` (kafka-broker-api-versions.sh)."""
from __future__ import annotations

import json
import sys
from typing import Any

import click

from kraft.cli.invocation import command_config_option, command_tls, fail, run


@click.command("get-offsets")
@command_config_option
@click.option("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT] of brokers (gRPC listeners)")
@click.option("--topic", required=True)
@click.option("--partitions", help="comma-separated partition ids (default: all)")
@click.option("--time", "when", default="-1", show_default=True,
              help="-1 (latest: the high watermark), -2 (earliest) or a time in ms since the epoch")
def get_offsets(bootstrap_server: str, topic: str, partitions: str | None, when: str) -> None:
    """Each partition's offset at a time, as TOPIC:PARTITION:OFFSET (kafka-get-offsets.sh); an
    offset is left empty when no record is that recent."""
    from clients.admin import Admin
    from clients.cluster_view import CLIENT_ERRORS, ClientError
    try:
        at = int(when)
        wanted = [int(p) for p in partitions.split(",")] if partitions else None
    except ValueError:
        fail("--time takes -1, -2 or a time in ms; --partitions takes ids like 0,1,2")
        return
    if at < -2:
        fail(f"--time {at}: use -1 (latest), -2 (earliest) or a time in ms")
        return

    async def ask() -> dict[tuple[str, int], tuple[int, int]]:
        async with Admin(bootstrap_server, tls=command_tls()) as admin:
            tps = await admin.partitions_of(topic)
            if not tps:
                raise ClientError(f"UNKNOWN_TOPIC_OR_PARTITION: Topic {topic} does not exist.")
            if wanted is not None:
                missing = sorted(set(wanted) - {p for _, p in tps})
                if missing:
                    raise ClientError(f"UNKNOWN_TOPIC_OR_PARTITION: topic {topic} has no partitions {missing}")
                tps = [(topic, p) for p in wanted]
            return await admin.offsets({tp: at for tp in tps})
    try:
        found = run(ask())
    except CLIENT_ERRORS as e:
        fail(str(e))
        return
    for (t, p), (offset, _) in sorted(found.items()):
        click.echo(f"{t}:{p}:{offset if offset >= 0 else ''}")


@click.command("delete-records")
@command_config_option
@click.option("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT] of brokers (gRPC listeners)")
@click.option("--offset-json-file", required=True, type=click.Path(dir_okay=False),
              help='JSON as kafka-delete-records.sh reads it: {"partitions": [{"topic": "t", "partition": 0, '
                   '"offset": 10}], "version": 1}; offset -1 is the high watermark')
def delete_records(bootstrap_server: str, offset_json_file: str) -> None:
    """Delete the records below an offset in each partition listed (kafka-delete-records.sh):
    the partition's log start offset moves up to it, and its new low watermark is printed."""
    from clients.admin import Admin
    from clients.cluster_view import CLIENT_ERRORS
    try:
        wanted = _offsets_to_delete(offset_json_file)
    except (OSError, ValueError) as e:
        fail(f"--offset-json-file {offset_json_file}: {e}")
        return

    async def ask() -> dict[tuple[str, int], int]:
        async with Admin(bootstrap_server, tls=command_tls()) as admin:
            return await admin.delete_records(wanted)
    click.echo("Executing records delete operation")
    try:
        done = run(ask())
    except CLIENT_ERRORS as e:
        fail(str(e))
        return
    click.echo("Records delete operation completed:")
    for (t, p), low in sorted(done.items()):
        click.echo(f"partition: {t}-{p}\tlow_watermark: {low}")


def _offsets_to_delete(path: str) -> dict[tuple[str, int], int]:
    """kafka-delete-records.sh's offset file, read as (topic, partition) -> offset; ValueError
    says what is wrong with it."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError('expected {"partitions": [{"topic": ..., "partition": ..., "offset": ...}], "version": 1}')
    out: dict[tuple[str, int], int] = {}
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str) and isinstance(e.get("partition"), int)
                and isinstance(e.get("offset"), int)):
            raise ValueError(f"each partition needs a string topic and integer partition and offset, not {e}")
        key = (e["topic"], e["partition"])
        if key in out:
            raise ValueError(f"the file lists partition {key[0]}-{key[1]} twice")
        out[key] = e["offset"]
    return out


@click.command("log-dirs")
@command_config_option
@click.option("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT] of brokers (gRPC listeners)")
@click.option("--describe", is_flag=True, required=True, help="describe the brokers' log directories")
@click.option("--broker-list", help="only these broker ids, e.g. 1,2")
@click.option("--topic-list", help="only these topics, e.g. a,b")
def log_dirs(bootstrap_server: str, describe: bool, broker_list: str | None, topic_list: str | None) -> None:
    """Bytes per partition per log dir per broker, as JSON (kafka-log-dirs.sh --describe).
    offsetLag is how far a replica's log end is behind its leader's; a replica moving to another
    log dir is also listed there with isFuture true, its offsetLag behind the current one."""
    from clients.admin import Admin
    from clients.cluster_view import CLIENT_ERRORS
    from common.errors import ErrorCode
    try:
        ids = [int(b) for b in broker_list.split(",")] if broker_list else None
    except ValueError:
        fail(f"--broker-list {broker_list!r}: expected broker ids like 1,2,3")
        return
    topics = set(topic_list.split(",")) if topic_list else None

    async def ask() -> tuple[dict[int, Any], dict[int, Any]]:
        async with Admin(bootstrap_server, tls=command_tls()) as admin:
            found = await admin.describe_brokers(ids)
            return found, {bid: await admin.describe_log_dirs(bid) for bid in found}
    try:
        found, dirs = run(ask())
    except CLIENT_ERRORS as e:
        fail(str(e))
        return
    leader_end = {(s.topic, s.partition): s.log_end_offset for d in found.values() for s in d.replicas
                  if s.role == "leader"}
    brokers = []
    for bid, d in sorted(found.items()):
        ends = {(s.topic, s.partition): s.log_end_offset for s in d.replicas}
        log_dirs = []
        for ld in dirs[bid].log_dirs:
            parts = [{"partition": f"{t.name}-{x.partition}", "size": x.size_bytes,
                      # a future replica: behind the current one (Kafka's); else behind its leader
                      "offsetLag": x.offset_lag if x.is_future else max(
                          0, leader_end.get((t.name, x.partition), 0) - ends.get((t.name, x.partition), 0)),
                      "isFuture": x.is_future}
                     for t in ld.topics if topics is None or t.name in topics for x in t.partitions]
            log_dirs.append({"logDir": ld.log_dir, "error": ErrorCode(ld.error_code).name if ld.error_code else None,
                             "partitions": parts})
        brokers.append({"broker": bid, "logDirs": log_dirs})
    missing = sorted(set(ids or ()) - set(found))
    if missing:
        click.echo(f"Error: brokers {missing} did not answer", err=True)
    click.echo("Querying brokers for log directories information")
    click.echo("Received log directory information from brokers " + ",".join(str(b) for b in sorted(found)))
    click.echo(json.dumps({"version": 1, "brokers": brokers}, separators=(",", ":")))
    if missing:
        sys.exit(1)


@click.command("broker-api-versions")
@click.option("--bootstrap-server", required=True, help="HOST:PORT of a broker's Kafka listener")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="seconds per request")
@click.option("--command-config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="properties file with the client's security.protocol and ssl.* keys")
def broker_api_versions(bootstrap_server: str, timeout: float, command_config: str | None) -> None:
    """The APIs and versions each broker serves to Kafka clients (kafka-broker-api-versions.sh)."""
    from clients.cluster_view import CLIENT_ERRORS
    from clients.config import read_config_file
    from clients.security import check_hostname, client_tls
    from common.tls import ssl_context
    from kraft.broker_api_versions import KafkaToolError
    from kraft.broker_api_versions import broker_api_versions as ask
    try:
        props = read_config_file(command_config) if command_config else {}
        tls = client_tls(props)
        context = ssl_context(tls, server=False, check_hostname=check_hostname(props)) if tls else None
        lines = run(ask(bootstrap_server, timeout, context))
    except (*CLIENT_ERRORS, KafkaToolError) as e:
        fail(str(e))
        return
    click.echo("\n".join(lines))
