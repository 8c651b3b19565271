"""SCRAM credentials in the metadata log (issue 29 item 2, KIP-554 and KIP-900): the records,
image, snapshot and tools keep salted hashes only and show that a credential exists, never its
secrets; AlterUserScramCredentials / DescribeUserScramCredentials follow Kafka's rules and
ACLs; `kraft configs --entity-type users` and `kraft storage format --add-scram` drive them."""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import uuid
from pathlib import Path

from click.testing import CliRunner, Result

from kraft.cli import main as kraft
from metadata.acls import CLUSTER_NAME, AclOperation, AclPermissionType, AclResourceType, PatternType, StandardAcl
from metadata.authorizer import Access, StandardAuthorizer
from metadata.config import from_properties
from metadata.delta import MetadataDelta
from common.errors import ErrorCode, KafkaError
from metadata.ids import random_id
from metadata.image import MetadataImage
from metadata.operations import ControllerOperations
from metadata.principal import Session
from metadata.record_json import record_to_dict
from metadata.records import access_control_entry
from metadata.scram import (ScramDeletion, ScramMechanism, alter_credentials, salted_password,
                            upsertion)
from metadata.server import ControllerServer
from metadata.shell.tree import File, metadata_tree
from metadata.snapshot import image_records
from tests.controllers import InProcessQuorum
from tests.kvcluster import free_ports

SHA512 = ScramMechanism.SCRAM_SHA_512
SHA256 = ScramMechanism.SCRAM_SHA_256


def image_with(records) -> MetadataImage:
    d = MetadataDelta(MetadataImage.empty("c"))
    d.replay_batch(records, 1, 1)
    return d.apply()


def test_a_credential_is_salted_hashes_that_check_a_password_and_never_show_it():
    recs, results = alter_credentials({}, [], [upsertion("alice", SHA512, "alice-secret", 8192)])
    assert [r.error for r in results] == [None]
    image = image_with(recs)
    cred = image.scram.credential("alice", SHA512)
    assert cred is not None and cred.iterations == 8192
    # RFC 5802: the stored key is H(HMAC(SaltedPassword, "Client Key")) of the right password only
    salted = salted_password(SHA512, "alice-secret", cred.salt, 8192)
    assert hashlib.sha512(hmac.new(salted, b"Client Key", "sha512").digest()).digest() == cred.stored_key
    assert hmac.new(salted, b"Server Key", "sha512").digest() == cred.server_key
    wrong = salted_password(SHA512, "guess", cred.salt, 8192)
    assert hashlib.sha512(hmac.new(wrong, b"Client Key", "sha512").digest()).digest() != cred.stored_key
    # nothing the tools print holds the secret, its salt or keys
    printed = json.dumps(record_to_dict(recs[0]))
    assert '"salt": "(redacted)"' in printed and '"storedKey": "(redacted)"' in printed
    assert cred.salt.hex() not in printed and cred.stored_key.hex() not in printed and "alice-secret" not in printed
    assert "salt" not in repr(cred) or cred.salt.hex() not in repr(cred)
    tree = metadata_tree(image, lambda: None)
    leaf = tree.children()["scram"].children()["alice"].children()["SCRAM-SHA-512"]
    assert isinstance(leaf, File) and leaf.value == {"mechanism": "SCRAM-SHA-512", "iterations": 8192}
    # a snapshot carries it, and reading the snapshot gives the same image
    again = image_with(list(image_records(image)))
    assert again.scram == image.scram


def test_kafkas_rules_for_altering_credentials():
    recs, _ = alter_credentials({}, [], [upsertion("alice", SHA512, "pw")])
    current = image_with(recs).scram.users
    few = upsertion("bob", SHA256, "pw", 4096)
    cases = {
        "few": ([], [few.__class__("bob", 1, 100, few.salt, few.salted_password)], ErrorCode.UNACCEPTABLE_CREDENTIAL),
        "many": ([], [few.__class__("bob", 1, 20000, few.salt, few.salted_password)], ErrorCode.UNACCEPTABLE_CREDENTIAL),
        "mechanism": ([], [few.__class__("bob", 7, 4096, few.salt, few.salted_password)],
                      ErrorCode.UNSUPPORTED_SASL_MECHANISM),
        "missing": ([ScramDeletion("bob", 1)], [], ErrorCode.RESOURCE_NOT_FOUND),
        "twice": ([ScramDeletion("alice", 2)], [upsertion("alice", SHA512, "x")], ErrorCode.DUPLICATE_RESOURCE),
        "empty": ([], [upsertion("", SHA512, "x")], ErrorCode.UNACCEPTABLE_CREDENTIAL),
    }
    for name, (deletions, upsertions, code) in cases.items():
        records, [result] = alter_credentials(current, deletions, upsertions)
        assert records == [] and result.error is not None and result.error.code == code, name
    # one user's refusal leaves the others' changes in
    records, results = alter_credentials(current, [ScramDeletion("alice", 2), ScramDeletion("carol", 2)],
                                         [upsertion("bob", SHA256, "pw")])
    assert [(r.user, r.error.code if r.error else None) for r in results] == [
        ("alice", None), ("carol", ErrorCode.RESOURCE_NOT_FOUND), ("bob", None)]
    after = MetadataDelta(image_with(recs))
    after.replay_batch(records, 2, 1)
    assert set(after.apply().scram.users) == {"bob"}


def test_the_operations_need_alter_and_describe_on_the_cluster(tmp_path):
    async def go() -> None:
        q = InProcessQuorum(tmp_path, n=1)
        await q.start()
        try:
            server = await q.active()
            authorizer = StandardAuthorizer(lambda: server.sm.image.acls, frozenset({"User:admin"}))
            ops = ControllerOperations(server.controller, authorizer)
            admin, alice = Access(authorizer, Session("User:admin", "h")), Access(authorizer, Session("User:alice", "h"))
            [ok] = await ops.alter_user_scram_credentials(admin, [], [upsertion("alice", SHA512, "pw", 8192)])
            assert ok.error is None
            for call in (ops.alter_user_scram_credentials(alice, [ScramDeletion("alice", 2)], []),
                         ops.describe_user_scram_credentials(alice, [])):
                try:
                    await call
                    raise AssertionError("allowed")
                except KafkaError as e:
                    assert e.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            [d] = await ops.describe_user_scram_credentials(admin, [])
            assert (d.user, d.credentials) == ("alice", ((SHA512, 8192),))
            [missing] = await ops.describe_user_scram_credentials(admin, ["nobody"])
            assert missing.error is not None and missing.error.code == ErrorCode.RESOURCE_NOT_FOUND
            describe = StandardAcl(AclResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:alice", "*",
                                   AclOperation.DESCRIBE, AclPermissionType.ALLOW)
            await server.controller.write(lambda view: ([access_control_entry(uuid.uuid4(), describe)], None))
            [d] = await ops.describe_user_scram_credentials(alice, ["alice"])
            assert d.error is None and d.credentials == ((SHA512, 8192),)
        finally:
            await q.stop()
    asyncio.run(go())


def cli(*args: str) -> Result:
    result = CliRunner().invoke(kraft, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output
    return result


def test_format_add_scram_then_kraft_configs_users(tmp_path: Path):
    """KIP-900: the first admin's credential is in the cluster from its first start; kraft
    configs then adds, describes and deletes credentials; dump-log shows none of the secrets."""
    [port] = free_ports(1)
    props = {"node.id": "1", "process.roles": "controller", "controller.quorum.voters": f"1@127.0.0.1:{port}",
             "listeners": f"CONTROLLER://127.0.0.1:{port}", "metadata.log.dir": str(tmp_path / "meta"),
             "controller.quorum.election.timeout.ms": "300"}
    conf = tmp_path / "controller.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    bad = cli("storage", "format", "-t", random_id(), "-c", str(conf), "--add-scram",
              "SCRAM-SHA-512=[name=admin,iterations=10,password=x]")
    assert bad.exit_code == 1 and "Too few iterations" in bad.output and not (tmp_path / "meta").exists()
    made = cli("storage", "format", "-t", random_id(), "-c", str(conf), "--add-scram",
               "SCRAM-SHA-512=[name=admin,password=admin-secret]")
    assert made.exit_code == 0, made.output
    bootstrap = f"127.0.0.1:{port}"

    async def start() -> ControllerServer:
        s = ControllerServer(from_properties(props))
        await s.start()
        return s

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(start())
    try:
        def describe() -> str:
            return cli("configs", "--bootstrap-controller", bootstrap, "--describe", "--entity-type", "users").output

        runner = threading.Thread(target=loop.run_forever, daemon=True)
        runner.start()
        eventually_sync(lambda: "'admin' are SCRAM-SHA-512=iterations=4096" in describe())
        r = cli("configs", "--bootstrap-controller", bootstrap, "--alter", "--entity-type", "users", "--entity-name",
                "alice", "--add-config", "SCRAM-SHA-512=[iterations=8192,password=alice-secret],"
                "SCRAM-SHA-256=[password=alice-secret]")
        assert r.exit_code == 0 and "Completed updating config for user alice." in r.output, r.output
        out = cli("configs", "--bootstrap-controller", bootstrap, "--describe", "--entity-type", "users",
                  "--entity-name", "alice").output
        assert out == ("SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096, "
                       "SCRAM-SHA-512=iterations=8192\n")
        r = cli("configs", "--bootstrap-controller", bootstrap, "--alter", "--entity-type", "users", "--entity-name",
                "alice", "--delete-config", "SCRAM-SHA-512")
        assert r.exit_code == 0, r.output
        again = cli("configs", "--bootstrap-controller", bootstrap, "--alter", "--entity-type", "users",
                    "--entity-name", "alice", "--delete-config", "SCRAM-SHA-512")
        assert again.exit_code == 1 and again.output.strip() == (
            "Error: RESOURCE_NOT_FOUND: Attempt to delete a user credential that does not exist")
        nobody = cli("configs", "--bootstrap-controller", bootstrap, "--describe", "--entity-type", "users",
                     "--entity-name", "nobody")
        assert nobody.exit_code == 1 and "RESOURCE_NOT_FOUND" in nobody.output
        assert "SCRAM-SHA-256=iterations=4096\n" in describe()
        wal = sorted((tmp_path / "meta").rglob("*.log"))
        dumped = cli("dump-log", "--files", ",".join(map(str, wal))).output
        assert dumped.count("\"type\": \"UserScramCredentialRecord\"") == 3
        assert dumped.count("\"type\": \"RemoveUserScramCredentialRecord\"") == 1
        assert '"salt": "(redacted)"' in dumped and "secret" not in dumped
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.run_until_complete(server.stop())
        loop.close()


def eventually_sync(check, timeout: float = 20.0) -> None:
    """tests.eventually for a check that runs the kraft CLI, which starts its own event loop (so it
    cannot be awaited inside one)."""
    import time
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_snapshot_with_credentials_is_read_back_and_laid_out_for_spark(tmp_path: Path):
    """Credentials come last in a snapshot; Spark's reader (which finds sections by the first
    record of each index block) knows their section instead of refusing the file."""
    from metadata.analytics.snapshot_ranges import layout
    from metadata.snapshot import read_info, read_snapshot, write_snapshot
    upserts = [upsertion(f"user-{i}", SHA256, "pw") for i in range(5)]
    image = image_with(alter_credentials({}, [], upserts)[0])
    path = tmp_path / "with-scram.snap"
    write_snapshot(image, str(path), created_ms=1, index_interval=2)
    assert read_snapshot(str(path)).scram == image.scram
    with open(path, "rb") as f:
        assert layout(f, read_info(str(path))).record_count == 5
