"""The main job (``make demo``): three controllers and three brokers on loopback, driven with
the same `kraft` commands an operator types, through the loss of the active controller and of
a partition leader, then a consumer group losing a member.

    python -m kraft.demo [--dir DIR] [--base-port P]
"""
from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from metadata.client import ControllerClient
from protos import controller_pb2 as pb

from .dev_quorum import REPO, DevQuorum

BOLD, DIM, RESET = ("\033[1m", "\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "", "")


def say(text: str) -> None:
    print(f"\n{BOLD}== {text}{RESET}", flush=True)


def kraft(*args: str, expect_failure: bool = False, input: str | None = None, quiet: bool = False) -> str:
    shown = "kraft " + " ".join(shlex.quote(a) for a in args)
    if not quiet:
        print(f"{DIM}${RESET} {shown}", flush=True)
    p = subprocess.run([sys.executable, "-m", "kraft.cli", *args], cwd=REPO, capture_output=True, text=True,
                       input=input)
    out = (p.stdout + p.stderr).rstrip()
    if out and not quiet:
        print(out + (f"  (exit {p.returncode})" if expect_failure else ""), flush=True)
    if (p.returncode != 0) != expect_failure:
        raise SystemExit(f"demo stopped: `{shown}` {'succeeded' if expect_failure else 'failed'} unexpectedly")
    return p.stdout


#: Where the demo leaves the metadata offset of its healthy cluster, for ``make report``.
HEALTHY_OFFSET_FILE = "healthy.offset"


def record_healthy_offset(bootstrap: str, base_dir: Path) -> int:
    """Keep the metadata offset now, while every broker runs, in ``base_dir``: once the demo
    has stopped them all, its log ends with every partition offline, an empty leaders chart."""
    out = kraft("cluster", "--bootstrap-controller", bootstrap, "describe", quiet=True)
    found = re.search(r"^Metadata offset: (\d+)$", out, re.M)
    if found is None:
        raise SystemExit(f"demo stopped: `kraft cluster describe` printed no metadata offset: {out!r}")
    (base_dir / HEALTHY_OFFSET_FILE).write_text(f"{found.group(1)}\n")
    return int(found.group(1))


async def first_write(q: DevQuorum, among: list[int]) -> float:
    """Seconds until a write commits on the new active controller."""
    t0 = time.monotonic()
    async with ControllerClient([f"127.0.0.1:{q.ports[i]}" for i in among], timeout=30, attempt_timeout=0.5) as c:
        await c.create_topics(pb.CreateTopicsRequest(topics=[
            pb.CreatableTopic(name="after-failover", num_partitions=3, replication_factor=3)]))
    return time.monotonic() - t0


def leaders(describe_output: str, topic: str) -> dict[int, int]:
    """partition -> leader, from `kraft topics describe` output."""
    out = {}
    for line in describe_output.splitlines():
        m = re.search(rf"Topic: {re.escape(topic)}\tPartition: (\d+)\tLeader: (\S+)", line)
        if m:
            out[int(m.group(1))] = int(m.group(2)) if m.group(2).isdigit() else -1
    return out


class Member:
    """A `kraft console-consumer --group` process and the values it printed."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kraft.cli", "console-consumer", "--bootstrap-server", bootstrap, "--topic",
             "orders", "--group", group, "--from-beginning", "--consumer-property", "session.timeout.ms=6000",
             "--consumer-property", "heartbeat.interval.ms=1000"],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.values: list[str] = []
        threading.Thread(target=lambda: self.values.extend(line.rstrip("\n") for line in self.proc.stdout or ()),
                         daemon=True).start()


def members_of(bootstrap: str, group: str) -> int:
    """Members of a stable group (0 while it rebalances)."""
    p = subprocess.run([sys.executable, "-m", "kraft.cli", "consumer-groups", "--bootstrap-server", bootstrap,
                        "--describe", "--group", group], cwd=REPO, capture_output=True, text=True)
    m = re.search(r"State: Stable, generation \d+, (\d+) members", p.stdout)
    return int(m.group(1)) if m else 0


async def group_scene(s: str, sent: list[str]) -> None:
    say("A consumer group of three console consumers shares orders; kill -9 one of them")
    members = [Member(s, "billing") for _ in range(3)]
    try:
        for _ in range(300):
            await asyncio.sleep(0.2)
            if members_of(s, "billing") == 3:
                break
        kraft("consumer-groups", "--bootstrap-server", s, "--describe", "--group", "billing")
        victim = members[0]
        victim.proc.kill()
        victim.proc.wait(10)
        print(f"killed a member that had printed {len(victim.values)} messages; the coordinator notices when its "
              f"6 s session expires and the other two share its partitions")
        third = [f"order-{i}:item {i}" for i in range(200, 260)]
        kraft("console-producer", "--bootstrap-server", s, "--topic", "orders", "--key-separator", ":",
              input="\n".join(third) + "\n", quiet=True)
        expected = {m.split(":", 1)[1] for m in sent + third}
        for _ in range(300):
            await asyncio.sleep(0.2)
            if expected <= {v for m in members for v in m.values} and members_of(s, "billing") == 2:
                break
        kraft("consumer-groups", "--bootstrap-server", s, "--describe", "--group", "billing")
        seen = [v for m in members for v in m.values]
        missing = expected - set(seen)
        print(f"{len(expected)} messages, each consumed by some member; missing: {len(missing)}; read twice: "
              f"{len(seen) - len(set(seen))} (what the killed member printed but had not committed yet)")
        if missing:
            raise SystemExit(f"demo failed: {len(missing)} messages never consumed by the group")
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.proc.terminate()
                m.proc.wait(15)


async def main_async(base_dir: str, base_port: int) -> None:
    say("Start three controllers and three brokers on loopback (what `kraft dev-quorum` does)")
    q = DevQuorum(base_dir, base_port, brokers=3, broker_extra={"replica.lag.time.max.ms": "10000"})
    q.start()
    try:
        leader = await q.wait_for_leader()
        await q.wait_for_brokers()
        c, s = q.bootstrap, q.bootstrap_servers
        print(f"cluster id {q.cluster_id}; configs, logs and data in {q.base_dir}")
        kraft("quorum", "--bootstrap-controller", c, "describe", "--status")
        kraft("cluster", "--bootstrap-controller", c, "describe")

        say("Create topics: replicas on distinct brokers, spread across racks, leaders balanced")
        kraft("topics", "--bootstrap-controller", c, "create", "--topic", "orders", "--partitions", "6",
              "--replication-factor", "3", "--config", "min.insync.replicas=2")
        kraft("topics", "--bootstrap-controller", c, "create", "--topic", "payments", "--partitions", "3",
              "--replication-factor", "2")
        kraft("topics", "--bootstrap-controller", c, "describe")
        print(f"{DIM}(a duplicate is refused with Kafka's error code){RESET}")
        kraft("topics", "--bootstrap-controller", c, "create", "--topic", "orders", expect_failure=True)

        say("Produce 100 messages with acks=all")
        first = [f"order-{i}:item {i}" for i in range(100)]
        kraft("console-producer", "--bootstrap-server", s, "--topic", "orders", "--acks", "all",
              "--key-separator", ":", input="\n".join(first) + "\n", quiet=True)
        print(f"{len(first)} messages acknowledged by the in-sync replicas")

        say(f"kill -9 the active controller (node {leader})")
        before = kraft("topics", "--bootstrap-controller", c, "list").split()
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

        say("kill -9 a broker that leads partitions")
        led = leaders(kraft("topics", "--bootstrap-controller", survivors, "describe", "--topic", "orders", quiet=True), "orders")
        victim = led[0]
        q.kill(victim)
        print(f"broker {victim} led partitions {sorted(p for p, b in led.items() if b == victim)} of orders")
        second = [f"order-{i}:item {i}" for i in range(100, 200)]
        kraft("console-producer", "--bootstrap-server", s, "--topic", "orders", "--acks", "all",
              "--key-separator", ":", input="\n".join(second) + "\n", quiet=True)
        print(f"{len(second)} more messages acknowledged with broker {victim} down")
        now = kraft("topics", "--bootstrap-controller", survivors, "describe", "--topic", "orders")
        moved = leaders(now, "orders")
        if any(b == victim for b in moved.values()):
            raise SystemExit(f"demo failed: broker {victim} still leads a partition")
        print(f"the controller fenced broker {victim} and elected new leaders from each ISR")
        out = kraft("console-consumer", "--bootstrap-server", s, "--topic", "orders", "--from-beginning",
                    "--max-messages", "200", "--timeout-ms", "20000", quiet=True).split("\n")
        got = {line.strip() for line in out if line.strip()}
        missing = {m.split(":", 1)[1] for m in first + second} - got
        print(f"consumed {len(got)} distinct messages; acknowledged but missing: {len(missing)}")
        if missing:
            raise SystemExit(f"demo failed: {len(missing)} acknowledged messages missing")

        say(f"Restart controller {leader} and broker {victim}: both rejoin and catch up")
        q.start_node(leader)
        q.start_node(victim)
        await q.wait_for_brokers(ids=[victim])
        for _ in range(150):  # until it is back in every ISR
            await asyncio.sleep(0.2)
            d = kraft("topics", "--bootstrap-controller", c, "describe", "--topic", "orders", quiet=True)
            isrs = [line.split("Isr: ")[1].split("\t")[0] for line in d.splitlines() if "Partition:" in line]
            if isrs and all(str(victim) in isr.split(",") for isr in isrs):
                break
        kraft("topics", "--bootstrap-controller", c, "describe", "--topic", "orders")
        kraft("quorum", "--bootstrap-controller", c, "describe", "--replication")

        say(f"Hand leadership back to the preferred replicas (broker {victim} leads nothing since its restart)")
        kraft("leader-election", "--bootstrap-controller", c, "--election-type", "preferred", "--all-topic-partitions")
        d = kraft("topics", "--bootstrap-controller", c, "describe", "--topic", "orders")
        off = [line for line in d.splitlines() if "Partition:" in line
               and line.split("Leader: ")[1].split("\t")[0] != line.split("Replicas: ")[1].split(",")[0]]
        if off:
            raise SystemExit(f"demo failed: partitions not led by their preferred replica: {off}")
        print("every partition is led by its first (preferred) replica again; with auto.leader.rebalance.enable "
              "(on by default) the controller does this itself every leader.imbalance.check.interval.seconds")

        await group_scene(s, first + second)

        offset = record_healthy_offset(c, q.base_dir)
        say("Done: shutting down (brokers first, with a controlled shutdown)")
        print(f"Metadata offset {offset} is the cluster with every broker running "
              f"({q.base_dir / HEALTHY_OFFSET_FILE}; `make report` reports on it)")
        print(f"The metadata stays in {q.base_dir}: `kraft analytics report --directory "
              f"{q.base_dir / 'controller-1'}` reports on it, `metadata-shell --directory ...` "
              "browses it.")
    finally:
        q.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--base-port", type=int, default=19093)
    a = ap.parse_args()
    asyncio.run(main_async(a.dir or tempfile.mkdtemp(prefix="kraft-demo-"), a.base_port))


if __name__ == "__main__":
    main()
