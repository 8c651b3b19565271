"""The code blocks of README.md and docs/*.md run as shown (issue 25 item 3).

Every fenced block is either run here or listed in NOT_RUN with the reason it cannot run as
shown (a synopsis, sample output, a file's contents, a multi-host step, Docker, Spark, a
benchmark); ```properties blocks are files' contents and are never run. A new block fails
``test_every_block_is_run_or_says_why_not`` until it is one or the other.

The blocks run against what they ask for: README's ``kraft dev-quorum`` block is started first,
in the background as its own terminal would run it (until ``Ctrl-C stops them.``); then every
other block in document order, README first: shell blocks as one bash script each (``set -e``,
so every command must succeed; ``&`` servers are stopped with their process group), Python
blocks as scripts. ``.venv/bin`` is on PATH, as ``source .venv/bin/activate`` puts it. The
addresses and directories the docs name are mapped onto this test's by SUBSTITUTIONS, so the
run shares no port or directory with anything else on the machine."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from tests.kvcluster import consecutive_ports
from tests.logs import BAD, assert_no_tracebacks
from tests.processes import sigint_as_in_a_terminal, stop_session

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DEV_QUORUM = "kraft dev-quorum"
T = TypeVar("T")

SYNOPSIS = "a synopsis of a command's forms (placeholders, [options], A|B), not one command"
OUTPUT = "what a command prints (or the error it stops with), not a command"
LISTING = "a listing or a picture, not a command"
ONE_HOST = "one node's steps on its own host; the kraft dev-quorum this test starts takes them for every node"
DOCKER = "docker compose: make compose-test (deploy/compose_test.py) runs it"
DOCKER_SPARK = "docker compose with Spark: make compose-test-spark (deploy/compose_spark_test.py) runs it"
SPARK = ("Spark (a JVM, minutes): tests/test_analytics.py, tests/test_spark_topics.py and "
         "tests/test_spark_standalone.py run these")
DEMO = "reads the .demo/ data of make report (the demo, then Spark): tests/test_metadata_shell.py runs these commands"
BENCH = "a benchmark (minutes of load), run on purpose, never by the tests"
SESSION = ("a sample session on another cluster (its topics, TLS or ACLs): its output cannot match; "
           "tests/test_{metadata_shell_live,leader_election,reassignment,acl_cli,tls}.py run these commands")

#: (document, how the block's first line begins) -> why it is not run; one entry may name several
#: blocks of a document.
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "kraft/       composes"): LISTING,
    ("README.md", "kraft storage random-uuid"): ONE_HOST,
    ("README.md", "ClusterId:"): OUTPUT,
    ("README.md", "from metadata.analytics.session import start"): SPARK,
    ("README.md", "deploy/build-wheels.sh"): DOCKER,
    ("README.md", "import asyncio, pickle"): ("one node of three, each started as its own process on formatted storage: "
                                            "tests/raftnodes.py runs RaftNode clusters on loopback"),
    ("README.md", "metadata-shell --directory /var/lib/kraft/metadata"): SYNOPSIS,
    ("README.md", "$ metadata-shell --directory .demo/"): DEMO,
    ("README.md", "make report"): DEMO,
    ("README.md", "ruff check ."): "the static checks, a minute of CPU: make test runs them first (make lint)",
    ("README.md", "$ kraft analytics report --directory .demo/"): DEMO,
    ("docs/analytics.md", ".venv/bin/pip install"): "installs packages (make test has)",
    ("docs/analytics.md", "error: Java was not found"): OUTPUT,
    ("docs/analytics.md", "from metadata.analytics."): SPARK,
    ("docs/analytics.md", ">>> r("): SPARK,
    ("docs/analytics.md", "offset 5 is before"): OUTPUT,
    ("docs/analytics.md", "snapshot /tmp/kraft-analytics-jpWA/"): OUTPUT,
    ("docs/analytics.md", "words = (spark"): SPARK,
    ("docs/analytics.md", "(spark.readStream"): SPARK,
    ("docs/analytics.md", "(df.selectExpr"): SPARK,
    ("docs/analytics.md", "exactly one of the options"): OUTPUT,
    ("docs/analytics.md", ".venv/bin/python -m bench."): BENCH,
    ("docs/analytics.md", "kraft analytics report --snapshot PATH"): SYNOPSIS,
    ("docs/analytics.md", "$ kraft analytics report"): SPARK,
    ("docs/analytics.md", "tables (parquet)"): OUTPUT,
    ("docs/analytics.md", "PYSPARK_PYTHON="): SPARK,
    ("docs/analytics.md", "kraft analytics standalone start"): SPARK,
    ("docs/analytics.md", "deploy/build-wheels.sh && deploy/build-wheels.sh spark"): DOCKER_SPARK,
    ("docs/brokers.md", "Produce / Fetch"): LISTING,
    ("docs/brokers.md", 'kraft storage format --cluster-id "$(cat cluster.id)"'): ONE_HOST,
    ("docs/brokers.md", "Error: cannot listen"): OUTPUT,
    ("docs/brokers.md", 'async with Producer("h1:9092'): "a fragment (await outside a function, hosts h1, h2)",
    ("docs/brokers.md", "python -m clients.console"): SYNOPSIS,
    ("docs/brokers.md", ".venv/bin/python -m bench."): BENCH,
    ("docs/brokers.md", ".venv/bin/py-spy record --pid BROKER_PID"): ("a profiler attached to a running broker "
                                                                        "(BROKER_PID stands for its process id)"),
    ("docs/brokers.md", "Dumping demo-2 (topic id"): OUTPUT,
    ("docs/brokers.md", "kraft transactions --bootstrap-server HOST:PORT abort"): SYNOPSIS,
    ("docs/metadata-shell.md", "metadata-shell --snapshot FILE"): SYNOPSIS,
    ("docs/metadata-shell.md", "$ metadata-shell -b 127.0.0.1:9999"): "an error example: a port where nothing listens, which 9999 need not be here",
    ("docs/metadata-shell.md", "/"): LISTING,
    ("docs/metadata-shell.md", "$ metadata-shell -d /var/kraft/meta"): SESSION,
    ("docs/metadata-shell.md", "$ metadata-shell --directory /var/kraft/meta"): SESSION,
    ("docs/metadata-shell.md", "$ metadata-shell -b 127.0.0.1:19093"): SESSION,
    ("docs/metadata-shell.md", "kraft dump-log --files DIR/"): SYNOPSIS,
    ("docs/metadata-shell.md", "Dumping /var/kraft/meta"): OUTPUT,
    ("docs/metadata-snapshot-format.md", "offset        size  field"): LISTING,
    ("docs/metadata-snapshot-format.md", "snapshot /var/kraft/meta"): OUTPUT,
    ("docs/operations.md", "kraft storage random-uuid"): ONE_HOST,
    ("docs/operations.md", "kraft topics --bootstrap-controller H:P"): SYNOPSIS,
    ("docs/operations.md", "$ kraft leader-election"): SESSION,
    ("docs/operations.md", "$ kraft quorum --bootstrap-controller 127.0.0.1:9093"): SESSION,
    ("docs/operations.md", "$ cat topics.json"): SESSION,
    ("docs/operations.md", "$ kraft reassign-partitions"): SESSION,
    ("docs/operations.md", "Error: "): OUTPUT,
    ("docs/operations.md", "$ cat admin.properties"): SESSION,
    ("docs/operations.md", ".venv/bin/python deploy/make_certs.py"): DOCKER,
    ("docs/operations.md", "BASE_IMAGE="): DOCKER,
    ("docs/operations.md", "$ kraft acls"): SESSION,
    ("docs/raft.md", "import asyncio, pickle"): ("three processes, one per node, on formatted storage: "
                                             "tests/test_tools_walk.py runs it so, whichever node leads"),
    ("docs/raft.md", "DATA_DIR/meta.properties"): LISTING,
    ("docs/web.md", "kraft web --bootstrap-controller"): ("a server that runs until Ctrl-C: tests/test_web.py starts it "
                                                         "against a cluster and drives it with a browser"),
}


#: (document, how the block's first line begins) -> what lines of its output must hold, where
#: the document says what the block prints.
PRINTS: dict[tuple[str, str], list[str]] = {
    ("README.md", "kraft topics --bootstrap-controller 127.0.0.1:19093"): ["k0\thello", "k1\tworld"],
    ("README.md", "printf 'k2:sent"): ["Error: No key separator found on line number 2: 'unkeyed'", "exit code 1"],
    ("README.md", "import asyncio"): ["RecordMetadata(topic='demo'", " b'k"],  # partition offset key value
    ("README.md", "from confluent_kafka import"): ["b'"],
    ("README.md", "for i in 1 2 3 4"): ["OK", "hello"],
    ("docs/brokers.md", "kraft dump-data --log-dir"): ["key: k0 payload: hello", "key: k1 payload: world"],
    ("docs/operations.md", "mkdir -p /tmp/kraft-sasl"): [
        "SCRAM credential configs for user-principal 'admin' are SCRAM-SHA-512=iterations=4096", "hello from alice",
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
        "exit code 1"],
    ("docs/operations.md", "kraft configs --bootstrap-controller 127.0.0.1:19093 --alter --entity-type clients"): [
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0",
        "Quota configs for the default client-id are request_percentage=50.0"],
}


@dataclass(frozen=True)
class Block:
    doc: str   # relative to the checkout
    line: int  # of the opening fence
    lang: str
    text: str

    @property
    def first(self) -> str:
        return next(line.strip() for line in self.text.splitlines() if line.strip())

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks() -> list[Block]:
    """The fenced blocks of DOCS, README first, each dedented to its fence."""
    out = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            fence = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
            if not fence:
                i += 1
                continue
            indent, end = len(fence.group(1)), i + 1
            while not re.match(r"^\s*```\s*$", lines[end]):
                end += 1
            body = "\n".join(line[indent:] for line in lines[i + 1:end]) + "\n"
            out.append(Block(str(path.relative_to(ROOT)), i + 1, fence.group(2), body))
            i = end + 1
    return out


def entry(table: dict[tuple[str, str], T], b: Block) -> T | None:
    """``table``'s entry for ``b``: the first of its document's whose start begins b's first line."""
    return next((v for (doc, start), v in table.items() if b.doc == doc and b.first.startswith(start)), None)


def not_run(b: Block) -> str | None:
    """Why ``b`` is not run, or None."""
    return "a file's contents" if b.lang == "properties" else entry(NOT_RUN, b)


def test_every_block_is_run_or_says_why_not():
    every = blocks()
    run = [b for b in every if not_run(b) is None]
    for b in run:
        assert b.lang in ("", "sh", "python"), f"{b}: a ```{b.lang} block is neither shell nor Python"
        assert not b.first.startswith("$ "), f"{b}: shows output ($ prompts): add it to NOT_RUN with why"
    for table in (NOT_RUN, PRINTS):
        stale = [key for key in table if not any(entry({key: 1}, b) for b in every)]
        assert not stale, f"entries for blocks no document has: {stale}"
    quorum, = [b for b in run if b.first.startswith(DEV_QUORUM)]
    assert quorum.text.strip() == quorum.first, f"{quorum}: runs until Ctrl-C, so it must be alone in its block"


# -- running them ---------------------------------------------------------------------------------

def substitutions(tmp: Path, base: int, kv: int) -> list[tuple[str, Callable[[re.Match], str] | str]]:
    """What the docs name -> what this test runs: (regex, replacement)."""
    return [
        # kraft dev-quorum's default ports (controllers 19093-19095, brokers' gRPC 19096-19098,
        # their Kafka listeners 19099-19101) -> the ports it was started on here; 19106-19108:
        # docs/operations.md's SASL example node
        (r"127\.0\.0\.1:(19\d\d\d)\b", lambda m: f"127.0.0.1:{base + int(m.group(1)) - 19093}"),
        (r"\bhost([123]):9093\b", lambda m: f"127.0.0.1:{base + int(m.group(1)) - 1}"),  # the operator's hosts
        (r"127\.0\.0\.1:909([1-4])\b", lambda m: f"127.0.0.1:{kv + int(m.group(1)) - 1}"),  # raft-kv's nodes
        (r"/tmp/kraft\b", str(tmp / "kraft")),
        (r"/tmp/kv(?=\d|\$)", str(tmp / "kv")),
        (re.escape(DEV_QUORUM), f"{DEV_QUORUM} --base-port {base}"),
    ]


def substituted(text: str, table: list) -> str:
    for pattern, replacement in table:
        text = re.sub(pattern, replacement, text)
    return text


def environment() -> dict[str, str]:
    """.venv/bin on PATH, and this checkout's code imported (by every subprocess too)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def dev_quorum(tmp_path: Path) -> Iterator[list]:
    """README's kraft dev-quorum block, running in the background until the test ends."""
    base = consecutive_ports(9 + 4 + 3)  # the dev quorum's 9, then raft-kv's 4, then the SASL example's 3
    table = substitutions(tmp_path, base, base + 9)
    block, = [b for b in blocks() if not_run(b) is None and b.first.startswith(DEV_QUORUM)]
    out = open(tmp_path / "dev-quorum.out", "w+")
    with sigint_as_in_a_terminal():
        p = subprocess.Popen(["bash", "-c", substituted(block.text, table)], cwd=ROOT, env=environment(),
                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while "Ctrl-C stops them." not in (text := (tmp_path / "dev-quorum.out").read_text()):
            assert p.poll() is None, f"{block}: kraft dev-quorum exited:\n{text}"
            try:
                p.wait(0.5)
            except subprocess.TimeoutExpired:
                pass
        yield table
    finally:
        # Ctrl-C, as its terminal would send it: it stops its servers (sessions of their own),
        # and whatever is left once it is gone (killed when it takes too long, or the test timed
        # out meanwhile) is killed by what it names, this test's directory
        stop_session(p, signal.SIGINT, 60, str(tmp_path))
        out.close()
    assert_no_tracebacks(tmp_path / "kraft", "*.log")


def run_block(b: Block, table: list, tmp: Path) -> None:
    """``b`` as a script, which must succeed without a traceback; its own servers stopped after."""
    text = substituted(b.text, table)
    if b.lang == "python":
        (script := tmp / f"block-{b.line}.py").write_text(text)
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", text]
    p = subprocess.Popen(argv, cwd=ROOT, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=180)
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # what it left in the background
        except ProcessLookupError:
            pass
        p.wait()
    assert p.returncode == 0, f"{b} ended with {p.returncode}:\n{text}\n---\n{out}"
    assert not [bad for bad in BAD if bad in out], f"{b}:\n{out}"
    printed = out.splitlines()
    for wanted in entry(PRINTS, b) or []:
        assert any(wanted in line for line in printed), f"{b} printed no line with {wanted!r}:\n{out}"


# About 38 s of CPU (user 32.3 s + sys 5.5 s for the whole pytest run: six servers and some 25
# Python start-ups of the blocks' tools), all of it work the blocks show; the waits are on
# conditions. At CI's load of 35-46 on 2 cores that is several minutes of wall time: it timed out
# at pytest's default 300 s.
@pytest.mark.timeout(900)
def test_the_blocks_run_as_shown(dev_quorum, tmp_path):
    for b in blocks():
        if not_run(b) is None and not b.first.startswith(DEV_QUORUM):
            run_block(b, dev_quorum, tmp_path)
