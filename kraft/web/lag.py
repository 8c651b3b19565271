"""Consumer groups' lag over time: the console samples every group's lag (per topic, the sum
over its partitions, as ``kraft consumer-groups --describe`` reads it) while it runs, and
keeps the last samples in memory for the chart on a group's page. The brokers keep no lag
history (a group's lag is the log end offsets minus its commits, computed by whoever asks), so
the console is the one to remember it: a chart starts when the console does."""
from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from clients.consumer_groups import PartitionLag, describe_group

from .charts import Chart, Series
from .cluster import CLUSTER_ERRORS, Cluster
from .periodic import Periodic

log = logging.getLogger("kraft.web")

SAMPLE_EVERY_S = 10.0
KEEP_SAMPLES = 180  # half an hour at one sample every ten seconds
MAX_GROUPS = 200  # a round samples this many groups at most (the first, by id)


def lag_by_topic(rows: Iterable[PartitionLag]) -> dict[str, int]:
    """Each topic's lag: the sum over its partitions that have one."""
    out: dict[str, int] = {}
    for r in rows:
        out[r.topic] = out.get(r.topic, 0) + (r.lag or 0)
    return out


@dataclass
class LagHistory(Periodic):
    """Each group's lag per topic over time: sampled every ``every`` seconds (``start``) and
    whenever a group's page is shown (``record``), the last ``keep`` samples of each group."""

    TASK_NAME: ClassVar[str] = "kraft-web-lag"
    WAIT_FIRST: ClassVar[bool] = True

    cluster: Cluster
    every: float = SAMPLE_EVERY_S
    keep: int = KEEP_SAMPLES
    samples: dict[str, deque[tuple[float, dict[str, int]]]] = field(default_factory=dict)
    problem: str | None = None  # why the last round failed, said once in the log

    def record(self, group_id: str, rows: Iterable[PartitionLag], at: float | None = None) -> None:
        kept = self.samples.setdefault(group_id, deque(maxlen=self.keep))
        kept.append((time.time() if at is None else at, lag_by_topic(rows)))

    def chart(self, group_id: str) -> Chart:
        """The group's lag per topic; a topic missing from a sample (no commit yet) is a gap."""
        series: Series = {}
        for at, topics in self.samples.get(group_id, ()):
            for topic, lag in topics.items():
                series.setdefault(topic, []).append((at, float(lag)))
        return Chart("lag-chart", f"Lag of {group_id} per topic", "messages", series)

    async def sample(self) -> None:
        """One round: every group's lag (a group that went away is skipped)."""
        try:
            admin = await self.cluster.brokers()
            groups = sorted(g.group_id for g in await admin.list_groups())[:MAX_GROUPS]
            for group_id in groups:
                with contextlib.suppress(*CLUSTER_ERRORS):
                    _, rows = await describe_group(admin, group_id)
                    self.record(group_id, rows)
        except Exception as e:  # noqa: BLE001 (brokers down: said once in the log, a gap in the charts)
            if self.problem is None:
                log.warning("consumer groups' lag not sampled: %s", e)
            self.problem = str(e)
            return
        self.problem = None

    step = sample
