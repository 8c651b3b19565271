"""``kraft configs``: describe and change topic and broker configs, users' SCRAM credentials, and
client quotas of users, client ids and IPs (kafka-configs.sh)."""
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
from kraft.client_quotas import DEFAULT
from protos import controller_pb2 as pb


@click.command()
@bootstrap_option
@timeout_option
@command_config_option
@click.option("--entity-type", "entity_types", multiple=True, required=True,
              type=click.Choice(["topics", "brokers", "users", "clients", "ips"]),
              help="repeatable for a quota of a user and a client id: --entity-type users --entity-name alice "
                   "--entity-type clients --entity-name app")
@click.option("--entity-name", "entity_names", multiple=True, help="topic name, broker id, user, client id or IP")
@click.option("--entity-default", "entity_names", flag_value=DEFAULT, multiple=True,
              help="the cluster-wide broker default, or the default user, client id or IP (quotas)")
@click.option("--describe", "action", flag_value="describe")
@click.option("--alter", "action", flag_value="alter")
@click.option("--add-config", "add", help="KEY=VALUE[,KEY=VALUE...]; a list value in brackets: KEY=[A,B]")
@click.option("--delete-config", "delete", help="KEY[,KEY...]")
def configs(bootstrap: str, timeout: float, entity_types: tuple[str, ...], entity_names: tuple[str, ...],
            action: str | None, add: str | None, delete: str | None) -> None:
    """Describe or change topic and broker configs, users' SCRAM credentials, and client quotas
    (kafka-configs.sh)."""
    if set(entity_types) & {"users", "clients", "ips"}:
        return _client_configs(bootstrap, timeout, entity_types, entity_names, action, add, delete)
    if len(entity_types) > 1 or len(entity_names) > 1:
        fail("topics and brokers take one --entity-type and one --entity-name (or --entity-default)")
    entity_type = entity_types[0]
    entity_name = entity_names[0] if entity_names and entity_names[0] != DEFAULT else None
    rtype = pb.TOPIC if entity_type == "topics" else pb.BROKER
    if entity_names and entity_names[0] == DEFAULT:
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


def _client_configs(bootstrap: str, timeout: float, types: tuple[str, ...], names: tuple[str, ...],
                    action: str | None, add: str | None, delete: str | None) -> None:
    """Client quotas (KIP-546) and, for a user alone, SCRAM credentials (KIP-554): kafka-configs.sh
    sends each key to its API, quota keys to AlterClientQuotas and SCRAM mechanisms to
    AlterUserScramCredentials."""
    from kraft import client_quotas as cq
    from kraft.users import _entries
    if set(types) & {"topics", "brokers"}:
        fail("--entity-type topics or brokers cannot be combined with users, clients or ips")
    try:
        parts = cq.entity(types, names) if names else [(cq.ENTITY_TYPES[t], None) for t in types]
    except ValueError as e:
        fail(str(e))
    adds, deletes = _entries(add or ""), [k for k in (delete or "").split(",") if k.strip()]
    scram_add = [a for a in adds if not cq.is_quota_key(a)]
    scram_delete = [d for d in deletes if not cq.is_quota_key(d)]
    scram_user = types == ("users",) and (action != "alter" or scram_add or scram_delete)
    if (scram_add or scram_delete) and not scram_user:
        fail(f"{', '.join(scram_add + scram_delete)}: not a quota key ({', '.join(sorted(cq.QUOTA_KEYS))}); "
             f"SCRAM credentials belong to one --entity-type users --entity-name USER")
    if action == "alter":
        quota_add = [a for a in adds if cq.is_quota_key(a)]
        quota_delete = [d for d in deletes if cq.is_quota_key(d)]
        if not names:
            fail("--alter needs --entity-name or --entity-default for each --entity-type")
        if quota_add or quota_delete:
            try:
                req = cq.alter_request(parts, quota_add, quota_delete)
            except ValueError as e:
                fail(str(e))
            for r in with_client(bootstrap, timeout, lambda c: c.alter_client_quotas(req)).results:
                check_error(r.error_code, r.error_message, "")
        if scram_add or scram_delete:
            _user_configs(bootstrap, timeout, parts[0][1], action, ",".join(scram_add), ",".join(scram_delete))
            return
        if not (quota_add or quota_delete):
            fail("--alter needs --add-config and/or --delete-config")
        click.echo(f"Completed updating quotas for {cq.label(cq.parts_of(parts))}.")
        return
    if action != "describe":
        fail("give --describe or --alter")
    request = cq.describe_request(parts) if names else cq.DESCRIBE_ALL
    resp = with_client(bootstrap, timeout, lambda c: c.describe_client_quotas(request))
    lines = cq.describe_lines(resp, None if names else [t for t, _ in parts])
    for line in lines:
        click.echo(line)
    if scram_user and (not names or parts[0][1] is not None):
        _user_configs(bootstrap, timeout, parts[0][1], action, add, delete, quiet_if_none=bool(lines))


def _user_configs(bootstrap: str, timeout: float, user: str | None, action: str | None, add: str | None,
                  delete: str | None, quiet_if_none: bool = False) -> None:
    """SCRAM credentials (KIP-554): the request is built by kraft.users, which salts the password here.
    ``quiet_if_none``: a user without a credential is no error (its quotas were printed)."""
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
        if not (quiet_if_none and r.error_code == pb.RESOURCE_NOT_FOUND):
            check_error(r.error_code, r.error_message, "")
    resp = pb.DescribeUserScramCredentialsResponse(results=[r for r in resp.results if not r.error_code])
    for line in describe_lines(resp):
        click.echo(line)
