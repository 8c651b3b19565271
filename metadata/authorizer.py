"""Authorization: whether a principal may do an operation on a resource, by the ACLs of the
metadata image (Kafka's StandardAuthorizer, ``authorizer.class.name``).

Kafka's rules, as StandardAuthorizerData applies them:

- a principal in ``super.users`` (``User:admin;User:broker``) may do anything;
- the ACLs that apply to a resource are its LITERAL ones, the LITERAL ``*`` ones of its type,
  and the PREFIXED ones whose name begins the resource's name; of those, the ones of the
  principal or of ``User:*``, from the client's address or ``*``, for the operation;
- DENY wins over ALLOW. An ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, one of
  ALTER_CONFIGS also DESCRIBE_CONFIGS, one of ALL everything; a DENY denies only its own
  operation (or, for ALL, every operation);
- a resource without any ACL is allowed only with ``allow.everyone.if.no.acl.found=true``
  (default false); one with ACLs, none allowing, is denied.

Speed: a check reads the few ACLs of the resource from the image's index by resource pattern
(``AclsImage.by_pattern``): one lookup for the LITERAL name, one for ``*``, and one per
distinct length of the PREFIXED names of that resource type (a handful in practice), never a
scan of every ACL, so a produce of many partitions stays cheap however many ACLs exist. The
distinct prefix lengths are computed once per ACL change (per ``AclsImage``).

Denials are logged at INFO once per principal, operation and resource (a bounded memory of
what was logged), so a client retrying a refused request cannot flood the log.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping

from .acls import (CLUSTER_NAME, WILDCARD, WILDCARD_PRINCIPAL, AclOperation, AclPermissionType,
                   AclResourceType, PatternType, ResourcePattern, StandardAcl)
from common.config_def import ConfigError

from common.errors import ErrorCode, KafkaError, capped
from .image import AclsImage
from .principal import Session

log = logging.getLogger("kafka.authorizer.logger")

#: ``authorizer.class.name`` values that turn authorization on (Kafka's KRaft authorizer).
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZER_NAMES = frozenset({STANDARD_AUTHORIZER, "StandardAuthorizer"})
AUTHORIZER_CLASS_NAME = "authorizer.class.name"
SUPER_USERS = "super.users"
ALLOW_IF_NO_ACL = "allow.everyone.if.no.acl.found"
#: How many denials are remembered as logged before the oldest is forgotten.
DENIALS_REMEMBERED = 10_000

O = AclOperation  # noqa: E741 -- read as O.READ, O.WRITE: never a bare value to mistake for 0
#: What an ALLOW of an operation also allows (Kafka's IMPLIES_DESCRIBE, IMPLIES_DESCRIBE_CONFIGS).
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    O.DESCRIBE: frozenset({O.DESCRIBE, O.READ, O.WRITE, O.DELETE, O.ALTER}),
    O.DESCRIBE_CONFIGS: frozenset({O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS}),
}


def _result(acl: StandardAcl, principal: str, host: str, op: AclOperation) -> AclPermissionType | None:
    """What ``acl`` says about the action: ALLOW, DENY, or None when it does not apply
    (Kafka's StandardAuthorizerData.findResult)."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation != O.ALL:
        if acl.permission_type == AclPermissionType.ALLOW:
            if acl.operation not in _IMPLIED_BY.get(op, (op,)):
                return None
        elif acl.operation != op:
            return None
    return acl.permission_type


class StandardAuthorizer:
    """Decides from the ACLs of the image ``acls()`` returns (the controller's committed
    image, a broker's published one), so every node decides as the others do once it has
    applied the same metadata."""

    def __init__(self, acls: Callable[[], AclsImage], super_users: frozenset[str] = frozenset(),
                 allow_if_no_acl: bool = False) -> None:
        self.acls = acls
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._lengths_of: AclsImage | None = None
        self._prefix_lengths: dict[AclResourceType, tuple[int, ...]] = {}
        self._denials: OrderedDict[tuple[str, AclOperation, AclResourceType, str], None] = OrderedDict()
        self._denials_lock = threading.Lock()  # the controller also checks in its worker thread

    @classmethod
    def from_config(cls, props: Mapping[str, str], acls: Callable[[], AclsImage]) -> StandardAuthorizer | None:
        """The authorizer the properties ask for; None when ``authorizer.class.name`` is
        empty (no authorization, as Kafka without an authorizer). ConfigError otherwise."""
        name = props.get(AUTHORIZER_CLASS_NAME, "").strip()
        if not name:
            return None
        if name not in AUTHORIZER_NAMES:
            raise ConfigError(f"{AUTHORIZER_CLASS_NAME}={name}: the only authorizer is {STANDARD_AUTHORIZER} "
                              "(or leave it empty for none)")
        supers = frozenset(u.strip() for u in props.get(SUPER_USERS, "").split(";") if u.strip())
        bad = sorted(u for u in supers if not u.partition(":")[2] or not u.partition(":")[0])
        if bad:
            raise ConfigError(f"{SUPER_USERS}: {bad[0]!r} is not a principal; expected e.g. User:admin;User:broker")
        flag = props.get(ALLOW_IF_NO_ACL, "false").strip().lower()
        if flag not in ("true", "false"):
            raise ConfigError(f"{ALLOW_IF_NO_ACL}={flag}: expected true or false")
        return cls(acls, supers, flag == "true")

    # -- deciding -----------------------------------------------------------------------------

    def _lengths(self, acls: AclsImage, rtype: AclResourceType) -> tuple[int, ...]:
        if acls is not self._lengths_of:
            found: dict[AclResourceType, set[int]] = {}
            for p in acls.by_pattern.keys():
                if p.pattern_type == PatternType.PREFIXED:
                    found.setdefault(p.resource_type, set()).add(len(p.name))
            self._prefix_lengths = {t: tuple(sorted(n)) for t, n in found.items()}
            self._lengths_of = acls
        return self._prefix_lengths.get(rtype, ())

    def authorize(self, session: Session, op: AclOperation, rtype: AclResourceType, name: str,
                  *, log_denial: bool = True, explicit: bool = False) -> bool:
        """Whether ``session`` may do ``op`` on the resource (Kafka's Authorizer.authorize).
        ``log_denial`` False for checks that only filter what is shown (Kafka's logIfDenied);
        ``explicit``: a super user or an ALLOW only, never ``allow.everyone.if.no.acl.found``."""
        if session.principal in self.super_users:
            return True
        acls = self.acls()
        found_any = allowed = False
        candidates = [acls.of(ResourcePattern(rtype, PatternType.LITERAL, name)),
                      acls.of(ResourcePattern(rtype, PatternType.LITERAL, WILDCARD))]
        candidates += [acls.of(ResourcePattern(rtype, PatternType.PREFIXED, name[:n]))
                       for n in self._lengths(acls, rtype) if n <= len(name)]
        for group in candidates:
            for acl in group.values():
                found_any = True
                result = _result(acl, session.principal, session.host, op)
                if result == AclPermissionType.DENY:
                    return self._denied(session, op, rtype, name, log_denial)
                allowed = allowed or result == AclPermissionType.ALLOW
        if allowed or (not found_any and self.allow_if_no_acl and not explicit):
            return True
        return self._denied(session, op, rtype, name, log_denial)

    def authorize_any(self, session: Session, op: AclOperation, rtype: AclResourceType) -> bool:
        """Whether ``session`` may do ``op`` on some resource of the type (Kafka's
        Authorizer.authorizeByResourceType): an ALLOW for it that no DENY covers. It scans the
        type's ACLs; InitProducerId, its one user, comes once per producer."""
        if self.authorize(session, op, rtype, "hardcode", log_denial=False):
            return True
        denied_literal: set[str] = set()
        denied_prefix: set[str] = set()
        allowed: list[tuple[PatternType, str]] = []
        for pattern, group in self.acls().by_pattern.items():
            if pattern.resource_type != rtype:
                continue
            for acl in group.values():
                if ((acl.principal not in (session.principal, WILDCARD_PRINCIPAL))
                        or acl.host not in (WILDCARD, session.host) or acl.operation not in (op, O.ALL)):
                    continue
                if acl.permission_type == AclPermissionType.DENY:
                    if pattern.pattern_type == PatternType.LITERAL and pattern.name == WILDCARD:
                        return self._denied(session, op, rtype, "*", True)
                    (denied_literal if pattern.pattern_type == PatternType.LITERAL else denied_prefix).add(pattern.name)
                else:
                    if pattern.pattern_type == PatternType.LITERAL and pattern.name == WILDCARD:
                        return True
                    allowed.append((pattern.pattern_type, pattern.name))
        for kind, name in allowed:
            if kind == PatternType.LITERAL and name in denied_literal:
                continue
            if not any(name[:n] in denied_prefix for n in range(1, len(name) + 1)):
                return True
        return self._denied(session, op, rtype, "*", True)

    def _denied(self, session: Session, op: AclOperation, rtype: AclResourceType, name: str, log_it: bool) -> bool:
        key = (session.principal, op, rtype, name)
        if not log_it or key in self._denials:
            return False
        with self._denials_lock:
            self._denials[key] = None
            if len(self._denials) > DENIALS_REMEMBERED:
                self._denials.popitem(last=False)
        log.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s "
                 "(logged once per principal, operation and resource)", session.principal, op.name,
                 session.host, rtype.name.capitalize(), name)
        return False


#: The operations each resource type has (Kafka's AclEntry.supportedOperations): the bits an
#: answer's authorized operations may set (KIP-430).
SUPPORTED_OPERATIONS: Mapping[AclResourceType, tuple[AclOperation, ...]] = {
    AclResourceType.TOPIC: (O.READ, O.WRITE, O.CREATE, O.DELETE, O.ALTER, O.DESCRIBE, O.DESCRIBE_CONFIGS,
                            O.ALTER_CONFIGS),
    AclResourceType.GROUP: (O.READ, O.DESCRIBE, O.DELETE),
    AclResourceType.CLUSTER: (O.CREATE, O.CLUSTER_ACTION, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS, O.IDEMPOTENT_WRITE,
                              O.ALTER, O.DESCRIBE),
}
#: Authorized operations a client did not ask for (Kafka's Int32.MIN_VALUE).
OPERATIONS_NOT_ASKED = -(1 << 31)


class Access:
    """What one request's session may do (Kafka's AuthHelper for one request context): every
    answer is the authorizer's, or yes when authorization is off."""

    def __init__(self, authorizer: StandardAuthorizer | None, session: Session) -> None:
        self.authorizer = authorizer
        self.session = session

    def topic(self, op: AclOperation, name: str, *, log_denial: bool = True) -> bool:
        return self.authorizer is None or self.authorizer.authorize(
            self.session, op, AclResourceType.TOPIC, name, log_denial=log_denial)

    def group(self, op: AclOperation, name: str) -> bool:
        return self.authorizer is None or self.authorizer.authorize(self.session, op, AclResourceType.GROUP, name)

    def cluster(self, op: AclOperation, *, log_denial: bool = True, explicit: bool = False) -> bool:
        return self.authorizer is None or self.authorizer.authorize(
            self.session, op, AclResourceType.CLUSTER, CLUSTER_NAME, log_denial=log_denial, explicit=explicit)

    def authorized_operations(self, rtype: AclResourceType, name: str) -> int:
        """Kafka's authorizedOperations (KIP-430): bit ``1 << op`` set for each operation of the
        resource type the session may do on the resource (all of them when authorization is
        off); checks that only inform are not logged as denials."""
        ops = SUPPORTED_OPERATIONS[rtype]
        if self.authorizer is not None:
            ops = tuple(op for op in ops if self.authorizer.authorize(self.session, op, rtype, name, log_denial=False))
        return sum(1 << int(op) for op in ops)

    def any_topic(self, op: AclOperation) -> bool:
        return self.authorizer is None or self.authorizer.authorize_any(self.session, op, AclResourceType.TOPIC)

    # One line each (capped: the name is the request's), Kafka's wording, with who was refused what.

    def topic_denied(self, op: AclOperation, name: str) -> str:
        return capped(f"Not authorized to access topics: [{name}] ({self.session.principal} may not {op.name} it)")

    def group_denied(self, op: AclOperation, name: str) -> str:
        return capped(f"Not authorized to access group: {name} ({self.session.principal} may not {op.name} it)")

    def cluster_denied(self, op: AclOperation) -> str:
        return f"Cluster authorization failed: {self.session.principal} may not {op.name} the cluster"

    def topic_refusal(self, op: AclOperation, name: str) -> KafkaError:
        return KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, self.topic_denied(op, name))

    def cluster_refusal(self, op: AclOperation) -> KafkaError:
        return KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, self.cluster_denied(op))

