"""What a test starts is stopped whatever way the test ends (tests/processes.py): a pytest-timeout
in the test or in its fixture's teardown, and a command that leaves servers of its own session
behind (``kraft dev-quorum`` killed while it stops them), as test_docs.py's dev_quorum fixture
met them on a loaded CI host: its dev cluster ran on after the test session."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from xml.etree import ElementTree

from kraft.dev_quorum import DevQuorum
from tests.eventually import eventually
from tests.processes import processes_naming

REPO = Path(__file__).resolve().parent.parent

#: A test module run by a pytest of its own: its fixture starts a command in a session of its own
#: (as test_docs.py's dev_quorum does) that starts a "server" in yet another session, and stops
#: it with tests.processes.stop_session. One command leaves its server behind when asked to stop
#: (kraft dev-quorum killed while stopping its servers); the other ignores Ctrl-C, so that the
#: timeout hits the teardown's wait.
MODULE = '''
import signal, subprocess, sys, time
import pytest
from tests.processes import processes_naming, sigint_as_in_a_terminal, stop_session

SERVER = "import time; time.sleep(600)"

def command(tmp_path, on_sigint):
    """bash that starts a server (its command line names tmp_path) in a session of its own."""
    script = (f"{on_sigint}; setsid {sys.executable} -c '{SERVER}' {tmp_path}/server & "
              "while true; do sleep 0.1; done")
    with sigint_as_in_a_terminal():
        return subprocess.Popen(["bash", "-c", script], start_new_session=True)

@pytest.fixture
def started(request, tmp_path):
    p = command(tmp_path, request.param)
    try:
        while not processes_naming(f"{tmp_path}/server"):
            time.sleep(0.05)
        yield
    finally:
        stop_session(p, signal.SIGINT, 60, str(tmp_path))

# exits at Ctrl-C, its server left running; the test times out
@pytest.mark.parametrize("started", ["trap 'exit 0' INT"], indirect=True)
def test_times_out(started):
    time.sleep(600)

# ignores Ctrl-C: the timeout hits the teardown's wait for it
@pytest.mark.parametrize("started", ["trap '' INT"], indirect=True)
def test_teardown_times_out(started):
    pass
'''


def test_a_timeout_in_the_test_or_its_teardown_leaves_no_process(tmp_path: Path):
    (tmp_path / "test_started.py").write_text(textwrap.dedent(MODULE))
    report = tmp_path / "report.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout=4",
                          "-o", "addopts=", "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "runs"),
                          "--junitxml", str(report), str(tmp_path / "test_started.py")],
                         cwd=REPO, capture_output=True, text=True, timeout=240)
    left = processes_naming(str(tmp_path / "runs"))
    for pid in left:
        _kill(pid)
    # read from the report, not the terminal: pytest trims its short summary to the terminal's
    # width except when it sees CI set, so counting lines of output differs between here and CI
    timeouts = [(case.get("name"), outcome.tag) for case in ElementTree.parse(report).iter("testcase")
                for outcome in case if "Timeout" in outcome.get("message", "")]
    assert sorted(timeouts) == [("test_teardown_times_out[trap '' INT]", "error"),
                                ("test_times_out[trap 'exit 0' INT]", "failure")], run.stdout + run.stderr
    assert not left, left


def test_dev_quorum_stop_cut_short_still_kills_every_server(tmp_path: Path):
    """DevQuorum.stop waits up to 30 s for each server it sent SIGTERM; an exception raised into
    that wait (a test's timeout, a handler of a second signal) still has each one killed: they
    run in sessions of their own, so nothing else would stop them."""
    marker = str(tmp_path / "server")
    q = DevQuorum(str(tmp_path), 1, brokers=1)
    # "servers" that take their time over SIGTERM
    for group, nid in ((q.broker_procs, 101), (q.procs, 1), (q.procs, 2)):
        group[nid] = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                       "signal.SIG_IGN); print(flush=True); time.sleep(600)", marker],
                                      stdout=subprocess.PIPE, start_new_session=True)
    for p in [*q.broker_procs.values(), *q.procs.values()]:
        p.stdout.readline()  # its SIGTERM handler is set
    asyncio.run(eventually(lambda: len(processes_naming(marker)) == 3, 30, what="three servers"))

    class CutShort(Exception):
        pass

    def interrupt(*_: object) -> None:
        raise CutShort

    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        try:
            q.stop()
        except CutShort:
            pass
        else:
            raise AssertionError("stop() was not cut short")
        left = processes_naming(marker)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
        for pid in processes_naming(marker):
            _kill(pid)
    assert not left, left


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
