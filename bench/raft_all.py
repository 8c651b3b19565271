"""``make bench-raft``: the embedded, service and failover benchmarks at 1, 64 and 256 clients,
and, when they are installed (``make anchors``), etcd's and PySyncObj's anchor benchmarks from
``../shared/anchors`` in the same run, so the figures can be compared as ratios; and
``bench.grpc_floor``, the most a Python gRPC service answers here with nothing behind it. The KV
service is measured twice: through unary calls (``--unary``) and through the stream client.
Prints every JSON line as it comes, then a table.

    python -m bench.raft_all [--seconds 10] [--clients 1,64,256] [--kills 10]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ANCHORS = Path(os.environ.get("KRAFT_ANCHORS", REPO.parent / "shared" / "anchors"))
ANCHOR_VENV = REPO / ".venv-anchors"


def run(cmd: list[str], timeout: float) -> dict | None:
    print(f"# {' '.join(cmd)}", file=sys.stderr, flush=True)
    # A session of its own, so that a benchmark that hangs goes with every process it started
    # instead of leaving them to load the machine for the next one.
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            print("#   timed out", file=sys.stderr)
            return None
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not rows:
        print(f"#   failed: {err.strip()[-500:]}", file=sys.stderr)
        return None
    print(json.dumps(rows[-1]), flush=True)
    return rows[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--clients", default="1,64,256")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--value", type=int, default=256)
    a = ap.parse_args()
    py = sys.executable
    clients = [int(c) for c in a.clients.split(",")]
    limit = a.seconds * 4 + 120
    rows = []
    have_etcd = shutil.which("etcd") is not None
    anchor_py = ANCHOR_VENV / "bin" / "python"
    have_pso = anchor_py.exists()
    if not (have_etcd and have_pso):
        print("# anchors not installed (run `make anchors`): etcd " + ("found" if have_etcd else "missing")
              + ", PySyncObj " + ("found" if have_pso else "missing"), file=sys.stderr)
    for n in clients:
        common = ["--clients", str(n), "--seconds", str(a.seconds), "--value", str(a.value)]
        rows.append(run([py, "-m", "bench.raft_embedded", *common], limit))
        if have_pso:
            rows.append(run([str(anchor_py), str(ANCHORS / "pysyncobj_bench.py"), *common], limit))
        rows.append(run([py, "-m", "bench.raft_service", "--unary", *common], limit))
        rows.append(run([py, "-m", "bench.raft_service", *common], limit))
        rows.append(run([py, "-m", "bench.grpc_floor", *common], limit))
        if have_etcd:
            rows.append(run([str(anchor_py if have_pso else py), str(ANCHORS / "etcd_bench.py"), *common], limit))
    rows.append(run([py, "-m", "bench.failover", "--kills", str(a.kills)], a.kills * 60 + 60))
    print("\n| system | clients | ops/s | p50 ms | p99 ms |\n|---|---|---|---|---|")
    for r in rows:
        if r and "ops_per_s" in r:
            print(f"| {r['system']} | {r['clients']} | {r['ops_per_s']:,} | {r['p50_ms']} | {r['p99_ms']} |")
        elif r and r.get("bench") == "failover":
            print(f"\nfailover over {r['kills']} kills: p50 {r['p50_s']} s, max {r['max_s']} s")


if __name__ == "__main__":
    main()
