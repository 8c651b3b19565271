"""``kraft storage``: formatting a server's directories before its first start (kafka-storage.sh)."""
from __future__ import annotations

import sys

import click

from kraft.cli.invocation import fail


@click.group()
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
    from common.errors import KafkaError
    from kraft.users import bootstrap_credentials
    from metadata import config as server_config
    from metadata.bootstrap import write_bootstrap_records
    from metadata.quorum import initial_voters
    from raft.errors import RaftError
    from raft.storage import check_formatted, format_storage
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
    except KafkaError as e:
        fail(e.message)


@storage.command("info")
@click.option("--config", "-c", "config_path", required=True, type=click.Path(dir_okay=False))
def storage_info(config_path: str) -> None:
    """What each of the server's directories holds (kafka-storage.sh info); exits 1 when one is
    missing, unformatted, another node's or another cluster's."""
    import os

    from common.config_def import ConfigError
    from metadata import config as server_config
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
