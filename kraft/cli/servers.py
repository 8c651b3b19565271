"""Process start-up: ``kraft server-start`` (either role, or both), ``kraft health`` (for
container health checks) and ``kraft dev-quorum`` (a local quorum of processes)."""
from __future__ import annotations

import signal
import sys

import click

from kraft.cli.invocation import fail, run


@click.command("server-start")
@click.argument("config_path", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING"]), default="INFO", show_default=True)
def server_start(config_path: str, log_level: str) -> None:
    """Run the roles FILE's process.roles names until SIGTERM or Ctrl-C."""
    from common.config_def import ConfigError
    from metadata import config as server_config
    try:
        cfg = server_config.load(config_path)
    except ConfigError as e:
        fail(str(e))
    import logging
    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format=f"%(asctime)s [node {cfg.node_id}] %(levelname)s %(name)s: %(message)s")
    from raft.transport import grpc_errors_in_one_line
    grpc_errors_in_one_line()
    sys.exit(run(_serve_roles(cfg)))


async def _serve_roles(cfg) -> int:
    """Run the controller, the broker, or both (a combined node: the controller starts first
    and stops last, since a broker's controlled shutdown needs it)."""
    import asyncio

    from brokerd.main import STARTUP_ERRORS, skip_test_strategies
    from brokerd.memory import keep_freed_memory
    from common.metrics import MetricsEndpoint
    from metadata.server import ControllerServer
    from raft.transport import calls_ended
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A combined node serves one /metrics for both roles; a single role serves its own.
    shared = MetricsEndpoint(cfg.prometheus_listener()) if cfg.is_controller and cfg.is_broker else None
    controller = ControllerServer(cfg, shared) if cfg.is_controller else None
    if cfg.is_broker:  # imported for a broker only: the Kafka listener's schemas take a second to load
        skip_test_strategies()
        keep_freed_memory()
        from brokerd.server import BrokerServer
    broker = BrokerServer(cfg, shared) if cfg.is_broker else None
    watched: list[asyncio.Task[BaseException | None]] = []
    try:
        if shared is not None:
            shared.start()
        if controller is not None:
            await controller.start()
            watched.append(loop.create_task(controller.node.wait_stopped()))
        if broker is not None:
            starting = loop.create_task(broker.start())
            await asyncio.wait([starting, loop.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)
            elif starting.exception() is not None:
                raise starting.exception()  # type: ignore[misc]
            else:
                watched.append(loop.create_task(broker.wait_stopped()))
        if watched and not stop.is_set():
            await asyncio.wait([*watched, loop.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        errors = [t.result() for t in watched if t.done() and t.result() is not None]
        if errors:
            click.echo(f"Error: {errors[0]}", err=True)
            return 1
        return 0
    except STARTUP_ERRORS as e:
        click.echo(f"Error: {e}", err=True)
        return 1
    finally:
        if broker is not None:
            await broker.stop()
        if controller is not None:
            await controller.stop()
        if shared is not None:
            shared.stop()
        await calls_ended()  # before the loop ends under them (raft.transport)


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="this server's properties file")
def health(config_path: str) -> None:
    """Exit 0 when this server is healthy: a controller has joined the quorum and knows the
    leader; a broker is registered and unfenced. For container health checks."""
    from common.config_def import ConfigError
    from metadata import config as server_config
    try:
        cfg = server_config.load(config_path)
    except ConfigError as e:
        fail(str(e))
        return
    problems = run(_health_problems(cfg))
    if problems:
        fail("; ".join(problems))
    click.echo("healthy")


async def _health_problems(cfg) -> list[str]:
    import grpc

    from common.channels import dial
    from raft.client import describe
    from raft.proto import raft_pb2 as rpb
    from raft.proto import raft_pb2_grpc
    problems = []
    if cfg.is_controller:
        try:
            async with dial(cfg.controller_address(), cfg.controller_tls, []) as ch:
                st = await raft_pb2_grpc.RaftAdminStub(ch).Status(rpb.StatusRequest(), timeout=3)
            if not st.leader_id:
                problems.append(f"controller {cfg.node_id} knows no leader")
            elif cfg.node_id not in st.voters:
                problems.append(f"controller {cfg.node_id} is not a voter of the quorum")
            elif st.directories.get(cfg.node_id, st.directory_id) != st.directory_id:
                problems.append(f"controller {cfg.node_id}'s directory {st.directory_id} is not voter {cfg.node_id}'s "
                                f"({st.directories[cfg.node_id]}): it was formatted again; remove-controller the old "
                                f"one, then add-controller this one")
        except grpc.aio.AioRpcError as e:
            problems.append(f"controller {cfg.node_id} does not answer: {describe(e)}")
    if cfg.is_broker:
        from brokerd.health import broker_problems
        problems += await broker_problems(cfg)
    return problems


@click.command("dev-quorum")
@click.option("--dir", "base_dir", default=None, help="where configs and data go (default: a new temp dir)")
@click.option("--base-port", type=int, default=19093, show_default=True,
              help="controllers listen on P..P+2, brokers on P+3... (gRPC), then on the ports after (Kafka), "
                   "then, with --console, every node's metrics")
@click.option("--brokers", type=int, default=3, show_default=True, help="broker processes (ids 101...)")
@click.option("--console", is_flag=True, help="also serve the web console (kraft web) over them at --listen, "
                                               "charting every node's metrics (make console)")
@click.option("--listen", default="127.0.0.1:8080", show_default=True, help="HOST:PORT the --console serves on")
def dev_quorum(base_dir: str | None, base_port: int, brokers: int, console: bool, listen: str) -> None:
    """Three controllers (and brokers, and a console) on loopback as processes; prints the
    bootstrap strings; Ctrl-C stops them."""
    import asyncio

    from common.config_def import ConfigError
    from common.errors import KafkaError
    from kraft.dev_quorum import DevQuorum
    from raft.errors import RaftError
    if console and not brokers:
        fail("--console needs brokers (--brokers 1 or more)")
    q = DevQuorum(base_dir, base_port, brokers=brokers, metrics=console)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the servers on SIGTERM too
    error = None
    try:
        q.start()
        leader = asyncio.run(q.wait_for_leader())
        if brokers:
            asyncio.run(q.wait_for_brokers())
        if console:
            q.start_console(listen)
            q.wait_for_console(listen)
        click.echo(f"3 controllers and {brokers} brokers running in {q.base_dir} (cluster id {q.cluster_id}); "
                   f"active controller: node {leader}")
        click.echo(f"controllers: {q.bootstrap}")
        if brokers:
            click.echo(f"brokers:     {q.bootstrap_servers}  (gRPC: kraft tools, clients/)")
            click.echo(f"Kafka:       {q.kafka_bootstrap_servers}  (bootstrap.servers for any Kafka client)")
        if console:
            click.echo(f"console:     http://{listen}/  (kraft web, charting every node's metrics)")
        click.echo(f"try:  kraft topics --bootstrap-controller {q.bootstrap} create --topic demo --partitions 3"
                   f"{' --replication-factor 3' if brokers >= 3 else ''}")
        click.echo(f"      kraft quorum --bootstrap-controller {q.bootstrap} describe --status")
        if brokers:
            click.echo(f"      echo hello | kraft console-producer --bootstrap-server {q.bootstrap_servers} --topic demo")
            click.echo(f"      kraft console-consumer --bootstrap-server {q.bootstrap_servers} --topic demo "
                       "--from-beginning")
        if brokers and not console:
            click.echo(f"      kraft web --bootstrap-controller {q.bootstrap} --bootstrap-server {q.bootstrap_servers}"
                       f"   (a console at http://127.0.0.1:8080/)")
        click.echo("Ctrl-C stops them.")
        q.wait()
    except KeyboardInterrupt:
        pass
    except (ConfigError, KafkaError, RaftError, OSError) as e:
        error = str(e)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C or SIGTERM does not leave servers behind
            signal.signal(sig, signal.SIG_IGN)
        q.stop()
    if error is not None:
        fail(error)
    click.echo("stopped.")
