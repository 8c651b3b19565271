"""PNG charts of a report, drawn with matplotlib (headless: the Agg backend)."""
from __future__ import annotations

import os
from collections.abc import Sequence

from .figures import Figures


def draw(figures: Figures, broker_load: Sequence[tuple[int, int, int]], output: str) -> list[str]:
    """Write ``leaders_per_broker.png`` and ``partitions_over_time.png`` into ``output``;
    ``broker_load`` is (broker, replicas, leaders) per broker. Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(output, exist_ok=True)
    written = []

    fig, ax = plt.subplots(figsize=(max(6.0, min(20.0, len(broker_load) * 0.15)), 4))
    brokers = [str(b) for b, _, _ in broker_load]
    leaders = [n for _, _, n in broker_load]
    ax.bar(brokers, leaders, color="#4477aa")
    s = figures.leaders_per_broker
    if s.members:
        ax.axhline(s.mean, color="#cc6677", linestyle="--", label=f"mean {s.mean:,.1f}")
        ax.legend(loc="upper right")
    ax.set_xlabel("broker")
    ax.set_ylabel("partitions led")
    skew = "" if s.skew is None else f" (skew {s.skew:.2f}, stddev {s.stddev:,.1f})"
    ax.set_title(f"Leaders per broker at offset {figures.offset}{skew}")
    if len(brokers) > 40:  # keep the axis readable
        step = -(-len(brokers) // 40)
        ax.set_xticks(range(0, len(brokers), step), brokers[::step], rotation=90)
    fig.tight_layout()
    path = os.path.join(output, "leaders_per_broker.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(8, 4))
    offsets = [h.offset for h in figures.history]
    ax.step(offsets, [h.partitions for h in figures.history], where="post", marker="o",
            markersize=3, color="#4477aa", label="partitions")
    ax.set_xlabel("metadata offset")
    ax.set_ylabel("partitions")
    topics_ax = ax.twinx()
    topics_ax.step(offsets, [h.topics for h in figures.history], where="post", color="#228833",
                   label="topics")
    topics_ax.set_ylabel("topics")
    ax.set_title("Partitions and topics over the metadata history")
    handles = ax.get_legend_handles_labels()[0] + topics_ax.get_legend_handles_labels()[0]
    ax.legend(handles, [str(h.get_label()) for h in handles], loc="upper left")
    fig.tight_layout()
    path = os.path.join(output, "partitions_over_time.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
    return written
