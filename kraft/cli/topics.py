"""``kraft topics``: create, list, describe, alter and delete topics (kafka-topics.sh)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from kraft.cli.invocation import (
    check_error,
    controller_group,
    fail,
    parse_configs,
    with_client,
)
from protos import controller_pb2 as pb

if TYPE_CHECKING:
    from metadata.client import ControllerClient


@controller_group
def topics() -> None:
    """Create, list, describe, alter and delete topics (kafka-topics.sh)."""


def _parse_assignment(text: str) -> list[list[int]]:
    try:
        return [[int(b) for b in part.split(":")] for part in text.split(",")]
    except ValueError:
        fail(f"bad --replica-assignment {text!r}: expected e.g. 1:2:3,2:3:1 (partition by partition)")
        raise


@topics.command("create")
@click.option("--topic", required=True)
@click.option("--partitions", type=int, default=-1, help="default: num.partitions")
@click.option("--replication-factor", type=int, default=-1, help="default: default.replication.factor")
@click.option("--config", "configs", multiple=True, help="KEY=VALUE, repeatable")
@click.option("--replica-assignment", help="broker lists per partition: 1:2:3,2:3:1")
@click.option("--if-not-exists", is_flag=True)
@click.option("--validate-only", is_flag=True)
@click.pass_obj
def topics_create(obj: tuple[str, float], topic: str, partitions: int, replication_factor: int, configs: tuple[str, ...],
                  replica_assignment: str | None, if_not_exists: bool, validate_only: bool) -> None:
    t = pb.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=replication_factor,
                          configs=parse_configs(configs))
    if replica_assignment:
        t.assignments.extend(pb.ReplicaAssignment(partition=p, replicas=r)
                             for p, r in enumerate(_parse_assignment(replica_assignment)))
    from common.errors import ErrorCode
    resp = with_client(*obj, lambda c: c.create_topics(pb.CreateTopicsRequest(topics=[t], validate_only=validate_only)))
    r = resp.topics[0]
    if r.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and if_not_exists:
        return
    check_error(r.error_code, r.error_message, "")
    click.echo(f"{'Validated' if validate_only else 'Created'} topic {topic}.")


@topics.command("list")
@click.pass_obj
def topics_list(obj: tuple[str, float]) -> None:
    resp = with_client(*obj, lambda c: c.describe_topics(pb.DescribeTopicsRequest()))
    for t in resp.topics:
        click.echo(t.name)


def _ids(xs: Any) -> str:
    return ",".join(str(x) for x in xs)


@topics.command("describe")
@click.option("--topic", help="one topic (default: all)")
@click.option("--under-replicated-partitions", is_flag=True, help="only partitions whose ISR is short")
@click.option("--unavailable-partitions", is_flag=True, help="only partitions without a leader")
@click.option("--under-min-isr-partitions", is_flag=True, help="only partitions whose ISR is below min.insync.replicas")
@click.option("--at-min-isr-partitions", is_flag=True, help="only partitions whose ISR is exactly min.insync.replicas")
@click.option("--topics-with-overrides", is_flag=True, help="only topics with configs of their own (no partitions)")
@click.pass_obj
def topics_describe(obj: tuple[str, float], topic: str | None, under_replicated_partitions: bool, unavailable_partitions: bool,
                    under_min_isr_partitions: bool, at_min_isr_partitions: bool, topics_with_overrides: bool) -> None:
    """Topics and partitions (kafka-topics.sh --describe); the filters show only what they name.
    min.insync.replicas is the topic's, else the cluster-wide dynamic default, else 1."""
    import uuid

    from metadata.ids import format_uuid

    async def work(c: ControllerClient) -> tuple[Any, int]:
        resp = await c.describe_topics(pb.DescribeTopicsRequest(names=[topic] if topic else []))
        default = 1
        if under_min_isr_partitions or at_min_isr_partitions:
            cluster = await c.describe_configs(pb.DescribeConfigsRequest(resources=[
                pb.AlterConfigsResource(resource_type=pb.BROKER, resource_name="")]))
            default = int(next((e.value for r in cluster.resources for e in r.configs
                                if e.name == "min.insync.replicas" and not e.is_default), "1"))
        return resp, default

    resp, min_isr_default = with_client(*obj, work)
    partition_filters = (under_replicated_partitions, unavailable_partitions, under_min_isr_partitions,
                         at_min_isr_partitions)
    for t in resp.topics:
        check_error(t.error_code, t.error_message, f"topic {t.name}")
        if topics_with_overrides and not t.configs:
            continue
        parts = list(t.partitions)
        min_isr = int(t.configs.get("min.insync.replicas", min_isr_default))
        if under_replicated_partitions:
            parts = [p for p in parts if len(p.isr) < len(p.replicas)]
        if unavailable_partitions:
            parts = [p for p in parts if p.leader < 0]
        if under_min_isr_partitions:
            parts = [p for p in parts if len(p.isr) < min_isr]
        if at_min_isr_partitions:
            parts = [p for p in parts if len(p.isr) == min_isr]
        if not any(partition_filters):
            rf = len(t.partitions[0].replicas) if t.partitions else 0
            cfg = ",".join(f"{k}={v}" for k, v in sorted(t.configs.items()))
            click.echo(f"Topic: {t.name}\tTopicId: {format_uuid(uuid.UUID(bytes=t.topic_id))}\t"
                       f"PartitionCount: {len(t.partitions)}\tReplicationFactor: {rf}\tConfigs: {cfg}")
        if topics_with_overrides:
            continue
        for p in parts:
            offline = f"\tOffline: {_ids(p.offline_replicas)}" if p.offline_replicas else ""
            click.echo(f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}"
                       f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}\tLeaderEpoch: {p.leader_epoch}{offline}")


@topics.command("delete")
@click.option("--topic", required=True)
@click.pass_obj
def topics_delete(obj: tuple[str, float], topic: str) -> None:
    resp = with_client(*obj, lambda c: c.delete_topics(pb.DeleteTopicsRequest(names=[topic])))
    r = resp.topics[0]
    check_error(r.error_code, r.error_message, "")
    click.echo(f"Deleted topic {topic}.")


@topics.command("alter")
@click.option("--topic", required=True)
@click.option("--partitions", type=int, required=True, help="the new partition count (it only grows)")
@click.option("--replica-assignment", help="broker lists for the new partitions: 1:2:3,2:3:1")
@click.pass_obj
def topics_alter(obj: tuple[str, float], topic: str, partitions: int, replica_assignment: str | None) -> None:
    t = pb.CreatePartitionsRequest.Topic(name=topic, count=partitions)
    if replica_assignment:
        t.assignments.extend(pb.ReplicaAssignment(replicas=r) for r in _parse_assignment(replica_assignment))
    resp = with_client(*obj, lambda c: c.create_partitions(pb.CreatePartitionsRequest(topics=[t])))
    r = resp.topics[0]
    check_error(r.error_code, r.error_message, "")
    click.echo(f"Topic {topic} now has {partitions} partitions.")
