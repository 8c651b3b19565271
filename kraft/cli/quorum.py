"""``kraft quorum`` (kafka-metadata-quorum.sh: describe, add and remove controllers, KIP-853) and
``kraft cluster`` (kafka-cluster.sh: describe, unregister a broker)."""
from __future__ import annotations

import json
import time
from typing import Any

import click

from kraft.cli.invocation import (
    command_config_option,
    controller_group,
    fail,
    timeout_option,
    with_client,
)
from protos import controller_pb2 as pb


@click.group()
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
def quorum_describe(obj: tuple[str, float], mode: str) -> None:
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
def quorum_add_controller(obj: tuple[str, float], config_path: str, dry_run: bool) -> None:
    """Make a running controller a voter. Start it first (formatted with --no-initial-controllers,
    with controller.quorum.bootstrap.servers): it follows the log as an observer; the active
    controller adds it once it has caught up, as a learner first, then as a voter."""
    import os

    from common.config_def import ConfigError
    from metadata import config as server_config
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
def quorum_remove_controller(obj: tuple[str, float], controller_id: int, controller_directory_id: str, dry_run: bool) -> None:
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
def cluster_unregister(obj: tuple[str, float], broker_id: int) -> None:
    """Forget a stopped broker that hosts no replicas."""
    with_client(*obj, lambda c: c.unregister_broker(pb.UnregisterBrokerRequest(broker_id=broker_id)))
    click.echo(f"Broker {broker_id} is no longer registered.")


@cluster.command("describe")
@click.pass_obj
def cluster_describe(obj: tuple[str, float]) -> None:
    r = with_client(*obj, lambda c: c.describe_cluster(pb.DescribeClusterRequest()))
    click.echo(f"Cluster ID: {r.cluster_id}")
    click.echo(f"Controller: {r.controller_id}")
    click.echo(f"Metadata offset: {r.metadata_offset}")
    click.echo(f"Brokers ({len(r.brokers)}):")
    for b in r.brokers:
        eps = ",".join(f"{e.name}://{e.host}:{e.port}" for e in b.endpoints)
        state = "fenced" if b.fenced else "shutting down" if b.in_controlled_shutdown else "active"
        click.echo(f"  {b.id}\t{eps}\track={b.rack or '-'}\t{state}\tepoch={b.epoch}")
