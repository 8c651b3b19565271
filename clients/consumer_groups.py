"""``kraft consumer-groups`` (kafka-consumer-groups.sh): list groups, describe one (members,
assignment, committed offset, log end offset and lag per partition), reset an inactive group's
offsets, delete an empty group or a group's offsets of topics it does not consume. Every
failure is one line with Kafka's error name."""
from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

import click
import grpc

from protos import broker_pb2 as pb

from .admin import EARLIEST, LATEST, Admin, TopicPartition
from .cluster_view import CLIENT_ERRORS, ClientError
from common.errors import ErrorCode, KafkaError
from .config import tools_tls
from .consumer_coordinator import ConsumerCoordinator
from .group_protocol import decode_assignment

class GroupAdmin(Admin):
    """The cluster view plus the group requests the tool makes."""

    def group(self, group_id: str) -> ConsumerCoordinator:
        return ConsumerCoordinator(group_id, self.cluster, self.connections, client_id="consumer-groups",
                                   session_timeout_ms=10000, rebalance_timeout_ms=10000, heartbeat_interval_ms=3000,
                                   strategies=["range"], instance_id=None, request_timeout_ms=10000,
                                   retry_backoff_ms=200)

    async def list_groups(self) -> list[pb.ListedGroup]:
        out: dict[str, pb.ListedGroup] = {}
        for address in list(self.cluster.brokers.values()) or self.cluster.bootstrap:
            try:
                r = await self.connections.stub(address).ListGroups(pb.ListGroupsRequest(), timeout=10)
            except grpc.aio.AioRpcError as e:
                raise ClientError(f"broker {address} did not answer: {e.code().name}") from None
            for g in r.groups:
                out[g.group_id] = g
        return [out[k] for k in sorted(out)]

    async def offsets_at(self, tps: list[TopicPartition], which: int) -> dict[TopicPartition, int]:
        """Log start (-2) or high watermark (-1) offsets from the partitions' leaders."""
        return {tp: offset for tp, (offset, _) in (await self.offsets({tp: which for tp in tps})).items()}


def table(rows: list[list[Any]]) -> str:
    """Columns padded to their widest cell (kafka-consumer-groups.sh and kafka-transactions.sh print so)."""
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(" ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows)


class PartitionLag(NamedTuple):
    """One row of ``--describe``: a partition the group committed to or is assigned; None
    where there is no committed offset, no answer from the leader, or no owner."""
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    lag: int | None
    member: pb.DescribedGroupMember | None


async def describe_group(admin: GroupAdmin, group_id: str) -> tuple[pb.DescribedGroup, list[PartitionLag]]:
    """The group (state, protocol, members) and its committed offsets, log end offsets and lag
    per partition: what ``--describe`` prints and the web console shows."""
    g = admin.group(group_id)
    r = await g.call("DescribeGroups", pb.DescribeGroupsRequest(groups=[group_id]), asyncio.get_running_loop().time() + 15)
    d = r.groups[0]
    if d.error_code:
        raise KafkaError(ErrorCode.of(d.error_code), d.error_message)
    committed = await g.committed([])
    owner: dict[TopicPartition, pb.DescribedGroupMember] = {}
    for m in d.members:
        try:
            for tp in decode_assignment(m.assignment):
                owner[tp] = m
        except ValueError:
            pass
    tps = sorted(set(committed) | set(owner))
    ends = await admin.offsets_at(tps, LATEST) if tps else {}
    rows = []
    for tp in tps:
        cur, end = committed.get(tp), ends.get(tp)
        rows.append(PartitionLag(tp[0], tp[1], cur, end, None if cur is None or end is None else max(0, end - cur),
                                 owner.get(tp)))
    return d, rows


async def _describe(admin: GroupAdmin, group_id: str) -> str:
    d, lags = await describe_group(admin, group_id)
    rows: list[list[Any]] = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                              "CONSUMER-ID", "CLIENT-ID"]]
    for r in lags:
        m = r.member
        rows.append([group_id, r.topic, r.partition, "-" if r.committed is None else r.committed,
                     "-" if r.log_end is None else r.log_end, "-" if r.lag is None else r.lag,
                     m.member_id if m else "-", m.client_id if m and m.client_id else "-"])
    head = "" if d.members else f"Consumer group '{group_id}' has no active members.\n\n"
    return head + table(rows) + f"\n\nState: {d.state}, generation {d.generation_id}, {len(d.members)} members"


async def _reset(admin: GroupAdmin, group_id: str, topic: str, how: tuple[str, int | None], execute: bool,
                 warn: Callable[[str], None]) -> str:
    g = admin.group(group_id)
    r = await g.call("DescribeGroups", pb.DescribeGroupsRequest(groups=[group_id]), asyncio.get_running_loop().time() + 15)
    d = r.groups[0]
    if d.error_code not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
        raise KafkaError(ErrorCode.of(d.error_code), d.error_message)
    if d.members:
        raise ClientError(f"Assignments can only be reset if the group '{group_id}' is inactive, but the current "
                          f"state is {d.state}.")
    tps = await admin.partitions_of(topic)
    if not tps:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {topic} does not exist.")
    earliest, latest = await admin.offsets_at(tps, EARLIEST), await admin.offsets_at(tps, LATEST)
    current = await g.committed(tps)
    kind, n = how
    new = {}
    for tp in tps:
        target = {"earliest": earliest[tp], "latest": latest[tp], "offset": latest[tp] if n is None else n,
                  "shift": current.get(tp, latest[tp]) + (n or 0)}[kind]
        if target > latest[tp]:
            warn(f"New offset ({target}) is higher than latest offset for topic partition {tp[0]}-{tp[1]}. Value "
                 f"will be set to {latest[tp]}")
            target = latest[tp]
        elif target < earliest[tp]:
            warn(f"New offset ({target}) is lower than earliest offset for topic partition {tp[0]}-{tp[1]}. Value "
                 f"will be set to {earliest[tp]}")
            target = earliest[tp]
        new[tp] = target
    if execute:
        await g.commit(new, managed=False)
    rows: list[list[Any]] = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group_id, t, p, o] for (t, p), o in sorted(new.items())]
    return table(rows)


@click.command("consumer-groups")
@click.option("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...] of any brokers")
@click.option("--list", "list_", is_flag=True, help="list every group")
@click.option("--describe", is_flag=True, help="members, committed offsets and lag of --group")
@click.option("--delete", is_flag=True, help="delete --group (it must have no members)")
@click.option("--reset-offsets", is_flag=True, help="set --group's offsets of --topic (the group must be inactive)")
@click.option("--delete-offsets", is_flag=True,
              help="delete --group's committed offsets of --topic (TOPIC or TOPIC:0,1), which no member may consume")
@click.option("--group", default=None)
@click.option("--topic", default=None)
@click.option("--to-earliest", is_flag=True)
@click.option("--to-latest", is_flag=True)
@click.option("--to-offset", type=int, default=None)
@click.option("--shift-by", type=int, default=None)
@click.option("--dry-run", is_flag=True, help="show the new offsets (the default)")
@click.option("--execute", is_flag=True, help="commit the new offsets")
@click.option("--command-config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="properties file with the client's security.protocol and ssl.* keys")
def consumer_groups(bootstrap_server: str, list_: bool, describe: bool, delete: bool, reset_offsets: bool,
                    delete_offsets: bool, group: str | None, topic: str | None, to_earliest: bool, to_latest: bool,
                    to_offset: int | None, shift_by: int | None, dry_run: bool, execute: bool,
                    command_config: str | None) -> None:
    """List, describe, reset and delete consumer groups and their offsets."""
    actions = [a for a, on in (("list", list_), ("describe", describe), ("delete", delete),
                               ("reset-offsets", reset_offsets), ("delete-offsets", delete_offsets)) if on]
    if len(actions) != 1:
        _fail("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
              "--delete-offsets")
    if actions[0] != "list" and not group:
        _fail(f"Option --{actions[0]} takes the option: --group")
    if delete_offsets and not topic:
        _fail("Option --delete-offsets takes the option: --topic (TOPIC or TOPIC:0,1)")
    how: tuple[str, int | None] = ("latest", None)
    if reset_offsets:
        if not topic:
            _fail("Option --reset-offsets takes the option: --topic (one topic)")
        chosen = [h for h in (("earliest", None) if to_earliest else None, ("latest", None) if to_latest else None,
                              ("offset", to_offset) if to_offset is not None else None,
                              ("shift", shift_by) if shift_by is not None else None) if h]
        if len(chosen) != 1:
            _fail("Option --reset-offsets takes exactly one of: --to-earliest, --to-latest, --to-offset, --shift-by")
        how = chosen[0]
        if dry_run and execute:
            _fail("Options --dry-run and --execute cannot be specified together.")
        if not dry_run and not execute:  # as Kafka warns: a dry run that does not say so misleads
            click.echo("WARN: No action will be performed as the --execute option is missing; add --execute to "
                       "commit the new offsets, or --dry-run to only show them without this warning.", err=True)

    try:
        tls = tools_tls(command_config)
    except CLIENT_ERRORS as e:
        _fail(str(e))

    async def run() -> str:
        async with GroupAdmin(bootstrap_server, tls=tls) as admin:
            if list_:
                return "\n".join(g.group_id for g in await admin.list_groups())
            assert group is not None
            if describe:
                return await _describe(admin, group)
            if delete:
                g = admin.group(group)
                r = await g.call("DeleteGroups", pb.DeleteGroupsRequest(groups=[group]),
                                  asyncio.get_running_loop().time() + 15)
                res = r.results[0]
                if res.error_code:
                    raise KafkaError(ErrorCode.of(res.error_code), res.error_message)
                return f"Deletion of requested consumer groups ('{group}') was successful."
            assert topic is not None
            if delete_offsets:
                return await _delete_offsets(admin, group, topic)
            return await _reset(admin, group, topic, how, execute, lambda w: click.echo(f"Warning: {w}", err=True))

    try:
        click.echo(asyncio.run(run()))
    except CLIENT_ERRORS as e:
        _fail(str(e))


async def _delete_offsets(admin: GroupAdmin, group_id: str, spec: str) -> str:
    """OffsetDelete of ``spec`` (TOPIC: all its partitions, or TOPIC:0,1), as
    kafka-consumer-groups.sh --delete-offsets prints it; a partition refused (a member consumes
    its topic) fails the command after the table."""
    topic, _, listed = spec.partition(":")
    try:
        partitions = [int(x) for x in listed.split(",")] if listed else \
            [p for _, p in await admin.partitions_of(topic)]
    except ValueError:
        raise ClientError(f"--topic {spec!r}: expected TOPIC or TOPIC:0,1") from None
    if not partitions:
        raise ClientError(f"UNKNOWN_TOPIC_OR_PARTITION: Topic {topic} does not exist.")
    r = await admin.group(group_id).call("OffsetDelete", pb.OffsetDeleteRequest(
        group_id=group_id, topics=[pb.OffsetDeleteTopic(name=topic, partitions=partitions)]),
        asyncio.get_running_loop().time() + 15)
    if r.error_code:
        raise KafkaError(ErrorCode.of(r.error_code), r.error_message or None)
    rows: list[list[Any]] = [["TOPIC", "PARTITION", "STATUS"]]
    failed: dict[str, ErrorCode] = {}
    for t in r.topics:
        for a in t.partitions:
            code = ErrorCode.of(a.error_code)
            rows.append([t.name, a.partition, f"Error: {code.name}" if code else "Successful"])
            if code:
                failed[f"{t.name}-{a.partition}"] = code
    shown = table(rows)
    if failed:
        click.echo(shown)
        raise ClientError(f"{next(iter(failed.values())).name}: the offsets of {', '.join(failed)} were not deleted")
    return f"Request succeed for deleting offsets with topic {topic} group {group_id}\n\n{shown}"


def _fail(message: str) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)
