"""``kraft reassign-partitions`` (kafka-reassign-partitions.sh): generate a plan, execute it
with an optional replication throttle, verify it (with the bytes and offsets each moving
replica still has to copy), cancel it, list what is moving. Plans are Kafka's JSON:
``{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]}``, with
``"log_dirs"`` (one per replica, "any" or an absolute path) moving replicas between a broker's
log dirs as Kafka's tool does (AlterReplicaLogDirs at each broker, ``move_log_dirs``).
See docs/operations.md, "Moving partitions"."""
from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from protos import broker_pb2 as bpb
from protos import controller_pb2 as pb

from metadata.client import ControllerClient
from common.errors import ErrorCode, KafkaError
from metadata.placement import UsableBroker, balanced_moves
from metadata.reassignments import LogDirPlan, Plan, PlanError, load_json, plan_json

if TYPE_CHECKING:
    from clients.admin import Admin

THROTTLES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def read_topics_to_move(path: str) -> list[str]:
    """``{"version": 1, "topics": [{"topic": "a"}, ...]}``."""
    doc = load_json(path, "--topics-to-move-json-file")
    entries = doc.get("topics") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries or not all(
            isinstance(e, dict) and isinstance(e.get("topic"), str) and e["topic"] for e in entries):
        raise PlanError(f'{path}: expected {{"version": 1, "topics": [{{"topic": "NAME"}}, ...]}}')
    return list(dict.fromkeys(e["topic"] for e in entries))


def parse_broker_list(text: str) -> list[int]:
    try:
        ids = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise PlanError(f"--broker-list {text!r}: expected broker ids like 1,2,3") from None
    if not ids or len(set(ids)) != len(ids):
        raise PlanError(f"--broker-list {text!r}: expected distinct broker ids like 1,2,3")
    return ids


def _check(code: int, message: str, what: str) -> None:
    c = ErrorCode.of(code)
    if c != ErrorCode.NONE:
        raise KafkaError(c, message or what)


async def current_assignment(client: ControllerClient, topics: Iterable[str]) -> Plan:
    r = await client.describe_topics(pb.DescribeTopicsRequest(names=sorted(set(topics))))
    out: Plan = {}
    for t in r.topics:
        _check(t.error_code, t.error_message, f"topic {t.name}")
        for p in t.partitions:
            out[(t.name, p.partition)] = tuple(p.replicas)
    return out


async def generate(client: ControllerClient, topics: list[str], broker_ids: list[int],
                   rack_aware: bool) -> tuple[Plan, Plan]:
    """(current, proposed) for every partition of ``topics`` over ``broker_ids``."""
    cluster = await client.describe_cluster(pb.DescribeClusterRequest())
    racks = {b.id: b.rack or None for b in cluster.brokers}
    unknown = [b for b in broker_ids if b not in racks]
    if unknown:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"--broker-list names brokers {unknown}, which are not registered")
    current = await current_assignment(client, topics)
    brokers = [UsableBroker(b, racks[b] if rack_aware else None) for b in broker_ids]
    return current, balanced_moves(current, brokers)


async def set_throttle(client: ControllerClient, brokers: Iterable[int], rate: int | None) -> None:
    """Set (or with None remove) both replication throttles on each broker."""
    op = pb.AlterableConfig.SET if rate is not None else pb.AlterableConfig.DELETE
    req = pb.IncrementalAlterConfigsRequest(resources=[
        pb.AlterConfigsResource(resource_type=pb.BROKER, resource_name=str(b), configs=[
            pb.AlterableConfig(name=k, op=op, value=str(rate) if rate is not None else "") for k in THROTTLES])
        for b in sorted(set(brokers))])
    r = await client.incremental_alter_configs(req)
    for res in r.resources:
        _check(res.error_code, res.error_message, f"broker {res.resource_name}")


async def execute(client: ControllerClient, plan: Plan, throttle: int | None) -> list[str]:
    """Start the plan; raise KafkaError (nothing started) when the controller refuses any
    entry, with one line per refused partition."""
    current = await current_assignment(client, {t for t, _ in plan})
    missing = sorted(k for k in plan if k not in current)
    if missing:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              f"the plan names partitions that do not exist: "
                              f"{', '.join(f'{t}-{p}' for t, p in missing)}; nothing was moved")
    involved = {b for k in plan for b in plan[k] + current[k]}
    if throttle is not None:
        await set_throttle(client, involved, throttle)
    req = pb.AlterPartitionReassignmentsRequest(reassignments=[
        pb.AlterPartitionReassignmentsRequest.Reassignment(topic=t, partition=p, replicas=pb.BrokerIdList(ids=r))
        for (t, p), r in sorted(plan.items())])
    r = await client.alter_partition_reassignments(req)
    failed = [x for x in r.results if x.error_code != ErrorCode.NONE]
    if failed:
        if throttle is not None:
            await set_throttle(client, involved, None)
        refused = [x for x in failed if x.error_code != ErrorCode.INVALID_REQUEST or "all or nothing" not in
                   x.error_message]
        raise KafkaError(ErrorCode.of((refused or failed)[0].error_code), "; ".join(
            f"{x.topic}-{x.partition}: {ErrorCode.of(x.error_code).name}: {x.error_message}"
            for x in refused or failed) + "; nothing was moved")
    lines = ["Current partition replica assignment", "", plan_json({k: current[k] for k in plan}), "",
             "Save this to use as the --reassignment-json-file option during rollback"]
    if throttle is not None:
        lines += ["Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
                  "throttle is removed.", f"The inter-broker throttle limit was set to {throttle} B/s"]
    lines.append("Successfully started partition reassignments for " +
                 ",".join(f"{t}-{p}" for t, p in sorted(plan)))
    return lines


@dataclass(frozen=True, slots=True)
class Progress:
    """What one moving replica still has to copy from its leader."""

    broker: int
    offsets_behind: int
    bytes_behind: int


def progress(describes: dict[int, bpb.DescribeBrokerResponse], topic: str, partition: int, leader: int,
             adding: Iterable[int]) -> list[Progress]:
    """From the brokers' own views: the leader's log end and size against each adding replica's."""
    def status(broker: int) -> bpb.ReplicaStatus | None:
        d = describes.get(broker)
        return next((s for s in d.replicas if s.topic == topic and s.partition == partition), None) if d else None
    lead = status(leader)
    out = []
    for b in adding:
        mine = status(b)
        if lead is not None:
            end, size = (mine.log_end_offset, mine.size_bytes) if mine is not None else (0, 0)
            out.append(Progress(b, max(0, lead.log_end_offset - end), max(0, lead.size_bytes - size)))
    return out


async def ongoing(client: ControllerClient, keys: Iterable[tuple[str, int]] | None
                  ) -> dict[tuple[str, int], pb.OngoingReassignment]:
    req = pb.ListPartitionReassignmentsRequest()
    if keys is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in keys:
            by_topic.setdefault(t, []).append(p)
        for t, ps in sorted(by_topic.items()):
            req.topics.add(name=t, partitions=sorted(ps))
    r = await client.list_partition_reassignments(req)
    return {(o.topic, o.partition): o for o in r.reassignments}


async def cancel(client: ControllerClient, plan: Plan) -> list[str]:
    moving = await ongoing(client, plan)
    keys = sorted(k for k in plan if k in moving)
    lines = []
    if keys:
        req = pb.AlterPartitionReassignmentsRequest(reassignments=[
            pb.AlterPartitionReassignmentsRequest.Reassignment(topic=t, partition=p) for t, p in keys])
        r = await client.alter_partition_reassignments(req)
        for x in r.results:
            _check(x.error_code, x.error_message, f"{x.topic}-{x.partition}")
        lines.append("Successfully cancelled partition reassignments for " + ",".join(f"{t}-{p}" for t, p in keys))
    else:
        lines.append("None of the plan's partitions is being reassigned")
    return lines


def kib(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


async def verify(client: ControllerClient, plan: Plan, describes: dict[int, bpb.DescribeBrokerResponse] | None,
                 preserve_throttles: bool) -> tuple[list[str], bool]:
    """Kafka's --verify lines, and whether the cluster matches the plan. Once nothing of the plan
    is moving, the throttles are cleared (unless ``preserve_throttles``)."""
    moving = await ongoing(client, plan)
    current = await current_assignment(client, {t for t, _ in plan})
    lines = ["Status of partition reassignment:"]
    matches = True
    for (t, p), target in sorted(plan.items()):
        o = moving.get((t, p))
        if o is not None:
            matches = False
            lines.append(f"Reassignment of partition {t}-{p} is still in progress.")
            for pr in progress(describes or {}, t, p, o.leader, o.adding_replicas):
                lines.append(f"  replica on broker {pr.broker}: {pr.offsets_behind} offsets "
                             f"({kib(pr.bytes_behind)}) behind the leader {o.leader}")
        elif current.get((t, p)) == target:
            lines.append(f"Reassignment of partition {t}-{p} is completed.")
        else:
            matches = False
            lines.append(f"There is no active reassignment of partition {t}-{p}, but replica set is "
                         f"{list(current.get((t, p), ()))} rather than {list(target)}.")
    if not moving and not preserve_throttles:
        cluster = await client.describe_cluster(pb.DescribeClusterRequest())
        brokers = sorted(b.id for b in cluster.brokers)
        await set_throttle(client, brokers, None)
        lines.append(f"Clearing broker-level throttles on brokers {','.join(map(str, brokers))}")
    return lines, matches


def list_lines(moving: dict[tuple[str, int], pb.OngoingReassignment]) -> list[str]:
    if not moving:
        return ["No partition reassignments found."]
    lines = ["Current partition reassignments:"]
    for (t, p), o in sorted(moving.items()):
        lines.append(f"{t}-{p}: replicas: {','.join(map(str, o.replicas))}. adding: "
                     f"{','.join(map(str, o.adding_replicas))}. removing: {','.join(map(str, o.removing_replicas))}.")
    return lines


def _replica(key: tuple[str, int, int]) -> str:
    """Kafka's TopicPartitionReplica: topic-partition-broker."""
    return f"{key[0]}-{key[1]}-{key[2]}"


async def move_log_dirs(admin: Admin, moves: LogDirPlan, timeout_s: float, *, retry: bool = True) -> list[str]:
    """Kafka's executeMoves: AlterReplicaLogDirs at each replica's broker until each move has
    started. A replica the reassignment has not created yet answers REPLICA_NOT_AVAILABLE (its
    broker will create it in that dir) and is asked again (``retry`` False: asked once, before
    the reassignment); any other error raises KafkaError."""
    # before the reassignment, a broker not registered is left to it to refuse
    pending = {k: d for k, d in moves.items() if retry or k[2] in admin.cluster.brokers}
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        for broker in sorted({b for _, _, b in pending}):
            asked = {(t, p): d for (t, p, b), d in pending.items() if b == broker}
            for (t, p), err in (await admin.alter_replica_log_dirs(broker, asked)).items():
                if err is None:
                    pending.pop((t, p, broker), None)
                elif err.code != ErrorCode.REPLICA_NOT_AVAILABLE:
                    raise KafkaError(err.code, f"failed to alter the log dir of {_replica((t, p, broker))} to "
                                               f"{asked[(t, p)]}: {err.message}")
        if not retry:
            return []
        if not pending:
            return ["Successfully started log directory moves for: " + ",".join(map(_replica, sorted(moves)))]
        if asyncio.get_running_loop().time() > deadline:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, "timed out before the log directory moves of "
                             f"{','.join(map(_replica, sorted(pending)))} started (the replicas are not on their "
                             "brokers yet)")
        await asyncio.sleep(0.1)


async def verify_log_dirs(admin: Admin, moves: LogDirPlan) -> tuple[list[str], bool]:
    """Kafka's verifyReplicaMoves lines (from each broker's DescribeLogDirs), and whether every
    replica is in its log dir."""
    where: dict[tuple[str, int, int], tuple[str | None, str | None]] = {}  # (current dir, future dir)
    for broker in sorted({b for _, _, b in moves}):
        r = await admin.describe_log_dirs(broker)
        for d in r.log_dirs:
            for t in d.topics:
                for x in t.partitions:
                    key = (t.name, x.partition, broker)
                    if key in moves:
                        now, future = where.get(key, (None, None))
                        where[key] = (now, d.log_dir) if x.is_future else (d.log_dir, future)
    lines, done = [], True
    for key, target in sorted(moves.items()):
        now, future = where.get(key, (None, None))
        if now == target:
            lines.append(f"Reassignment of replica {_replica(key)} completed successfully.")
            continue
        done = False
        if future == target:
            lines.append(f"Reassignment of replica {_replica(key)} is still in progress.")
        elif now is None:
            lines.append(f"Partition {key[0]}-{key[1]} cannot be found in any live log directory on broker {key[2]}.")
        else:
            lines.append(f"Partition {key[0]}-{key[1]} on broker {key[2]} is not being moved from log dir {now} "
                         f"to {target}.")
    return lines, done
