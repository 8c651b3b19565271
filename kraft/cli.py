"""``kraft``: format storage, run a server, and administer the quorum the way a Kafka operator
does with kafka-storage.sh, kafka-server-start.sh, kafka-topics.sh, kafka-configs.sh and
kafka-metadata-quorum.sh. Every failure prints one line and exits non-zero."""
from __future__ import annotations

import json
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import click

from protos import controller_pb2 as pb

# The rest is imported by the commands that use it: `kraft --help` and a command's own work
# then pay for nothing else (issue 25 item 9, bench/cli_startup.py).
if TYPE_CHECKING:
    from metadata.client import ControllerClient
    from common.tls import TLSConfig


def fail(message: str) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(1)


def run(coro: Awaitable[Any]) -> Any:
    import asyncio
    from metadata.client import ControllerError
    from metadata.errors import ApiError
    from common.config_def import ConfigError
    from raft.errors import RaftError
    try:
        return asyncio.run(coro)  # type: ignore[arg-type]
    except (ControllerError, ApiError) as e:  # ApiError: a rule checked on this side (placement)
        fail(str(e))
    except (ConfigError, RaftError) as e:
        fail(str(e))
    except KeyboardInterrupt:
        sys.exit(130)


TLS_KEY = "kraft.tls"


def _load_command_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> None:
    """``--command-config FILE``, on a group or a command: the client's ``security.protocol``
    and ``ssl.*`` keys (clients/security.py), kept in the invocation's ``ctx.meta`` so every
    command under it connects with them."""
    if path:
        from clients.cluster_view import ClientError
        from clients.config import tools_tls
        try:
            ctx.meta[TLS_KEY] = tools_tls(path)
        except ClientError as e:
            fail(str(e))


command_config_option = click.option(
    "--command-config", type=click.Path(exists=True, dir_okay=False), expose_value=False, is_eager=True,
    callback=_load_command_config, help="properties file with the client's security.protocol and ssl.* keys")


def command_tls() -> TLSConfig | None:
    """The TLS of this invocation's ``--command-config`` (None: plaintext)."""
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(TLS_KEY) if ctx is not None else None


def with_client(bootstrap: str, timeout: float, work: Callable[[ControllerClient], Awaitable[Any]]) -> Any:
    """``work`` with a client of the quorum at ``bootstrap``, which gives up at once when no
    address accepts a connection; one that turns out to be a broker's Kafka listener is named."""
    from metadata.client import ControllerClient, ControllerError
    from metadata.errors import ErrorCode
    from raft.client import CLOSED_DURING_SETUP

    async def go() -> Any:
        async with ControllerClient(bootstrap, timeout=timeout, tls=command_tls(),
                                    give_up_unconnectable=True) as client:
            try:
                return await work(client)
            except ControllerError as e:
                if e.code != ErrorCode.NETWORK_EXCEPTION or CLOSED_DURING_SETUP not in e.message:
                    raise  # only a listener that closed the connection may speak another protocol
                from clients.listener_probe import speaks_kafka
                kafka = [a for a in client.endpoints if await speaks_kafka(a, timeout_s=1.0)]
                if kafka:
                    raise ControllerError(ErrorCode.INVALID_REQUEST, f"{','.join(kafka)} is a broker's Kafka listener, "
                                          f"not a controller's: give --bootstrap-controller the controllers' "
                                          f"listener, as in controller.quorum.voters") from None
                raise
    return run(go())


NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


class ToolGroup(click.Group):
    """The ``kraft`` group: a usage mistake is one line (with where to find the options), and
    an exception no command expected still ends in one line, never a traceback (each command
    turns the failures it knows into Kafka's error names)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # ctx.exit(n): n
            sys.exit(code if isinstance(code, int) else 0)
        except NO_ARGS_IS_HELP as e:  # `kraft` alone, or a group alone: its help, as click shows it
            click.echo(e.format_message(), err=True)
            sys.exit(e.exit_code)
        except click.UsageError as e:
            where = f" ('{e.ctx.command_path} -h' lists the options)" if e.ctx is not None else ""
            click.echo(f"Error: {e.format_message()}{where}", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            click.echo(f"Error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except click.Abort:
            sys.exit(1)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *MOUNTED})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in MOUNTED and name not in self.commands:
            import importlib
            module, attribute, _ = MOUNTED[name]
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, with the mounted commands' lines from MOUNTED (nothing imported)."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = []
        for name in names:
            if name in MOUNTED and name not in self.commands:
                rows.append((name, MOUNTED[name][2]))
            elif (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as e:
            fail(f"unexpected {type(e).__name__}: {e} (a bug: please report it with the command that caused it)")


@click.group(cls=ToolGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Run and operate a KRaft-style metadata quorum."""


# ------------------------------------------------------------------------------- storage

@main.group()
def storage() -> None:
    """Format storage before a server's first start (kafka-storage.sh)."""


@storage.command("random-uuid")
def random_uuid() -> None:
    """Print a new cluster id."""
    from metadata.ids import random_id
    click.echo(random_id())


@storage.command("format")
@click.option("--cluster-id", "-t", required=True, help="from `kraft storage random-uuid`; the same on every node")
@click.option("--config", "-c", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option("--ignore-formatted", "-g", is_flag=True, help="skip directories already formatted for this node")
@click.option("--standalone", "-s", is_flag=True,
              help="a dynamic quorum of this one controller, to grow with `kraft quorum add-controller`")
@click.option("--initial-controllers", "-I", metavar="ID@HOST:PORT:DIRECTORY_ID,...",
              help="a dynamic quorum's first voters; this node's directory gets the id given for it")
@click.option("--no-initial-controllers", "-N", is_flag=True,
              help="a controller that will join a running dynamic quorum (it starts as an observer)")
@click.option("--add-scram", "-S", "add_scram", multiple=True, metavar="'SCRAM-SHA-512=[name=USER,password=PW]'",
              help="a SCRAM credential the new cluster starts with (KIP-900), repeatable")
def storage_format(cluster_id: str, config_path: str, ignore_formatted: bool, standalone: bool,
                   initial_controllers: str | None, no_initial_controllers: bool, add_scram: tuple[str, ...]) -> None:
    """Format metadata.log.dir (and log.dirs for brokers) with the cluster id and node id, and a
    controller's with its quorum's first voters (KIP-853) unless controller.quorum.voters names them."""
    from common.config_def import ConfigError
    from raft.errors import RaftError
    from raft.storage import check_formatted, format_storage
    from metadata import config as server_config
    from metadata.quorum import initial_voters
    from metadata.bootstrap import write_bootstrap_records
    from metadata.errors import ApiError
    from kraft.users import bootstrap_credentials
    try:
        cfg = server_config.load(config_path)
        voters, directory_id = initial_voters(cfg, standalone=standalone, initial_controllers=initial_controllers,
                                              no_initial_controllers=no_initial_controllers)
        credentials = bootstrap_credentials(add_scram)
        dirs = [cfg.metadata_log_dir] + [d for d in (cfg.log_dirs if cfg.is_broker else ()) if d != cfg.metadata_log_dir]
        for d in dirs:
            first = d == cfg.metadata_log_dir
            done = format_storage(d, cluster_id, cfg.node_id, ignore_formatted=ignore_formatted,
                                  directory_id=directory_id if first else None,
                                  initial_voters=voters if first else None)
            if first and done and credentials:
                write_bootstrap_records(d, credentials)
            with_voters = f"; initial controllers {','.join(map(str, voters))}" if first and voters else ""
            click.echo(f"Formatting {d} with metadata.version 1 (cluster id {cluster_id}, node {cfg.node_id}, "
                       f"directory id {check_formatted(d, cluster_id, cfg.node_id)['directory.id']}){with_voters}"
                       if done else f"{d} is already formatted for this node; skipped")
    except (ConfigError, RaftError, ValueError) as e:
        fail(str(e))
    except ApiError as e:
        fail(e.message)


@storage.command("info")
@click.option("--config", "-c", "config_path", required=True, type=click.Path(dir_okay=False))
def storage_info(config_path: str) -> None:
    """What each of the server's directories holds (kafka-storage.sh info); exits 1 when one is
    missing, unformatted, another node's or another cluster's."""
    import os
    from metadata import config as server_config
    from common.config_def import ConfigError
    from raft.errors import RaftError
    from raft.storage.disk import META_FILE, read_properties
    try:
        cfg = server_config.load(config_path)
    except ConfigError as e:
        fail(str(e))
        return
    dirs = list(dict.fromkeys([cfg.metadata_log_dir, *(cfg.log_dirs if cfg.is_broker else ())]))
    problems, found = [], {}
    for d in dirs:
        meta = os.path.join(d, META_FILE)
        if not os.path.isdir(d):
            problems.append(f"{d} does not exist")
        elif not os.path.exists(meta):
            problems.append(f"{d} is not formatted")
        else:
            try:
                found[d] = read_properties(meta)
            except RaftError as e:
                problems.append(f"{d}: {e}")
    for d, props in found.items():
        if props.get("node.id") != str(cfg.node_id):
            problems.append(f"{d} is formatted for node {props.get('node.id')}, this is node {cfg.node_id}")
    if len({p.get("cluster.id") for p in found.values()}) > 1:
        problems.append("the directories are formatted for different clusters: " +
                        ", ".join(f"{d} for {p.get('cluster.id')}" for d, p in found.items()))
    click.echo(f"Found log director{'ies' if len(dirs) > 1 else 'y'}:\n" + "".join(f"  {d}\n" for d in dirs))
    for d, props in found.items():
        click.echo(f"Found metadata in {d}: {{" + ", ".join(f"{k}={v}" for k, v in sorted(props.items())) + "}")
    if problems:
        click.echo(f"\nFound problem{'s' if len(problems) > 1 else ''}:\n" + "".join(f"  {p}\n" for p in problems))
        sys.exit(1)


# ------------------------------------------------------------------------------- servers

@main.command("server-start")
@click.argument("config_path", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING"]), default="INFO", show_default=True)
def server_start(config_path: str, log_level: str) -> None:
    """Run the roles FILE's process.roles names until SIGTERM or Ctrl-C."""
    from metadata import config as server_config
    from common.config_def import ConfigError
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
    from brokerd.main import STARTUP_ERRORS
    from brokerd.server import BrokerServer
    from common.metrics import MetricsEndpoint
    from metadata.server import ControllerServer
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A combined node serves one /metrics for both roles; a single role serves its own.
    shared = MetricsEndpoint(cfg.prometheus_listener()) if cfg.is_controller and cfg.is_broker else None
    controller = ControllerServer(cfg, shared) if cfg.is_controller else None
    broker = BrokerServer(cfg, shared) if cfg.is_broker else None
    watched = []
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


# ------------------------------------------------------------------------------- topics

bootstrap_option = click.option("--bootstrap-controller", "bootstrap", required=True, envvar="KRAFT_BOOTSTRAP_CONTROLLER",
                                help="HOST:PORT[,HOST:PORT...] of any controllers")
timeout_option = click.option("--command-timeout", "timeout", type=float, default=30.0, show_default=True,
                              help="seconds to keep retrying while no active controller answers")


def controller_group(fn: Callable[[], None]) -> click.Group:
    """A ``kraft`` command group that talks to the controller quorum, named and documented
    by ``fn``: its commands get (bootstrap, timeout) as their context object."""
    @main.group(name=fn.__name__, help=fn.__doc__)
    @bootstrap_option
    @timeout_option
    @command_config_option
    @click.pass_context
    def group(ctx: click.Context, bootstrap: str, timeout: float) -> None:
        ctx.obj = (bootstrap, timeout)
    return group


def _check(code: int, message: str, what: str) -> None:
    from metadata.client import error_code
    from metadata.errors import ErrorCode
    c = error_code(code)
    if c != ErrorCode.NONE:
        fail(f"{c.name}: {message or what}")


@controller_group
def topics() -> None:
    """Create, list, describe, alter and delete topics (kafka-topics.sh)."""


def _parse_configs(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for p in pairs:
        for item in p.split(","):
            if "=" not in item:
                fail(f"bad config {item!r}: expected KEY=VALUE")
            k, v = item.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def _parse_assignment(text: str) -> list[list[int]]:
    try:
        return [[int(b) for b in part.split(":")] for part in text.split(",")]
    except ValueError:
        fail(f"bad --replica-assignment {text!r}: expected e.g. 1:2:3,2:3:1 (partition by partition)")
        raise


@topics.command("create")
@click.option("--topic", required=True)
@click.option("--partitions", type=int, default=-1, help="default: num.partitions")
@click.option("--replication-factor", type=int, default=-1, help="default: default.replication.factor")
@click.option("--config", "configs", multiple=True, help="KEY=VALUE, repeatable")
@click.option("--replica-assignment", help="broker lists per partition: 1:2:3,2:3:1")
@click.option("--if-not-exists", is_flag=True)
@click.option("--validate-only", is_flag=True)
@click.pass_obj
def topics_create(obj: tuple, topic: str, partitions: int, replication_factor: int, configs: tuple[str, ...],
                  replica_assignment: str | None, if_not_exists: bool, validate_only: bool) -> None:
    t = pb.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=replication_factor,
                          configs=_parse_configs(configs))
    if replica_assignment:
        t.assignments.extend(pb.ReplicaAssignment(partition=p, replicas=r)
                             for p, r in enumerate(_parse_assignment(replica_assignment)))
    from metadata.errors import ErrorCode
    resp = with_client(*obj, lambda c: c.create_topics(pb.CreateTopicsRequest(topics=[t], validate_only=validate_only)))
    r = resp.topics[0]
    if r.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and if_not_exists:
        return
    _check(r.error_code, r.error_message, "")
    click.echo(f"{'Validated' if validate_only else 'Created'} topic {topic}.")


@topics.command("list")
@click.pass_obj
def topics_list(obj: tuple) -> None:
    resp = with_client(*obj, lambda c: c.describe_topics(pb.DescribeTopicsRequest()))
    for t in resp.topics:
        click.echo(t.name)


def _ids(xs: Any) -> str:
    return ",".join(str(x) for x in xs)


@topics.command("describe")
@click.option("--topic", help="one topic (default: all)")
@click.option("--under-replicated-partitions", is_flag=True, help="only partitions whose ISR is short")
@click.option("--unavailable-partitions", is_flag=True, help="only partitions without a leader")
@click.option("--under-min-isr-partitions", is_flag=True, help="only partitions whose ISR is below min.insync.replicas")
@click.option("--at-min-isr-partitions", is_flag=True, help="only partitions whose ISR is exactly min.insync.replicas")
@click.option("--topics-with-overrides", is_flag=True, help="only topics with configs of their own (no partitions)")
@click.pass_obj
def topics_describe(obj: tuple, topic: str | None, under_replicated_partitions: bool, unavailable_partitions: bool,
                    under_min_isr_partitions: bool, at_min_isr_partitions: bool, topics_with_overrides: bool) -> None:
    """Topics and partitions (kafka-topics.sh --describe); the filters show only what they name.
    min.insync.replicas is the topic's, else the cluster-wide dynamic default, else 1."""
    import uuid

    from metadata.ids import format_uuid

    async def work(c: ControllerClient) -> tuple[Any, int]:
        resp = await c.describe_topics(pb.DescribeTopicsRequest(names=[topic] if topic else []))
        default = 1
        if under_min_isr_partitions or at_min_isr_partitions:
            cluster = await c.describe_configs(pb.DescribeConfigsRequest(resources=[
                pb.AlterConfigsResource(resource_type=pb.BROKER, resource_name="")]))
            default = int(next((e.value for r in cluster.resources for e in r.configs
                                if e.name == "min.insync.replicas" and not e.is_default), "1"))
        return resp, default

    resp, min_isr_default = with_client(*obj, work)
    partition_filters = (under_replicated_partitions, unavailable_partitions, under_min_isr_partitions,
                         at_min_isr_partitions)
    for t in resp.topics:
        _check(t.error_code, t.error_message, f"topic {t.name}")
        if topics_with_overrides and not t.configs:
            continue
        parts = list(t.partitions)
        min_isr = int(t.configs.get("min.insync.replicas", min_isr_default))
        if under_replicated_partitions:
            parts = [p for p in parts if len(p.isr) < len(p.replicas)]
        if unavailable_partitions:
            parts = [p for p in parts if p.leader < 0]
        if under_min_isr_partitions:
            parts = [p for p in parts if len(p.isr) < min_isr]
        if at_min_isr_partitions:
            parts = [p for p in parts if len(p.isr) == min_isr]
        if not any(partition_filters):
            rf = len(t.partitions[0].replicas) if t.partitions else 0
            cfg = ",".join(f"{k}={v}" for k, v in sorted(t.configs.items()))
            click.echo(f"Topic: {t.name}\tTopicId: {format_uuid(uuid.UUID(bytes=t.topic_id))}\t"
                       f"PartitionCount: {len(t.partitions)}\tReplicationFactor: {rf}\tConfigs: {cfg}")
        if topics_with_overrides:
            continue
        for p in parts:
            offline = f"\tOffline: {_ids(p.offline_replicas)}" if p.offline_replicas else ""
            click.echo(f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}"
                       f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}\tLeaderEpoch: {p.leader_epoch}{offline}")


@topics.command("delete")
@click.option("--topic", required=True)
@click.pass_obj
def topics_delete(obj: tuple, topic: str) -> None:
    resp = with_client(*obj, lambda c: c.delete_topics(pb.DeleteTopicsRequest(names=[topic])))
    r = resp.topics[0]
    _check(r.error_code, r.error_message, "")
    click.echo(f"Deleted topic {topic}.")


@topics.command("alter")
@click.option("--topic", required=True)
@click.option("--partitions", type=int, required=True, help="the new partition count (it only grows)")
@click.option("--replica-assignment", help="broker lists for the new partitions: 1:2:3,2:3:1")
@click.pass_obj
def topics_alter(obj: tuple, topic: str, partitions: int, replica_assignment: str | None) -> None:
    t = pb.CreatePartitionsRequest.Topic(name=topic, count=partitions)
    if replica_assignment:
        t.assignments.extend(pb.ReplicaAssignment(replicas=r) for r in _parse_assignment(replica_assignment))
    resp = with_client(*obj, lambda c: c.create_partitions(pb.CreatePartitionsRequest(topics=[t])))
    r = resp.topics[0]
    _check(r.error_code, r.error_message, "")
    click.echo(f"Topic {topic} now has {partitions} partitions.")


# ------------------------------------------------------------------------------- quorum, cluster

@main.group()
@click.option("--bootstrap-controller", "bootstrap", envvar="KRAFT_BOOTSTRAP_CONTROLLER",
              help="HOST:PORT[,HOST:PORT...] of any controllers (add-controller: by default, those its --config names)")
@timeout_option
@command_config_option
@click.pass_context
def quorum(ctx: click.Context, bootstrap: str | None, timeout: float) -> None:
    """Describe the controller quorum and change its voters (kafka-metadata-quorum.sh, KIP-853)."""
    ctx.obj = (bootstrap, timeout)


def _need_bootstrap(obj: tuple) -> tuple[str, float]:
    if not obj[0]:
        fail("give --bootstrap-controller HOST:PORT[,HOST:PORT...] (any controllers of the quorum)")
    return obj


def _replicas_json(replicas: Any) -> str:
    """Kafka's CurrentVoters/CurrentObservers: [{"id": 1, "directoryId": "...", "endpoints": [...]}]."""
    out = []
    for r in sorted(replicas, key=lambda r: r.replica_id):
        d: dict[str, Any] = {"id": r.replica_id, "directoryId": r.directory_id or None}
        if r.endpoints:
            d["endpoints"] = list(r.endpoints)
        out.append(json.dumps(d))
    return f"[{', '.join(out)}]"


@quorum.command("describe")
@click.option("--status", "mode", flag_value="status", default=True)
@click.option("--replication", "mode", flag_value="replication")
@click.pass_obj
def quorum_describe(obj: tuple, mode: str) -> None:
    from raft.config import UNKNOWN_DIRECTORY
    r = with_client(*_need_bootstrap(obj), lambda c: c.describe_quorum(pb.DescribeQuorumRequest()))
    now = time.time() * 1000
    if mode == "status":
        followers = [v for v in r.voters if v.replica_id != r.leader_id]
        max_lag = max((v.lag for v in followers), default=0)
        lag_ms = max((int(now - v.last_caught_up_timestamp) if v.last_caught_up_timestamp > 0 else -1
                      for v in followers), default=-1)
        for k, v in [("ClusterId", r.cluster_id), ("LeaderId", r.leader_id), ("LeaderEpoch", r.leader_epoch),
                     ("HighWatermark", r.high_watermark), ("MaxFollowerLag", max_lag),
                     ("MaxFollowerLagTimeMs", lag_ms),
                     ("CurrentVoters", _replicas_json(r.voters)),
                     ("CurrentObservers", _replicas_json(r.observers))]:
            click.echo(f"{k + ':':<24}{v}")
        return
    click.echo("NodeId\tDirectoryId\tLogEndOffset\tLag\tLastFetchTimestamp\tLastCaughtUpTimestamp\tStatus")
    voters = sorted(r.voters, key=lambda v: v.replica_id != r.leader_id)  # the leader first, as Kafka lists it
    for kind, reps in (("Voter", voters), ("Observer", r.observers)):
        for v in reps:
            status = "Leader" if v.replica_id == r.leader_id and kind == "Voter" else ("Follower" if kind == "Voter" else "Observer")
            click.echo(f"{v.replica_id}\t{v.directory_id or UNKNOWN_DIRECTORY}\t{v.log_end_offset}\t{v.lag}\t"
                       f"{v.last_fetch_timestamp}\t{v.last_caught_up_timestamp}\t{status}")


@quorum.command("add-controller")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="the new controller's properties: its node.id, controller listener and formatted metadata.log.dir")
@click.option("--dry-run", is_flag=True, help="say what would be added, and change nothing")
@click.pass_obj
def quorum_add_controller(obj: tuple, config_path: str, dry_run: bool) -> None:
    """Make a running controller a voter. Start it first (formatted with --no-initial-controllers,
    with controller.quorum.bootstrap.servers): it follows the log as an observer; the active
    controller adds it once it has caught up, as a learner first, then as a voter."""
    import os
    from metadata import config as server_config
    from common.config_def import ConfigError
    from raft.errors import RaftError
    from raft.storage import check_formatted
    from raft.storage.disk import META_FILE
    bootstrap, timeout = obj
    try:
        cfg = server_config.load(config_path)
        if not cfg.is_controller:
            raise ConfigError(f"{config_path}: process.roles has no controller; is this a controller's config?")
        meta = os.path.join(cfg.metadata_log_dir, META_FILE)
        if not os.path.exists(meta):
            raise ConfigError(f"{cfg.metadata_log_dir} is not formatted: run `kraft storage format --cluster-id ID "
                              f"--config {config_path} --no-initial-controllers` first")
        props = check_formatted(cfg.metadata_log_dir, None, cfg.node_id)
    except (ConfigError, RaftError) as e:
        fail(str(e))
        return
    host, port = cfg.advertised[cfg.controller_listener]
    directory = props.get("directory.id", "")
    described = (f"controller {cfg.node_id} with directory id {directory} and endpoints: "
                 f"{cfg.controller_listener}://{host}:{port}")
    bootstrap = bootstrap or ",".join(cfg.quorum_bootstrap())
    if dry_run:
        _dry_run_quorum_change(bootstrap, timeout, "add")
        click.echo(f"DRY RUN of adding {described}")
        return
    req = pb.AddRaftVoterRequest(cluster_id=props.get("cluster.id", ""), timeout_ms=int(timeout * 400),
                                 voter_id=cfg.node_id, voter_directory_id=directory,
                                 listeners=[pb.Endpoint(name=cfg.controller_listener, host=host, port=port)])
    with_client(bootstrap, timeout, lambda c: c.add_raft_voter(req, attempt_timeout=timeout))
    click.echo(f"Added {described}")


@quorum.command("remove-controller")
@click.option("--controller-id", type=int, required=True, help="the voter's node id")
@click.option("--controller-directory-id", required=True,
              help="the voter's directory id, as describe --status shows it (AAAAAAAAAAAAAAAAAAAAAA when unknown)")
@click.option("--dry-run", is_flag=True, help="say what would be removed, and change nothing")
@click.pass_obj
def quorum_remove_controller(obj: tuple, controller_id: int, controller_directory_id: str, dry_run: bool) -> None:
    """Remove a voter, named by node id and directory id (a controller formatted again is another);
    also a learner that an interrupted add-controller left behind."""
    if controller_id <= 0:
        fail(f"bad --controller-id {controller_id}: controller ids are positive")
    described = f"KRaft controller {controller_id} with directory id {controller_directory_id}"
    if dry_run:
        _dry_run_quorum_change(*_need_bootstrap(obj), "remove")
        click.echo(f"DRY RUN of removing {described}")
        return
    req = pb.RemoveRaftVoterRequest(voter_id=controller_id, voter_directory_id=controller_directory_id)
    with_client(*_need_bootstrap(obj), lambda c: c.remove_raft_voter(req))
    click.echo(f"Removed {described}")


def _dry_run_quorum_change(bootstrap: str, timeout: float, verb: str) -> None:
    """A --dry-run still asks the quorum whether it can change at all: a static one refuses."""
    from metadata.quorum import static_quorum_refusal
    r = with_client(bootstrap, timeout, lambda c: c.describe_quorum(pb.DescribeQuorumRequest()))
    if not any(v.directory_id for v in r.voters):
        fail(str(static_quorum_refusal(verb)))


@controller_group
def cluster() -> None:
    """Describe the cluster: id, active controller, brokers; unregister a broker (kafka-cluster.sh)."""


@cluster.command("unregister")
@click.option("--id", "broker_id", type=int, required=True, help="the broker to forget")
@click.pass_obj
def cluster_unregister(obj: tuple, broker_id: int) -> None:
    """Forget a stopped broker that hosts no replicas."""
    with_client(*obj, lambda c: c.unregister_broker(pb.UnregisterBrokerRequest(broker_id=broker_id)))
    click.echo(f"Broker {broker_id} is no longer registered.")


@cluster.command("describe")
@click.pass_obj
def cluster_describe(obj: tuple) -> None:
    r = with_client(*obj, lambda c: c.describe_cluster(pb.DescribeClusterRequest()))
    click.echo(f"Cluster ID: {r.cluster_id}")
    click.echo(f"Controller: {r.controller_id}")
    click.echo(f"Metadata offset: {r.metadata_offset}")
    click.echo(f"Brokers ({len(r.brokers)}):")
    for b in r.brokers:
        eps = ",".join(f"{e.name}://{e.host}:{e.port}" for e in b.endpoints)
        state = "fenced" if b.fenced else "shutting down" if b.in_controlled_shutdown else "active"
        click.echo(f"  {b.id}\t{eps}\track={b.rack or '-'}\t{state}\tepoch={b.epoch}")


# ------------------------------------------------------------------------------- configs

@main.command()
@bootstrap_option
@timeout_option
@command_config_option
@click.option("--entity-type", type=click.Choice(["topics", "brokers", "users"]), required=True)
@click.option("--entity-name", help="topic name, broker id or user")
@click.option("--entity-default", is_flag=True, help="the cluster-wide broker default")
@click.option("--describe", "action", flag_value="describe")
@click.option("--alter", "action", flag_value="alter")
@click.option("--add-config", "add", help="KEY=VALUE[,KEY=VALUE...]")
@click.option("--delete-config", "delete", help="KEY[,KEY...]")
def configs(bootstrap: str, timeout: float, entity_type: str, entity_name: str | None, entity_default: bool,
            action: str | None, add: str | None, delete: str | None) -> None:
    """Describe or change topic and broker configs, and users' SCRAM credentials (kafka-configs.sh)."""
    if entity_type == "users":
        return _user_configs(bootstrap, timeout, entity_name, action, add, delete)
    rtype = pb.TOPIC if entity_type == "topics" else pb.BROKER
    if entity_default:
        if rtype != pb.BROKER:
            fail("--entity-default applies to --entity-type brokers")
        name = ""
    elif entity_name is None:
        fail("give --entity-name (or --entity-default for brokers)")
        return
    elif rtype == pb.BROKER and not entity_name.isdigit():
        fail(f"--entity-name {entity_name!r}: a broker is named by its id, e.g. 101")
        return
    else:
        name = entity_name
    label = f"{'topic' if rtype == pb.TOPIC else 'broker'} {name or '<default>'}"
    if action == "alter":
        changes = [pb.AlterableConfig(name=k, op=pb.AlterableConfig.SET, value=v)
                   for k, v in _parse_configs((add,) if add else ()).items()]
        changes += [pb.AlterableConfig(name=k.strip(), op=pb.AlterableConfig.DELETE)
                    for k in (delete or "").split(",") if k.strip()]
        if not changes:
            fail("--alter needs --add-config and/or --delete-config")
        req = pb.IncrementalAlterConfigsRequest(resources=[pb.AlterConfigsResource(
            resource_type=rtype, resource_name=name, configs=changes)])
        r = with_client(bootstrap, timeout, lambda c: c.incremental_alter_configs(req)).resources[0]
        _check(r.error_code, r.error_message, "")
        click.echo(f"Completed updating config for {label}.")
        return
    if action != "describe":
        fail("give --describe or --alter")
    req = pb.DescribeConfigsRequest(resources=[pb.AlterConfigsResource(resource_type=rtype, resource_name=name)])
    r = with_client(bootstrap, timeout, lambda c: c.describe_configs(req)).resources[0]
    _check(r.error_code, r.error_message, "")
    click.echo(f"Configs for {label} are:")
    for e in r.configs:
        click.echo(f"  {e.name}={e.value}{'  (default)' if e.is_default else ''}")


def _user_configs(bootstrap: str, timeout: float, user: str | None, action: str | None, add: str | None,
                  delete: str | None) -> None:
    """SCRAM credentials (KIP-554): the request is built by kraft.users, which salts the password here."""
    from metadata.errors import ApiError
    from kraft.users import alter_request, describe_lines
    if action == "alter":
        if not user:
            fail("--alter --entity-type users needs --entity-name USER")
        try:
            req = alter_request(user or "", add, delete)
        except ValueError as e:
            fail(str(e))
        except ApiError as e:
            fail(f"{e.code.name}: {e.message}")
        for r in with_client(bootstrap, timeout, lambda c: c.alter_user_scram_credentials(req)).results:
            _check(r.error_code, r.error_message, "")
        click.echo(f"Completed updating config for user {user}.")
        return
    if action != "describe":
        fail("give --describe or --alter")
    resp = with_client(bootstrap, timeout, lambda c: c.describe_user_scram_credentials(
        pb.DescribeUserScramCredentialsRequest(users=[user] if user else [])))
    for r in resp.results:
        _check(r.error_code, r.error_message, "")
    for line in describe_lines(resp):
        click.echo(line)


# ------------------------------------------------------------------------------- ACLs

@main.command("acls")
@bootstrap_option
@timeout_option
@command_config_option
@click.option("--add", "action", flag_value="add", help="add the ACLs the options name")
@click.option("--remove", "action", flag_value="remove", help="remove them (all of a resource's without principals)")
@click.option("--list", "action", flag_value="list", help="list the ACLs (of the resources named, or all)")
@click.option("--allow-principal", "allow_principals", multiple=True, metavar="TYPE:NAME", help="e.g. User:alice")
@click.option("--deny-principal", "deny_principals", multiple=True, metavar="TYPE:NAME")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="IP", help="default: * (any)")
@click.option("--deny-host", "deny_hosts", multiple=True, metavar="IP", help="default: * (any)")
@click.option("--operation", "operation_names", multiple=True,
              help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                   "IdempotentWrite or All (default), repeatable")
@click.option("--topic", "topics", multiple=True, help="a topic (or, with --resource-pattern-type prefixed, a prefix)")
@click.option("--group", "groups", multiple=True, help="a consumer group (or a prefix)")
@click.option("--cluster", is_flag=True, help="the cluster")
@click.option("--resource-pattern-type", "pattern_name", metavar="literal|prefixed|match|any",
              help="literal (default) or prefixed to add; also match or any to remove or list")
@click.option("--principal", help="--list: only this principal's ACLs")
@click.option("--force", is_flag=True, help="accepted for kafka-acls.sh compatibility: --remove never asks")
def acls_command(bootstrap: str, timeout: float, action: str | None, allow_principals: tuple[str, ...],
                 deny_principals: tuple[str, ...], allow_hosts: tuple[str, ...], deny_hosts: tuple[str, ...],
                 operation_names: tuple[str, ...], topics: tuple[str, ...], groups: tuple[str, ...], cluster: bool,
                 pattern_name: str | None, principal: str | None, force: bool) -> None:
    """Add, remove and list ACLs (kafka-acls.sh); the controllers need authorizer.class.name."""
    from metadata.errors import ApiError, ErrorCode

    from . import acls as A
    if action is None:
        fail("give one of --add, --remove, --list")
    try:
        where = A.resources(topics, groups, cluster, A.pattern_type(pattern_name, action))
        if action != "list" and not where:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"--{action} needs a resource: --topic, --group or --cluster")
        who = A.entries(allow_principals, allow_hosts, deny_principals, deny_hosts)
        if action == "add" and not who:
            raise ApiError(ErrorCode.INVALID_REQUEST, "--add needs --allow-principal or --deny-principal")
        ops = A.operations(operation_names, where)
        wanted_principal = A.check_principal(principal) if principal else None
    except ApiError as e:
        fail(e.message)
        return

    async def work(client: ControllerClient) -> tuple[list[str], list[str]]:
        if action == "add":
            return await A.add(client, where, who, ops)
        if action == "remove":
            return await A.remove(client, where, who, ops if operation_names else None)
        return await A.list_acls(client, where, wanted_principal), []

    lines, errors = with_client(bootstrap, timeout, work)
    if lines:
        click.echo("\n".join(lines))
    for error in errors:
        click.echo(f"Error: {error}", err=True)
    if errors:
        sys.exit(1)


# ------------------------------------------------------------------------------- health

@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="this server's properties file")
def health(config_path: str) -> None:
    """Exit 0 when this server is healthy: a controller has joined the quorum and knows the
    leader; a broker is registered and unfenced. For container health checks."""
    from metadata import config as server_config
    from common.config_def import ConfigError
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
    from raft.client import describe
    from raft.proto import raft_pb2 as rpb
    from raft.proto import raft_pb2_grpc
    from common.channels import dial
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


@main.command("get-offsets")
@command_config_option
@click.option("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT] of brokers (gRPC listeners)")
@click.option("--topic", required=True)
@click.option("--partitions", help="comma-separated partition ids (default: all)")
@click.option("--time", "when", default="-1", show_default=True,
              help="-1 (latest: the high watermark), -2 (earliest) or a time in ms since the epoch")
def get_offsets(bootstrap_server: str, topic: str, partitions: str | None, when: str) -> None:
    """Each partition's offset at a time, as TOPIC:PARTITION:OFFSET (kafka-get-offsets.sh); an
    offset is left empty when no record is that recent."""
    from clients.admin import Admin
    from clients.cluster_view import ClientError
    try:
        at = int(when)
        wanted = [int(p) for p in partitions.split(",")] if partitions else None
    except ValueError:
        fail("--time takes -1, -2 or a time in ms; --partitions takes ids like 0,1,2")
        return
    if at < -2:
        fail(f"--time {at}: use -1 (latest), -2 (earliest) or a time in ms")
        return

    async def ask() -> dict[tuple[str, int], tuple[int, int]]:
        async with Admin(bootstrap_server, tls=command_tls()) as admin:
            tps = await admin.partitions_of(topic)
            if not tps:
                raise ClientError(f"UNKNOWN_TOPIC_OR_PARTITION: Topic {topic} does not exist.")
            if wanted is not None:
                missing = sorted(set(wanted) - {p for _, p in tps})
                if missing:
                    raise ClientError(f"UNKNOWN_TOPIC_OR_PARTITION: topic {topic} has no partitions {missing}")
                tps = [(topic, p) for p in wanted]
            return await admin.offsets({tp: at for tp in tps})
    try:
        found = run(ask())
    except ClientError as e:
        fail(str(e))
        return
    for (t, p), (offset, _) in sorted(found.items()):
        click.echo(f"{t}:{p}:{offset if offset >= 0 else ''}")


@main.command("reassign-partitions")
@command_config_option
@click.option("--bootstrap-controller", "bootstrap", required=True, help="HOST:PORT[,HOST:PORT] of controllers")
@click.option("--bootstrap-server", help="HOST:PORT of a broker (gRPC listener): --verify then shows what each "
                                         "moving replica still has to copy")
@click.option("--generate", "action", flag_value="generate", help="propose a balanced plan")
@click.option("--execute", "action", flag_value="execute", help="start the moves of --reassignment-json-file")
@click.option("--verify", "action", flag_value="verify", help="show progress; clear throttles once done")
@click.option("--cancel", "action", flag_value="cancel", help="stop the moves of --reassignment-json-file")
@click.option("--list", "action", flag_value="list", help="every reassignment in progress")
@click.option("--topics-to-move-json-file", help='--generate: {"version":1,"topics":[{"topic":"NAME"}]}')
@click.option("--all-topics", is_flag=True, help="--generate: plan every topic (e.g. to drain a broker)")
@click.option("--broker-list", help="--generate: the brokers to place replicas on, e.g. 1,2,3")
@click.option("--disable-rack-aware", is_flag=True, help="--generate: ignore broker racks")
@click.option("--reassignment-json-file", help='{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}')
@click.option("--throttle", type=click.IntRange(min=1), help="--execute: bytes/s for moving replicas")
@click.option("--preserve-throttles", is_flag=True, help="--verify: keep the throttles when done")
@click.option("--timeout", type=float, default=30.0, show_default=True)
def reassign_partitions(bootstrap: str, bootstrap_server: str | None, action: str | None,
                        topics_to_move_json_file: str | None, all_topics: bool, broker_list: str | None,
                        disable_rack_aware: bool, reassignment_json_file: str | None, throttle: int | None,
                        preserve_throttles: bool, timeout: float) -> None:
    """Move partitions between brokers (kafka-reassign-partitions.sh); docs/operations.md."""
    from metadata.reassignments import PlanError, plan_json, read_plan

    from . import reassign as r
    if action is None:
        fail("give one of --generate, --execute, --verify, --cancel, --list")
    try:
        if action == "generate":
            if not broker_list or bool(topics_to_move_json_file) == all_topics:
                raise PlanError("--generate needs --broker-list and either --topics-to-move-json-file or "
                                  "--all-topics")
            ids = r.parse_broker_list(broker_list)
            topics = r.read_topics_to_move(topics_to_move_json_file) if topics_to_move_json_file else None
        elif action != "list":
            if not reassignment_json_file:
                raise PlanError(f"--{action} needs --reassignment-json-file")
            plan = read_plan(reassignment_json_file)
    except PlanError as e:
        fail(str(e))
        return

    async def work(client: ControllerClient) -> tuple[list[str], bool]:
        if action == "generate":
            names = topics
            if names is None:
                names = sorted(t.name for t in (await client.describe_topics(pb.DescribeTopicsRequest())).topics)
            current, proposed = await r.generate(client, names, ids, not disable_rack_aware)
            return (["Current partition replica assignment", plan_json(current), "",
                     "Proposed partition reassignment configuration", plan_json(proposed)], True)
        if action == "execute":
            return await r.execute(client, plan, throttle), True
        if action == "cancel":
            return await r.cancel(client, plan), True
        if action == "list":
            return r.list_lines(await r.ongoing(client, None)), True
        describes = None
        if bootstrap_server:
            from clients.admin import Admin
            async with Admin(bootstrap_server, tls=command_tls()) as admin:
                describes = await admin.describe_brokers()
        return await r.verify(client, plan, describes, preserve_throttles)

    lines, ok = with_client(bootstrap, timeout, work)
    click.echo("\n".join(lines))
    if not ok:
        sys.exit(1)


@main.command("log-dirs")
@command_config_option
@click.option("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT] of brokers (gRPC listeners)")
@click.option("--describe", is_flag=True, required=True, help="describe the brokers' log directories")
@click.option("--broker-list", help="only these broker ids, e.g. 1,2")
@click.option("--topic-list", help="only these topics, e.g. a,b")
def log_dirs(bootstrap_server: str, describe: bool, broker_list: str | None, topic_list: str | None) -> None:
    """Bytes per partition per broker, as JSON (kafka-log-dirs.sh --describe). offsetLag is how
    far a replica's log end is behind its leader's."""
    from clients.admin import Admin
    from clients.cluster_view import ClientError
    try:
        ids = [int(b) for b in broker_list.split(",")] if broker_list else None
    except ValueError:
        fail(f"--broker-list {broker_list!r}: expected broker ids like 1,2,3")
        return
    topics = set(topic_list.split(",")) if topic_list else None

    async def ask() -> dict[int, Any]:
        async with Admin(bootstrap_server, tls=command_tls()) as admin:
            return await admin.describe_brokers(ids)
    try:
        found = run(ask())
    except ClientError as e:
        fail(str(e))
        return
    leader_end = {(s.topic, s.partition): s.log_end_offset for d in found.values() for s in d.replicas
                  if s.role == "leader"}
    brokers = []
    for bid, d in sorted(found.items()):
        parts = [{"partition": f"{s.topic}-{s.partition}", "size": s.size_bytes,
                  "offsetLag": max(0, leader_end.get((s.topic, s.partition), s.log_end_offset) - s.log_end_offset),
                  "isFuture": False}
                 for s in d.replicas if topics is None or s.topic in topics]
        brokers.append({"broker": bid, "logDirs": [{"logDir": d.log_dirs[0] if d.log_dirs else "", "error": None,
                                                    "partitions": parts}]})
    missing = sorted(set(ids or ()) - set(found))
    if missing:
        click.echo(f"Error: brokers {missing} did not answer", err=True)
    click.echo("Querying brokers for log directories information")
    click.echo("Received log directory information from brokers " + ",".join(str(b) for b in sorted(found)))
    click.echo(json.dumps({"version": 1, "brokers": brokers}, separators=(",", ":")))
    if missing:
        sys.exit(1)


@main.command("leader-election")
@command_config_option
@click.option("--bootstrap-controller", "bootstrap", required=True, help="HOST:PORT[,HOST:PORT] of controllers")
@click.option("--election-type", type=click.Choice(["preferred", "unclean"], case_sensitive=False), required=True,
              help="preferred: the first replica leads again; unclean: a leaderless partition takes any live replica")
@click.option("--all-topic-partitions", is_flag=True, help="every partition")
@click.option("--topic", help="one topic (all its partitions, or --partition)")
@click.option("--partition", type=int, help="one partition of --topic")
@click.option("--timeout", type=float, default=30.0, show_default=True)
def leader_election(bootstrap: str, election_type: str, all_topic_partitions: bool, topic: str | None,
                    partition: int | None, timeout: float) -> None:
    """Elect leaders (kafka-leader-election.sh); exits 1 when a partition could not be elected."""
    from metadata.client import error_code
    from metadata.errors import ErrorCode
    if all_topic_partitions == bool(topic) or (partition is not None and not topic):
        fail("give either --all-topic-partitions, or --topic (and optionally --partition)")
        return
    kind = election_type.upper()

    async def work(client: ControllerClient) -> Any:
        req = pb.ElectLeadersRequest(election_type=getattr(pb.ElectLeadersRequest, kind))
        if topic:
            if partition is None:
                r = await client.describe_topics(pb.DescribeTopicsRequest(names=[topic]))
                t = r.topics[0]
                _check(t.error_code, t.error_message, f"topic {topic}")
                parts = [p.partition for p in t.partitions]
            else:
                parts = [partition]
            req.topics.add(name=topic, partitions=parts)
        return await client.elect_leaders(req)

    resp = with_client(bootstrap, timeout, work)
    done = [f"{r.topic}-{r.partition}" for r in resp.results if r.error_code == ErrorCode.NONE]
    needless = [f"{r.topic}-{r.partition}" for r in resp.results if r.error_code == ErrorCode.ELECTION_NOT_NEEDED]
    failed = [r for r in resp.results if r.error_code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)]
    if done:
        click.echo(f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}")
    if needless:
        click.echo(f"Valid replica already elected for partitions {', '.join(needless)}")
    if not resp.results:
        click.echo(f"No partition needed a leader election ({kind})")
    for r in failed:
        click.echo(f"Error completing leader election ({kind}) for partition: {r.topic}-{r.partition}: "
                   f"{error_code(r.error_code).name}: {r.error_message}", err=True)
    if failed:
        sys.exit(1)


@main.command("broker-api-versions")
@click.option("--bootstrap-server", required=True, help="HOST:PORT of a broker's Kafka listener")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="seconds per request")
@click.option("--command-config", type=click.Path(exists=True, dir_okay=False), default=None,
              help="properties file with the client's security.protocol and ssl.* keys")
def broker_api_versions(bootstrap_server: str, timeout: float, command_config: str | None) -> None:
    """The APIs and versions each broker serves to Kafka clients (kafka-broker-api-versions.sh)."""
    from clients.cluster_view import ClientError
    from clients.config import read_config_file
    from clients.security import check_hostname, client_tls
    from common.tls import ssl_context
    from common.config_def import ConfigError
    from .broker_api_versions import KafkaToolError, broker_api_versions as ask
    try:
        props = read_config_file(command_config) if command_config else {}
        tls = client_tls(props)
        context = ssl_context(tls, server=False, check_hostname=check_hostname(props)) if tls else None
        lines = run(ask(bootstrap_server, timeout, context))
    except (ClientError, ConfigError, KafkaToolError) as e:
        fail(str(e))
        return
    click.echo("\n".join(lines))


# ------------------------------------------------------------------------------- development

@main.command("dev-quorum")
@click.option("--dir", "base_dir", default=None, help="where configs and data go (default: a new temp dir)")
@click.option("--base-port", type=int, default=19093, show_default=True,
              help="controllers listen on P..P+2, brokers on P+3... (gRPC), then on the ports after (Kafka)")
@click.option("--brokers", type=int, default=3, show_default=True, help="broker processes (ids 101...)")
def dev_quorum(base_dir: str | None, base_port: int, brokers: int) -> None:
    """Three controllers (and brokers) on loopback as processes; prints the bootstrap strings;
    Ctrl-C stops them."""
    from common.config_def import ConfigError
    from raft.errors import RaftError

    from .dev_quorum import DevQuorum
    q = DevQuorum(base_dir, base_port, brokers=brokers)
    try:
        q.start()
        leader = run(q.wait_for_leader())
        if brokers:
            run(q.wait_for_brokers())
    except (ConfigError, RaftError, OSError) as e:
        q.stop()
        fail(str(e))
        return
    click.echo(f"3 controllers and {brokers} brokers running in {q.base_dir} (cluster id {q.cluster_id}); "
               f"active controller: node {leader}")
    click.echo(f"controllers: {q.bootstrap}")
    if brokers:
        click.echo(f"brokers:     {q.bootstrap_servers}  (gRPC: kraft tools, clients/)")
        click.echo(f"Kafka:       {q.kafka_bootstrap_servers}  (bootstrap.servers for any Kafka client)")
    click.echo(f"try:  kraft topics --bootstrap-controller {q.bootstrap} create --topic demo --partitions 3"
               f"{' --replication-factor 3' if brokers >= 3 else ''}")
    click.echo(f"      kraft quorum --bootstrap-controller {q.bootstrap} describe --status")
    if brokers:
        click.echo(f"      echo hello | kraft console-producer --bootstrap-server {q.bootstrap_servers} --topic demo")
        click.echo(f"      kraft console-consumer --bootstrap-server {q.bootstrap_servers} --topic demo --from-beginning")
        click.echo(f"      kraft web --bootstrap-controller {q.bootstrap} --bootstrap-server {q.bootstrap_servers}"
                   f"   (a console at http://127.0.0.1:8080/)")
    click.echo("Ctrl-C stops them.")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the controllers on SIGTERM too
    try:
        q.wait()
    except (KeyboardInterrupt, ConfigError) as e:
        if isinstance(e, ConfigError):
            click.echo(f"Error: {e}", err=True)
    finally:
        q.stop()
        click.echo("stopped.")


#: Commands that live in their own modules, imported when run: (module, attribute, the line
#: `kraft --help` shows, which would otherwise cost importing them all).
MOUNTED = {
    "analytics": ("metadata.analytics.cli", "analytics", "Spark analytics over metadata snapshots and logs."),
    "console-consumer": ("clients.console", "console_consumer", "Print the messages of TOPIC to stdout."),
    "console-producer": ("clients.console", "console_producer", "Send the lines of stdin to TOPIC."),
    "consumer-groups": ("clients.consumer_groups", "consumer_groups",
                        "List, describe, reset and delete consumer groups."),
    "dump-log": ("metadata.dump_log", "dump_log", "Decode metadata log segments and snapshots."),
    "dump-data": ("brokerd.dump_data", "dump_data", "Decode a partition's batches in a broker's log dir."),
    "web": ("kraft.web.command", "web", "Serve a web console for the cluster (overview, topics, messages, groups)."),
}


if __name__ == "__main__":
    main()
