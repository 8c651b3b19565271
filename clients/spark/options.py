"""The ``kraft-topic`` source's options, named and shaped as Spark's Kafka source names them
(spark-sql-kafka's KafkaSourceProvider): which topics (exactly one of ``subscribe``,
``subscribePattern``, ``assign``), from and to which offsets, how much per task and per
micro-batch, and whether lost data fails the query. Every mistake is one line."""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..admin import EARLIEST, LATEST, TopicPartition  # noqa: F401 (re-exported for the source)
from ..cluster_view import ClientError


class TopicSourceError(ClientError):
    """Options or offsets the source cannot use; the message is the one line the user sees."""


#: An offset spec: "earliest", "latest", {topic: {partition: offset}} (-2/-1 allowed, as in
#: Spark), or ("timestamp", ms | {topic: {partition: ms}}).
OffsetSpec = Any


@dataclass(frozen=True)
class TopicOptions:
    bootstrap: str
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    max_records_per_partition: int = 0     # 0: one Spark partition per topic partition
    max_offsets_per_trigger: int = 0       # 0: every micro-batch reads all there is
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000         # kafkaConsumer.pollTimeoutMs
    isolation_level: str = "read_committed"  # isolation.level: up to the LSO, no aborted transactions

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> "TopicOptions":
        o = lowered(options)
        bootstrap = bootstrap_of(o)
        given = [k for k in ("subscribe", "subscribepattern", "assign") if o.get(k)]
        if len(given) != 1:
            raise TopicSourceError("exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
                                   f"specified; {'none was' if not given else ', '.join(given) + ' were'} given")
        kw: dict[str, Any] = {"bootstrap": bootstrap}
        if o.get("subscribe"):
            topics = tuple(t.strip() for t in o["subscribe"].split(",") if t.strip())
            if not topics:
                raise TopicSourceError("option 'subscribe' names no topic: give topic1,topic2,...")
            kw["subscribe"] = topics
        elif o.get("subscribepattern"):
            try:
                re.compile(o["subscribepattern"])
            except re.error as e:
                raise TopicSourceError(f"option 'subscribePattern' is not a regular expression: {e}") from None
            kw["pattern"] = o["subscribepattern"]
        else:
            kw["assign"] = _assign(o["assign"])
        kw["starting"] = _spec(o, "starting", "latest" if streaming else "earliest")
        if streaming:
            if any(k.startswith("ending") for k in o):
                raise TopicSourceError("ending offsets are not valid for a streaming query; they apply to batch reads")
        else:
            kw["ending"] = _spec(o, "ending", "latest")
            if kw["ending"] == "earliest":
                raise TopicSourceError("endingOffsets 'earliest' is not valid for a batch read")
        kw["max_records_per_partition"] = _count(o, "maxrecordsperpartition")
        kw["max_offsets_per_trigger"] = _count(o, "maxoffsetspertrigger")
        fail = o.get("failondataloss", "true").strip().lower()
        if fail not in ("true", "false"):
            raise TopicSourceError(f"option 'failOnDataLoss' must be true or false, not {fail!r}")
        kw["fail_on_data_loss"] = fail == "true"
        if o.get("kafkaconsumer.polltimeoutms"):
            kw["poll_timeout_ms"] = _count(o, "kafkaconsumer.polltimeoutms")
        kw["isolation_level"] = _isolation_level(o)
        return cls(**kw)

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"


def lowered(options: Mapping[str, str]) -> dict[str, str]:
    """Spark's option names are case-insensitive."""
    return {k.lower(): v for k, v in options.items()}


def bootstrap_of(o: Mapping[str, str]) -> str:
    """``bootstrap.servers`` (or Spark's Kafka spelling ``kafka.bootstrap.servers``), required."""
    bootstrap = o.get("bootstrap.servers") or o.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise TopicSourceError('option "bootstrap.servers" must be specified (the brokers\' HOST:PORT list)')
    return bootstrap


def _isolation_level(o: Mapping[str, str]) -> str:
    """``isolation.level`` (or ``kafka.isolation.level``, as Spark's Kafka source passes it to its
    consumer); read_committed unless told otherwise, so that a job never counts records of a
    transaction that was aborted or is still open (issue 28)."""
    level = (o.get("isolation.level") or o.get("kafka.isolation.level") or "read_committed").strip().lower()
    if level not in ("read_committed", "read_uncommitted"):
        raise TopicSourceError(f"option 'isolation.level' must be read_committed or read_uncommitted, not {level!r}")
    return level


def _count(o: Mapping[str, str], key: str) -> int:
    raw = o.get(key)
    if raw is None:
        return 0
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n <= 0:
        raise TopicSourceError(f"option '{key}' must be a positive integer, not {raw!r}")
    return n


def _json(text: str, key: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise TopicSourceError(f"option '{key}' is not valid JSON ({e.msg} at character {e.pos}): {text!r}") from None


def _assign(text: str) -> tuple[TopicPartition, ...]:
    value = _json(text, "assign")
    if not isinstance(value, dict) or not value or not all(
            isinstance(ps, list) and ps and all(isinstance(p, int) and p >= 0 for p in ps) for ps in value.values()):
        raise TopicSourceError('option \'assign\' must be JSON like {"topicA":[0,1],"topicB":[2,4]}, not ' + repr(text))
    return tuple((t, p) for t, ps in value.items() for p in ps)


def _spec(o: Mapping[str, str], which: str, default: str) -> OffsetSpec:
    by_time = o.get(f"{which}offsetsbytimestamp")
    at_time = o.get(f"{which}timestamp")
    offsets = o.get(f"{which}offsets")
    if sum(x is not None for x in (by_time, at_time, offsets)) > 1:
        raise TopicSourceError(f"give only one of '{which}Offsets', '{which}OffsetsByTimestamp' and "
                               f"'{which}Timestamp'")
    if at_time is not None:
        try:
            return ("timestamp", int(at_time))
        except ValueError:
            raise TopicSourceError(f"option '{which}Timestamp' must be a time in ms since the epoch, "
                                   f"not {at_time!r}") from None
    if by_time is not None:
        return ("timestamp", _per_partition(_json(by_time, f"{which}OffsetsByTimestamp"),
                                            f"{which}OffsetsByTimestamp", minimum=0))
    if offsets is None:
        return default
    if offsets.strip().lower() in ("earliest", "latest"):
        return offsets.strip().lower()
    return _per_partition(_json(offsets, f"{which}Offsets"), f"{which}Offsets", minimum=-2)


def _per_partition(value: Any, key: str, minimum: int) -> dict[str, dict[int, int]]:
    """``{"topic": {"0": 23, "1": -1}}`` with partitions as ints."""
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    if not isinstance(value, dict) or not value:
        raise TopicSourceError(f"option '{key}' must be 'earliest', 'latest' or JSON like {example}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            raise TopicSourceError(f"option '{key}': topic {topic!r} must map partitions to offsets, like {example}")
        for p, off in parts.items():
            if not str(p).lstrip("-").isdigit() or int(p) < 0 or not isinstance(off, int) or off < minimum:
                raise TopicSourceError(f"option '{key}': {topic}-{p} -> {off!r} is not a partition and an offset "
                                       f"(>= {minimum})")
            out.setdefault(topic, {})[int(p)] = off
    return out
