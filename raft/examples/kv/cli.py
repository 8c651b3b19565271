"""``raft-kv``: run a node of the replicated key-value store, or talk to a running cluster.

    raft-kv format --id 1 --data-dir /tmp/kv1 --cluster-id demo
    raft-kv serve  --id 1 --voters 1@127.0.0.1:9091,2@127.0.0.1:9092,3@127.0.0.1:9093 --data-dir /tmp/kv1
    raft-kv --endpoints 127.0.0.1:9091,127.0.0.1:9092 put greeting hello
    raft-kv --endpoints 127.0.0.1:9091 get greeting
"""
from __future__ import annotations

import asyncio
import logging
import signal
import sys
from typing import Any, Awaitable, Callable, NoReturn

import grpc

try:
    import click
except ImportError:  # the base install is the library alone (pyproject.toml)
    sys.exit("raft-kv: error: the command line needs click: pip install 'pykraft[server]'")

from raft.proto import raft_pb2 as rpb
from common.config_def import ConfigError
from common.tls import TLSConfig
from raft.config import NodeOptions
from raft.errors import RaftError
from raft.storage import format_storage
from raft.transport import calls_ended, grpc_errors_in_one_line

from .client import KVClient, KVError

_DEFAULTS = NodeOptions()


def _fail(msg: str) -> NoReturn:
    click.echo(f"raft-kv: error: {msg}", err=True)
    sys.exit(1)


def _tls(cert: str | None, key: str | None, ca: str | None, client_auth: bool) -> TLSConfig | None:
    if not cert and not key and not ca:
        return None
    if not cert or not key:
        _fail("--tls-cert and --tls-key go together")
    return TLSConfig(cert=cert, key=key, ca=ca, require_client_auth=client_auth)


tls_options = [
    click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="PEM certificate"),
    click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="PEM private key"),
    click.option("--tls-ca", type=click.Path(exists=True, dir_okay=False), help="PEM CA bundle to verify peers"),
]


def with_tls(f: Callable) -> Callable:
    for opt in reversed(tls_options):
        f = opt(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--endpoints", envvar="RAFT_KV_ENDPOINTS", default="127.0.0.1:9091",
              show_default=True, help="comma-separated HOST:PORT of any nodes")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="seconds per command")
@with_tls
@click.pass_context
def main(ctx: click.Context, endpoints: str, timeout: float, tls_cert, tls_key, tls_ca) -> None:
    """A replicated key-value store on the raft package."""
    ctx.obj = {"endpoints": [e.strip() for e in endpoints.split(",") if e.strip()],
               "timeout": timeout, "tls": _tls(tls_cert, tls_key, tls_ca, False)}


@main.command("format")
@click.option("--id", "node_id", type=int, required=True)
@click.option("--data-dir", required=True)
@click.option("--cluster-id", required=True, help="the same on every node of the cluster")
@click.option("--ignore-formatted", is_flag=True)
def format_cmd(node_id: int, data_dir: str, cluster_id: str, ignore_formatted: bool) -> None:
    """Format a data directory for a node (required before its first start)."""
    try:
        done = format_storage(data_dir, cluster_id, node_id, ignore_formatted=ignore_formatted)
    except RaftError as e:
        _fail(str(e))
    except OSError as e:  # a directory that cannot be made or written
        _fail(f"cannot format {data_dir}: {e.strerror or e}")
    click.echo(f"formatted {data_dir} for node {node_id} of cluster {cluster_id}" if done
               else f"{data_dir} is already formatted for node {node_id} of cluster {cluster_id}")


@main.command()
@click.option("--id", "node_id", type=int, required=True, help="this node's id")
@click.option("--voters", required=True, help="ID@HOST:PORT,... the initial voters")
@click.option("--data-dir", required=True, help="formatted with `raft-kv format`")
@click.option("--address", help="this node's HOST:PORT when it is not among the voters")
@click.option("--listen", help="HOST:PORT to bind when it differs from the advertised address")
@click.option("--election-timeout-ms", type=int, default=_DEFAULTS.election_timeout_ms, show_default=True)
@click.option("--heartbeat-ms", type=int, default=_DEFAULTS.heartbeat_interval_ms, show_default=True)
@click.option("--snapshot-entries", type=int, default=_DEFAULTS.snapshot_entries, show_default=True,
              help="take a snapshot after this many applied entries")
@click.option("--snapshot-trailing-entries", type=int, default=_DEFAULTS.snapshot_trailing_entries,
              show_default=True, help="entries kept after a snapshot for followers that lag")
@click.option("--max-message-bytes", type=int, default=_DEFAULTS.max_message_bytes, show_default=True)
@click.option("--no-fsync", is_flag=True, help="unsafe: skip fsync (benchmarks only)")
@click.option("--tls-client-auth", is_flag=True, help="require client certificates (mutual TLS)")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]), default="INFO",
              show_default=True)
@click.pass_obj
def serve(obj: dict, node_id: int, voters: str, data_dir: str, address: str | None,
          listen: str | None, election_timeout_ms: int, heartbeat_ms: int, snapshot_entries: int,
          snapshot_trailing_entries: int, max_message_bytes: int, no_fsync: bool, tls_client_auth: bool,
          log_level: str) -> None:
    """Run a node until SIGTERM or Ctrl-C (a leader hands over leadership first)."""
    from .server import build

    logging.basicConfig(level=log_level, format=f"%(asctime)s node{node_id} %(name)s %(levelname)s %(message)s")
    grpc_errors_in_one_line()
    tls = obj["tls"]
    if tls is not None and tls_client_auth:
        tls = TLSConfig(tls.cert, tls.key, tls.ca, require_client_auth=True)
    try:
        opts = NodeOptions(election_timeout_ms=election_timeout_ms, heartbeat_interval_ms=heartbeat_ms,
                           tick_ms=min(50, heartbeat_ms), snapshot_entries=snapshot_entries,
                           snapshot_trailing_entries=snapshot_trailing_entries,
                           max_message_bytes=max_message_bytes, fsync=not no_fsync, tls=tls,
                           listen=listen)
        opts.core_config()
    except ConfigError as e:
        _fail(str(e))

    async def run() -> int:
        try:
            node, _ = build(node_id, voters, data_dir, options=opts, address=address)
            await node.start()
        except (RaftError, ConfigError) as e:
            _fail(str(e))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        stopped = loop.create_task(node.wait_stopped())
        await asyncio.wait([loop.create_task(stop.wait()), stopped], return_when=asyncio.FIRST_COMPLETED)
        err = stopped.result() if stopped.done() else None  # it stopped by itself
        await node.stop()  # (then returns at once)
        await calls_ended()  # before the loop ends under them
        if err is not None:
            click.echo(f"raft-kv: error: {err}", err=True)
            return 1
        return 0

    sys.exit(asyncio.run(run()))


def _client_command(fn: Callable[[KVClient], Awaitable[Any]]) -> Callable[[dict], None]:
    def run(obj: dict) -> None:
        async def go() -> Any:
            client = KVClient(obj["endpoints"], timeout=obj["timeout"], tls=obj["tls"])
            try:
                return await fn(client)
            finally:
                await client.close()
        try:
            asyncio.run(go())
        except KVError as e:
            _fail(str(e))
    return run


@main.command()
@click.argument("key")
@click.argument("value")
@click.pass_obj
def put(obj: dict, key: str, value: str) -> None:
    """Set KEY to VALUE."""
    async def go(c: KVClient) -> None:
        await c.put(key.encode(), value.encode())
        click.echo("OK")
    _client_command(go)(obj)


@main.command()
@click.argument("key")
@click.pass_obj
def get(obj: dict, key: str) -> None:
    """Print KEY's value (a linearizable read); exit 1 when it is absent."""
    async def go(c: KVClient) -> None:
        v = await c.get(key.encode())
        if v is None:
            _fail(f"key {key!r} not found")
        click.echo(v.decode(errors="replace"))
    _client_command(go)(obj)


@main.command()
@click.argument("key")
@click.pass_obj
def delete(obj: dict, key: str) -> None:
    """Delete KEY."""
    async def go(c: KVClient) -> None:
        click.echo("deleted" if await c.delete(key.encode()) else "not found")
    _client_command(go)(obj)


@main.command()
@click.argument("key")
@click.argument("old", required=False)
@click.argument("new")
@click.option("--absent", is_flag=True, help="succeed only if KEY does not exist (no OLD)")
@click.pass_obj
def cas(obj: dict, key: str, old: str | None, new: str, absent: bool) -> None:
    """Set KEY to NEW if it holds OLD; exit 1 otherwise."""
    if (old is None) != absent:
        _fail("give OLD, or --absent without OLD")

    async def go(c: KVClient) -> None:
        ok, before = await c.cas(key.encode(), None if old is None else old.encode(), new.encode())
        if not ok:
            _fail(f"compare failed: {key!r} is " + ("absent" if before is None else repr(before.decode(errors='replace'))))
        click.echo("OK")
    _client_command(go)(obj)


@main.command()
@click.pass_obj
def status(obj: dict) -> None:
    """Show each endpoint's view: role, term, leader, commit and applied index; on the
    leader, each peer's match index, lag and last contact."""
    async def go(c: KVClient) -> None:
        for ep in obj["endpoints"]:
            try:
                s = await c.status(ep)
            except grpc.aio.AioRpcError as e:
                click.echo(f"{ep}: unreachable ({e.details()})")
                continue
            click.echo(f"{ep}: node {s.node_id} {s.role.lower()} term={s.term} leader={s.leader_id} "
                       f"commit={s.commit_index} applied={s.applied_index} voters={list(s.voters)}"
                       + (f" learners={list(s.learners)}" if s.learners else ""))
            for p in s.peers:
                click.echo(f"    peer {p.node_id} {p.kind} match={p.match_index} "
                           f"lag={p.lag} last_contact={p.last_contact_seconds}s {p.state}")
            if s.rejected:
                click.echo("    rejected: " + ", ".join(f"{k}={v}" for k, v in sorted(s.rejected.items())))
    _client_command(go)(obj)


@main.group()
def member() -> None:
    """Change the cluster's membership (through the leader)."""


def _member(method: str, request: Any) -> Callable[[dict], None]:
    async def go(c: KVClient) -> None:
        r = await c.admin(method, request)
        click.echo(f"OK (log index {r.index})" if r.index else "OK (no change)")
    return _client_command(go)


@member.command("add-voter")
@click.argument("node_id", type=int)
@click.argument("address")
@click.pass_obj
def add_voter(obj: dict, node_id: int, address: str) -> None:
    """Add NODE_ID at ADDRESS as a voter (it joins as a learner until caught up)."""
    _member("AddVoter", rpb.MemberRequest(node_id=node_id, address=address))(obj)


@member.command("add-learner")
@click.argument("node_id", type=int)
@click.argument("address")
@click.pass_obj
def add_learner(obj: dict, node_id: int, address: str) -> None:
    """Add NODE_ID at ADDRESS as a non-voting learner."""
    _member("AddLearner", rpb.MemberRequest(node_id=node_id, address=address))(obj)


@member.command("remove")
@click.argument("node_id", type=int)
@click.pass_obj
def remove(obj: dict, node_id: int) -> None:
    """Remove NODE_ID from the cluster."""
    _member("RemoveMember", rpb.MemberRequest(node_id=node_id))(obj)


@main.command("transfer-leader")
@click.argument("target", type=int)
@click.pass_obj
def transfer_leader(obj: dict, target: int) -> None:
    """Hand leadership to voter TARGET; returns once it leads."""
    async def go(c: KVClient) -> None:
        before = (await c.status()).leader_id  # the answer carries no log index to tell by
        await c.admin("TransferLeadership", rpb.TransferRequest(target=target))
        click.echo(f"OK (node {target} already leads)" if before == target
                   else f"OK (leadership moved from node {before} to node {target})")
    _client_command(go)(obj)


if __name__ == "__main__":
    main()
