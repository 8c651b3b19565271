"""Driving programs on a pseudo-terminal from tests.

Not ``pexpect.spawn``: it forks in Python, and a fork while gRPC threads of earlier tests are
busy sometimes loses the child before it runs; subprocess does not take that path."""
from __future__ import annotations

import os
import select
import subprocess
import termios
import time

from pexpect.fdpexpect import fdspawn

from tests.kvcluster import REPO


class Terminal:
    def __init__(self, args: list[str], env: dict[str, str], timeout: float = 20) -> None:
        master, slave = os.openpty()
        termios.tcsetwinsize(slave, (40, 200))
        self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=REPO, env=env,
                                     start_new_session=True)
        os.close(slave)
        self.child = fdspawn(master, encoding="utf-8", timeout=timeout)

    def wait(self, timeout: float = 20) -> int:
        return self.proc.wait(timeout)

    def finish(self, timeout: float = 20) -> tuple[int, str]:
        """Wait for the program to exit, reading its output meanwhile (a full terminal buffer
        would block it); its exit code and the output not read before."""
        deadline = time.monotonic() + timeout
        rest = []
        fd = self.child.child_fd
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # EIO: the terminal's other side is closed
                    break
                if not data:
                    break
                rest.append(data.decode(errors="replace"))
            elif self.proc.poll() is not None:
                break
        try:
            return self.proc.wait(max(0.1, deadline - time.monotonic())), "".join(rest)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -9, "".join(rest)

    def __getattr__(self, name: str):  # send, expect, expect_exact, before, ...
        return getattr(self.child, name)


def spawn_on_terminal(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, fdspawn]:
    t = Terminal(args, env)
    return t.proc, t.child
