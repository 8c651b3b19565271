"""What consumers of one group tell each other through the coordinator: Kafka's
ConsumerProtocol encodings of a subscription and of an assignment (version 0, so that a
Kafka-protocol front end can pass them through), and the assignors the group leader runs:
``range`` (Kafka's default before cooperative rebalancing), ``roundrobin`` and ``sticky``.
"""
from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None  # the sticky assignor keeps the member's last assignment here


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _bytes(b: bytes | None) -> bytes:
    return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return v

    def string(self) -> str:
        n = self.take(">h")
        s = self.data[self.at:self.at + n].decode()
        self.at += n
        return s

    def bytes(self) -> bytes | None:
        n = self.take(">i")
        if n < 0:
            return None
        b = self.data[self.at:self.at + n]
        self.at += n
        return b


def encode_subscription(s: Subscription) -> bytes:
    return (struct.pack(">hi", 0, len(s.topics)) + b"".join(_string(t) for t in s.topics) + _bytes(s.user_data))


def decode_subscription(data: bytes) -> Subscription:
    """ValueError if the bytes are not a subscription."""
    try:
        r = _Reader(data)
        r.take(">h")
        topics = tuple(r.string() for _ in range(r.take(">i")))
        user_data = r.bytes() if r.at < len(data) else None
        return Subscription(topics, user_data)
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not a consumer subscription: {e}") from None


def encode_assignment(partitions: Sequence[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(partitions):
        by_topic.setdefault(t, []).append(p)
    out = [struct.pack(">hi", 0, len(by_topic))]
    for t, ps in by_topic.items():
        out.append(_string(t) + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    out.append(_bytes(None))
    return b"".join(out)


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """ValueError if the bytes are not an assignment (empty bytes: no partitions)."""
    if not data:
        return []
    try:
        r = _Reader(data)
        r.take(">h")
        out: list[TopicPartition] = []
        for _ in range(r.take(">i")):
            t = r.string()
            out.extend((t, r.take(">i")) for _ in range(r.take(">i")))
        return out
    except (struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"not a consumer assignment: {e}") from None


# -- assignors: member id -> subscription, topic -> partition count => member id -> partitions --

Assignment = dict[str, list[TopicPartition]]


def range_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
    """Kafka's RangeAssignor: per topic, its subscribers in member id order take consecutive
    ranges, the first ``n % m`` one partition more."""
    out: Assignment = {m: [] for m in members}
    for topic, n in sorted(partitions.items()):
        subs = sorted(m for m, s in members.items() if topic in s.topics)
        if not subs:
            continue
        share, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = share + (1 if i < extra else 0)
            out[m].extend((topic, p) for p in range(start, start + count))
            start += count
    return out


def roundrobin_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
    """Kafka's RoundRobinAssignor: every partition in (topic, partition) order to the next
    member, in member id order, that subscribes to its topic."""
    out: Assignment = {m: [] for m in members}
    order = sorted(members)
    if not order:
        return out
    i = 0
    for topic, n in sorted(partitions.items()):
        subs = [m for m in order if topic in members[m].topics]
        if not subs:
            continue
        for p in range(n):
            while order[i % len(order)] not in subs:
                i += 1
            out[order[i % len(order)]].append((topic, p))
            i += 1
    return out


def sticky_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
    """Kafka's StickyAssignor in spirit: each member keeps what it had (its user data carries
    its last assignment) as far as balance allows; the rest go to the least loaded, and
    partitions move from the most to the least loaded until counts differ by at most one
    among members that could take them."""
    valid = {(t, p) for t, n in partitions.items() for p in range(n)}
    out: Assignment = {m: [] for m in members}
    taken: set[TopicPartition] = set()
    for m in sorted(members):
        s = members[m]
        previous = decode_assignment(s.user_data) if s.user_data else []
        for tp in previous:
            if tp in valid and tp not in taken and tp[0] in s.topics:
                out[m].append(tp)
                taken.add(tp)
    for tp in sorted(valid - taken):
        eligible = [m for m in members if tp[0] in members[m].topics]
        if eligible:
            target = min(eligible, key=lambda m: (len(out[m]), m))
            out[target].append(tp)
    moved = True
    while moved:
        moved = False
        for m in sorted(out, key=lambda m: (-len(out[m]), m)):
            for tp in sorted(out[m], reverse=True):
                eligible = [x for x in members if tp[0] in members[x].topics and x != m]
                if not eligible:
                    continue
                target = min(eligible, key=lambda x: (len(out[x]), x))
                if len(out[m]) - len(out[target]) > 1:
                    out[m].remove(tp)
                    out[target].append(tp)
                    moved = True
                    break
            if moved:
                break
    return {m: sorted(tps) for m, tps in out.items()}


ASSIGNORS = {"range": range_assign, "roundrobin": roundrobin_assign, "sticky": sticky_assign}
