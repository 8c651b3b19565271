"""A broker's Prometheus metrics (docs/operations.md, "Monitoring"), read from its replicas,
ISR manager, group coordinator and topic counters when Prometheus scrapes. Names follow
Kafka's JMX metrics through the JMX exporter (``kafka.server:type=ReplicaManager,
name=UnderReplicatedPartitions`` is ``kafka_server_replicamanager_underreplicatedpartitions``).

Runs on the HTTP server's thread: every dict the event loop changes is copied (atomically,
under the GIL) before it is walked."""
from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from common.metrics import StateCollector, gauge

from .fetch_session import FetchSessionCache
from .group_coordinator import GroupCoordinator
from .transaction_coordinator import TransactionCoordinator
from .replica_manager import ReplicaManager


def _counter(name: str, doc: str, label: str, values: dict[str, int]) -> CounterMetricFamily:
    c = CounterMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        c.add_metric([key], value)
    return c


class BrokerMetrics(StateCollector):
    """ReplicaManager, BrokerTopicMetrics, purgatory, per-partition log offsets and consumer
    group lag of one broker."""

    def __init__(self, rm: ReplicaManager, groups: GroupCoordinator, metadata_offset: Callable[[], int],
                 registry: CollectorRegistry, fetch_sessions: FetchSessionCache | None = None,
                 transactions: TransactionCoordinator | None = None) -> None:
        self.rm = rm
        self.fetch_sessions = fetch_sessions
        self.groups = groups
        self.transactions = transactions
        self.metadata_offset = metadata_offset
        super().__init__(registry)

    def collect(self) -> Iterator[Metric]:
        rm = self.rm
        partitions = list(rm.partitions.values())
        leaders = [p for p in partitions if p.is_leader]
        rmp = "kafka_server_replicamanager_"
        yield gauge(rmp + "partitioncount", "Replicas on this broker", len(partitions))
        yield gauge(rmp + "leadercount", "Partitions this broker leads", len(leaders))
        yield gauge(rmp + "underreplicatedpartitions", "Led partitions whose ISR is smaller than their replicas",
                    sum(1 for p in leaders if len(p.isr) < len(p.replicas)))
        yield gauge(rmp + "underminisrpartitioncount", "Led partitions whose ISR is below min.insync.replicas",
                    sum(1 for p in leaders if len(p.isr) < p.config.min_insync_replicas))
        yield gauge(rmp + "atminisrpartitioncount", "Led partitions whose ISR is exactly min.insync.replicas",
                    sum(1 for p in leaders if len(p.isr) == p.config.min_insync_replicas))
        isr = rm.isr
        shrinks = CounterMetricFamily(rmp + "isrshrinks", "ISR shrinks this broker proposed as a leader")
        shrinks.add_metric([], isr.shrinks if isr else 0)
        yield shrinks
        expands = CounterMetricFamily(rmp + "isrexpands", "ISR expansions this broker proposed as a leader")
        expands.add_metric([], isr.expands if isr else 0)
        yield expands

        stats = rm.topic_stats
        btm = "kafka_server_brokertopicmetrics_"
        yield _counter(btm + "bytesin", "Bytes producers appended, per topic", "topic", dict(stats.bytes_in))
        yield _counter(btm + "messagesin", "Records producers appended, per topic", "topic", dict(stats.messages_in))
        yield _counter(btm + "bytesout", "Bytes fetched by consumers, per topic", "topic", dict(stats.bytes_out))
        yield _counter(btm + "replicationbytesout", "Bytes fetched by follower replicas, per topic", "topic",
                       dict(stats.replication_bytes_out))

        purgatory = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                                      "Requests waiting in a purgatory (acks=all produces, long-polling fetches)",
                                      labels=["delayedOperation"])
        purgatory.add_metric(["Produce"], sum(p.delayed_produces for p in leaders))
        purgatory.add_metric(["Fetch"], sum(p.delayed_fetches for p in partitions))
        yield purgatory

        labels = ["topic", "partition"]
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "The offset after a replica's last record", labels=labels)
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "A replica's first offset", labels=labels)
        hw = GaugeMetricFamily("kafka_log_log_highwatermark", "A replica's high watermark (consumers read below it)",
                               labels=labels)
        offsets: dict[tuple[str, int], int] = {}
        for p in partitions:
            log = p.log
            key = [p.topic, str(p.index)]
            end.add_metric(key, log.log_end_offset)
            start.add_metric(key, log.log_start_offset)
            hw.add_metric(key, log.high_watermark)
            if p.is_leader:
                offsets[(p.topic, p.index)] = log.high_watermark
        yield end
        yield start
        yield hw

        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "A group's committed offset behind the high watermark (groups this broker "
                                "coordinates, partitions it leads)", labels=["consumergroup", "topic", "partition"])
        for g in list(self.groups.groups.values()):
            for (topic, index), committed in dict(g.offsets).items():
                high = offsets.get((topic, index))
                if high is not None:
                    lag.add_metric([g.group_id, topic, str(index)], max(0, high - committed.offset))
        yield lag
        sessions = self.fetch_sessions
        if sessions is not None:
            fsc = "kafka_server_fetchsessioncache_"
            yield gauge(fsc + "numincrementalfetchsessions", "Fetch sessions (KIP-227) in the cache",
                        len(sessions.sessions))
            yield gauge(fsc + "numincrementalfetchpartitionscached", "Partitions of the cached fetch sessions",
                        sessions.partitions_cached)
            for name, doc, n in (("incrementalfetchsessionevictions", "Fetch sessions evicted from a full cache",
                                  sessions.evictions),
                                 ("incrementalfetches", "Fetch requests served from a session (incremental)",
                                  sessions.incremental_fetches)):
                c = CounterMetricFamily(fsc + name, doc)
                c.add_metric([], n)
                yield c
        if self.transactions is not None:
            txns = GaugeMetricFamily("kafka_transaction_coordinator_transactions",
                                     "Transactional ids this broker coordinates, by state (its partitions of "
                                     "__transaction_state)", labels=["state"])
            for state, n in self.transactions.count_by_state().items():
                txns.add_metric([state.value], n)
            yield txns
        yield gauge("kafka_server_brokermetadatametrics_last_applied_record_offset",
                    "The metadata offset this broker has applied", self.metadata_offset())
