"""Replica placement: Kafka's rack-aware round robin, plus balancing against current load."""
from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from metadata import records as R
from metadata.delta import MetadataDelta
from common.errors import ErrorCode, KafkaError
from metadata.image import MetadataImage
from metadata.placement import (BrokerLoad, UsableBroker, place_replicas, rack_alternated,
                                validate_assignment)

KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def brokers(racks: dict[int, str | None]) -> list[UsableBroker]:
    return [UsableBroker(b, r) for b, r in racks.items()]


def test_matches_kafkas_rack_aware_assignment() -> None:
    # AdminUtilsTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers
    assert rack_alternated(brokers(KAFKA_RACKS)) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated(brokers({b: r for b, r in KAFKA_RACKS.items() if b != 5})) == [
        0, 3, 1, 4, 2]
    assert place_replicas(brokers(KAFKA_RACKS), 7, 3, start=0) == [
        (0, 3, 1), (3, 1, 5), (1, 5, 4), (5, 4, 2), (4, 2, 0), (2, 0, 3), (0, 4, 2)]


def test_matches_kafkas_rack_unaware_assignment() -> None:
    # Kafka's documented example: 5 brokers, 10 partitions, RF 3, first replica at broker 0.
    got = place_replicas(brokers({b: None for b in range(5)}), 10, 3, start=0)
    assert [p[0] for p in got] == [0, 1, 2, 3, 4] * 2
    assert got[:5] == [(0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 0), (4, 0, 1)]
    assert got[5:] == [(0, 2, 3), (1, 3, 4), (2, 4, 0), (3, 0, 1), (4, 1, 2)]  # shifted once


def random_cluster(rng: random.Random) -> list[UsableBroker]:
    n = rng.randint(1, 12)
    racks = rng.choice([[None], ["a", "b"], ["a", "b", "c"], ["a", None], ["x", "y", "z", "w"]])
    ids = rng.sample(range(100), n)
    return [UsableBroker(b, rng.choice(racks)) for b in ids]


def test_replicas_are_distinct_and_spread_over_racks() -> None:
    rng = random.Random(7)
    for _ in range(300):
        cluster = random_cluster(rng)
        rf = rng.randint(1, len(cluster))
        parts = rng.randint(1, 40)
        got = place_replicas(cluster, parts, rf, start=rng.randrange(50))
        rack_of = {b.id: b.rack for b in cluster}
        racks = len(set(rack_of.values()))
        assert len(got) == parts
        for replicas in got:
            assert len(replicas) == rf and len(set(replicas)) == rf
            assert set(replicas) <= set(rack_of)
            assert len({rack_of[b] for b in replicas}) == min(rf, racks), (cluster, got)


def test_leaders_and_replicas_are_balanced() -> None:
    for racks in ({b: None for b in range(6)}, KAFKA_RACKS,
                  {b: f"r{b % 3}" for b in range(9)}):
        n = len(racks)
        for start in range(n):
            got = place_replicas(brokers(racks), 4 * n, 3, start=start)
            leaders = Counter(p[0] for p in got)
            assert set(leaders.values()) == {4}
            assert set(Counter(b for p in got for b in p).values()) == {12}
    got = place_replicas(brokers({b: None for b in range(4)}), 6, 2, start=3)
    assert sorted(Counter(p[0] for p in got).values()) == [1, 1, 2, 2]  # never 2 apart


def test_leaders_go_where_there_are_fewest() -> None:
    cluster = brokers({1: None, 2: None, 3: None})
    load = BrokerLoad(leaders={1: 5, 2: 1}, replicas={1: 5, 2: 5, 3: 5})
    got = place_replicas(cluster, 6, 2, start=0, load=load)
    # Least loaded first, round-robin among equals; broker 1 already leads the most.
    assert [p[0] for p in got] == [3, 2, 3, 2, 3, 3]
    total = Counter({1: 5, 2: 1}) + Counter(p[0] for p in got)
    assert total == {1: 5, 2: 3, 3: 4}


def test_replica_counts_order_brokers_within_a_rack() -> None:
    cluster = brokers({1: "a", 2: "a", 3: "b", 4: "b"})
    assert rack_alternated(cluster) == [1, 3, 2, 4]
    assert rack_alternated(cluster, {1: 10, 3: 10}) == [2, 4, 1, 3]
    light = place_replicas(cluster, 1, 2, load=BrokerLoad({}, {1: 10, 3: 10}))
    assert light == [(2, 4)]


def test_placement_is_deterministic() -> None:
    cluster = brokers({b: f"r{b % 4}" for b in range(10)})
    shuffled = cluster[::-1]
    a = place_replicas(cluster, 25, 3, start=4)
    assert place_replicas(cluster, 25, 3, start=4) == a
    assert place_replicas(shuffled, 25, 3, start=4) == a  # broker order does not matter
    assert place_replicas(cluster, 25, 3, start=5) != a


def test_mixed_racks_count_no_rack_as_a_rack() -> None:
    cluster = brokers({1: None, 2: None, 3: "a", 4: "b"})
    assert rack_alternated(cluster) == [1, 3, 4, 2]
    for replicas in place_replicas(cluster, 8, 3):
        assert len({{1: None, 2: None, 3: "a", 4: "b"}[b] for b in replicas}) == 3


@pytest.mark.parametrize("parts, rf, n, code, message", [
    (0, 1, 3, ErrorCode.INVALID_PARTITIONS, "invalid non-positive value (0)"),
    (-2, 1, 3, ErrorCode.INVALID_PARTITIONS, "(-2)"),
    (3, 0, 3, ErrorCode.INVALID_REPLICATION_FACTOR, "must be larger than 0, got 0"),
    (3, 4, 3, ErrorCode.INVALID_REPLICATION_FACTOR, "partition 4 time(s): only 3 broker(s)"),
    (3, 1, 0, ErrorCode.INVALID_REPLICATION_FACTOR, "only 0 broker(s)"),
])
def test_placement_errors_carry_kafka_codes(parts: int, rf: int, n: int, code: ErrorCode,
                                            message: str) -> None:
    with pytest.raises(KafkaError) as e:
        place_replicas(brokers({b: None for b in range(n)}), parts, rf)
    assert e.value.code == code and message in e.value.message
    assert (ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_REPLICATION_FACTOR) == (37, 38)


def test_explicit_assignment_is_validated() -> None:
    known = {1, 2, 3}
    assert validate_assignment({0: [1, 2], 1: [2, 3], 2: [3, 1]}, known) == 2
    assert validate_assignment({3: [1], 4: [2]}, known, first_partition=3,
                               replication_factor=1) == 1
    cases = [
        ({}, {}, "is empty"),
        ({0: [1], 2: [2]}, {}, "consecutive 0-based integer sequence, got [0, 2]"),
        ({1: [1], 2: [2]}, {}, "consecutive 0-based"),
        ({0: [1]}, {"first_partition": 3}, "consecutive 3-based"),
        ({0: [1, 2, 1]}, {}, "includes the broker 1 more than once for partition 0"),
        ({0: [1], 1: [4]}, {}, "includes broker 4 for partition 1, but no broker with that id"),
        ({0: [1, 2], 1: [3]}, {}, "partition 1 has 1, expected 2"),
        ({0: [1, 2]}, {"replication_factor": 3}, "partition 0 has 2, expected 3"),
        ({0: []}, {}, "empty replica list for partition 0"),
    ]
    for assignment, kw, message in cases:
        with pytest.raises(KafkaError) as e:
            validate_assignment(assignment, known, **kw)
        assert e.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT == 39
        assert message in e.value.message, e.value.message


def test_broker_load_of_an_image() -> None:
    t = uuid.UUID(int=1)
    d = MetadataDelta(MetadataImage.empty())
    d.replay_batch([R.topic("t", t), R.partition(t, 0, [1, 2]), R.partition(t, 1, [2, 3]),
                    R.partition(t, 2, [2, 1], leader=R.NO_LEADER)], 1, 1)
    load = BrokerLoad.of(d.apply())
    assert dict(load.leaders) == {1: 1, 2: 1}
    assert dict(load.replicas) == {1: 2, 2: 3, 3: 1}
