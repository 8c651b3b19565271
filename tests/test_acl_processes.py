"""ACLs in a cluster of real processes (three controllers, two brokers, plaintext, the
authorizer on, User:ANONYMOUS, which every node is on plaintext, in super.users): `kraft acls`
writes them into the metadata log, every controller and broker gets them, and they survive a
`kill -9` of the active controller and a restart of every node (from snapshots and the log);
metadata-shell shows them under /acls and dump-log decodes their records."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from metadata.authorizer import STANDARD_AUTHORIZER
from tests.brokercluster import REPO, BrokerCluster
from tests.eventually import eventually
from tests.logs import assert_no_tracebacks

SECURITY = {"authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS"}


def tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def kraft(c: BrokerCluster, *args: str) -> str:
    p = tool("kraft.cli", "acls", "--bootstrap-controller", c.quorum.bootstrap, *args)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return p.stdout


def acl_ids(source: str, path: Path) -> list[str]:
    """The ACL ids metadata-shell finds in a log directory (-d) or a snapshot file (-s)."""
    p = tool("metadata.shell", source, str(path), "-c", "ls /acls/byId")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return p.stdout.split()


def test_acls_replicate_and_survive_failover_and_restarts(tmp_path: Path) -> None:
    c = BrokerCluster(tmp_path, 2, broker_props=SECURITY, controller_props={
        **SECURITY, "metadata.log.max.records.between.snapshots": "8", "metadata.log.snapshot.trailing.records": "4"})
    c.start()
    try:
        asyncio.run(c.wait_unfenced(timeout=60))
        kraft(c, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation", "Describe",
              "--topic", "orders", "--group", "billing")
        kraft(c, "--add", "--deny-principal", "User:bob", "--operation", "Write", "--topic", "pay",
              "--resource-pattern-type", "prefixed")
        kraft(c, "--add", "--allow-principal", "User:broker", "--operation", "ClusterAction", "--cluster")
        listed = kraft(c, "--list")
        assert listed.count("(principal=") == 6
        assert ("Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=pay, patternType=PREFIXED)`: \n"
                " \t(principal=User:bob, host=*, operation=WRITE, permissionType=DENY) \n") in listed

        controllers = [c.quorum.base_dir / f"controller-{i}" for i in (1, 2, 3)]

        def everywhere(count: int) -> bool:
            """Every controller's log and every broker's local metadata snapshot hold ``count`` ACLs."""
            seen = [acl_ids("-d", d) for d in controllers]
            seen += [acl_ids("-s", max((c.log_dir(b) / "__cluster_metadata").glob("*.snap"))) for b in c.ids]
            return all(len(ids) == count for ids in seen) and len({tuple(ids) for ids in seen}) == 1

        async def replicated(count: int) -> None:
            await eventually(lambda: everywhere(count), 30, interval=0.5, what=f"{count} ACLs on every node")
        asyncio.run(replicated(6))

        # kill -9 of the active controller: the next one has the same ACLs, and takes new writes
        leader = asyncio.run(c.quorum.wait_for_leader())
        c.quorum.kill(leader)
        assert asyncio.run(c.quorum.wait_for_leader(among=[i for i in (1, 2, 3) if i != leader])) != leader
        assert kraft(c, "--list") == listed
        kraft(c, "--remove", "--deny-principal", "User:bob", "--operation", "Write", "--topic", "pay",
              "--resource-pattern-type", "prefixed")
        kraft(c, "--add", "--allow-principal", "User:carol", "--operation", "Write", "--topic", "pay",
              "--resource-pattern-type", "prefixed")
        after_failover = kraft(c, "--list")
        assert "User:bob" not in after_failover and "User:carol" in after_failover
        c.quorum.start_node(leader)
        asyncio.run(replicated(6))

        # every node restarts: the ACLs come back from the snapshots and logs
        c.restart_all()
        assert kraft(c, "--list") == after_failover
        asyncio.run(replicated(6))

        # the tools: the records in the controllers' logs and snapshots
        snapshots = sorted(controllers[0].glob("snapshots/*.snap"))
        assert snapshots, "the controllers took no snapshot"
        dumped = tool("kraft.cli", "dump-log", "--json", "--files", str(snapshots[-1]))
        assert dumped.returncode == 0, dumped.stderr
        items = [json.loads(line) for line in dumped.stdout.splitlines()]
        in_snapshot = [i["payload"] for i in items if i["item"] == "snapshotRecord"
                       and i["payload"]["type"] == "AccessControlEntryRecord"]
        assert {(r["data"]["principal"], r["data"]["operation"]) for r in in_snapshot} <= {
            ("User:alice", "READ"), ("User:alice", "DESCRIBE"), ("User:broker", "CLUSTER_ACTION"),
            ("User:bob", "WRITE"), ("User:carol", "WRITE")} and in_snapshot
        segments = sorted(controllers[0].glob("wal/*.log"))
        logged = tool("kraft.cli", "dump-log", "--files", ",".join(map(str, segments)))
        assert logged.returncode == 0, logged.stderr
        assert '"type": "RemoveAccessControlEntryRecord"' in logged.stdout
        one = acl_ids("-d", controllers[0])[0]
        shown = json.loads(tool("metadata.shell", "-d", str(controllers[0]), "-c", f"cat /acls/byId/{one}").stdout)
        assert set(shown) == {"resourceType", "resourceName", "patternType", "principal", "host", "operation",
                              "permissionType"}
    finally:
        c.close()
    assert_no_tracebacks(c.base)
