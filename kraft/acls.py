"""``kraft acls`` (kafka-acls.sh): ACLs from the command line, through the controllers'
CreateAcls, DescribeAcls and DeleteAcls, printed as kafka-acls.sh prints them.

Everything the options name is checked before a request is sent, so a bad operation, host or
principal writes nothing and says why in one line.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from metadata.acls import (CLUSTER_NAME, OPERATIONS, WILDCARD, AclOperation, AclPermissionType, AclResourceType,
                           PatternType, StandardAcl, camel, check_host, check_principal, parse_named)
from metadata.client import ControllerClient
from common.errors import ErrorCode, KafkaError
from protos import controller_pb2 as pb

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource the command names: type, name and pattern type (a filter's may be ANY/MATCH)."""

    type: AclResourceType
    name: str | None
    pattern: PatternType

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.type.name}, name={self.name}, patternType={self.pattern.name})"


def resources(topics: Iterable[str], groups: Iterable[str], cluster: bool, pattern: PatternType) -> list[Resource]:
    out = [Resource(AclResourceType.TOPIC, t, pattern) for t in topics]
    out += [Resource(AclResourceType.GROUP, g, pattern) for g in groups]
    if cluster:
        out.append(Resource(AclResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    return out


def pattern_type(text: str | None, action: str) -> PatternType:
    """``--resource-pattern-type``, LITERAL by default as in kafka-acls.sh; ACLs to add are
    LITERAL or PREFIXED, filters to remove or list may also be ANY or MATCH."""
    if text is None:
        return PatternType.LITERAL
    allowed = ([PatternType.LITERAL, PatternType.PREFIXED] if action == "add" else
               [PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH, PatternType.ANY])
    return parse_named(text, f"--resource-pattern-type for --{action}", allowed)  # type: ignore[return-value]


def operations(names: Iterable[str], where: list[Resource]) -> list[AclOperation]:
    """The operations named (ALL when none is), each one the resource types named support."""
    known = sorted(frozenset().union(*OPERATIONS.values()))
    ops = [parse_named(n, "operation", known) for n in names] or [AclOperation.ALL]
    for r in where:
        for op in ops:
            if op not in OPERATIONS[r.type]:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"ResourceType {r.type.name} only supports operations "
                               f"{', '.join(camel(o) for o in sorted(OPERATIONS[r.type]))}; not {camel(op)}")
    return ops  # type: ignore[return-value]


def entries(allow_principals: Iterable[str], allow_hosts: Iterable[str], deny_principals: Iterable[str],
            deny_hosts: Iterable[str]) -> list[tuple[AclPermissionType, str, str]]:
    """(permission, principal, host) for every principal and host named; hosts default to *."""
    out = []
    for permission, principals, hosts in ((ALLOW, allow_principals, allow_hosts), (DENY, deny_principals, deny_hosts)):
        checked_hosts = [check_host(h) for h in hosts] or [WILDCARD]
        out += [(permission, check_principal(p), h) for p in principals for h in checked_hosts]
    return out


def binding(r: Resource, permission: AclPermissionType, principal: str, host: str, op: AclOperation) -> pb.AclBinding:
    assert r.name is not None
    return pb.AclBinding(resource_type=r.type, resource_name=r.name, pattern_type=r.pattern, principal=principal,
                         host=host, operation=op, permission_type=permission)


def resource_filter(r: Resource | None, principal: str | None = None, host: str | None = None,
                    op: AclOperation = AclOperation.ANY,
                    permission: AclPermissionType = AclPermissionType.ANY) -> pb.AclFilter:
    f = pb.AclFilter(resource_type=r.type if r else AclResourceType.ANY,
                     pattern_type=r.pattern if r else PatternType.ANY, operation=op, permission_type=permission)
    for field, value in (("resource_name", r.name if r else None), ("principal", principal), ("host", host)):
        if value is not None:
            setattr(f, field, value)
    return f


def acl_of(b: pb.AclBinding) -> StandardAcl:
    return StandardAcl(AclResourceType(b.resource_type), b.resource_name, PatternType(b.pattern_type), b.principal,
                       b.host, AclOperation(b.operation), AclPermissionType(b.permission_type))


def listing(heading: str, acls: Iterable[StandardAcl]) -> list[str]:
    """kafka-acls.sh's layout: a heading per resource pattern, an indented line per ACL."""
    by_resource: dict[Resource, list[StandardAcl]] = {}
    for a in sorted(acls):
        by_resource.setdefault(Resource(a.resource_type, a.resource_name, a.pattern_type), []).append(a)
    lines: list[str] = []
    for r, found in by_resource.items():
        lines += [f"{heading} `{r}`: "] + [f" \t{a.entry()} " for a in found] + [""]
    return lines


async def current(client: ControllerClient, r: Resource) -> list[str]:
    resp = await client.describe_acls(pb.DescribeAclsRequest(filter=resource_filter(r)))
    found = [acl_of(b) for b in resp.acls]
    return listing("Current ACLs for resource", found) if found else [f"Current ACLs for resource `{r}`: ", ""]


async def add(client: ControllerClient, where: list[Resource], who: list[tuple[AclPermissionType, str, str]],
              ops: list[AclOperation]) -> tuple[list[str], list[str]]:
    """Lines to print and errors (one line each) of CreateAcls."""
    wanted = [(r, binding(r, permission, principal, host, op)) for r in where
              for permission, principal, host in who for op in ops]
    resp = await client.create_acls(pb.CreateAclsRequest(creations=[b for _, b in wanted]))
    errors = [f"{ErrorCode.of(x.error_code).name}: {x.error_message}" for x in resp.results if x.error_code]
    lines: list[str] = []
    for r in where:
        lines += listing("Adding ACLs for resource", [acl_of(b) for (of, b), x in zip(wanted, resp.results, strict=True)
                                                       if of == r and not x.error_code])
        lines += await current(client, r)
    return lines, errors


async def remove(client: ControllerClient, where: list[Resource], who: list[tuple[AclPermissionType, str, str]],
                 ops: list[AclOperation] | None) -> tuple[list[str], list[str]]:
    """DeleteAcls for the named entries of each resource, or all its ACLs when none is named."""
    filters = [resource_filter(r, principal, host, op, permission) for r in where
               for permission, principal, host in who for op in ops or [AclOperation.ANY]] if who else \
        [resource_filter(r, op=op) for r in where for op in ops or [AclOperation.ANY]]
    resp = await client.delete_acls(pb.DeleteAclsRequest(filters=filters))
    errors = [f"{ErrorCode.of(x.error_code).name}: {x.error_message}" for x in resp.filter_results if x.error_code]
    removed = {acl_of(b) for x in resp.filter_results for b in x.matching_acls}
    lines = listing("Removing ACLs for resource", removed)
    for r in where:
        lines += await current(client, r)
    return lines, errors


async def list_acls(client: ControllerClient, where: list[Resource], principal: str | None) -> list[str]:
    found: set[StandardAcl] = set()
    targets: list[Resource | None] = [*where] if where else [None]
    for r in targets:
        resp = await client.describe_acls(pb.DescribeAclsRequest(filter=resource_filter(r, principal)))
        found.update(acl_of(b) for b in resp.acls)
    return listing("Current ACLs for resource", found)
