"""ACLs as metadata: the records, the image and its index, snapshots, the controller's rules
for CreateAcls / DeleteAcls / DescribeAcls (Kafka's AclControlManager), and the tools that
show them (metadata-shell's /acls, kraft dump-log)."""
from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from metadata import records as R
from metadata.acls import (AclBindingFilter, AclOperation, AclPermissionType, AclResourceType, PatternType,
                           ResourcePattern, StandardAcl, acl_filter, create_acls, delete_acls, matching, new_acl)
from metadata.delta import MetadataDelta
from metadata.dump_log import dump_log
from common.errors import ErrorCode, KafkaError
from metadata.image import MetadataImage
from metadata.records import RecordError
from metadata.shell.main import main as shell
from metadata.snapshot import image_records, read_snapshot, write_snapshot
from raft.messages import Entry, EntryType
from tests import metadata_logs as L

T, G, C = AclResourceType.TOPIC, AclResourceType.GROUP, AclResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
O = AclOperation  # noqa: E741 -- read as O.READ, O.WRITE: never a bare value to mistake for 0
IDS = [uuid.UUID(int=0xAC10 + i) for i in range(6)]  # a pool: an image of n ACLs takes the first n (strict=False)


def acl(name: str = "orders", op: AclOperation = O.READ, principal: str = "User:alice", *,
        rtype: AclResourceType = T, pattern: PatternType = LIT, host: str = "*",
        permission: AclPermissionType = ALLOW) -> StandardAcl:
    return StandardAcl(rtype, name, pattern, principal, host, op, permission)


SOME = [acl(), acl("orders", O.WRITE, "User:bob", permission=DENY), acl("ord", O.WRITE, pattern=PRE),
        acl("billing", O.READ, rtype=G), acl("kafka-cluster", O.CLUSTER_ACTION, "User:broker", rtype=C),
        acl("*", O.DESCRIBE, "User:*")]


def image_with(acls: list[StandardAcl], base: MetadataImage | None = None, offset: int = 1) -> MetadataImage:
    delta = MetadataDelta(base or MetadataImage.empty("acl-test"))
    delta.replay_batch([R.access_control_entry(i, a) for i, a in zip(IDS, acls, strict=False)], offset, 1)
    return delta.apply()


# -- records, image, delta ---------------------------------------------------------------------------

def test_records_build_the_image_and_its_index() -> None:
    image = image_with(SOME)
    assert dict(image.acls.by_id) == dict(zip(IDS, SOME, strict=True))
    assert dict(image.acls.of(ResourcePattern(T, LIT, "orders"))) == {IDS[0]: SOME[0], IDS[1]: SOME[1]}
    assert dict(image.acls.of(ResourcePattern(T, PRE, "ord"))) == {IDS[2]: SOME[2]}
    assert len(image.acls.of(ResourcePattern(T, PRE, "orders"))) == 0

    delta = MetadataDelta(image)
    delta.replay_batch([R.remove_access_control_entry(IDS[0]), R.remove_access_control_entry(IDS[2])], 2, 1)
    after = delta.apply()
    assert delta.changes().acls_changed and not delta.changes().empty
    assert set(after.acls.by_id) == set(IDS[:6]) - {IDS[0], IDS[2]}
    assert dict(after.acls.of(ResourcePattern(T, LIT, "orders"))) == {IDS[1]: SOME[1]}
    assert ResourcePattern(T, PRE, "ord") not in after.acls.by_pattern  # emptied patterns go
    assert dict(image.acls.by_id) == dict(zip(IDS, SOME, strict=True))  # the base is untouched
    unchanged = MetadataDelta(after)
    unchanged.replay_batch([R.no_op()], 3, 1)
    assert unchanged.apply().acls is after.acls and not unchanged.changes().acls_changed


@pytest.mark.parametrize("records, problem", [
    ([R.access_control_entry(IDS[0], SOME[0])] * 2, "exists already"),
    ([R.remove_access_control_entry(IDS[5])], "no ACL has id"),
    ([R.access_control_entry(IDS[0], acl(op=O.ANY))], "not an ACL"),
    ([R.access_control_entry(IDS[0], acl(pattern=PatternType.MATCH))], "not an ACL"),
    ([R.access_control_entry(IDS[0], acl(permission=AclPermissionType.ANY))], "not an ACL"),
    ([R.access_control_entry(IDS[0], acl(""))], "not an ACL"),
])
def test_records_no_controller_writes_are_refused(records: list, problem: str) -> None:
    delta = MetadataDelta(MetadataImage.empty("acl-test"))
    with pytest.raises(RecordError, match=problem):
        delta.replay_batch(records, 1, 1)


def test_an_unknown_enum_value_in_a_record_is_refused() -> None:
    record = R.access_control_entry(IDS[0], SOME[0])
    record.access_control_entry.operation = 99
    with pytest.raises(RecordError, match="99"):
        MetadataDelta(MetadataImage.empty("acl-test")).replay_batch([record], 1, 1)


def test_snapshots_hold_the_acls_last_by_id() -> None:
    image = image_with(SOME)
    kinds = [r.WhichOneof("record") for r in image_records(image)]
    assert kinds[-len(SOME):] == ["access_control_entry"] * len(SOME)
    buf = io.BytesIO()
    write_snapshot(image, buf, created_ms=1)
    buf.seek(0)
    assert read_snapshot(buf) == image


# -- the controller's rules -----------------------------------------------------------------------------

def test_create_is_idempotent_and_refusals_are_per_entry() -> None:
    image = image_with(SOME[:1])
    bad = KafkaError(ErrorCode.INVALID_REQUEST, "unknown operation 99")
    records, results = create_acls(image.acls, [SOME[0], SOME[1], SOME[1], bad])
    assert results == [None, None, None, bad]
    assert len(records) == 1 and records[0].access_control_entry.principal == "User:bob"
    assert uuid.UUID(bytes=records[0].access_control_entry.id) not in image.acls.by_id


def test_delete_matches_filters_and_is_bounded() -> None:
    image = image_with(SOME)
    everything = AclBindingFilter()
    records, results = delete_acls(image.acls, [everything, KafkaError(ErrorCode.INVALID_REQUEST, "x")], 100)
    assert len(records) == len(SOME) and sorted(results[0]) == sorted(SOME)
    assert isinstance(results[1], KafkaError)
    with pytest.raises(KafkaError) as refused:
        delete_acls(image.acls, [everything], 5)
    assert refused.value.code == ErrorCode.POLICY_VIOLATION


def test_filters_match_as_kafka_filters_do() -> None:
    acls = image_with(SOME).acls

    def found(**kw: object) -> set[StandardAcl]:
        return {a for _, a in matching(acls, AclBindingFilter(**kw))}  # type: ignore[arg-type]
    # MATCH: every ACL that applies to the topic "orders": its own, the prefix, the wildcard
    assert found(resource_type=T, resource_name="orders", pattern_type=PatternType.MATCH) == {
        SOME[0], SOME[1], SOME[2], SOME[5]}
    # ANY: the name exactly, whatever the pattern type
    assert found(resource_type=T, resource_name="ord") == {SOME[2]}
    assert found(resource_type=T, resource_name="orders", pattern_type=LIT, principal="User:bob") == {SOME[1]}
    assert found(operation=O.READ) == {SOME[0], SOME[3]}
    assert found(permission_type=DENY) == {SOME[1]}
    assert found(resource_type=G) == {SOME[3]}
    assert found(host="10.0.0.1") == set()


@pytest.mark.parametrize("args, message", [
    ((2, "t", 3, "User:a", "*", 99, 3), "unknown operation 99"),
    ((2, "t", 3, "User:a", "*", 1, 3), "invalid operation ANY"),
    ((3, "g", 3, "User:a", "*", 4, 3), "invalid operation WRITE for resource type GROUP"),
    ((5, "tx", 3, "User:a", "*", 4, 3), "invalid resource type TRANSACTIONAL_ID"),
    ((9, "t", 3, "User:a", "*", 3, 3), "unknown resource type 9"),
    ((2, "t", 2, "User:a", "*", 3, 3), "invalid pattern type MATCH"),
    ((2, "t", 3, "", "*", 3, 3), "principal ''"),
    ((2, "t", 3, "alice", "*", 3, 3), "principal 'alice'"),
    ((2, "t", 3, "User:", "*", 3, 3), "principal 'User:'"),
    ((2, "t", 3, "User:a", "example.com", 3, 3), "host 'example.com'"),
    ((2, "t", 3, "User:a", "*", 3, 1), "invalid permission type ANY"),
    ((2, "", 3, "User:a", "*", 3, 3), "Resource name should not be empty"),
    ((4, "other", 3, "User:a", "*", 7, 3), "the cluster resource is LITERAL 'kafka-cluster'"),
    ((2, "t" * 40_000, 3, "User:a", "*", 3, 3), "at most 32767"),
])
def test_bad_acls_are_refused_in_one_line(args: tuple, message: str) -> None:
    with pytest.raises(KafkaError) as refused:
        new_acl(*args)
    assert refused.value.code == ErrorCode.INVALID_REQUEST
    assert message in refused.value.message and "\n" not in refused.value.message


def test_acls_are_normalized_and_filters_checked() -> None:
    assert new_acl(2, "t", 3, "User:a", "::0001", 3, 3).host == "::1"
    with pytest.raises(KafkaError, match="UNKNOWN"):
        acl_filter(0, None, 1, None, None, 1, 1)
    with pytest.raises(KafkaError, match="unknown operation 42"):
        acl_filter(1, None, 1, None, None, 42, 1)
    assert acl_filter(1, None, 1, None, "*", 1, 1).host == "*"


# -- the tools ---------------------------------------------------------------------------------------------

def acl_log(path: Path) -> Path:
    """A log directory: the shell tests' history, then ACLs added (offset 10) and one removed (11)."""
    entries = L.entries()[:-1]
    added = [R.access_control_entry(i, a) for i, a in zip(IDS[:2], SOME[:2], strict=True)]
    entries.append(Entry(10, 3, R.encode_batch(added, append_time_ms=L.T0)))
    entries.append(Entry(11, 3, R.encode_batch([R.remove_access_control_entry(IDS[1])], append_time_ms=L.T0)))
    entries.append(Entry(12, 3, b"", EntryType.NOOP))
    return L.build_log_dir(path, log=entries)


def run(command, *args: str) -> list[str]:
    result = CliRunner().invoke(command, list(args))
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    return result.stdout.splitlines()


def test_metadata_shell_shows_acls_by_id(tmp_path: Path) -> None:
    log_dir = str(acl_log(tmp_path / "meta"))
    assert run(shell, "-d", log_dir, "-c", "ls /acls") == ["byId"]
    assert run(shell, "-d", log_dir, "-c", "ls /acls/byId") == [str(IDS[0])]
    assert json.loads("\n".join(run(shell, "-d", log_dir, "-c", f"cat /acls/byId/{IDS[0]}"))) == {
        "resourceType": "TOPIC", "resourceName": "orders", "patternType": "LITERAL", "principal": "User:alice",
        "host": "*", "operation": "READ", "permissionType": "ALLOW"}
    assert run(shell, "-d", log_dir, "--at-offset", "10", "-c", "ls /acls/byId") == sorted(map(str, IDS[:2]))
    history = run(shell, "-d", log_dir, "-c", f"changes /acls/byId/{IDS[1]}")
    assert [line.split()[1] for line in history if line.startswith("offset")] == ["10", "11"]
    assert any("RemoveAccessControlEntryRecord" in line for line in history)


def test_dump_log_decodes_acl_records(tmp_path: Path) -> None:
    log_dir = acl_log(tmp_path / "meta")
    result = CliRunner().invoke(dump_log, ["--json", "--files", ",".join(map(str, L.segment_paths(log_dir)))])
    assert result.exit_code == 0, result.output
    items = [json.loads(line) for line in result.stdout.splitlines()]
    payloads = [r["payload"] for i in items if i["item"] == "entry" and i.get("offset") in (10, 11)
                for r in i["records"]]
    assert payloads[0] == {"type": "AccessControlEntryRecord", "version": 1, "data": {
        "id": str(IDS[0]), "resourceType": "TOPIC", "resourceName": "orders", "patternType": "LITERAL",
        "principal": "User:alice", "host": "*", "operation": "READ", "permissionType": "ALLOW"}}
    assert payloads[2] == {"type": "RemoveAccessControlEntryRecord", "version": 1, "data": {"id": str(IDS[1])}}
