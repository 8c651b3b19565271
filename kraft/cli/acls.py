"""``kraft acls`` (kafka-acls.sh): the options; kraft/acls.py does the work."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from kraft.cli.invocation import (
    bootstrap_option,
    command_config_option,
    fail,
    timeout_option,
    with_client,
)

if TYPE_CHECKING:
    from metadata.client import ControllerClient


@click.command("acls")
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
    from common.errors import ErrorCode, KafkaError
    from kraft import acls as A
    if action is None:
        fail("give one of --add, --remove, --list")
    try:
        where = A.resources(topics, groups, cluster, A.pattern_type(pattern_name, action or ""))
        if action != "list" and not where:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"--{action} needs a resource: --topic, --group or --cluster")
        who = A.entries(allow_principals, allow_hosts, deny_principals, deny_hosts)
        if action == "add" and not who:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "--add needs --allow-principal or --deny-principal")
        ops = A.operations(operation_names, where)
        wanted_principal = A.check_principal(principal) if principal else None
    except KafkaError as e:
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
