"""The processes a test started, stopped whatever way the test ends.

A command the tests run may start servers in sessions of their own (``kraft dev-quorum`` starts
each controller and broker with ``start_new_session``, so that a Ctrl-C reaches only the
command, which stops them in order). Signalling the command's process group then does not
reach them, and killing the command (it did not stop in time) orphans them: they ran on
after the test session. What a test started is found by what its command line names (the
test's own directory, which nothing else on the machine names) and killed by pid.

pytest-timeout (``timeout_method = "signal"``, pyproject.toml) fails a test by raising from a
SIGALRM handler wherever the test is, a fixture's teardown included; its timer fires once. So
a teardown first asks nicely and kills in a ``finally``: an exception raised into the polite
wait still reaches the kill.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def sigint_as_in_a_terminal() -> Iterator[None]:
    """Children started meanwhile take SIGINT as in a terminal, where Ctrl-C stops them. A test
    run started in the background (``nohup``, ``&``, some CI runners) ignores SIGINT, and exec
    keeps an ignored signal ignored (a handler it resets), so ``kraft dev-quorum`` never heard
    the test's Ctrl-C: each such teardown waited out its 60 s and then killed it."""
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if previous == signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def processes_naming(*markers: str) -> dict[int, str]:
    """The live processes (not zombies) whose command line names one of ``markers``: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone meanwhile
        if state != "Z" and any(m in cmdline for m in markers):
            found[int(entry.name)] = cmdline
    return found


def kill_processes_naming(*markers: str) -> dict[int, str]:
    """SIGKILL (after a SIGCONT: a stopped process dies only once continued) every process
    naming one of ``markers`` but this one; what was killed."""
    found = {pid: cmd for pid, cmd in processes_naming(*markers).items() if pid != os.getpid()}
    for pid in found:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
    return found


def stop_session(p: subprocess.Popen, stop_signal: int, grace_s: float, *markers: str) -> None:
    """Stop ``p``, started with ``start_new_session``, and all it started: ``stop_signal`` to
    its process group (its own way of stopping what it started), up to ``grace_s`` for it to
    exit; then, and also when that wait is cut short by an exception, SIGKILL to the group and
    to every process naming one of ``markers`` (what it started in sessions of their own)."""
    try:
        try:
            os.killpg(p.pid, stop_signal)
        except ProcessLookupError:
            pass  # it exited already
        p.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        kill_processes_naming(*markers)
        p.wait()
