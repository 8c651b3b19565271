"""Access control lists as metadata: Kafka's ACL vocabulary with its numeric ids (resource
types, pattern types, operations, permission types), one ACL (``StandardAcl``), the filters
that describe and delete ACLs (``AclBindingFilter``), and the controller's CreateAcls,
DeleteAcls and DescribeAcls as records (Kafka's AclControlManager).

ACLs live in the metadata log (AccessControlEntryRecord / RemoveAccessControlEntryRecord,
each ACL with an id), so every controller and broker has the same ones; ``metadata.authorizer``
enforces them. A request names values by Kafka's ids; anything else, and an operation a
resource type does not have (Kafka's ``AclEntry.supportedOperations``), is refused with
INVALID_REQUEST and one line, before anything is written.
"""
from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, TypeVar

from common.errors import ErrorCode, KafkaError

from .records import MetadataRecord, access_control_entry, remove_access_control_entry

if TYPE_CHECKING:
    from .image import AclsImage

#: The name of the one CLUSTER resource (Kafka's ``Resource.CLUSTER_NAME``).
CLUSTER_NAME = "kafka-cluster"
#: A LITERAL resource name or an ACL host matching any (Kafka's ``ResourcePattern.WILDCARD_RESOURCE``).
WILDCARD = "*"
#: The principal of an ACL that applies to every principal.
WILDCARD_PRINCIPAL = "User:*"
#: Kafka's limit on a string in its protocol; longer names are refused rather than stored.
MAX_STRING_CHARS = 32767


class AclResourceType(IntEnum):
    """Kafka's ``ResourceType`` (named apart from ``metadata.image.ResourceType``, which is
    a config resource's)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """Kafka's ``PatternType``: an ACL is LITERAL or PREFIXED; filters also take ANY and MATCH."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """Kafka's ``AclOperation``."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    """Kafka's ``AclPermissionType``."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


O = AclOperation  # noqa: E741 -- read as O.READ, O.WRITE: never a bare value to mistake for 0
#: The operations of each resource type this cluster has (Kafka's AclEntry.supportedOperations;
#: transactional ids, delegation tokens and users do not exist here).
OPERATIONS: dict[AclResourceType, frozenset[AclOperation]] = {
    AclResourceType.TOPIC: frozenset({O.READ, O.WRITE, O.CREATE, O.DESCRIBE, O.DELETE, O.ALTER,
                                      O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS, O.ALL}),
    AclResourceType.GROUP: frozenset({O.READ, O.DESCRIBE, O.DELETE, O.ALL}),
    AclResourceType.CLUSTER: frozenset({O.CREATE, O.CLUSTER_ACTION, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS,
                                        O.IDEMPOTENT_WRITE, O.ALTER, O.DESCRIBE, O.ALL}),
}


def camel(value: IntEnum) -> str:
    """Kafka's tool spelling of an enum value: ``CLUSTER_ACTION`` -> ``ClusterAction``."""
    return "".join(w.capitalize() for w in value.name.split("_"))


def parse_named(text: str, what: str, allowed: Iterable[IntEnum]) -> IntEnum:
    """One of ``allowed`` by its name in any case, with or without underscores
    (``ClusterAction``, ``cluster_action``); KafkaError INVALID_REQUEST listing them otherwise."""
    wanted = text.replace("_", "").replace("-", "").lower()
    allowed = list(allowed)
    for value in allowed:
        if value.name.replace("_", "").lower() == wanted:
            return value
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown {what} {text!r}: use "
                   f"{', '.join(camel(v) for v in allowed)}")


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """What an ACL applies to (Kafka's ``ResourcePattern``); the authorizer's index key."""

    resource_type: AclResourceType
    pattern_type: PatternType
    name: str

    def __str__(self) -> str:
        return f"{camel(self.resource_type)}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class StandardAcl:
    """One ACL (Kafka's ``StandardAcl``): ``principal`` may (ALLOW) or may not (DENY) do
    ``operation`` on the resources ``pattern`` names, from ``host`` (an IP address or ``*``)."""

    resource_type: AclResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @property
    def pattern(self) -> ResourcePattern:
        return ResourcePattern(self.resource_type, self.pattern_type, self.resource_name)

    def entry(self) -> str:
        """As kafka-acls.sh prints an ACL under its resource."""
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs a DescribeAcls or DeleteAcls names (Kafka's ``AclBindingFilter``): ANY (or
    None for strings) matches every value; a MATCH pattern matches the ACLs that apply to the
    named resource (its LITERAL, wildcard and PREFIXED ACLs)."""

    resource_type: AclResourceType = AclResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, acl: StandardAcl) -> bool:
        return (self._matches_pattern(acl)
                and (self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (AclOperation.ANY, acl.operation)
                and self.permission_type in (AclPermissionType.ANY, acl.permission_type))

    def _matches_pattern(self, acl: StandardAcl) -> bool:
        """Kafka's ``ResourcePatternFilter.matches``."""
        if self.resource_type not in (AclResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        name = self.resource_name
        if name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD
        return name.startswith(acl.resource_name)

    def exact(self) -> ResourcePattern | None:
        """The one resource pattern this filter can match, when it names one: then the index
        answers instead of a scan."""
        if (self.resource_type in (AclResourceType.ANY, AclResourceType.UNKNOWN) or self.resource_name is None
                or self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED)):
            return None
        return ResourcePattern(self.resource_type, self.pattern_type, self.resource_name)


# -- from the wire ------------------------------------------------------------------------------

E = TypeVar("E", bound=IntEnum)


def _enum(enum: type[E], value: int, what: str) -> E:
    try:
        return enum(value)
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown {what} {value}") from None


def _checked_string(value: str, what: str) -> str:
    if len(value) > MAX_STRING_CHARS:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"the {what} is {len(value)} characters long, at most "
                       f"{MAX_STRING_CHARS}")
    return value


def check_principal(principal: str) -> str:
    """``Type:name`` with both parts (Kafka's SecurityUtils.parseKafkaPrincipal)."""
    kind, colon, name = principal.partition(":")
    if not colon or not kind or not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"principal {principal!r}: expected a string in format "
                       "principalType:principalName, e.g. User:alice")
    return _checked_string(principal, "principal")


def check_host(host: str) -> str:
    """``*`` or an IP address, normalized (``::0001`` -> ``::1``) as clients' addresses are."""
    if host == WILDCARD:
        return host
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"host {host!r}: expected an IP address or * "
                       "(ACLs match the client's address, not its name)") from None


def new_acl(resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
            operation: int, permission_type: int) -> StandardAcl:
    """An ACL to create from Kafka's ids; KafkaError INVALID_REQUEST (one line) when it is not one
    (Kafka's AclControlManager.validateNewAcl, with the supported operations of kafka-acls.sh)."""
    rtype = _enum(AclResourceType, resource_type, "resource type")
    if rtype not in OPERATIONS:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid resource type {rtype.name}: use TOPIC, GROUP or CLUSTER")
    pattern = _enum(PatternType, pattern_type, "pattern type")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid pattern type {pattern.name}: an ACL is LITERAL or PREFIXED")
    op = _enum(AclOperation, operation, "operation")
    if op not in OPERATIONS[rtype]:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid operation {op.name} for resource type {rtype.name}, "
                       f"which supports {', '.join(o.name for o in sorted(OPERATIONS[rtype]))}")
    permission = _enum(AclPermissionType, permission_type, "permission type")
    if permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"invalid permission type {permission.name}: use ALLOW or DENY")
    if not resource_name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Resource name should not be empty")
    if rtype == AclResourceType.CLUSTER and (resource_name != CLUSTER_NAME or pattern != PatternType.LITERAL):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"the cluster resource is LITERAL {CLUSTER_NAME!r}, "
                       f"not {pattern.name} {resource_name!r}")
    return StandardAcl(rtype, _checked_string(resource_name, "resource name"), pattern, check_principal(principal),
                       check_host(host), op, permission)


def acl_filter(resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
               host: str | None, operation: int, permission_type: int) -> AclBindingFilter:
    """A filter from Kafka's ids; INVALID_REQUEST for an unknown id or an UNKNOWN value (Kafka's
    AclControlManager.validateFilter)."""
    values = (_enum(AclResourceType, resource_type, "resource type"), _enum(PatternType, pattern_type, "pattern type"),
              _enum(AclOperation, operation, "operation"), _enum(AclPermissionType, permission_type, "permission type"))
    unknown = [type(v).__name__ for v in values if v.name == "UNKNOWN"]
    if unknown:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"the filter's {unknown[0]} is UNKNOWN; use ANY to match every value")
    rtype, pattern, op, permission = values
    return AclBindingFilter(rtype, resource_name, pattern, principal,
                            check_host(host) if host not in (None, WILDCARD) else host, op, permission)


# -- the controller's rules -------------------------------------------------------------------------

def _new_id(taken: AclsImage, chosen: set[uuid.UUID]) -> uuid.UUID:
    while True:
        candidate = uuid.uuid4()
        if candidate not in taken.by_id and candidate not in chosen:
            return candidate


def create_acls(acls: AclsImage, wanted: list[StandardAcl | KafkaError]
                ) -> tuple[list[MetadataRecord], list[KafkaError | None]]:
    """Records for the ACLs that do not exist yet, and a result per entry: an ACL that exists
    already (or twice in the request) succeeds without a record, as in Kafka, which makes a
    repeated CreateAcls harmless. ``wanted`` holds the refusals of ``new_acl`` in place."""
    records: list[MetadataRecord] = []
    results: list[KafkaError | None] = []
    chosen: set[uuid.UUID] = set()
    added: set[StandardAcl] = set()
    for acl in wanted:
        if isinstance(acl, KafkaError):
            results.append(acl)
            continue
        if acl not in added and acl not in acls.of(acl.pattern).values():
            acl_id = _new_id(acls, chosen)
            chosen.add(acl_id)
            added.add(acl)
            records.append(access_control_entry(acl_id, acl))
        results.append(None)
    return records, results


def matching(acls: AclsImage, f: AclBindingFilter) -> Iterator[tuple[uuid.UUID, StandardAcl]]:
    """The ACLs a filter matches, with their ids: from the index when the filter names one
    resource pattern, else by a scan (run such requests off the event loop)."""
    exact = f.exact()
    found = acls.of(exact).items() if exact is not None else acls.by_id.items()
    return ((i, a) for i, a in found if f.matches(a))


def delete_acls(acls: AclsImage, filters: list[AclBindingFilter | KafkaError], limit: int
                ) -> tuple[list[MetadataRecord], list[KafkaError | list[StandardAcl]]]:
    """RemoveAccessControlEntryRecords for every ACL a filter matches, and per filter the ACLs
    it removes (or why it was refused). More than ``limit`` removals refuse the whole request
    with POLICY_VIOLATION, nothing written (Kafka's MAX_RECORDS_PER_USER_OP)."""
    removed: dict[uuid.UUID, StandardAcl] = {}
    results: list[KafkaError | list[StandardAcl]] = []
    for f in filters:
        if isinstance(f, KafkaError):
            results.append(f)
            continue
        found = list(matching(acls, f))
        removed.update(found)
        if len(removed) > limit:
            raise KafkaError(ErrorCode.POLICY_VIOLATION, f"the filters match more than {limit} ACLs; delete them "
                           "with narrower filters, in several requests")
        results.append([a for _, a in found])
    return [remove_access_control_entry(i) for i in removed], results
