"""``python -m brokerd.main FILE``: run a broker from a properties file until SIGTERM or Ctrl-C,
which trigger a controlled shutdown. Start-up errors (bad config, a log directory that is not
formatted or is formatted for another cluster or holds a store that failed a read, a
registration the controller refuses) exit with code 1 and one line on stderr. A log directory
that fails while the broker runs halts it with code 1 (``log_dir_failure``)."""
from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import TYPE_CHECKING

import click

from common.errors import KafkaError
from metadata.config import load
from common.config_def import ConfigError
from raft.errors import StorageError
from raft.transport import calls_ended, grpc_errors_in_one_line

from .log_store import StorageFailure
from .memory import keep_freed_memory

if TYPE_CHECKING:
    from .server import BrokerServer

#: What a server's start-up may fail with, in one line. A controller-only ``kraft server-start``
#: imports this module but not the broker's server (the Kafka listener's schemas take a second).
STARTUP_ERRORS = (ConfigError, StorageError, StorageFailure, KafkaError)


def skip_test_strategies() -> None:
    """Before a server process loads the broker: kio registers Hypothesis strategies for its
    message types whenever hypothesis is importable (a test tool, installed with the dev extras,
    never used by a server), which is 0.7 s of CPU at every start on such a machine. Marked
    absent here, unless already loaded (a test process calling this in-process keeps it)."""
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]


def _fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


async def _until_done_or(task: asyncio.Task, stop: asyncio.Event) -> None:
    """Until ``task`` ends or ``stop`` is set; the wait on ``stop`` is not left running."""
    stopping = asyncio.get_running_loop().create_task(stop.wait())
    try:
        await asyncio.wait([task, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        await asyncio.gather(stopping, return_exceptions=True)


async def _serve_until_calls_ended(server: BrokerServer) -> int:
    try:
        return await serve(server)
    finally:
        await calls_ended()  # before the loop ends under them (raft.transport)


async def serve(server: BrokerServer) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    starting = loop.create_task(server.start())
    await _until_done_or(starting, stop)
    if not starting.done():  # stopped while starting
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        return 0
    if starting.exception() is not None:
        e = starting.exception()
        if isinstance(e, STARTUP_ERRORS):
            click.echo(f"Error: {e}", err=True)
            return 1
        raise e  # type: ignore[misc]
    stopped = loop.create_task(server.wait_stopped())
    await _until_done_or(stopped, stop)
    error = stopped.result() if stopped.done() else None
    await server.stop()
    await asyncio.gather(stopped, return_exceptions=True)  # stop() ends it
    if error is not None:
        click.echo(f"Error: {error}", err=True)
        return 1
    return 0


@click.command()
@click.argument("config_path", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING"]), default="INFO", show_default=True)
def main(config_path: str, log_level: str) -> None:
    """Run the broker FILE configures (process.roles must include broker)."""
    try:
        cfg = load(config_path)
        if not cfg.is_broker:
            raise ConfigError(f"{config_path}: process.roles={','.join(sorted(cfg.roles))} has no broker role")
        skip_test_strategies()
        keep_freed_memory()
        from .server import BrokerServer
        server = BrokerServer(cfg)
    except ConfigError as e:
        _fail(str(e))
        return
    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format=f"%(asctime)s [broker {cfg.node_id}] %(levelname)s %(name)s: %(message)s")
    grpc_errors_in_one_line()
    sys.exit(asyncio.run(_serve_until_calls_ended(server)))


if __name__ == "__main__":
    main()
