"""The report's summary as text: one screen, totals first, then the worst skew, then each
problem with its count and a few examples."""
from __future__ import annotations

from collections.abc import Sequence

from .figures import Figures, Spread

_PROBLEM_TITLES = {
    "offline": "offline partitions (no leader)",
    "under_min_isr": "under-min-ISR partitions",
    "under_replicated": "under-replicated partitions",
    "placement": "placement violations",
}


def _n(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


_SPREADS = (("replicas per broker", "replicas_per_broker", "broker"),
            ("leaders per broker", "leaders_per_broker", "broker"),
            ("replicas per rack", "replicas_per_rack", "rack"),
            ("leaders per rack", "leaders_per_rack", "rack"))


def _spread_line(title: str, s: Spread, member: str) -> str:
    skew = "-" if s.skew is None else f"{s.skew:.2f}"
    busiest = f"{member} {s.busiest}"
    return (f"  {title:<22}{_n(s.mean):>12}{_n(s.max):>12}  {busiest:<17}{skew:>6}"
            f"{s.stddev:>10,.1f}")


def worst_skew(f: Figures) -> tuple[str, Spread, str] | None:
    """The spread with the highest max/mean: (its title, it, what its members are)."""
    candidates = [(title, s, member) for title, name, member in _SPREADS
                  if (s := getattr(f, name)) is not None and s.skew is not None]
    return max(candidates, key=lambda c: c[1].skew or 0.0) if candidates else None


def render(f: Figures, *, kind: str, tables: Sequence[str] = (), output: str | None = None,
           fmt: str = "", plots: Sequence[str] = (), moves: int = 0) -> str:
    lines = [f"kraft metadata report: {f.source} ({kind}, offset {f.offset})",
             f"  {f.topics:,} topics, {f.partitions:,} partitions, {f.replicas:,} replicas; "
             f"{f.brokers:,} brokers ({f.fenced_brokers:,} fenced)"
             + (f" on {f.racks:,} racks" if f.racks else ", no racks"),
             "",
             f"  {'load':<22}{'mean':>12}{'max':>12}  {'(busiest)':<17}{'skew':>6}{'stddev':>10}"]
    for title, name, member in _SPREADS:
        spread = getattr(f, name)
        if spread is not None and spread.members:
            lines.append(_spread_line(title, spread, member))
    worst = worst_skew(f)
    if worst:
        title, s, member = worst
        lines.append(f"  worst skew: {title}, {s.skew:.2f} ({member} {s.busiest} has "
                     f"{_n(s.max)}, the mean is {_n(s.mean)})")
    lines += ["", "  problems"]
    for name, problem in f.problems().items():
        lines.append(f"  {_PROBLEM_TITLES[name]:<34}{problem.count:>10,}")
        lines.extend(f"      e.g. {e}" for e in problem.examples)
    if f.history:
        first, last = f.history[0], f.history[-1]
        lines += ["", f"  history: {len(f.history):,} batch(es), offsets {first.offset} to "
                      f"{last.offset}: topics {first.topics:,} -> {last.topics:,}, partitions "
                      f"{first.partitions:,} -> {last.partitions:,}"]
    if moves:
        where = (f"kraft reassign-partitions --bootstrap-controller HOST:PORT --execute "
                 f"--reassignment-json-file {output}/reassignment.json" if output else "give --output to write it")
        lines += ["", f"  rebalancing plan: {moves:,} partition(s) to move: {where}"]
    if output:
        lines += ["", f"  tables ({fmt}) in {output}: {', '.join(tables)}"]
        if plots:
            lines.append(f"  plots: {', '.join(plots)}")
    return "\n".join(lines)
