"""The authorizer's rules (Kafka's StandardAuthorizer): super users, deny wins, literal,
prefixed and wildcard resources, User:*, hosts, implied operations, the no-ACL default,
authorizing by resource type, its configuration, bounded denial logging, and that a check
reads the index instead of scanning every ACL."""
from __future__ import annotations

import logging
import uuid

import pytest

from metadata import authorizer as authz
from metadata import records as R
from metadata.acls import (CLUSTER_NAME, AclOperation, AclPermissionType, AclResourceType, PatternType,
                           StandardAcl)
from metadata.authorizer import Access, StandardAuthorizer
from metadata.delta import MetadataDelta
from metadata.image import AclsImage, MetadataImage
from metadata.principal import Session
from common.config_def import ConfigError

T, G, C = AclResourceType.TOPIC, AclResourceType.GROUP, AclResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
O = AclOperation  # noqa: E741 -- read as O.READ, O.WRITE: never a bare value to mistake for 0
ALICE, BOB = Session("User:alice", "10.0.0.1"), Session("User:bob", "10.0.0.2")


def acl(name: str, op: AclOperation, principal: str = "User:alice", *, rtype: AclResourceType = T,
        pattern: PatternType = LIT, host: str = "*", permission: AclPermissionType = ALLOW) -> StandardAcl:
    return StandardAcl(rtype, name, pattern, principal, host, op, permission)


def acls_of(*acls: StandardAcl) -> AclsImage:
    delta = MetadataDelta(MetadataImage.empty("authz"))
    delta.replay_batch([R.access_control_entry(uuid.uuid4(), a) for a in acls], 1, 1)
    return delta.apply().acls


def authorizer(*acls: StandardAcl, supers: frozenset[str] = frozenset(), allow_if_no_acl: bool = False
               ) -> StandardAuthorizer:
    image = acls_of(*acls)
    return StandardAuthorizer(lambda: image, supers, allow_if_no_acl)


def may(a: StandardAuthorizer, session: Session, op: AclOperation, name: str = "orders",
        rtype: AclResourceType = T) -> bool:
    return a.authorize(session, op, rtype, name)


def test_super_users_may_do_anything_even_when_denied() -> None:
    a = authorizer(acl("orders", O.ALL, "User:admin", permission=DENY), supers=frozenset({"User:admin"}))
    assert may(a, Session("User:admin", "1.2.3.4"), O.WRITE)
    assert may(a, Session("User:admin", "1.2.3.4"), O.CLUSTER_ACTION, CLUSTER_NAME, C)
    assert not may(a, ALICE, O.READ)


def test_without_acls_the_default_decides() -> None:
    assert not may(authorizer(), ALICE, O.READ)
    assert may(authorizer(allow_if_no_acl=True), ALICE, O.READ)
    # the resource has ACLs, just none for alice: denied whatever the default
    assert not may(authorizer(acl("orders", O.READ, "User:bob"), allow_if_no_acl=True), ALICE, O.READ)
    # ACLs on another resource do not count
    assert may(authorizer(acl("payments", O.READ, "User:bob"), allow_if_no_acl=True), ALICE, O.READ)


def test_literal_allow_and_implied_operations() -> None:
    a = authorizer(acl("orders", O.READ), acl("orders", O.ALTER_CONFIGS))
    assert may(a, ALICE, O.READ)
    assert may(a, ALICE, O.DESCRIBE)          # READ implies DESCRIBE
    assert may(a, ALICE, O.DESCRIBE_CONFIGS)  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert not may(a, ALICE, O.WRITE)
    assert not may(a, ALICE, O.READ, "orders2")
    assert not may(a, BOB, O.READ)
    for op in (O.WRITE, O.DELETE, O.ALTER):
        assert may(authorizer(acl("orders", op)), ALICE, O.DESCRIBE)
    assert not may(authorizer(acl("orders", O.CREATE)), ALICE, O.DESCRIBE)
    assert all(may(authorizer(acl("orders", O.ALL)), ALICE, op) for op in (O.READ, O.WRITE, O.DESCRIBE, O.DELETE))


def test_deny_wins_and_denies_only_its_own_operation() -> None:
    a = authorizer(acl("orders", O.ALL), acl("orders", O.WRITE, permission=DENY))
    assert not may(a, ALICE, O.WRITE)
    assert may(a, ALICE, O.READ)
    # a DENY of READ does not deny DESCRIBE (implication is for ALLOW only)
    b = authorizer(acl("orders", O.DESCRIBE), acl("orders", O.READ, permission=DENY))
    assert may(b, ALICE, O.DESCRIBE) and not may(b, ALICE, O.READ)
    # a DENY of ALL denies everything, here through a wildcard principal on a prefix
    c = authorizer(acl("orders", O.READ), acl("ord", O.ALL, "User:*", pattern=PRE, permission=DENY))
    assert not may(c, ALICE, O.READ) and not may(c, ALICE, O.DESCRIBE)


def test_prefixed_wildcard_resources_and_principals() -> None:
    a = authorizer(acl("ord", O.WRITE, pattern=PRE), acl("*", O.READ, "User:*"), acl("o", O.DELETE, pattern=PRE))
    assert may(a, ALICE, O.WRITE, "orders") and may(a, ALICE, O.WRITE, "ord")
    assert not may(a, ALICE, O.WRITE, "or") and not may(a, ALICE, O.WRITE, "payments")
    assert may(a, ALICE, O.DELETE, "orders") and may(a, ALICE, O.DELETE, "o")
    assert may(a, BOB, O.READ, "anything") and not may(a, BOB, O.WRITE, "orders")
    # a LITERAL "ord" is not a prefix
    assert not may(authorizer(acl("ord", O.WRITE)), ALICE, O.WRITE, "orders")


def test_hosts_match_the_client_address() -> None:
    a = authorizer(acl("orders", O.READ, host="10.0.0.1"))
    assert may(a, ALICE, O.READ)
    assert not may(a, Session("User:alice", "10.0.0.9"), O.READ)


def test_groups_and_the_cluster_are_resources_of_their_own() -> None:
    a = authorizer(acl("billing", O.READ, rtype=G), acl(CLUSTER_NAME, O.CLUSTER_ACTION, rtype=C))
    assert may(a, ALICE, O.READ, "billing", G) and not may(a, ALICE, O.READ, "billing", T)
    assert may(a, ALICE, O.CLUSTER_ACTION, CLUSTER_NAME, C) and not may(a, ALICE, O.ALTER, CLUSTER_NAME, C)


@pytest.mark.parametrize("acls, allowed", [
    ([], False),
    ([acl("a", O.WRITE, pattern=PRE)], True),
    ([acl("b", O.WRITE)], True),
    ([acl("*", O.WRITE)], True),
    ([acl("b", O.READ)], False),                                                    # another operation
    ([acl("b", O.WRITE, "User:bob")], False),                                       # another principal
    ([acl("b", O.WRITE), acl("b", O.WRITE, permission=DENY)], False),               # denied literally
    ([acl("ab", O.WRITE), acl("a", O.WRITE, pattern=PRE, permission=DENY)], False), # a deny prefix covers it
    ([acl("ab", O.WRITE), acl("abc", O.WRITE, pattern=PRE, permission=DENY)], True),
    ([acl("b", O.ALL), acl("*", O.WRITE, permission=DENY)], False),                 # a wildcard deny
])
def test_write_on_some_topic(acls: list[StandardAcl], allowed: bool) -> None:
    """Kafka's authorizeByResourceType, which InitProducerId uses."""
    assert authorizer(*acls).authorize_any(ALICE, O.WRITE, T) is allowed


def test_configuration() -> None:
    image = acls_of()
    assert StandardAuthorizer.from_config({}, lambda: image) is None
    assert StandardAuthorizer.from_config({"authorizer.class.name": " "}, lambda: image) is None
    a = StandardAuthorizer.from_config({"authorizer.class.name": authz.STANDARD_AUTHORIZER,
                                        "super.users": "User:admin; User:broker;",
                                        "allow.everyone.if.no.acl.found": "TRUE"}, lambda: image)
    assert a is not None and a.super_users == {"User:admin", "User:broker"} and a.allow_if_no_acl
    for props, problem in [({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}, "the only authorizer"),
                           ({"super.users": "admin"}, "'admin' is not a principal"),
                           ({"allow.everyone.if.no.acl.found": "yes"}, "expected true or false")]:
        with pytest.raises(ConfigError, match=problem):
            StandardAuthorizer.from_config({"authorizer.class.name": "StandardAuthorizer", **props}, lambda: image)


def test_access_without_an_authorizer_allows_everything() -> None:
    access = Access(None, BOB)
    assert access.topic(O.WRITE, "x") and access.group(O.READ, "g") and access.cluster(O.ALTER)
    assert access.any_topic(O.WRITE)


def test_denials_are_logged_once_per_principal_operation_and_resource(caplog: pytest.LogCaptureFixture,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(authz, "DENIALS_REMEMBERED", 3)
    a = authorizer()
    with caplog.at_level(logging.INFO, logger="kafka.authorizer.logger"):
        for _ in range(100):
            may(a, ALICE, O.WRITE)
            may(a, ALICE, O.READ)
        a.authorize(BOB, O.READ, T, "orders", log_denial=False)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0] == ("Principal = User:alice is Denied operation = WRITE from host = 10.0.0.1 on resource = "
                        "Topic:LITERAL:orders (logged once per principal, operation and resource)")
    for name in ("a", "b", "c", "d"):  # the memory is bounded: the oldest is forgotten
        may(a, ALICE, O.WRITE, name)
    assert len(a._denials) == 3
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kafka.authorizer.logger"):
        may(a, ALICE, O.WRITE)
    assert len(caplog.records) == 1


class CountingAcls:
    """An AclsImage that counts lookups and refuses to be scanned."""

    def __init__(self, image: AclsImage) -> None:
        self.image, self.lookups = image, 0
        self.by_pattern = image.by_pattern  # read once per ACL change, for the prefix lengths

    def of(self, pattern):  # noqa: ANN001, ANN201
        self.lookups += 1
        return self.image.of(pattern)

    @property
    def by_id(self):  # noqa: ANN201
        raise AssertionError("an authorization check scanned every ACL")


def test_a_check_reads_the_index_not_every_acl() -> None:
    many = [acl(f"topic-{i}", O.READ, f"User:u{i}") for i in range(5000)]
    many += [acl("pre", O.WRITE, pattern=PRE), acl("prefix", O.WRITE, pattern=PRE)]
    counting = CountingAcls(acls_of(*many))
    a = StandardAuthorizer(lambda: counting)  # type: ignore[arg-type, return-value]
    for i in range(100):
        assert may(a, Session(f"User:u{i}", "1.1.1.1"), O.READ, f"topic-{i}")
    assert may(a, ALICE, O.WRITE, "prefixes")
    # per check: the literal name, the literal *, and one per distinct prefix length (3, 6)
    assert counting.lookups == 101 * 4
