"""What a new user hit on a walk through the tools (issue 25, item 6), each as it was met:
``consumer-groups --reset-offsets`` on a new group, ``quorum add/remove-controller --dry-run``
on a static quorum, ``dump-log`` on a broker's snapshot, metadata-shell's ``/quorum`` of a
static quorum, ``raft-kv transfer-leader``, docs/raft.md's embedding example and the offset
``make report`` reports at. (A wrong controller address: tests/test_tool_errors.py.)"""
from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from raft.storage import format_storage
from tests import metadata_logs as L
from tests.brokercluster import REPO, BrokerCluster, running_cluster
from tests.eventually import eventually
from tests.kvcluster import free_ports
from tests.logs import assert_no_tracebacks

KRAFT = [sys.executable, "-m", "kraft.cli"]
SHELL = [sys.executable, "-m", "metadata.shell.main"]


def run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("walk"), {}) as c:
        asyncio.run(c.create_topic("walk", partitions=2))
        yield c


def test_reset_offsets_of_a_new_group_waits_for_its_coordinator_to_load(cluster):
    """The first request for a group makes its coordinator load its partition of
    __consumer_offsets; COORDINATOR_LOAD_IN_PROGRESS is retried, as Kafka's tool does."""
    for group in ("fresh-1", "fresh-2", "fresh-3"):  # on different partitions of __consumer_offsets
        p = run(KRAFT + ["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers, "--reset-offsets",
                         "--group", group, "--topic", "walk", "--to-earliest", "--execute"])
        assert p.returncode == 0 and p.stderr == "", p.stderr
        assert p.stdout.split("\n")[1].split() == [group, "walk", "0", "0"], p.stdout


def test_reset_offsets_without_execute_says_it_is_a_dry_run(cluster):
    p = run(KRAFT + ["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers, "--reset-offsets",
                     "--group", "dry", "--topic", "walk", "--to-latest"])
    assert p.returncode == 0, p.stderr
    assert p.stderr.startswith("WARN: No action will be performed as the --execute option is missing"), p.stderr
    explicit = run(KRAFT + ["consumer-groups", "--bootstrap-server", cluster.bootstrap_servers, "--reset-offsets",
                            "--group", "dry", "--topic", "walk", "--to-latest", "--dry-run"])
    assert explicit.returncode == 0 and explicit.stderr == "", explicit.stderr


def test_a_dry_run_on_a_static_quorum_is_refused_as_the_real_call_is(cluster):
    c = cluster.quorum.bootstrap
    for change in (["add-controller", "--config", str(cluster.quorum.config_path(1))],
                   ["remove-controller", "--controller-id", "3", "--controller-directory-id",
                    "AAAAAAAAAAAAAAAAAAAAAA"]):
        real = run(KRAFT + ["quorum", "--bootstrap-controller", c, *change])
        dry = run(KRAFT + ["quorum", "--bootstrap-controller", c, *change, "--dry-run"])
        assert real.returncode == dry.returncode == 1, (real.stderr, dry.stdout)
        assert dry.stderr == real.stderr and "UNSUPPORTED_VERSION" in dry.stderr and "static" in dry.stderr
        assert "DRY RUN" not in dry.stdout


def test_dump_log_reads_a_snapshot_by_its_content(cluster, tmp_path):
    """A broker keeps plain metadata snapshots named like Raft's (*.snap)."""
    named = L.write_plain_snapshot(tmp_path / "00000000000000000004.snap")
    found = sorted((cluster.log_dir(101) / "__cluster_metadata").glob("*.snap"))
    for path in [named, *found[-1:]]:
        p = run(KRAFT + ["dump-log", "--files", str(path)])
        assert p.returncode == 0 and p.stderr == "", p.stderr
        assert p.stdout.startswith(f"Dumping {path} (metadata snapshot)\nMetadata snapshot: clusterId: "), p.stdout
    cut = tmp_path / "00000000000000000009-00000000000000000001.snap"  # a Raft snapshot that lost its trailer
    cut.write_bytes(named.read_bytes()[:-3])
    p = run(KRAFT + ["dump-log", "--files", str(cut)])
    assert p.returncode == 1 and "no Raft snapshot trailer" in p.stderr, p.stderr


def test_quorum_of_a_static_quorum_in_metadata_shell(cluster):
    """Its directory records no voters (they are in controller.quorum.voters): null, not
    absent; a static quorum has no learners; a node that voted shows whom."""
    shown = json.loads(run(SHELL + ["--directory", str(cluster.quorum.base_dir / "controller-1"), "--json",
                                    "-c", "tree /quorum"]).stdout)
    assert shown["voters"] is None and shown["learners"] == [] and "votedFor" in shown, shown
    live = run(SHELL + ["--bootstrap-controller", cluster.quorum.bootstrap, "--json", "-c", "tree /quorum"])
    shown = json.loads(live.stdout)
    assert shown["voters"] == [1, 2, 3] and shown["learners"] == [], live.stderr
    assert shown["votedFor"] == shown["leader"] > 0, shown


def test_make_report_reports_where_every_broker_ran(cluster):
    """`make report` passes the demo's healthy offset to `kraft analytics report --offset`:
    the demo's log ends with every broker stopped (no leaders)."""
    from kraft.demo import HEALTHY_OFFSET_FILE, record_healthy_offset
    offset = record_healthy_offset(cluster.quorum.bootstrap, cluster.base)
    assert (cluster.base / HEALTHY_OFFSET_FILE).read_text() == f"{offset}\n"
    makefile = (REPO / "Makefile").read_text()
    assert f"--offset $$(cat .demo/{HEALTHY_OFFSET_FILE})" in makefile
    leaders = run(SHELL + ["--directory", str(cluster.quorum.base_dir / "controller-1"), "--at-offset", str(offset),
                           "--json", "-c", "cat /topics/walk/partitions/0/leader"])
    assert leaders.returncode == 0 and int(leaders.stdout) in cluster.ids, leaders.stderr


def test_raft_kv_transfer_leader_says_where_leadership_went(kv_cluster):
    c = kv_cluster(3)
    c.start_all()
    leader, _ = asyncio.run(c.wait_leader())
    target = next(n for n in c.ids if n != leader)
    endpoints = ",".join(c.endpoints())
    moved = c.run_cli("--endpoints", endpoints, "transfer-leader", str(target))
    assert moved.stdout.strip() == f"OK (leadership moved from node {leader} to node {target})", moved.stdout
    again = c.run_cli("--endpoints", endpoints, "transfer-leader", str(target))
    assert again.stdout.strip() == f"OK (node {target} already leads)", again.stdout


def test_the_embedding_example_of_docs_raft_md_runs_whichever_node_leads(tmp_path):
    """Node 1 starts last, when 2 or 3 leads: it follows instead of proposing (NotLeader)."""
    text = (REPO / "docs" / "raft.md").read_text()
    code = re.search(r"## Embedding a node\n\n```python\n(.*?)```", text, re.S).group(1)
    ports = free_ports(3)
    for i, port in enumerate(ports, 1):
        code = code.replace(f"127.0.0.1:909{i}", f"127.0.0.1:{port}")
    code = code.replace("/var/lib/counter/", f"{tmp_path}/")
    (tmp_path / "counter.py").write_text(code)
    procs = {}
    outs = {n: tmp_path / f"node{n}.log" for n in (1, 2, 3)}

    def start(n: int) -> None:
        format_storage(str(tmp_path / str(n)), "counter", n)
        procs[n] = subprocess.Popen([sys.executable, "counter.py", str(n)], cwd=tmp_path, stdout=outs[n].open("w"),
                                    stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"})

    def printed(n: int, pattern: str) -> None:
        """Until node ``n`` printed a line matching ``pattern``, or exited."""
        asyncio.run(eventually(lambda: re.search(pattern, outs[n].read_text(), re.M) or procs[n].poll() is not None,
                               30, what=f"node {n} printing {pattern!r}"))
    try:
        start(2), start(3)
        printed(2, r"^5$|follows")
        printed(3, r"^5$|follows")
        start(1)
        printed(1, r"follows|Error")
        out = {n: outs[n].read_text() for n in (1, 2, 3)}
        assert all(p.poll() is None for p in procs.values()), out  # none crashed
        assert re.fullmatch(r"node 1 follows node [23]\n", out[1]), out
        assert sorted([out[2], out[3]])[0] == "5\n", out  # the leader, 2 or 3, proposed
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    assert_no_tracebacks(tmp_path)
