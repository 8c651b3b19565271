"""The report's figures computed in one Python process, without Spark.

This is the baseline Spark is measured against (``bench/analytics.py``) and a cross-check
in the tests: the same rules (``figures``), a different engine. A snapshot is streamed
record by record (its broker and config sections first, so that every partition can be
judged as it passes); a log directory is replayed to an image with ``MetadataLogDir``.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from metadata.image import MetadataImage
from metadata.log_dir import MetadataLogDir, MetadataLogError, open_snapshot
from metadata.records import NO_LEADER
from metadata.snapshot import SnapshotError, read_info

from . import figures as F
from .frames import PartitionDecoder, frames, parse
from .log_view import check_offset
from .snapshot_ranges import layout, records

Brokers = Mapping[int, "tuple[str | None, bool]"]  # id -> (rack, fenced)


class Tally:
    """Counts and problems over partitions fed one at a time."""

    def __init__(self, brokers: Brokers, topic_min_isr: Mapping[str, int],
                 default_min_isr: int) -> None:
        self.brokers = brokers
        self.rack = {b: rack for b, (rack, _) in brokers.items()}
        self.racks_in_cluster = len({r for r in self.rack.values() if r is not None})
        self.topic_min_isr = topic_min_isr
        self.default_min_isr = default_min_isr
        self.partitions = self.replica_count = 0
        self.hosted: Counter[int] = Counter({b: 0 for b in brokers})
        self.leading: Counter[int] = Counter({b: 0 for b in brokers})
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, list[tuple[str, int, str]]] = {p: [] for p in F.PROBLEMS}

    def add(self, topic: str, partition: int, replicas: Sequence[int], isr: Sequence[int],
            leader: int) -> None:
        self.partitions += 1
        self.replica_count += len(replicas)
        hosted = self.hosted
        for b in replicas:
            hosted[b] += 1
        if leader != NO_LEADER:
            self.leading[leader] += 1
        min_isr = self.topic_min_isr.get(topic, self.default_min_isr)
        racks = [self.rack.get(b) for b in replicas] if self.racks_in_cluster else []
        found = []
        if leader == NO_LEADER:
            found.append("offline")
        if len(isr) < min_isr:
            found.append("under_min_isr")
        if len(isr) < len(replicas):
            found.append("under_replicated")
        if (len(set(replicas)) < len(replicas)
                or (racks and F.rack_violation(racks, self.racks_in_cluster))):
            found.append("placement")
        for problem in found:
            self.counts[problem] += 1
            kept = self.examples[problem]
            if len(kept) < F.EXAMPLES or (topic, partition) < kept[-1][:2]:
                kept.append((topic, partition,
                             F.example(problem, topic, partition, replicas, isr, min_isr, racks)))
                kept.sort()
                del kept[F.EXAMPLES:]

    def figures(self, source: str, offset: int, topics: int,
                history: Iterable[F.HistoryPoint]) -> F.Figures:
        members = set(self.hosted) | set(self.leading)
        by_rack = F.rack_load((self.rack.get(b), self.hosted[b], self.leading[b])
                              for b in members)
        problems = {p: F.Problem(self.counts[p], tuple(e for _, _, e in self.examples[p]))
                    for p in F.PROBLEMS}
        return F.Figures(
            source=source, offset=offset, topics=topics, partitions=self.partitions,
            replicas=self.replica_count, brokers=len(self.brokers),
            fenced_brokers=sum(1 for _, fenced in self.brokers.values() if fenced),
            racks=self.racks_in_cluster,
            replicas_per_broker=F.spread({b: self.hosted[b] for b in members}),
            leaders_per_broker=F.spread({b: self.leading[b] for b in members}),
            replicas_per_rack=F.spread({k: v[1] for k, v in by_rack.items()}) if by_rack else None,
            leaders_per_rack=F.spread({k: v[2] for k, v in by_rack.items()}) if by_rack else None,
            history=tuple(history), **problems)


def figures_of_snapshot(path: str) -> F.Figures:
    """Stream a snapshot file: its broker and config sections, then every record once."""
    with open_snapshot(path) as f:
        try:
            info = read_info(f)
        except SnapshotError as e:
            raise MetadataLogError(str(e)) from None
        where = layout(f, info)
        brokers = {}
        for r in records(f, 0, where.brokers_end):
            if r.WhichOneof("record") == "register_broker":
                b = r.register_broker
                brokers[b.broker_id] = (b.rack if b.HasField("rack") else None, b.fenced)
        per_topic, default = F.min_isr_settings(
            (r.config.resource_type, r.config.resource_name, r.config.name, r.config.value)
            for r in records(f, where.configs_start, info.record_count)
            if r.WhichOneof("record") == "config")
        tally = Tally(brokers, per_topic, default)
        names: dict[bytes, str] = {}
        decoder = PartitionDecoder()  # as the Spark tasks decode them
        for i, pos, data in frames(f, info, 0, info.record_count):
            fast = decoder.decode(data)
            if fast is not None:
                raw, partition, _, (replicas, isr, leader, _, _) = fast
                tally.add(names[raw], partition, replicas, isr, leader)
                continue
            r = parse(info, i, pos, data)
            which = r.WhichOneof("record")
            if which == "partition":
                p = r.partition
                tally.add(names[p.topic_id], p.partition_id, p.replicas[:], p.isr[:], p.leader)
            elif which == "topic":
                names[r.topic.topic_id] = r.topic.name
    point = F.HistoryPoint(info.last_offset, len(names), tally.partitions)
    return tally.figures(path, info.last_offset, len(names), [point])


def figures_of_image(image: MetadataImage, source: str,
                     history: Iterable[F.HistoryPoint]) -> F.Figures:
    brokers = {b.id: (b.rack, b.fenced) for b in image.brokers.values()}
    per_topic, default = F.min_isr_settings(
        (r.type, r.name, k, v) for r, values in image.configs.items() for k, v in values.items())
    tally = Tally(brokers, per_topic, default)
    for name in sorted(image.topics_by_name):
        for pid, p in sorted(image.topics_by_name[name].partitions.items()):
            tally.add(name, pid, p.replicas, p.isr, p.leader)
    return tally.figures(source, image.offset, len(image.topics_by_id), history)


def figures_of_directory(path: str, offset: int | None = None) -> F.Figures:
    """Replay a log directory to ``offset``; the history has a point per record batch."""
    log = MetadataLogDir(path)
    at = check_offset(log, offset)
    history: list[F.HistoryPoint] = []
    image = log.snapshot_image()
    if log.snapshot_path is not None:
        history.append(F.HistoryPoint(log.snapshot_offset, len(image.topics_by_id),
                                      image.partition_count()))
    for batch, image_after in log.history():
        if batch.offset > at:
            break
        image = image_after
        if batch.records:
            history.append(F.HistoryPoint(batch.offset, len(image.topics_by_id),
                                          image.partition_count()))
    return figures_of_image(image, path, history)
