"""A controller's Prometheus metrics (docs/operations.md, "Monitoring"): ``RaftMetrics`` of its
Raft node and ``ControllerMetrics``, the gauges of its metadata, on the process's registry
(``common.metrics``). Gauges are read from the current state when Prometheus scrapes; only
latencies and elections are recorded as they happen."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from common.metrics import LATENCY_BUCKETS, StateCollector, gauge
from raft.messages import Role

if TYPE_CHECKING:
    from raft.node import RaftNode

    from .controller import QuorumController

_STATES = {Role.LEADER: "leader", Role.CANDIDATE: "candidate", Role.PRE_CANDIDATE: "prospective",
           Role.FOLLOWER: "follower"}


class RaftMetrics(StateCollector):
    """``kafka_server_raftmetrics_*`` (Kafka's raft-metrics group) of one Raft node: its view
    of the leader and epoch, its log's high watermark and end (exclusive offsets, as Kafka's),
    append and commit latencies, and the elections it started and won."""

    def __init__(self, node: RaftNode, registry: CollectorRegistry) -> None:
        self.node = node
        self.commit_latency = Histogram(
            "kafka_server_raftmetrics_commit_latency_seconds",
            "Time from this node's proposal of an entry to its commit and apply", registry=registry,
            buckets=LATENCY_BUCKETS)
        self.append_latency = Histogram(
            "kafka_server_raftmetrics_append_latency_seconds",
            "Time to make newly appended log entries durable (write and fsync)", registry=registry,
            buckets=LATENCY_BUCKETS)
        self.elections = Counter("kafka_server_raftmetrics_elections_started",
                                 "Elections this node started as a candidate", registry=registry)
        self.elections_won = Counter("kafka_server_raftmetrics_elections_won",
                                     "Elections this node won (it became the leader)", registry=registry)
        node.commit_latency_observer = self.commit_latency.observe
        node.append_latency_observer = self.append_latency.observe
        node.on_role_change(self._role_changed)
        super().__init__(registry)

    def _role_changed(self, role: Role, leader: int, term: int) -> None:
        if role == Role.CANDIDATE:
            self.elections.inc()
        elif role == Role.LEADER:
            self.elections_won.inc()

    def collect(self) -> Iterator[Metric]:
        n = self.node
        if not hasattr(n, "core"):
            return
        state = _STATES.get(n.role, "follower")
        states = GaugeMetricFamily("kafka_server_raftmetrics_current_state",
                                   "1 for this node's Raft state", labels=["state"])
        for s in _STATES.values():
            states.add_metric([s], 1.0 if s == state else 0.0)
        yield states
        yield gauge("kafka_server_raftmetrics_current_leader", "The leader's node id, -1 when unknown",
                    n.leader_id or -1)
        yield gauge("kafka_server_raftmetrics_current_epoch", "The current Raft term (Kafka's epoch)", n.term)
        yield gauge("kafka_server_raftmetrics_high_watermark",
                    "The offset after the last committed entry", n.commit_index + 1)
        yield gauge("kafka_server_raftmetrics_log_end_offset",
                    "The offset after the last entry in this node's log", n.next_index)
        yield gauge("kafka_server_raftmetrics_applied_offset", "The last entry applied to the state machine",
                    n.applied)


class ControllerMetrics(StateCollector):
    """``kafka_controller_kafkacontroller_*`` of one controller, from its committed metadata
    image when scraped. Every controller replays the same log, so the standbys report the same
    partition and broker counts; ActiveControllerCount is 1 on the active one only.

    ``kafka_controller_controllereventmanager_*``: Kafka's controller event queue. Ours handles
    operations on one event loop, where only writes (broker heartbeats and registrations,
    AlterPartition, every change a tool asks for) wait for a turn, one built at a time: the
    queue's size is those waiting or being built, its time their wait from arrival to build."""

    def __init__(self, controller: QuorumController, registry: CollectorRegistry) -> None:
        self.controller = controller
        self.event_queue_time = Histogram(
            "kafka_controller_controllereventmanager_event_queue_time_seconds",
            "Time from a write's arrival at the controller to the start of its build, after the writes before it "
            "(Kafka's EventQueueTimeMs)", registry=registry, buckets=LATENCY_BUCKETS)
        controller.queue_time_observer = self.event_queue_time.observe
        super().__init__(registry)

    def collect(self) -> Iterator[Metric]:
        c = self.controller
        if not hasattr(c.node, "core"):
            return  # not started yet
        image = c.sm.image
        offline = preferred_imbalance = partitions = 0
        for _, _, p in image.partitions():
            partitions += 1
            if not p.has_leader:
                offline += 1
            elif p.replicas and p.leader != p.replicas[0]:
                preferred_imbalance += 1
        brokers = list(image.brokers.values())
        fenced = sum(1 for b in brokers if b.fenced)
        prefix = "kafka_controller_kafkacontroller_"
        yield gauge(prefix + "activecontrollercount", "1 on the active controller, else 0",
                    1.0 if c.active else 0.0)
        yield gauge(prefix + "offlinepartitionscount", "Partitions without a leader", offline)
        yield gauge(prefix + "preferredreplicaimbalancecount",
                    "Partitions not led by their preferred (first) replica", preferred_imbalance)
        yield gauge(prefix + "globalpartitioncount", "Partitions in the cluster", partitions)
        yield gauge(prefix + "globaltopiccount", "Topics in the cluster", len(image.topics_by_id))
        yield gauge(prefix + "activebrokercount", "Registered brokers that are not fenced", len(brokers) - fenced)
        yield gauge(prefix + "fencedbrokercount", "Registered brokers that are fenced", fenced)
        yield gauge(prefix + "lastappliedrecordoffset", "The metadata offset of the image this controller serves",
                    image.offset)
        yield gauge(prefix + "lastcommittedrecordoffset", "The highest committed metadata offset",
                    c.node.commit_index)
        yield gauge("kafka_controller_controllereventmanager_eventqueuesize",
                    "Writes waiting for their turn at the controller or being built (Kafka's EventQueueSize)",
                    c.queued_writes)
