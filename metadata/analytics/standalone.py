"""A Spark standalone cluster on this machine, from PySpark's own jars: one master and N
workers, each started with ``spark-class`` (``org.apache.spark.deploy.master.Master``,
``org.apache.spark.deploy.worker.Worker spark://HOST:PORT``), so nothing beyond the
``analytics`` extra and Java is needed. It is what a job outgrowing ``local[*]`` runs on, and
what the tests run the data sources on in cluster mode.

    python -m metadata.analytics.standalone start --dir /tmp/kraft-spark   # prints the master URL
    python -m metadata.analytics.standalone stop --dir /tmp/kraft-spark

Each daemon leads a process group of its own (its executors join it), so ``stop`` ends the
workers, their executors and the master, and nothing is left running. The executors' Python
is the driver's ``PYSPARK_PYTHON`` (``session.start`` sets it to its own interpreter for a
master on loopback, which runs here); their memory must fit a worker's (``--memory``), which
``session.start`` asks for on such a master (``EXECUTOR_MEMORY``, or ``SPARK_EXECUTOR_MEMORY``).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import click

from .errors import AnalyticsError
from .session import EXECUTOR_MEMORY, find_java

#: The daemons' own heap: they only schedule, the executors compute.
DAEMON_MEMORY = "256m"
#: ... and a quick start on a busy machine: one GC thread, no optimising JIT (they are idle).
DAEMON_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
PIDS = "pids.json"


def spark_home() -> Path:
    """PySpark's installation: its ``bin/spark-class`` and ``jars/`` make a Spark distribution."""
    import pyspark
    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, on ``host``;
    logs, work directories and pids in ``directory``."""

    directory: Path
    host: str = "127.0.0.1"
    port: int = 7077
    webui_port: int = 8080
    workers: int = 2
    cores: int = 1
    memory: str = EXECUTOR_MEMORY

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    def start(self, timeout: float = 300.0) -> str:
        """Start the master and the workers; returns the master URL once every worker has
        registered. On failure nothing is left running."""
        find_java()
        self.directory.mkdir(parents=True, exist_ok=True)
        if (self.directory / PIDS).exists():
            raise AnalyticsError(f"{self.directory} already holds a running cluster ({PIDS}); stop it first")
        pids = [self._daemon("master", "org.apache.spark.deploy.master.Master", "--host", self.host,
                             "--port", str(self.port), "--webui-port", str(self.webui_port))]
        (self.directory / PIDS).write_text(json.dumps(pids))
        try:
            for n in range(1, self.workers + 1):
                work = self.directory / f"worker-{n}"
                work.mkdir(exist_ok=True)
                pids.append(self._daemon(f"worker-{n}", "org.apache.spark.deploy.worker.Worker", "--host",
                                         self.host, "--cores", str(self.cores), "--memory", self.memory,
                                         "--webui-port", "0", "--work-dir", str(work), self.master_url))
                (self.directory / PIDS).write_text(json.dumps(pids))
            self._wait_for_workers(timeout, pids)
        except BaseException:
            self.stop()
            raise
        return self.master_url

    def _daemon(self, name: str, cls: str, *args: str) -> int:
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
               "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS, "SPARK_LOCAL_IP": self.host,
               "SPARK_LOCAL_DIRS": str(self.directory / "local")}  # executors' scratch space, theirs to remove
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        with open(self.directory / f"{name}.log", "ab") as log:
            p = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), cls, *args], env=env,
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        return p.pid

    def worker_pids(self) -> list[int]:
        """The workers' processes (their executors are their children), e.g. to measure what
        the executors cost; empty when the cluster is not running."""
        pid_file = self.directory / PIDS
        return json.loads(pid_file.read_text())[1:] if pid_file.exists() else []

    def alive_workers(self) -> int:
        """Workers the master counts as ALIVE (its web UI's JSON); 0 while it is not up."""
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.webui_port}/json/", timeout=2) as r:
                state = json.load(r)
        except (OSError, ValueError):
            return 0
        return sum(w.get("state") == "ALIVE" for w in state.get("workers", []))

    def _wait_for_workers(self, timeout: float, pids: list[int]) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            dead = [p for p in pids if not _running(p)]
            if dead or time.monotonic() > deadline:
                why = "a daemon exited" if dead else f"not every worker registered within {timeout:.0f} s"
                raise AnalyticsError(f"the Spark standalone cluster did not start ({why}); see the logs in "
                                     f"{self.directory}")
            time.sleep(0.5)

    def stop(self, grace: float = 15.0) -> None:
        """End every daemon's process group (workers with their executors, then the master):
        SIGTERM, then SIGKILL after ``grace`` seconds."""
        pid_file = self.directory / PIDS
        if not pid_file.exists():
            return
        pids: list[int] = json.loads(pid_file.read_text())
        for pid in reversed(pids):
            _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(_group_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in pids:
            _signal_group(pid, signal.SIGKILL)
        for pid in pids:
            _reap(pid)
        pid_file.unlink()

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a child of ours that exited is reaped here, not left a zombie)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: started by an earlier ``start`` command
        return _group_alive(pid)
    return done == 0


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


# -- command line ----------------------------------------------------------------------------

@click.group("standalone")
def standalone() -> None:
    """A Spark standalone cluster (a master and workers) on this machine, from PySpark's jars."""


@standalone.command("start")
@click.option("--dir", "directory", required=True, metavar="DIR", help="Logs, work directories and pids.")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address every daemon binds.")
@click.option("--port", default=7077, show_default=True, help="The master's port.")
@click.option("--webui-port", default=8080, show_default=True, help="The master's web UI port.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(min=1))
@click.option("--cores", default=1, show_default=True, type=click.IntRange(min=1), help="Per worker.")
@click.option("--memory", default=EXECUTOR_MEMORY, show_default=True, help="Per worker, for its executors.")
def start_command(directory: str, host: str, port: int, webui_port: int, workers: int, cores: int,
                  memory: str) -> None:
    """Start the master and the workers; print the master URL once every worker registered."""
    try:
        url = StandaloneCluster(Path(directory), host, port, webui_port, workers, cores, memory).start()
    except AnalyticsError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    click.echo(url)


@standalone.command("stop")
@click.option("--dir", "directory", required=True, metavar="DIR", help="The directory given to start.")
def stop_command(directory: str) -> None:
    """Stop the workers, their executors and the master started with this directory."""
    StandaloneCluster(Path(directory)).stop()


if __name__ == "__main__":
    standalone()
