"""Replica placement for new partitions (CreateTopics, CreatePartitions), after Kafka's
rack-aware assignment (``AdminUtils.assignReplicasToBrokers``).

Brokers are arranged so that racks alternate (rack a's first broker, rack b's first, ...,
then each rack's second), and partitions walk that list round-robin: the first replica (the
preferred leader) advances one broker per partition, and the followers sit at a shifted
distance from it that grows every full turn, so that the replicas of one broker's partitions
spread over many others and no rack holds two replicas of a partition while another holds
none. With no load given and ``start`` fixed, the result is exactly Kafka's.

The current load is what this adds: each leader goes to the broker with the fewest leaders
so far (ties broken by the round-robin turn), and brokers with fewer replicas come first
within their rack, so a cluster evens out across many CreateTopics. Placement is
deterministic in its inputs; the controller passes ``start`` (Kafka draws it at random).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from common.errors import ErrorCode, KafkaError

from .image import MetadataImage
from .records import NO_LEADER

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker that may take new replicas (registered and unfenced). Brokers without a rack
    count as one more rack of their own."""

    id: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """Partitions led by, and replicas hosted on, each broker."""

    leaders: Mapping[int, int]
    replicas: Mapping[int, int]

    @classmethod
    def of(cls, image: MetadataImage) -> BrokerLoad:
        """Count over every partition of the image (linear in partitions)."""
        leaders: Counter[int] = Counter()
        replicas: Counter[int] = Counter()
        for topic in image.topics_by_id.values():
            for p in topic.partitions.values():
                if p.leader != NO_LEADER:
                    leaders[p.leader] += 1
                replicas.update(p.replicas)
        return cls(leaders, replicas)


def rack_alternated(brokers: Sequence[UsableBroker],
                    replica_counts: Mapping[int, int] | None = None) -> list[int]:
    """Broker ids with racks alternating: racks in name order (no rack first), brokers
    within a rack by fewest replicas, then id. E.g. racks a: 0 1 2, b: 3 4 5, c: 6 7 8 give
    0 3 6 1 4 7 2 5 8."""
    counts = replica_counts or {}
    by_rack: dict[str | None, list[int]] = {}
    for b in brokers:
        by_rack.setdefault(b.rack, []).append(b.id)
    racks = sorted(by_rack, key=lambda r: (r is not None, r or ""))
    columns = [sorted(by_rack[r], key=lambda i: (counts.get(i, 0), i)) for r in racks]
    return [col[row] for row in range(max(map(len, columns), default=0))
            for col in columns if row < len(col)]


def place_replicas(brokers: Sequence[UsableBroker], partitions: int, replication_factor: int,
                   *, start: int = 0, load: BrokerLoad | None = None) -> list[tuple[int, ...]]:
    """Replicas for partitions 0..partitions-1, the preferred leader first.

    Every partition gets ``replication_factor`` distinct brokers, on as many racks as
    possible. Raises ``KafkaError`` with INVALID_PARTITIONS or INVALID_REPLICATION_FACTOR.
    """
    if partitions < 1:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                       f"Number of partitions was set to an invalid non-positive value "
                       f"({partitions}).")
    if replication_factor < 1:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Replication factor must be larger than 0, got {replication_factor}.")
    n = len(brokers)
    if replication_factor > n:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"Unable to replicate the partition {replication_factor} time(s): only "
                       f"{n} broker(s) are registered and unfenced.")
    ids = [b.id for b in brokers]
    if len(set(ids)) != n:
        raise ValueError(f"duplicate broker ids in {sorted(ids)}")
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    load = load or BrokerLoad({}, {})
    rack_of = {b.id: b.rack for b in brokers}
    racks = len(set(rack_of.values()))
    arranged = rack_alternated(brokers, load.replicas)
    leaders = [load.leaders.get(b, 0) for b in arranged]
    result: list[tuple[int, ...]] = []
    for p in range(partitions):
        turn = (start + p) % n
        # Kafka's nextReplicaShift (grows each full turn), times the racks so that a
        # follower's distance from its leader keeps racks alternating.
        shift = (start + p // n) * racks
        # The least-loaded leader; among equals, the first from this partition's turn.
        least = min(leaders)
        first = next(i for i in (*range(turn, n), *range(turn)) if leaders[i] == least)
        leaders[first] += 1
        leader = arranged[first]
        replicas = [leader]
        used_racks = {rack_of[leader]}
        k = 0
        while len(replicas) < replication_factor:
            b = arranged[(first + 1 + (shift + k) % (n - 1)) % n]
            if b not in replicas and (rack_of[b] not in used_racks or len(used_racks) == racks):
                replicas.append(b)
                used_racks.add(rack_of[b])
            k += 1
        result.append(tuple(replicas))
    return result


def validate_assignment(assignment: Mapping[int, Sequence[int]], brokers: Collection[int], *,
                        first_partition: int = 0,
                        replication_factor: int | None = None) -> int:
    """Check an explicit assignment (partition id -> replicas) and return its replication
    factor. Partition ids must run first_partition, first_partition+1, ... without gaps;
    every broker must be in ``brokers`` (registered), appear once per partition, and every
    partition have the same number of replicas (``replication_factor`` if given, as for
    CreatePartitions on an existing topic). Raises ``KafkaError`` INVALID_REPLICA_ASSIGNMENT."""
    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)

    if not assignment:
        raise invalid("The manual partition assignment is empty.")
    ids = sorted(assignment)
    if ids != list(range(first_partition, first_partition + len(ids))):
        raise invalid(f"Partitions should be a consecutive {first_partition}-based integer "
                      f"sequence, got {ids}.")
    known = set(brokers)
    expected = replication_factor
    for pid in ids:
        replicas = list(assignment[pid])
        if not replicas:
            raise invalid(f"The manual partition assignment includes an empty replica list "
                          f"for partition {pid}.")
        seen: set[int] = set()
        for b in replicas:
            if b in seen:
                raise invalid(f"The manual partition assignment includes the broker {b} more "
                              f"than once for partition {pid}.")
            seen.add(b)
            if b not in known:
                raise invalid(f"The manual partition assignment includes broker {b} for "
                              f"partition {pid}, but no broker with that id is registered.")
        if expected is None:
            expected = len(replicas)
        elif len(replicas) != expected:
            raise invalid(f"All partitions in the manual partition assignment must have the "
                          f"same number of replicas: partition {pid} has {len(replicas)}, "
                          f"expected {expected}.")
    assert expected is not None
    return expected


def balanced_moves(current: Mapping[K, Sequence[int]], brokers: Sequence[UsableBroker]) -> dict[K, tuple[int, ...]]:
    """A reassignment plan over ``brokers`` that moves few replicas (the planner behind
    ``kraft reassign-partitions --generate``). Each partition keeps its replication factor.
    Replicas on brokers not listed move to the least-loaded listed broker the partition does
    not use, on a rack it does not use yet when there is one; then, while two brokers' replica
    counts differ by more than one, one replica moves from the fullest to the emptiest; last,
    preferred leaders (first replicas) are evened out the same way by swapping order, which
    moves no data. Draining a broker is leaving it out of ``brokers``; filling a new one is
    listing it. Raises KafkaError INVALID_REPLICATION_FACTOR when a partition has more replicas
    than there are brokers listed."""
    rack_of = {b.id: b.rack for b in brokers}
    too_wide = [k for k, r in current.items() if len(r) > len(rack_of)]
    if too_wide:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                       f"{len(too_wide)} partition(s) have more replicas than the {len(rack_of)} broker(s) listed")
    plan = {k: list(r) for k, r in current.items()}
    load: Counter[int] = Counter({b: 0 for b in rack_of})
    load.update(r for replicas in plan.values() for r in replicas if r in rack_of)

    def fits(replicas: list[int], leaving: int, b: int) -> tuple[bool, int, int]:
        """Sort key for ``b`` taking ``leaving``'s place: a new rack first, then the least load."""
        return (rack_of[b] in {rack_of[r] for r in replicas if r != leaving and r in rack_of}, load[b], b)

    for replicas in plan.values():
        for i, r in enumerate(replicas):
            if r not in rack_of:
                best = min((b for b in rack_of if b not in replicas), key=lambda b: fits(replicas, r, b))
                replicas[i] = best
                load[best] += 1
    def move_replica(hi: int, lo: int) -> Callable[[], None] | None:
        options = [replicas for replicas in plan.values() if hi in replicas and lo not in replicas]
        if not options:
            return None
        chosen = min(options, key=lambda replicas: fits(replicas, hi, lo)[0])
        return lambda: chosen.__setitem__(chosen.index(hi), lo)

    def swap_leader(hi: int, lo: int) -> Callable[[], None] | None:
        chosen = next((replicas for replicas in plan.values() if replicas[0] == hi and lo in replicas), None)
        if chosen is None:
            return None
        j = chosen.index(lo)
        return lambda: chosen.__setitem__(slice(None), [lo, *chosen[1:j], hi, *chosen[j + 1:]])

    _even_out(load, move_replica)
    leads: Counter[int] = Counter({b: 0 for b in rack_of})
    leads.update(replicas[0] for replicas in plan.values())
    _even_out(leads, swap_leader)
    return {k: tuple(r) for k, r in plan.items()}


def _even_out(counts: Counter[int], change: Callable[[int, int], Callable[[], None] | None]) -> None:
    """While the fullest member holds more than one over another, carry out the change that
    moves one unit from the fullest to the emptiest member it can go to (``change`` returns
    None when there is no such change between the two)."""
    while counts:
        hi = max(counts, key=lambda b: (counts[b], -b))
        for lo in sorted(counts, key=lambda b: (counts[b], b)):
            if counts[hi] - counts[lo] <= 1:
                return
            apply = change(hi, lo)
            if apply is not None:
                apply()
                counts[hi] -= 1
                counts[lo] += 1
                break
        else:
            return
