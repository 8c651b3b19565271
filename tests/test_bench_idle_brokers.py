"""bench.idle_brokers' before/after summary, without a cluster: each window of this tree paired
with the base's of the same round, the medians and the paired ratios of the idle CPU."""
from __future__ import annotations

from bench.idle_brokers import summary


def _row(tree: str, r: int, brokers: float, controllers: float, window: int = 0) -> dict:
    return {"phase": "idle", "window": window, "seconds": 20.0, "brokers_cores": brokers,
            "brokers_user_cores": brokers * 0.8, "controllers_cores": controllers, "tree": tree, "round": r}


def test_the_summary_pairs_the_idle_cpu_round_by_round():
    rows = [_row("base", 0, 0.050, 0.15), _row("this", 0, 0.025, 0.12),
            _row("this", 1, 0.030, 0.12), _row("base", 1, 0.040, 0.16),
            _row("base", 2, 0.060, 0.14), _row("this", 2, 0.040, 0.14),
            {"tree": "base", "round": 1, "system": "cluster", "phase": "logs", "noteworthy_lines": 0}]
    out = summary(rows, 3)
    brokers = out["brokers_cores"]
    assert brokers["base"] == 0.05 and brokers["this"] == 0.03
    assert brokers["paired_ratio"] == 0.667 and brokers["range"] == [0.5, 0.75] and brokers["pairs"] == 3
    assert out["controllers_cores"]["range"] == [0.75, 1.0]
    # a failed run (no row) pairs with nothing; windows pair with the same window
    out = summary([r for r in rows if (r["tree"], r["round"]) != ("this", 2)]
                  + [_row("base", 0, 0.05, 0.15, window=1), _row("this", 0, 0.01, 0.15, window=1)], 3)
    assert out["brokers_cores"]["pairs"] == 3 and out["brokers_cores"]["range"] == [0.2, 0.75]
