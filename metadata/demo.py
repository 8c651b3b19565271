"""The main job (``make demo``): a local 3-controller quorum on loopback, driven with the same
`kraft` commands an operator types, through a failover of the active controller.

    python -m metadata.demo [--dir DIR] [--base-port P]
"""
from __future__ import annotations

import argparse
import asyncio
import shlex
import subprocess
import sys
import tempfile
import time

from brokerd.lifecycle import BrokerLifecycle
from brokerd.metadata_fetcher import MetadataFetcher
from metadata.client import ControllerClient
from protos import controller_pb2 as pb

from .dev_quorum import REPO, DevQuorum

BOLD, DIM, RESET = ("\033[1m", "\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "", "")


def say(text: str) -> None:
    print(f"\n{BOLD}== {text}{RESET}", flush=True)


def kraft(*args: str, expect_failure: bool = False) -> str:
    shown = "kraft " + " ".join(shlex.quote(a) for a in args)
    print(f"{DIM}${RESET} {shown}", flush=True)
    p = subprocess.run([sys.executable, "-m", "metadata.cli", *args], cwd=REPO, capture_output=True, text=True)
    out = (p.stdout + p.stderr).rstrip()
    if out:
        print(out + (f"  (exit {p.returncode})" if expect_failure else ""), flush=True)
    if (p.returncode != 0) != expect_failure:
        raise SystemExit(f"demo stopped: `{shown}` {'succeeded' if expect_failure else 'failed'} unexpectedly")
    return p.stdout


async def register_brokers(q: DevQuorum, n: int) -> list[tuple[BrokerLifecycle, MetadataFetcher, ControllerClient]]:
    out = []
    for i, rack in zip(range(n), "abc"):
        bid = 101 + i
        client = ControllerClient(q.bootstrap)
        fetcher = MetadataFetcher(client, bid, max_wait_ms=300)
        fetcher.start()
        lc = BrokerLifecycle(client, bid, q.cluster_id,
                             [pb.Endpoint(name="PLAINTEXT", host="127.0.0.1", port=9092 + i, security_protocol="PLAINTEXT")],
                             rack=f"rack-{rack}", heartbeat_interval_s=0.5, metadata_offset=lambda f=fetcher: f.offset)
        await lc.start()
        out.append((lc, fetcher, client))
    for lc, _, _ in out:
        await asyncio.wait_for(lc.unfenced.wait(), 30)
    return out


async def first_write(q: DevQuorum, among: list[int]) -> float:
    """Seconds until a write commits on the new active controller."""
    t0 = time.monotonic()
    async with ControllerClient([f"127.0.0.1:{q.ports[i]}" for i in among], timeout=30, attempt_timeout=0.5) as c:
        await c.call("CreateTopics", pb.CreateTopicsRequest(topics=[
            pb.CreatableTopic(name="after-failover", num_partitions=3, replication_factor=3)]))
    return time.monotonic() - t0


async def main_async(base_dir: str, base_port: int) -> None:
    say("Start three controllers on loopback (kraft dev-quorum does the same)")
    q = DevQuorum(base_dir, base_port)
    q.start()
    brokers = []
    try:
        leader = await q.wait_for_leader()
        b = q.bootstrap
        print(f"cluster id {q.cluster_id}; configs, logs and data in {q.base_dir}")
        kraft("quorum", "--bootstrap-controller", b, "describe", "--status")

        say("Register three brokers through the broker RPCs (BrokerRegistration + BrokerHeartbeat)")
        print("(real broker processes arrive with brokerd; these speak the same RPCs, pull the metadata "
              "log with FetchMetadata and are unfenced once caught up)")
        brokers = await register_brokers(q, 3)
        kraft("cluster", "--bootstrap-controller", b, "describe")

        say("Create topics: replicas on distinct brokers, spread across racks, leaders balanced")
        kraft("topics", "--bootstrap-controller", b, "create", "--topic", "orders", "--partitions", "6",
              "--replication-factor", "3")
        kraft("topics", "--bootstrap-controller", b, "create", "--topic", "payments", "--partitions", "3",
              "--replication-factor", "2", "--config", "min.insync.replicas=2", "--config", "retention.ms=86400000")
        kraft("topics", "--bootstrap-controller", b, "describe")
        print(f"{DIM}(a duplicate is refused with Kafka's error code){RESET}")
        kraft("topics", "--bootstrap-controller", b, "create", "--topic", "orders", expect_failure=True)

        say(f"kill -9 the active controller (node {leader})")
        before = kraft("topics", "--bootstrap-controller", b, "list").split()
        q.kill(leader)
        others = [n for n in q.ports if n != leader]
        took = await first_write(q, others)
        new_leader = await q.wait_for_leader(among=others)
        print(f"node {new_leader} took over and committed a write {took:.2f}s after the kill, "
              f"with no metadata to reload: it had replayed the same log")
        survivors = ",".join(f"127.0.0.1:{q.ports[n]}" for n in others)
        kraft("quorum", "--bootstrap-controller", survivors, "describe", "--status")
        after = kraft("topics", "--bootstrap-controller", survivors, "list").split()
        lost = set(before) - set(after)
        print(f"topics before the kill: {len(before)}, after: {len(after)} (lost: {len(lost)})")
        if lost:
            raise SystemExit(f"demo failed: topics lost: {sorted(lost)}")

        say(f"Restart node {leader}: it rejoins as a standby and catches up")
        q.start_node(leader)
        for _ in range(100):
            await asyncio.sleep(0.1)
            out = subprocess.run([sys.executable, "-m", "metadata.cli", "quorum", "--bootstrap-controller", b,
                                  "describe", "--replication"], cwd=REPO, capture_output=True, text=True).stdout
            row = [line for line in out.splitlines() if line.startswith(f"{leader}\t")]
            if row and row[0].split("\t")[2] == "0":
                break
        kraft("quorum", "--bootstrap-controller", b, "describe", "--replication")

        say("Done: shutting down")
    finally:
        for lc, fetcher, client in brokers:
            await lc.stop()
            await fetcher.stop()
            await client.close()
        q.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--base-port", type=int, default=19093)
    a = ap.parse_args()
    asyncio.run(main_async(a.dir or tempfile.mkdtemp(prefix="kraft-demo-"), a.base_port))


if __name__ == "__main__":
    main()
