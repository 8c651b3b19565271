"""The ACLs page: every ACL the metadata log holds, one added through a form, one removed
after a confirmation. Requests go through ``kraft acls``'s own code (kraft/acls.py), so the
options are checked and the controller's answers read exactly as ``kraft acls --add/--remove``
checks and reads them; the controller authorizes each as the console's principal."""
from __future__ import annotations

from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from kraft import acls as tool
from metadata.acls import (CLUSTER_NAME, OPERATIONS, WILDCARD, AclPermissionType, AclResourceType,
                           PatternType, StandardAcl, camel, parse_named)
from common.errors import KafkaError
from common.errors import ErrorCode
from protos import controller_pb2 as pb

from .pages import bad_request, cluster_of, not_found, render, require_writable

RESOURCE_TYPES = (AclResourceType.TOPIC, AclResourceType.GROUP, AclResourceType.CLUSTER)
PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)
PERMISSIONS = (AclPermissionType.ALLOW, AclPermissionType.DENY)
ALL_OPERATIONS = sorted(frozenset().union(*OPERATIONS.values()))


def _fields(acl: StandardAcl) -> dict[str, str]:
    """An ACL as the form fields that name it (the delete links carry them)."""
    return {"resource_type": camel(acl.resource_type), "resource_name": acl.resource_name,
            "pattern_type": camel(acl.pattern_type), "principal": acl.principal, "host": acl.host,
            "operation": camel(acl.operation), "permission": camel(acl.permission_type)}


def _acl(form: FormData | dict[str, str]) -> StandardAcl:
    """The one ACL the fields name, checked by kraft acls's rules (an INVALID_REQUEST line)."""
    def text(key: str, default: str = "") -> str:
        return str(form.get(key) or default).strip()
    rtype = AclResourceType(parse_named(text("resource_type"), "resource type", RESOURCE_TYPES))
    name = CLUSTER_NAME if rtype == AclResourceType.CLUSTER else text("resource_name")
    if not name:
        raise bad_request(f"give the {camel(rtype).lower()}'s name (or {WILDCARD} for every one)")
    pattern = tool.pattern_type(text("pattern_type", "Literal"), "add")
    where = tool.resources([name] if rtype == AclResourceType.TOPIC else [],
                           [name] if rtype == AclResourceType.GROUP else [],
                           rtype == AclResourceType.CLUSTER, pattern)
    (op,) = tool.operations([text("operation", "All")], where)
    permission = AclPermissionType(parse_named(text("permission", "Allow"), "permission type", PERMISSIONS))
    allow, deny = (True, False) if permission == AclPermissionType.ALLOW else (False, True)
    principal, host = text("principal"), text("host", WILDCARD)
    ((permission, principal, host),) = tool.entries([principal] if allow else [], [host] if allow else [],
                                                     [principal] if deny else [], [host] if deny else [])
    r = where[0]
    return StandardAcl(r.type, name, r.pattern, principal, host, op, permission)


def _raise_first(errors: list[str]) -> None:
    """The first of the tool's error lines (``CODE: message``) as the controller's error."""
    if errors:
        code, _, message = errors[0].partition(": ")
        raise KafkaError(ErrorCode[code], message)


async def acl_list(request: Request) -> Response:
    r = await cluster_of(request).controller.describe_acls(pb.DescribeAclsRequest(filter=tool.resource_filter(None)))
    found = sorted(tool.acl_of(b) for b in r.acls)
    return render(request, "acls.html", acls=[(a, urlencode(_fields(a))) for a in found])


async def acl_new(request: Request) -> Response:
    require_writable(request)
    return render(request, "acl_new.html", resource_types=[camel(t) for t in RESOURCE_TYPES],
                  pattern_types=[camel(p) for p in PATTERN_TYPES], permissions=[camel(p) for p in PERMISSIONS],
                  operations=[camel(o) for o in ALL_OPERATIONS])


async def acl_create(request: Request) -> Response:
    require_writable(request)
    acl = _acl(await request.form())
    r = tool.Resource(acl.resource_type, acl.resource_name, acl.pattern_type)
    _, errors = await tool.add(cluster_of(request).controller, [r], [(acl.permission_type, acl.principal, acl.host)],
                               [acl.operation])
    _raise_first(errors)
    return RedirectResponse(str(request.url_for("acls")) + "?" + urlencode({"added": f"{r} {acl.entry()}"}),
                            status_code=303)


async def acl_delete_confirm(request: Request) -> Response:
    require_writable(request)
    acl = _acl(dict(request.query_params))
    return render(request, "acl_delete.html", acl=acl, fields=_fields(acl),
                  resource=tool.Resource(acl.resource_type, acl.resource_name, acl.pattern_type))


async def acl_delete(request: Request) -> Response:
    require_writable(request)
    acl = _acl(await request.form())
    r = tool.Resource(acl.resource_type, acl.resource_name, acl.pattern_type)
    lines, errors = await tool.remove(cluster_of(request).controller, [r],
                                      [(acl.permission_type, acl.principal, acl.host)], [acl.operation])
    _raise_first(errors)
    if not any(line.startswith("Removing ACLs") for line in lines):
        raise not_found(f"no such ACL: {r} {acl.entry()}")
    return RedirectResponse(str(request.url_for("acls")) + "?" + urlencode({"removed": f"{r} {acl.entry()}"}),
                            status_code=303)
