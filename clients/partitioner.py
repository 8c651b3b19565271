"""Kafka's default partitioning, so that keyed records land on the same partition as with a
Java, librdkafka or Sarama producer (Kafka's BuiltInPartitioner and Utils.murmur2; tests/test_broker_units.py):

1. an explicit partition wins;
2. a key: ``toPositive(murmur2(key)) % numPartitions``, over all partitions, available or not;
3. no key: stick to one partition until a new batch is needed, then move to another one,
   different from the last, among the partitions that have a leader (KIP-480's
   StickyPartitionCache).

A ``Producer(partitioner=...)`` replaces 2 and 3 (Kafka's ``partitioner.class``).
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


class Partitioner(Protocol):
    """Kafka's Partitioner: the partition of a record sent without one. ``key`` and ``value``
    are as given to ``send``, ``key_bytes``/``value_bytes`` serialized; ``cluster`` is the
    producer's ``ClusterView`` (``cluster.partition_count(topic)``, and
    ``cluster.topics[topic].available``: the partitions with a leader). A result outside
    ``[0, partition count)`` fails the send. ``close()``, if it has one, runs when the
    producer closes."""

    def partition(self, topic: str, key: Any, key_bytes: bytes | None, value: Any, value_bytes: bytes | None,
                  cluster: Any) -> int: ...


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2 with seed 0x9747b28c, as a signed int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        j = i * 4
        k = data[j] | (data[j + 1] << 8) | (data[j + 2] << 16) | (data[j + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    tail = n4 * 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not abs: abs(MIN_VALUE) is negative)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """The partition for records without a key, per topic (Kafka's StickyPartitionCache)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng or random.Random()
        self.sticky: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        p = self.sticky.get(topic)
        return p if p is not None else self.next_partition(topic, num_partitions, available, -1)

    def next_partition(self, topic: str, num_partitions: int, available: Sequence[int], prev: int) -> int:
        """A new batch is needed for ``prev``: change to another partition (unless someone
        already did)."""
        old = self.sticky.get(topic)
        if old is not None and old != prev:
            return old
        if len(available) < 1:
            new = self.rng.randrange(num_partitions)
        elif len(available) == 1:
            new = available[0]
        else:
            new = available[self.rng.randrange(len(available))]
            while new == old:
                new = available[self.rng.randrange(len(available))]
        self.sticky[topic] = new
        return new
