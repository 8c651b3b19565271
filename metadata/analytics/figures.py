"""The figures of a cluster health report, whoever computes them (Spark in ``health``, one
Python process in ``plain``), and the rules both follow, kept here so they cannot drift:

- load is counted per broker (replicas hosted, partitions led) over the registered brokers
  and any broker a replica names; per rack over the racks of registered brokers;
- skew is max/mean (1.0 is perfectly even), with the population standard deviation;
- under-replicated: ISR smaller than the replicas; under-min-ISR: ISR smaller than the
  topic's ``min.insync.replicas`` (else the cluster default, a broker config on resource
  "", else 1); offline: no leader (-1);
- a placement violation is two replicas of a partition on one broker, or, when racks exist,
  on one rack while a rack holding none of its replicas exists (fewer distinct racks than
  min(replicas with a rack, racks in the cluster)).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from metadata.image import ResourceType

MIN_ISR_KEY = "min.insync.replicas"
DEFAULT_MIN_ISR = 1
EXAMPLES = 3

#: Problem name -> its table name in the report's output.
PROBLEMS = {
    "offline": "offline_partitions",
    "under_min_isr": "under_min_isr_partitions",
    "under_replicated": "under_replicated_partitions",
    "placement": "placement_violations",
}


@dataclass(frozen=True, slots=True)
class Spread:
    """How evenly a count (replicas, leaders) is spread over brokers or racks."""

    members: int
    total: int
    mean: float
    max: int
    busiest: str  # the member holding the max (the smallest such id)
    stddev: float

    @property
    def skew(self) -> float | None:
        """max/mean: 1.0 is perfectly even; None when there is nothing to spread."""
        return round(self.max / self.mean, 4) if self.mean else None


def spread(counts: Mapping[Any, int]) -> Spread:
    """The spread of ``counts`` (member -> count; members with 0 included)."""
    if not counts:
        return Spread(0, 0, 0.0, 0, "", 0.0)
    n = len(counts)
    total = sum(counts.values())
    mean = total / n
    top = max(counts.values())
    busiest = min(k for k, v in counts.items() if v == top)
    stddev = math.sqrt(sum((v - mean) ** 2 for v in counts.values()) / n)
    return Spread(n, total, round(mean, 4), top, str(busiest), round(stddev, 4))


def rack_load(brokers: Iterable[tuple[str | None, int, int]]) -> dict[str, tuple[int, int, int]]:
    """(brokers, replicas, leaders) per rack from (rack, replicas, leaders) per broker;
    brokers without a rack (or not registered) count in no rack."""
    out: dict[str, tuple[int, int, int]] = {}
    for rack, replicas, leaders in brokers:
        if rack is not None:
            n, r, lead = out.get(rack, (0, 0, 0))
            out[rack] = (n + 1, r + replicas, lead + leaders)
    return out


@dataclass(frozen=True, slots=True)
class Problem:
    count: int
    examples: tuple[str, ...]  # the first few, by topic and partition


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    offset: int
    topics: int
    partitions: int


@dataclass(frozen=True, slots=True)
class Figures:
    source: str
    offset: int
    topics: int
    partitions: int
    replicas: int
    brokers: int         # registered
    fenced_brokers: int
    racks: int
    replicas_per_broker: Spread
    leaders_per_broker: Spread
    replicas_per_rack: Spread | None
    leaders_per_rack: Spread | None
    offline: Problem
    under_min_isr: Problem
    under_replicated: Problem
    placement: Problem
    history: tuple[HistoryPoint, ...]

    def problems(self) -> dict[str, Problem]:
        return {name: getattr(self, name) for name in PROBLEMS}

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("replicas_per_broker", "leaders_per_broker", "replicas_per_rack",
                     "leaders_per_rack"):
            s = getattr(self, name)
            if s is not None:
                out[name]["skew"] = s.skew
        return out


def differences(a: Figures, b: Figures) -> list[str]:
    """Where two computations of the figures disagree (``source`` aside)."""
    return [f"{f.name}: {getattr(a, f.name)!r} != {getattr(b, f.name)!r}"
            for f in fields(Figures)
            if f.name != "source" and getattr(a, f.name) != getattr(b, f.name)]


def min_isr_of(value: str | None) -> int | None:
    """A ``min.insync.replicas`` value as a number; None if it is not one."""
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def min_isr_settings(configs: Iterable[tuple[int, str, str, str]]) -> tuple[dict[str, int], int]:
    """Per-topic ``min.insync.replicas`` and the cluster default, from (resource type id,
    resource name, key, value) of config entries; values that are not numbers are ignored."""
    per_topic: dict[str, int] = {}
    default = DEFAULT_MIN_ISR
    for rtype, name, key, value in configs:
        number = min_isr_of(value) if key == MIN_ISR_KEY else None
        if number is None:
            continue
        if rtype == ResourceType.TOPIC:
            per_topic[name] = number
        elif rtype == ResourceType.BROKER and name == "":
            default = number
    return per_topic, default


def rack_violation(racks: Sequence[str | None], racks_in_cluster: int) -> bool:
    placed = [r for r in racks if r is not None]
    return len(set(placed)) < min(len(placed), racks_in_cluster)


def partition_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def example(problem: str, topic: str, partition: int, replicas: Sequence[int],
            isr: Sequence[int], min_isr: int, racks: Sequence[str | None]) -> str:
    """One line about one partition with ``problem``, the same from Spark and plain."""
    name = partition_name(topic, partition)
    replicas, isr = list(replicas), list(isr)
    if problem == "offline":
        return f"{name}: no leader; replicas {replicas}, isr {isr}"
    if problem == "under_min_isr":
        return f"{name}: isr {isr} < {MIN_ISR_KEY} {min_isr}"
    if problem == "under_replicated":
        return f"{name}: isr {isr} of replicas {replicas}"
    if len(set(replicas)) < len(replicas):
        return f"{name}: a broker holds two replicas: {replicas}"
    return f"{name}: replicas {replicas} on racks {list(racks)}"
