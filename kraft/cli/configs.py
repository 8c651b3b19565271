"""``kraft configs``: describe and change topic and broker configs, and users' SCRAM credentials
(kafka-configs.sh)."""
from __future__ import annotations

import click

from kraft.cli.invocation import (
    bootstrap_option,
    check_error,
    command_config_option,
    fail,
    parse_configs,
    timeout_option,
    with_client,
)
from protos import controller_pb2 as pb


@click.command()
@bootstrap_option
@timeout_option
@command_config_option
@click.option("--entity-type", type=click.Choice(["topics", "brokers", "users"]), required=True)
@click.option("--entity-name", help="topic name, broker id or user")
@click.option("--entity-default", is_flag=True, help="the cluster-wide broker default")
@click.option("--describe", "action", flag_value="describe")
@click.option("--alter", "action", flag_value="alter")
@click.option("--add-config", "add", help="KEY=VALUE[,KEY=VALUE...]; a list value in brackets: KEY=[A,B]")
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
                   for k, v in parse_configs((add,) if add else ()).items()]
        changes += [pb.AlterableConfig(name=k.strip(), op=pb.AlterableConfig.DELETE)
                    for k in (delete or "").split(",") if k.strip()]
        if not changes:
            fail("--alter needs --add-config and/or --delete-config")
        req = pb.IncrementalAlterConfigsRequest(resources=[pb.AlterConfigsResource(
            resource_type=rtype, resource_name=name, configs=changes)])
        r = with_client(bootstrap, timeout, lambda c: c.incremental_alter_configs(req)).resources[0]
        check_error(r.error_code, r.error_message, "")
        click.echo(f"Completed updating config for {label}.")
        return
    if action != "describe":
        fail("give --describe or --alter")
    req = pb.DescribeConfigsRequest(resources=[pb.AlterConfigsResource(resource_type=rtype, resource_name=name)])
    r = with_client(bootstrap, timeout, lambda c: c.describe_configs(req)).resources[0]
    check_error(r.error_code, r.error_message, "")
    click.echo(f"Configs for {label} are:")
    for e in r.configs:
        click.echo(f"  {e.name}={e.value}{'  (default)' if e.is_default else ''}")


def _user_configs(bootstrap: str, timeout: float, user: str | None, action: str | None, add: str | None,
                  delete: str | None) -> None:
    """SCRAM credentials (KIP-554): the request is built by kraft.users, which salts the password here."""
    from common.errors import KafkaError
    from kraft.users import alter_request, describe_lines
    if action == "alter":
        if not user:
            fail("--alter --entity-type users needs --entity-name USER")
        try:
            req = alter_request(user or "", add, delete)
        except ValueError as e:
            fail(str(e))
        except KafkaError as e:
            fail(f"{e.code.name}: {e.message}")
        for r in with_client(bootstrap, timeout, lambda c: c.alter_user_scram_credentials(req)).results:
            check_error(r.error_code, r.error_message, "")
        click.echo(f"Completed updating config for user {user}.")
        return
    if action != "describe":
        fail("give --describe or --alter")
    resp = with_client(bootstrap, timeout, lambda c: c.describe_user_scram_credentials(
        pb.DescribeUserScramCredentialsRequest(users=[user] if user else [])))
    for r in resp.results:
        check_error(r.error_code, r.error_message, "")
    for line in describe_lines(resp):
        click.echo(line)
