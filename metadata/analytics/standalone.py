"""A Spark standalone cluster on this machine, from PySpark's own jars: one master and N
workers, each started with ``spark-class`` (``org.apache.spark.deploy.master.Master``,
``org.apache.spark.deploy.worker.Worker spark://HOST:PORT``), so nothing beyond the
``analytics`` extra and Java is needed. It is what a job outgrowing ``local[*]`` runs on, and
what the tests run the data sources on in cluster mode.

    python -m metadata.analytics.standalone start --dir /tmp/kraft-spark   # prints the master URL
    python -m metadata.analytics.standalone stop --dir /tmp/kraft-spark

``master`` and ``worker`` run one daemon in the foreground instead (the same command line,
``exec``'d: the compose services of deploy/docker-compose.spark.yml, one daemon a container).

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
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """PySpark's installation: its ``bin/spark-class`` and ``jars/`` make a Spark distribution."""
    import pyspark
    return Path(pyspark.__file__).resolve().parent


def master_command(host: str, port: int, webui_port: int) -> list[str]:
    """The master's command line (``spark-class``, as Spark's own ``start-master.sh`` runs it)."""
    return [str(spark_home() / "bin" / "spark-class"), MASTER_CLASS, "--host", host, "--port", str(port),
            "--webui-port", str(webui_port)]


def worker_command(master_url: str, host: str, cores: int, memory: str, work_dir: Path,
                   webui_port: int = 0) -> list[str]:
    """A worker's command line: ``cores`` and ``memory`` are what it offers its executors."""
    return [str(spark_home() / "bin" / "spark-class"), WORKER_CLASS, "--host", host, "--cores", str(cores),
            "--memory", memory, "--webui-port", str(webui_port), "--work-dir", str(work_dir), master_url]


def daemon_env(host: str, local_dirs: Path) -> dict[str, str]:
    """The environment a daemon runs in: small and quick JVMs bound to ``host``, the executors'
    scratch space in ``local_dirs`` (theirs to remove) and their Python this interpreter unless
    ``PYSPARK_PYTHON`` says otherwise."""
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
           "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS, "SPARK_LOCAL_IP": host, "SPARK_LOCAL_DIRS": str(local_dirs)}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


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
        pids = [self._daemon("master", master_command(self.host, self.port, self.webui_port))]
        (self.directory / PIDS).write_text(json.dumps(pids))
        try:
            for n in range(1, self.workers + 1):
                work = self.directory / f"worker-{n}"
                work.mkdir(exist_ok=True)
                pids.append(self._daemon(f"worker-{n}", worker_command(self.master_url, self.host, self.cores,
                                                                       self.memory, work)))
                (self.directory / PIDS).write_text(json.dumps(pids))
            self._wait_for_workers(timeout, pids)
        except BaseException:
            self.stop()
            raise
        return self.master_url

    def _daemon(self, name: str, command: list[str]) -> int:
        with open(self.directory / f"{name}.log", "ab") as log:
            p = subprocess.Popen(command, env=daemon_env(self.host, self.directory / "local"),
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


def _run_in_foreground(command: list[str], host: str, local_dirs: Path) -> None:
    """Become the daemon (``exec``): its signals, output and exit status are the caller's, as a
    container's main process must be."""
    try:
        find_java()
        local_dirs.mkdir(parents=True, exist_ok=True)
        os.execve(command[0], command, daemon_env(host, local_dirs))
    except (AnalyticsError, OSError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


@standalone.command("master")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address the master binds, and its URL's host (e.g. a container's host name).")
@click.option("--port", default=7077, show_default=True, help="The master's port.")
@click.option("--webui-port", default=8080, show_default=True, help="The master's web UI port.")
@click.option("--local-dir", default="/tmp/kraft-spark", show_default=True, help="Scratch space.")
def master_command_line(host: str, port: int, webui_port: int, local_dir: str) -> None:
    """Run a master in the foreground (one daemon of a cluster spread over machines or containers)."""
    _run_in_foreground(master_command(host, port, webui_port), host, Path(local_dir))


@standalone.command("worker")
@click.argument("master_url")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address the worker and its executors bind.")
@click.option("--cores", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--memory", default=EXECUTOR_MEMORY, show_default=True, help="For its executors.")
@click.option("--webui-port", default=8081, show_default=True, help="The worker's web UI port.")
@click.option("--work-dir", default="/tmp/kraft-spark/work", show_default=True,
              help="The executors' working directories and logs.")
def worker_command_line(master_url: str, host: str, cores: int, memory: str, webui_port: int, work_dir: str) -> None:
    """Run a worker of MASTER_URL (spark://HOST:PORT) in the foreground."""
    work = Path(work_dir)
    _run_in_foreground(worker_command(master_url, host, cores, memory, work, webui_port), host, work / "local")


if __name__ == "__main__":
    standalone()
