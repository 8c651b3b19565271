"""The cluster health report, computed with Spark over the ``kraft`` data source's tables.

The partitions table is read once and cached; every per-partition judgement (offline,
under-replicated, under-min-ISR, placement) is a column computed on it, the rack of each
replica looked up in a map of the (few) brokers, so nothing is joined or shuffled at the
size of the partitions except the per-broker counts. The rules are ``figures``'; only the
small per-broker and per-rack tables are brought back to the driver.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import reduce
from typing import Any
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as fn

from common.errors import KafkaError
from metadata.image import ResourceType
from metadata.placement import UsableBroker, balanced_moves
from metadata.reassignments import Plan
from metadata.records import NO_LEADER

from . import figures as F
from .target import Target

_PROBLEM_COLUMNS = ("topic", "topic_id", "partition", "replicas", "isr", "leader", "leader_epoch",
                    "partition_epoch", "min_isr", "racks")


@dataclass
class Health:
    figures: F.Figures
    tables: dict[str, DataFrame]  # the report's output tables, by name
    broker_load: list[tuple[int, int, int]]  # (broker, replicas, leaders), by broker
    cached: list[DataFrame]
    plan: Plan  # partitions to move so that replicas and preferred leaders are even (reassignment JSON)

    def release(self) -> None:
        """Drop the cached tables (the session may outlive the report)."""
        for df in self.cached:
            df.unpersist()


def reader(spark: SparkSession, target: Target, table: str) -> DataFrame:
    r = spark.read.format("kraft").option("table", table)
    if target.directory:  # pinned: a live controller's log may grow while the report runs
        r = r.option("offset", str(target.offset))
    return r.load(target.path)


def concurrently(*actions: Callable[[], Any]) -> list[Any]:
    """Run Spark actions side by side: small jobs are mostly scheduling latency, which
    overlaps; big ones share the cores as they would anyway."""
    with ThreadPoolExecutor(max_workers=len(actions)) as pool:
        return [f.result() for f in [pool.submit(a) for a in actions]]


def compute(spark: SparkSession, target: Target) -> Health:
    load = lambda table: reader(spark, target, table)  # noqa: E731
    brokers, settings, topics = concurrently(
        lambda: load("brokers").select("broker", "rack", "fenced").orderBy("broker").collect(),
        lambda: load("configs").where(fn.col("key") == F.MIN_ISR_KEY).collect(),
        lambda: load("topics").count())
    racks = {b.broker: b.rack for b in brokers}
    racks_in_cluster = len({r for r in racks.values() if r is not None})
    per_topic, default_min_isr = F.min_isr_settings(
        (ResourceType[c.resource_type], c.resource_name, c.key, c.value) for c in settings)

    cached = _flag(spark, load("partitions"), per_topic, default_min_isr).cache()
    simple = [p for p in F.PROBLEMS if p != "placement"]
    totals = cached.agg(fn.count(fn.lit(1)).alias("partitions"),
                        fn.sum(fn.size("replicas")).alias("replicas"),
                        fn.max(fn.size("replicas")).alias("max_rf"),
                        *[fn.sum(fn.col(p).cast("int")).alias(p) for p in simple]).first()
    assert totals is not None  # and the partitions are cached from here on
    rules = Placement(racks, racks_in_cluster, totals["max_rf"] or 0)
    flagged = cached.withColumn("placement", rules.violated())

    registered = spark.createDataFrame([(b.broker, b.rack, b.fenced) for b in brokers],
                                       "broker int, rack string, fenced boolean")
    # One pass over the replicas (a leader is always one of them: the delta checks it).
    per_broker = (flagged.select(fn.explode("replicas").alias("broker"), "leader")
                  .groupBy("broker")
                  .agg(fn.count(fn.lit(1)).alias("replicas"),
                       fn.sum((fn.col("broker") == fn.col("leader")).cast("long"))
                       .alias("leaders")))
    brokers_load = (registered.join(per_broker, "broker", "full")
                    .fillna(0, ["replicas", "leaders"]).orderBy("broker"))
    history, history_cached = _history(spark, target, load, topics, totals["partitions"])
    rows, misplaced, examples, points = concurrently(
        brokers_load.collect,
        lambda: flagged.where(fn.col("placement")).count(),
        lambda: _examples(flagged, rules),
        history.collect)
    by_rack = F.rack_load((r.rack, r.replicas, r.leaders) for r in rows)
    racks_load = spark.createDataFrame(
        [(rack, n, replicas, leaders) for rack, (n, replicas, leaders) in sorted(by_rack.items())],
        "rack string, brokers long, replicas long, leaders long")
    counts = {**{p: totals[p] or 0 for p in simple}, "placement": misplaced}

    figures = F.Figures(
        source=target.path, offset=target.offset, topics=topics,
        partitions=totals["partitions"], replicas=totals["replicas"] or 0,
        brokers=len(brokers), fenced_brokers=sum(1 for b in brokers if b.fenced),
        racks=racks_in_cluster,
        replicas_per_broker=F.spread({r.broker: r.replicas for r in rows}),
        leaders_per_broker=F.spread({r.broker: r.leaders for r in rows}),
        replicas_per_rack=F.spread({k: v[1] for k, v in by_rack.items()}) if by_rack else None,
        leaders_per_rack=F.spread({k: v[2] for k, v in by_rack.items()}) if by_rack else None,
        history=tuple(F.HistoryPoint(h.offset, h.topics, h.partitions) for h in points),
        **{p: F.Problem(counts[p], examples.get(p, ())) for p in F.PROBLEMS})
    problems = {F.PROBLEMS[p]: rules.with_racks(flagged.where(fn.col(p)))
                .select(*_PROBLEM_COLUMNS).orderBy("topic", "partition") for p in F.PROBLEMS}
    tables = {"brokers_load": brokers_load, **({"racks_load": racks_load} if by_rack else {}),
              **problems, "history": history}
    live = [UsableBroker(b.broker, b.rack) for b in brokers if not b.fenced]
    return Health(figures, tables, [(r.broker, r.replicas, r.leaders) for r in rows],
                  [cached, *history_cached], rebalancing_plan(flagged, rows, live))


def rebalancing_plan(partitions: DataFrame, load: list[Any], live: list[UsableBroker]) -> Plan:
    """The moves that even out replicas and preferred leaders over the unfenced brokers (the
    planner of ``kraft reassign-partitions --generate``), when they are uneven: some broker
    holds more than one replica or preferred leadership over another, or a replica sits on a
    broker that is fenced or gone. The assignment is brought to the driver only then."""
    ids = {b.id for b in live}
    replicas = [r.replicas for r in load if r.broker in ids] or [0]
    if not live or max(replicas) - min(replicas) <= 1 and all(r.broker in ids for r in load if r.replicas):
        preferred = partitions.groupBy(fn.col("replicas")[0].alias("b")).count().collect()
        counts = {b.id: 0 for b in live} | {r.b: r["count"] for r in preferred}
        if not live or (max(counts.values()) - min(counts.values()) <= 1 and set(counts) <= ids):
            return {}
    current = {(r.topic, r.partition): tuple(r.replicas)
               for r in partitions.select("topic", "partition", "replicas").toLocalIterator()}
    try:
        proposed = balanced_moves(current, live)
    except KafkaError:  # more replicas than live brokers: nothing to propose
        return {}
    return {k: v for k, v in proposed.items() if v != current[k]}


def _flag(spark: SparkSession, partitions: DataFrame, per_topic: dict[str, int],
          default_min_isr: int) -> DataFrame:
    """The partitions with their min ISR and a boolean column per problem but placement."""
    if per_topic:
        settings = spark.createDataFrame(sorted(per_topic.items()), "topic string, _min_isr int")
        partitions = partitions.join(fn.broadcast(settings), "topic", "left")
    else:
        partitions = partitions.withColumn("_min_isr", fn.lit(None).cast("int"))
    return (partitions
            .withColumn("min_isr", fn.coalesce("_min_isr", fn.lit(default_min_isr)))
            .withColumn("offline", fn.col("leader") == NO_LEADER)
            .withColumn("under_min_isr", fn.size("isr") < fn.col("min_isr"))
            .withColumn("under_replicated", fn.size("isr") < fn.size("replicas"))
            .drop("_min_isr"))


#: Up to this replication factor, placement is judged with scalar comparisons per replica
#: pair; above it, with array functions (which build a hash set per row, several times slower).
_PAIRWISE_RF = 8
#: Broker ids below this are looked up in an array literal; others in a map (a linear scan).
_DENSE_IDS = 1 << 16


def _lookup(table: dict[int, Any], key: Column, kind: str) -> Column:
    """``table[key]`` (null if absent) for a literal table of broker ids."""
    if not table:
        return fn.lit(None).cast(kind)
    if min(table) >= 0 and max(table) < _DENSE_IDS:
        values = fn.array(*[fn.lit(table.get(b)).cast(kind) for b in range(max(table) + 1)])
        return fn.when(key.between(0, max(table)), fn.element_at(values, key + 1))
    return fn.try_element_at(fn.create_map(*[v for b, value in sorted(table.items())
                                             for v in (fn.lit(b), fn.lit(value).cast(kind))]),
                             key)


@dataclass(frozen=True)
class Placement:
    """The placement rule (``figures``) as Spark columns, without higher-order functions
    (``transform``, ``filter``: interpreted, not compiled) or per-row hash sets when the
    replication factor is small: each replica position up to the largest replication factor
    is a column, compared pairwise, and racks are compared by number."""

    racks: dict[int, str | None]
    racks_in_cluster: int
    max_rf: int

    def _replica(self, i: int) -> Column:
        return fn.try_element_at("replicas", fn.lit(i + 1))

    def replica_racks(self) -> Column:
        """The rack of each replica (null: none, or not registered), as an array."""
        if not self.racks_in_cluster or not self.max_rf:
            return fn.array().cast("array<string>")
        every = fn.array(*[_lookup(self.racks, self._replica(i), "string")
                           for i in range(self.max_rf)])
        return fn.slice(every, 1, fn.size("replicas"))

    def violated(self) -> Column:
        if self.max_rf > _PAIRWISE_RF:
            return self._violated_by_arrays()
        k = self.max_rf
        replicas = [self._replica(i) for i in range(k)]
        same = [fn.coalesce(replicas[i] == replicas[j], fn.lit(False))
                for i in range(k) for j in range(i)]
        duplicate = reduce(Column.__or__, same, fn.lit(False))
        if not self.racks_in_cluster:
            return duplicate
        codes = {rack: n for n, rack in enumerate(sorted({r for r in self.racks.values()
                                                          if r is not None}))}
        rack = [_lookup({b: codes.get(r) for b, r in self.racks.items() if r is not None},
                        replicas[i], "int") for i in range(k)]
        placed = [r.isNotNull().cast("int") for r in rack]
        # A rack counts once, at its first replica: differing from (or unlike null) each
        # earlier one.
        first = [reduce(Column.__and__, [fn.coalesce(rack[i] != rack[j], fn.lit(True))
                                         for j in range(i)], rack[i].isNotNull()).cast("int")
                 for i in range(k)]
        distinct = reduce(Column.__add__, first, fn.lit(0))
        return duplicate | (distinct < fn.least(reduce(Column.__add__, placed, fn.lit(0)),
                                                fn.lit(self.racks_in_cluster)))

    def _violated_by_arrays(self) -> Column:
        duplicate = fn.size(fn.array_distinct("replicas")) < fn.size("replicas")
        if not self.racks_in_cluster:
            return duplicate
        placed = fn.array_compact(self.replica_racks())
        return duplicate | (fn.size(fn.array_distinct(placed))
                            < fn.least(fn.size(placed), fn.lit(self.racks_in_cluster)))

    def with_racks(self, partitions: DataFrame) -> DataFrame:
        return partitions.withColumn("racks", self.replica_racks())


def _examples(flagged: DataFrame, rules: Placement) -> dict[str, tuple[str, ...]]:
    """The first few partitions of each problem, by topic and partition, in one job."""
    firsts = [rules.with_racks(flagged.where(fn.col(p)).orderBy("topic", "partition")
                               .limit(F.EXAMPLES))
              .select(fn.lit(p).alias("problem"), *_PROBLEM_COLUMNS) for p in F.PROBLEMS]
    out: dict[str, list[tuple[str, int, str]]] = {}
    for r in reduce(DataFrame.unionByName, firsts).collect():
        out.setdefault(r.problem, []).append((r.topic, r.partition, F.example(
            r.problem, r.topic, r.partition, r.replicas, r.isr, r.min_isr, r.racks)))
    return {p: tuple(e for _, _, e in sorted(found)) for p, found in out.items()}


def _history(spark: SparkSession, target: Target, load: Callable[[str], DataFrame],
             topics: int, partitions: int) -> tuple[DataFrame, list[DataFrame]]:
    """Topic and partition counts after each record batch, from the records table: the
    snapshot's records all count at its offset, then each log batch adds or removes."""
    if not target.directory:
        return spark.createDataFrame([(target.offset, topics, partitions)],
                                     "offset long, topics long, partitions long"), []
    records = load("records").select("offset", "record_type", "topic_id", "partition").cache()
    created = records.where(fn.col("record_type") == "TopicRecord").select("topic_id", "offset")
    removed = (records.where(fn.col("record_type") == "RemoveTopicRecord")
               .select("topic_id", fn.col("offset").alias("removed")))
    born = (records.where(fn.col("record_type") == "PartitionRecord")
            .groupBy("topic_id", "partition").agg(fn.min("offset").alias("offset")))
    died = (born.join(removed, "topic_id").where(fn.col("offset") <= fn.col("removed"))
            .select(fn.col("removed").alias("offset")))
    zero = fn.lit(0)
    changes = (records.select("offset", zero.alias("t"), zero.alias("p"))
               .unionByName(created.select("offset", fn.lit(1).alias("t"), zero.alias("p")))
               .unionByName(removed.select(fn.col("removed").alias("offset"),
                                           fn.lit(-1).alias("t"), zero.alias("p")))
               .unionByName(born.select("offset", zero.alias("t"), fn.lit(1).alias("p")))
               .unionByName(died.select("offset", zero.alias("t"), fn.lit(-1).alias("p")))
               .groupBy("offset").agg(fn.sum("t").alias("t"), fn.sum("p").alias("p")))
    upto = Window.orderBy("offset").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return (changes.select("offset", fn.sum("t").over(upto).alias("topics"),
                           fn.sum("p").over(upto).alias("partitions"))
            .orderBy("offset")), [records]
