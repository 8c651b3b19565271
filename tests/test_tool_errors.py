"""Every tool answers a mistake with one line and a non-zero exit, never a traceback (issue 25,
item 5): each ``kraft`` command, metadata-shell, dump-log, raft-kv and the console tools, run as
processes with bad arguments, a missing or foreign file, an address where nothing listens, and
against a running cluster asked for what cannot be done. An address where nothing listens fails
at once, not after the command's whole timeout; a broker's listener given as a controller's
says which listener to use (items 4 and 6)."""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.brokercluster import REPO, BrokerCluster, running_cluster
from tests.kvcluster import free_ports

DEAD = f"127.0.0.1:{free_ports(1)[0]}"  # closed: connections to it are refused
MISSING = "/nonexistent/kraft-test/file"
KRAFT = [sys.executable, "-m", "kraft.cli"]
SHELL = [sys.executable, "-m", "metadata.shell.main"]
KV = [sys.executable, "-m", "raft.examples.kv.cli"]


def timed(argv: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    t = time.monotonic()
    p = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    return p, time.monotonic() - t


#: The timeout a case that could wait on the network is given (--timeout, --command-timeout):
#: far above what starting a tool takes on CI's loaded 2 cores (up to ~20 s at load 20+), so
#: that failing before it proves the tool did not wait for it, however loaded the machine.
PATIENCE = "60"


def bound(argv: list[str] | tuple[str, ...]) -> float:
    """How long ``argv`` may take to fail: less than the timeout it was given, which a tool that
    waited for it would take at least; 20 s for a mistake that needs no network."""
    for option in ("--timeout", "--command-timeout"):
        if option in argv:
            return float(argv[argv.index(option) + 1])
    return 20.0


def one_line_failure(argv: list[str], ran: tuple[subprocess.CompletedProcess, float] | None = None) -> str:
    """Run ``argv`` (or take how it ``ran``); assert it failed with exactly one line on stderr,
    no traceback and no bug report from the safety net, within its ``bound``; return that line."""
    within_s = bound(argv)
    p, took = ran or timed(argv)
    shown = f"{' '.join(argv[2:])}\nstdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-3000:]}"
    assert "Traceback" not in p.stderr + p.stdout, shown
    assert p.returncode != 0, shown
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, shown
    assert "unexpected" not in lines[0], shown  # kraft's safety net caught what the command did not
    assert took < within_s, f"took {took:.1f}s: {shown}"
    return lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    (d / "garbage.json").write_text("not json")
    (d / "no-topics.json").write_text('{"version": 1, "topics": []}')
    (d / "garbage.log").write_bytes(b"garbage")
    (d / "random.snap").write_bytes(bytes(range(256)) * 3)
    (d / "bad.properties").write_text("node.id=x\n")
    (d / "broker.properties").write_text("node.id=5\nprocess.roles=broker\ncontroller.quorum.voters=1@127.0.0.1:1\n"
                                         f"listeners=PLAINTEXT://127.0.0.1:1\nlog.dirs={d}/b\n")
    return d


OFFLINE = [
    # storage, servers, health
    ["storage", "format", "--cluster-id", "x", "--config", MISSING],
    ["storage", "format", "--cluster-id", "x", "--config", "{d}/bad.properties"],
    ["storage", "info", "--config", MISSING],
    ["server-start", MISSING],
    ["server-start", "{d}/bad.properties"],
    ["health", "--config", MISSING],
    # the controller quorum: nothing listening, a bad address, bad arguments
    ["topics", "--bootstrap-controller", DEAD, "list"],
    ["topics", "--bootstrap-controller", "no-port", "list"],
    ["topics", "--bootstrap-controller", DEAD, "create", "--topic", "t"],
    ["topics", "--bootstrap-controller", DEAD, "create", "--topic", "t", "--replica-assignment", "a:b"],
    ["topics", "--bootstrap-controller", DEAD, "create", "--topic", "t", "--config", "x"],
    ["topics", "--bootstrap-controller", DEAD, "describe", "--topic", "t"],
    ["topics", "--bootstrap-controller", DEAD, "delete", "--topic", "t"],
    ["topics", "--bootstrap-controller", DEAD, "alter", "--topic", "t", "--partitions", "3"],
    ["topics", "--bootstrap-controller", DEAD, "alter", "--topic", "t"],
    ["quorum", "--bootstrap-controller", DEAD, "describe", "--replication"],
    ["quorum", "describe"],
    ["quorum", "--bootstrap-controller", DEAD, "add-controller", "--config", MISSING],
    ["quorum", "--bootstrap-controller", DEAD, "add-controller", "--config", "{d}/broker.properties"],
    ["quorum", "--bootstrap-controller", DEAD, "remove-controller", "--controller-id", "1",
     "--controller-directory-id", "x"],
    ["quorum", "--bootstrap-controller", DEAD, "remove-controller", "--controller-id", "-1",
     "--controller-directory-id", "x"],
    ["cluster", "--bootstrap-controller", DEAD, "describe"],
    ["cluster", "--bootstrap-controller", DEAD, "unregister", "--id", "5"],
    ["configs", "--bootstrap-controller", DEAD, "--entity-type", "topics", "--entity-name", "t", "--describe"],
    ["configs", "--bootstrap-controller", DEAD, "--entity-type", "topics", "--entity-name", "t", "--alter",
     "--add-config", "x"],
    ["configs", "--bootstrap-controller", DEAD, "--entity-type", "brokers", "--entity-name", "abc", "--describe"],
    ["acls", "--bootstrap-controller", DEAD, "--list"],
    ["acls", "--bootstrap-controller", DEAD, "--add", "--allow-principal", "bad", "--topic", "t"],
    ["acls", "--bootstrap-controller", DEAD, "--add", "--allow-principal", "User:a", "--topic", "t",
     "--operation", "Nope"],
    ["reassign-partitions", "--bootstrap-controller", DEAD, "--list"],
    ["reassign-partitions", "--bootstrap-controller", DEAD, "--generate", "--broker-list", "1,2", "--all-topics"],
    ["reassign-partitions", "--bootstrap-controller", DEAD, "--generate", "--broker-list", "1,x", "--all-topics"],
    ["reassign-partitions", "--bootstrap-controller", DEAD, "--generate", "--broker-list", "1,2",
     "--topics-to-move-json-file", MISSING],
    ["reassign-partitions", "--bootstrap-controller", DEAD, "--generate", "--broker-list", "1,2",
     "--topics-to-move-json-file", "{d}/no-topics.json"],
    ["reassign-partitions", "--bootstrap-controller", DEAD, "--execute", "--reassignment-json-file",
     "{d}/garbage.json"],
    ["reassign-partitions", "--bootstrap-controller", DEAD, "--verify"],
    ["leader-election", "--bootstrap-controller", DEAD, "--election-type", "preferred", "--all-topic-partitions"],
    ["leader-election", "--bootstrap-controller", DEAD, "--election-type", "preferred"],
    # the brokers
    ["get-offsets", "--bootstrap-server", DEAD, "--topic", "t"],
    ["get-offsets", "--bootstrap-server", "no-port", "--topic", "t"],
    ["get-offsets", "--bootstrap-server", DEAD, "--topic", "t", "--time", "-7"],
    ["delete-records", "--bootstrap-server", DEAD, "--offset-json-file", "{d}/garbage.json"],
    ["delete-records", "--bootstrap-server", DEAD, "--offset-json-file", "{d}/no-topics.json"],
    ["delete-records", "--bootstrap-server", DEAD, "--offset-json-file", MISSING],
    ["log-dirs", "--bootstrap-server", DEAD, "--describe"],
    ["log-dirs", "--bootstrap-server", DEAD, "--describe", "--broker-list", "a"],
    ["broker-api-versions", "--bootstrap-server", DEAD, "--timeout", PATIENCE],
    ["broker-api-versions", "--bootstrap-server", "no-port"],
    ["consumer-groups", "--bootstrap-server", DEAD, "--list"],
    ["consumer-groups", "--bootstrap-server", DEAD, "--describe", "--group", "g"],
    ["consumer-groups", "--bootstrap-server", DEAD, "--reset-offsets", "--group", "g"],
    ["consumer-groups", "--bootstrap-server", DEAD, "--delete-offsets", "--group", "g"],
    ["consumer-groups", "--bootstrap-server", DEAD, "--delete-offsets", "--group", "g", "--topic", "t:x"],
    ["console-producer", "--bootstrap-server", DEAD, "--topic", "t", "--producer-property", "nonsense"],
    ["console-consumer", "--bootstrap-server", DEAD, "--topic", "t", "--offset", "abc"],
    # files
    ["dump-log", "--files", MISSING],
    ["dump-log", "--files", "{d}/garbage.log"],
    ["dump-log", "--files", "{d}/random.snap"],
    ["dump-log", "--files", "{d}"],
    ["analytics", "report", "--snapshot", MISSING],
    ["analytics", "report"],
    ["no-such-command"],
]


OTHERS = [
    SHELL + ["--snapshot", MISSING, "-c", "ls"],
    SHELL + ["--directory", MISSING, "-c", "ls"],
    SHELL + ["--snapshot", "{d}/random.snap", "-c", "ls"],
    SHELL + ["--bootstrap-controller", DEAD, "-c", "ls"],
    SHELL + ["--bootstrap-controller", "no-port", "-c", "ls"],
    KV + ["--endpoints", DEAD, "get", "k"],
    KV + ["--endpoints", DEAD, "put", "k", "v"],
    KV + ["--endpoints", DEAD, "transfer-leader", "2"],
    KV + ["format", "--id", "1", "--data-dir", "/proc/kraft-test", "--cluster-id", "c"],
    KV + ["serve", "--id", "1", "--voters", "bad", "--data-dir", MISSING],
]


@pytest.fixture(scope="module")
def offline(files) -> dict[tuple[str, ...], tuple[subprocess.CompletedProcess, float]]:
    """Every offline case, run three at a time (each is mostly a process starting up)."""
    argvs = [tuple(KRAFT + args) for args in OFFLINE] + [tuple(argv) for argv in OTHERS]
    with ThreadPoolExecutor(3) as pool:
        ran = pool.map(lambda argv: timed([a.replace("{d}", str(files)) for a in argv]), argvs)
        return dict(zip(argvs, ran, strict=True))


@pytest.mark.parametrize("args", OFFLINE, ids=lambda a: " ".join(a)[:70])
def test_kraft_offline_mistakes(args, offline):
    argv = tuple(KRAFT + args)
    one_line_failure(list(argv), ran=offline[argv])


@pytest.mark.parametrize("argv", OTHERS, ids=lambda a: " ".join(a[2:])[:70])
def test_other_tools_offline_mistakes(argv, offline):
    one_line_failure(argv, ran=offline[tuple(argv)])


def test_a_refused_address_fails_at_once_saying_so():
    """Not after --command-timeout: once every address refused the connection."""
    line = one_line_failure(KRAFT + ["topics", "--bootstrap-controller", f"{DEAD},{DEAD}",
                                     "--command-timeout", PATIENCE, "list"])
    assert line == f"Error: NETWORK_EXCEPTION: no controller accepted a connection: {DEAD}: connection refused", line


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("tool-errors"), {}) as c:
        yield c


def test_a_brokers_listener_as_the_controller_names_the_listener_to_use(cluster):
    """Issue 25 item 4: a broker's gRPC port answered "Method not found!"; its Kafka port made
    the tool wait its whole timeout."""
    controller = cluster.quorum.bootstrap
    grpc_port, kafka_port = cluster.bootstrap_servers.split(",")[0], f"127.0.0.1:{cluster.kafka_ports[101]}"
    line = one_line_failure(KRAFT + ["topics", "--bootstrap-controller", grpc_port, "list"])
    assert "is not a controller listener" in line and "controller.quorum.voters" in line, line
    line = one_line_failure(KRAFT + ["cluster", "--bootstrap-controller", kafka_port, "--command-timeout", PATIENCE,
                                     "describe"])
    assert "is a broker's Kafka listener" in line and "controller.quorum.voters" in line, line
    assert controller  # the right one still works:
    ok = subprocess.run(KRAFT + ["topics", "--bootstrap-controller", controller, "list"], cwd=REPO,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr


def test_kraft_against_a_cluster_asked_the_impossible(cluster, files):
    c, b = cluster.quorum.bootstrap, cluster.bootstrap_servers
    created = subprocess.run(KRAFT + ["topics", "--bootstrap-controller", c, "create", "--topic", "rf3",
                                      "--replication-factor", "3", "--partitions", "2"],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    generate = KRAFT + ["reassign-partitions", "--bootstrap-controller", c, "--generate", "--broker-list", "101,102",
                        "--all-topics"]
    argvs = [generate] + [KRAFT + args for args in (
        ["reassign-partitions", "--bootstrap-controller", c, "--generate", "--broker-list", "101,999", "--all-topics"],
        ["topics", "--bootstrap-controller", c, "create", "--topic", "x", "--replication-factor", "9"],
        ["topics", "--bootstrap-controller", c, "create", "--topic", "bad name!"],
        ["topics", "--bootstrap-controller", c, "describe", "--topic", "nope"],
        ["topics", "--bootstrap-controller", c, "alter", "--topic", "rf3", "--partitions", "1"],
        ["configs", "--bootstrap-controller", c, "--entity-type", "brokers", "--entity-name", "101", "--alter",
         "--add-config", "min.insync.replicas=x"],
        ["cluster", "--bootstrap-controller", c, "unregister", "--id", "101"],
        ["leader-election", "--bootstrap-controller", c, "--election-type", "preferred", "--topic", "nope"],
        ["get-offsets", "--bootstrap-server", b, "--topic", "rf3", "--partitions", "7"],
        ["get-offsets", "--bootstrap-server", c, "--topic", "rf3"],
        ["log-dirs", "--bootstrap-server", b, "--describe", "--broker-list", "999"],
        ["consumer-groups", "--bootstrap-server", b, "--delete", "--group", "nope"],
        ["dump-log", "--files", str(cluster.quorum.base_dir / "controller-1" / "meta.properties")])] + [
        SHELL + ["--bootstrap-controller", c, "-c", "cat /nope"],
        SHELL + ["--bootstrap-controller", b.split(",")[0], "-c", "ls"]]
    with ThreadPoolExecutor(3) as pool:
        ran = list(pool.map(timed, argvs))
    lines = [one_line_failure(argv, ran=r) for argv, r in zip(argvs, ran, strict=True)]
    assert lines[0].startswith("Error: INVALID_REPLICATION_FACTOR:"), lines[0]  # it was a traceback
