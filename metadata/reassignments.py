"""Partition reassignments (Kafka's AlterPartitionReassignments and ListPartitionReassignments,
KIP-455), as the records that start and cancel them.

A reassignment starts with one PartitionChange record: ``replicas`` becomes the target replicas
followed by those leaving, ``adding``/``removing`` say which are which. The added replicas'
brokers see themselves in ``replicas`` and start following; the leader adds them to the ISR
once they catch up, and that AlterPartition completes the move in the same record
(``partitions.completed``). Everything lives in the metadata log, so a new active controller
carries on where the old one stopped.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .configs import topic_config
from common.errors import ErrorCode, KafkaError
from .image import ConfigResource, MetadataImage, PartitionRegistration, ResourceType, TopicImage
from .partitions import PartitionOutcome as Outcome, change, completed, live_brokers
from .records import NO_LEADER, MetadataRecord


@dataclass(frozen=True, slots=True)
class Reassignment:
    """One entry of a plan: ``replicas`` None cancels the reassignment in progress."""

    topic: str
    partition: int
    replicas: tuple[int, ...] | None


def alter(image: MetadataImage, plan: Sequence[Reassignment]) -> tuple[list[MetadataRecord], list[Outcome]]:
    """Start or cancel each reassignment of the plan. All or nothing: when one entry is invalid
    no record is written, and the valid entries say they were not started."""
    live = live_brokers(image)
    records: list[MetadataRecord] = []
    outcomes: list[Outcome] = []
    seen: set[tuple[str, int]] = set()
    for r in plan:
        try:
            if (r.topic, r.partition) in seen:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"{r.topic}-{r.partition} appears twice in the plan")
            seen.add((r.topic, r.partition))
            t = image.topics_by_name.get(r.topic)
            p = t.partitions.get(r.partition) if t is not None else None
            if t is None or p is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {r.topic}-{r.partition} does not exist")
            if r.replicas is None:
                rec = _cancel(t, r.partition, p, live)
            else:
                rec = _start(image, t, r.partition, p, r.replicas, live)
            if rec is not None:
                records.append(rec)
            outcomes.append(Outcome(r.topic, r.partition, ErrorCode.NONE))
        except KafkaError as e:
            outcomes.append(Outcome(r.topic, r.partition, e.code, e.message))
    if any(o.code != ErrorCode.NONE for o in outcomes):
        records = []
        outcomes = [o if o.code != ErrorCode.NONE else
                    Outcome(o.topic, o.partition, ErrorCode.INVALID_REQUEST,
                            "not started: other entries of the plan are invalid, and a plan is all or nothing")
                    for o in outcomes]
    return records, outcomes


def _original(p: PartitionRegistration) -> tuple[int, ...]:
    """The replicas before the reassignment in progress (Kafka's PartitionReassignmentRevert)."""
    return tuple(r for r in p.replicas if r not in p.adding)


def _start(image: MetadataImage, t: TopicImage, pid: int, p: PartitionRegistration, target: tuple[int, ...],
           live: set[int]) -> MetadataRecord | None:
    name = f"{t.name}-{pid}"
    if not target:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"the target replicas of {name} are empty")
    if len(set(target)) != len(target):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"the target replicas {list(target)} of {name} "
                                                             f"repeat a broker")
    unknown = [b for b in target if b not in image.brokers]
    if unknown:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"the target replicas of {name} name brokers "
                                                             f"{unknown}, which are not registered")
    configs = dict(image.config(ConfigResource(ResourceType.TOPIC, t.name)))
    defaults = dict(image.config(ConfigResource(ResourceType.BROKER, "")))
    min_isr = int(topic_config(configs, "min.insync.replicas", defaults))
    if len(target) < min_isr:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"{len(target)} target replicas for {name} are fewer than its min.insync.replicas "
                       f"({min_isr}): acks=all writes would fail")
    original = _original(p)
    removing = tuple(r for r in original if r not in target)
    adding = tuple(r for r in target if r not in original)
    replicas = target + removing
    isr = tuple(r for r in replicas if r in p.isr)
    moved = PartitionRegistration(replicas, isr, p.leader, p.leader_epoch, p.partition_epoch, adding, removing)
    leader = p.leader if p.leader in replicas else next((r for r in isr if r in live), NO_LEADER)
    done = completed(moved, isr, live)
    if done is not None:
        replicas, isr, leader = done
        adding = removing = ()
    return change(t, pid, p, leader, isr, replicas, adding, removing)


def _cancel(t: TopicImage, pid: int, p: PartitionRegistration, live: set[int]) -> MetadataRecord | None:
    """Back to the original replicas; those being added leave."""
    if not p.reassigning:
        raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {t.name}-{pid} is in progress")
    original = _original(p)
    isr = tuple(r for r in original if r in p.isr)
    if not isr:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                       f"cannot cancel the reassignment of {t.name}-{pid}: none of its original replicas "
                       f"{list(original)} is in sync; let it complete, or reassign it again")
    leader = p.leader if p.leader in original else next((r for r in isr if r in live), NO_LEADER)
    return change(t, pid, p, leader, isr, original, (), ())


def ongoing(image: MetadataImage, topics: dict[str, list[int]] | None
            ) -> list[tuple[str, int, PartitionRegistration]]:
    """The reassignments in progress, of every partition or of those named (an empty list:
    every partition of the topic)."""
    out = []
    for t in sorted(image.topics_by_id.values(), key=lambda t: t.name):
        if topics is not None and t.name not in topics:
            continue
        wanted = topics.get(t.name) if topics is not None else None
        for pid, p in sorted(t.partitions.items()):
            if p.reassigning and (not wanted or pid in wanted):
                out.append((t.name, pid, p))
    return out


# -- the plan file: Kafka's reassignment JSON, written by `kraft reassign-partitions --generate`
# -- and the health report, read by --execute/--verify/--cancel --------------------------------

Plan = dict[tuple[str, int], tuple[int, ...]]


class PlanError(Exception):
    """A plan file or option the tool refuses before asking the cluster anything."""


def load_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise PlanError(f"cannot read {what} {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise PlanError(f"{what} {path} is not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


#: (topic, partition, broker) -> the log dir (an absolute path of its ``log.dirs``) the broker
#: keeps that replica in: a plan's ``log_dirs`` other than "any".
LogDirPlan = dict[tuple[str, int, int], str]


def read_plan(path: str) -> Plan:
    """A reassignment JSON file's replicas (its ``log_dirs``: ``read_plan_with_log_dirs``)."""
    return read_plan_with_log_dirs(path)[0]


def read_plan_with_log_dirs(path: str) -> tuple[Plan, LogDirPlan]:
    """A reassignment JSON file: each partition's replicas and, where ``log_dirs`` names one
    (one entry per replica, "any" or an absolute path), the log dir of a replica."""
    doc = load_json(path, "--reassignment-json-file")
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise PlanError(f'{path}: expected {{"version": 1, "partitions": [{{"topic": ..., "partition": ..., '
                        f'"replicas": [...]}}, ...]}}')
    plan: Plan = {}
    log_dirs: LogDirPlan = {}
    for i, e in enumerate(entries):
        ok = (isinstance(e, dict) and isinstance(e.get("topic"), str) and type(e.get("partition")) is int
              and isinstance(e.get("replicas"), list) and all(type(r) is int for r in e["replicas"]))
        if not ok:
            raise PlanError(f"{path}: entry {i} needs a topic (string), a partition (integer) and replicas "
                            f"(a list of broker ids)")
        dirs = e.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or len(dirs) != len(e["replicas"]) or not all(
                isinstance(d, str) and (d == "any" or d.startswith("/")) for d in dirs)):
            raise PlanError(f"{path}: entry {i}: log_dirs needs one entry per replica, each \"any\" or an "
                            f"absolute path")
        key = (e["topic"], e["partition"])
        if key in plan:
            raise PlanError(f"{path}: partition {key[0]}-{key[1]} appears more than once")
        plan[key] = tuple(e["replicas"])
        for broker, d in zip(e["replicas"], dirs or (), strict=False):
            if d != "any":
                log_dirs[(*key, broker)] = d
    return plan, log_dirs


def plan_json(plan: Plan) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())]}, separators=(",", ":"))
