"""Which partitions a query reads and between which offsets: topics resolved from
``subscribe``/``subscribePattern``/``assign``, offset specs resolved with ListOffsets at the
partitions' leaders (so only below the high watermark), and the result cut into ranges of at
most ``maxRecordsPerPartition`` offsets, one Spark task each."""
from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from ..admin import Admin
from ..cluster_view import CLIENT_ERRORS
from .options import EARLIEST, LATEST, OffsetSpec, TopicOptions, TopicPartition, TopicSourceError

#: Offsets per partition as Spark keeps them in a streaming checkpoint: {topic: {"0": 42}}.
Offsets = dict[str, dict[str, int]]


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one partition: one Spark task."""

    topic: str
    partition: int
    start: int
    end: int


async def partitions(admin: Admin, opts: TopicOptions, *, missing_ok: bool = False) -> list[TopicPartition]:
    """The partitions the options name, as the cluster has them now (with ``missing_ok``, a
    subscribed topic that is gone is left out rather than an error)."""
    if opts.pattern is not None:
        pattern = re.compile(opts.pattern)
        topics = await admin.topics()
        return sorted((name, p.partition) for name, t in topics.items()
                      if pattern.fullmatch(name) and not name.startswith("__") for p in t.partitions)
    names = opts.subscribe or tuple(dict.fromkeys(t for t, _ in opts.assign))
    out: list[TopicPartition] = []
    for name in names:
        try:
            found = await admin.partitions_of(name)
        except CLIENT_ERRORS:
            found = []
        if not found and not missing_ok:
            raise TopicSourceError(f"topic {name} does not exist (UNKNOWN_TOPIC_OR_PARTITION)")
        out += found
    if opts.assign:
        if missing_ok:
            return sorted(set(opts.assign) & set(out))
        missing = sorted(set(opts.assign) - set(out))
        if missing:
            raise TopicSourceError(f"option 'assign' names partitions the cluster does not have: "
                                   f"{', '.join(f'{t}-{p}' for t, p in missing)}")
        return sorted(opts.assign)
    return sorted(out)


async def resolve(admin: Admin, spec: OffsetSpec, tps: list[TopicPartition], *, default: int,
                  read_committed: bool) -> dict[TopicPartition, int]:
    """Each partition's offset for ``spec``; a partition the JSON leaves out gets ``default``
    (-2 earliest, -1 latest), a time no record reaches yet gets the latest offset. The latest
    offset is the high watermark, or with ``read_committed`` the last stable offset: a read
    ends before the first transaction still open."""
    if not tps:
        return {}
    if spec in ("earliest", "latest"):
        which = {tp: EARLIEST if spec == "earliest" else LATEST for tp in tps}
    elif isinstance(spec, tuple):  # ("timestamp", ms or {topic: {partition: ms}})
        at = spec[1]
        which = {tp: at if isinstance(at, int) else at.get(tp[0], {}).get(tp[1], default) for tp in tps}
    else:
        reading = set(tps)
        unknown = sorted(f"{t}-{p}" for t, ps in spec.items() for p in ps if (t, p) not in reading)
        if unknown:
            raise TopicSourceError(f"offsets were given for partitions that are not read: {', '.join(unknown)}")
        which = {tp: spec.get(tp[0], {}).get(tp[1], default) for tp in tps}
    fixed = {tp: off for tp, off in which.items() if off >= 0 and not isinstance(spec, tuple)}
    asked = {tp: off for tp, off in which.items() if tp not in fixed}
    found = {tp: off for tp, (off, _) in
             (await admin.offsets(asked, read_committed=read_committed) if asked else {}).items()}
    beyond = [tp for tp, off in found.items() if off < 0]  # a time no record reaches yet
    if beyond:
        latest = await admin.offsets({tp: LATEST for tp in beyond}, read_committed=read_committed)
        found.update({tp: off for tp, (off, _) in latest.items()})
    return {**found, **fixed}


def split(starts: dict[TopicPartition, int], ends: dict[TopicPartition, int], most: int) -> list[OffsetRange]:
    """The ranges to read, each at most ``most`` offsets long (0: one per partition)."""
    out = []
    for tp in sorted(ends):
        start, end = starts.get(tp, 0), ends[tp]
        step = most or max(end - start, 1)
        for s in range(start, end, step):
            out.append(OffsetRange(tp[0], tp[1], s, min(s + step, end)))
    return out


def to_json(offsets: dict[TopicPartition, int]) -> Offsets:
    out: Offsets = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = off
    return out


def from_json(offsets: Offsets) -> dict[TopicPartition, int]:
    return {(t, int(p)): off for t, ps in offsets.items() for p, off in ps.items()}
