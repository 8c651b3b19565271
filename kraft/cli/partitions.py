"""Tools that move partitions and their leaders through the controllers: ``kraft
reassign-partitions`` (kafka-reassign-partitions.sh) and ``kraft leader-election``
(kafka-leader-election.sh)."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from kraft.cli.invocation import (
    check_error,
    command_config_option,
    command_tls,
    fail,
    with_client,
)
from protos import controller_pb2 as pb

if TYPE_CHECKING:
    from metadata.client import ControllerClient


@click.command("reassign-partitions")
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
    from kraft import reassign as r
    from metadata.reassignments import PlanError, plan_json, read_plan_with_log_dirs
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
            plan, log_dirs = read_plan_with_log_dirs(reassignment_json_file)
            if log_dirs and action in ("execute", "verify") and not bootstrap_server:
                raise PlanError("the plan's log_dirs need --bootstrap-server: each broker is asked to move "
                                "its replicas between its log dirs")
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
            if not log_dirs:
                return await r.execute(client, plan, throttle), True
            from clients.admin import Admin
            async with Admin(bootstrap_server or "", tls=command_tls()) as admin:
                # first, so that replicas the reassignment adds are created in their dirs
                await r.move_log_dirs(admin, log_dirs, timeout, retry=False)
                lines = await r.execute(client, plan, throttle)
                return lines + await r.move_log_dirs(admin, log_dirs, timeout), True
        if action == "cancel":
            return await r.cancel(client, plan), True
        if action == "list":
            return r.list_lines(await r.ongoing(client, None)), True
        describes = None
        dir_lines: list[str] = []
        dirs_done = True
        if bootstrap_server:
            from clients.admin import Admin
            async with Admin(bootstrap_server, tls=command_tls()) as admin:
                describes = await admin.describe_brokers()
                if log_dirs:
                    dir_lines, dirs_done = await r.verify_log_dirs(admin, log_dirs)
        lines, done = await r.verify(client, plan, describes, preserve_throttles)
        return lines + dir_lines, done and dirs_done

    from clients.cluster_view import ClientError
    try:
        lines, ok = with_client(bootstrap, timeout, work)
    except ClientError as e:  # the brokers of --bootstrap-server
        fail(str(e))
        return
    click.echo("\n".join(lines))
    if not ok:
        sys.exit(1)


@click.command("leader-election")
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
    from common.errors import ErrorCode
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
                check_error(t.error_code, t.error_message, f"topic {topic}")
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
                   f"{ErrorCode.of(r.error_code).name}: {r.error_message}", err=True)
    if failed:
        sys.exit(1)
