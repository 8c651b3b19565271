"""Client quotas (issue 29 item 3, KIP-546): ClientQuotaRecord in the image, delta, snapshots and
metadata-shell; AlterClientQuotas/DescribeClientQuotas with Kafka's rules and ACLs, on the
controller, on the brokers' Kafka listener (APIs 48 and 49, forwarded) and through
`kraft configs --entity-type users|clients|ips`."""
from __future__ import annotations

import asyncio
import socket
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from common.errors import ErrorCode, KafkaError
from kraft.cli import main as kraft
from metadata.acls import CLUSTER_NAME, AclOperation, AclPermissionType, AclResourceType, PatternType, StandardAcl
from metadata.authorizer import Access, StandardAuthorizer
from metadata.client_quotas import (MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT, QuotaAlteration, QuotaFilterComponent,
                                    QuotaOp, alter_quotas, describe_quotas)
from metadata.delta import MetadataDelta
from metadata.image import MetadataImage
from metadata.operations import ControllerOperations
from metadata.principal import Session
from metadata.records import access_control_entry
from metadata.shell.tree import File, metadata_tree
from metadata.snapshot import image_records
from tests.brokercluster import BrokerCluster, running_cluster
from tests.controllers import InProcessQuorum

ALICE = (("user", "alice"),)
ALICE_ANY_CLIENT = (("user", "alice"), ("client-id", None))


def image_with(records: list, base: MetadataImage | None = None) -> MetadataImage:
    base = base or MetadataImage.empty("c")
    d = MetadataDelta(base)
    d.replay_batch(records, base.offset + 1, 1)
    return d.apply()


def alteration(entity: tuple, **ops: float | None) -> QuotaAlteration:
    return QuotaAlteration(entity, tuple(QuotaOp(k, v or 0.0, v is None) for k, v in ops.items()))


def test_quotas_are_records_in_the_image_snapshot_and_shell():
    recs, results = alter_quotas({}, [alteration(ALICE, producer_byte_rate=1048576, request_percentage=50.5),
                                      alteration((("client-id", None),), consumer_byte_rate=2048),
                                      alteration((("ip", "10.0.0.1"),), connection_creation_rate=10)])
    assert [r.error for r in results] == [None, None, None] and len(recs) == 4
    image = image_with(recs)
    assert dict(image.client_quotas.of(ALICE)) == {"producer_byte_rate": 1048576.0, "request_percentage": 50.5}
    assert dict(image.client_quotas.of((("client-id", None),))) == {"consumer_byte_rate": 2048.0}
    # a snapshot carries them, and reading it gives the same quotas
    assert image_with(list(image_records(image))).client_quotas == image.client_quotas
    tree = metadata_tree(image, lambda: None).children()["clientQuotas"].children()
    assert sorted(tree) == ["client-id=<default>", "ip=10.0.0.1", "user=alice"]
    leaf = tree["user=alice"].children()["producer_byte_rate"]
    assert isinstance(leaf, File) and leaf.value == 1048576.0
    # removing one key keeps the other; removing the last drops the entity; removing a key not set writes nothing
    recs, _ = alter_quotas(image.client_quotas.entities, [alteration(ALICE, producer_byte_rate=None),
                                                          alteration((("client-id", None),), consumer_byte_rate=None),
                                                          alteration((("client-id", "x"),), consumer_byte_rate=None)])
    assert len(recs) == 2
    after = image_with(recs, image)
    assert dict(after.client_quotas.of(ALICE)) == {"request_percentage": 50.5}
    assert (("client-id", None),) not in after.client_quotas.entities


def test_kafkas_rules_for_altering_quotas():
    bad = {
        "empty entity": alteration((), producer_byte_rate=1),
        "unknown entity type": alteration((("group", "g"),), producer_byte_rate=1),
        "a type twice": alteration((("user", "a"), ("user", "b")), producer_byte_rate=1),
        "ip with a user": alteration((("user", "a"), ("ip", "1.2.3.4")), connection_creation_rate=1),
        "not an ip": alteration((("ip", "not-an-ip"),), connection_creation_rate=1),
        "unknown key": alteration(ALICE, producer_byte_rates=1),
        "an ip key on a user": alteration(ALICE, connection_creation_rate=1),
        "a user key on an ip": alteration((("ip", "1.2.3.4"),), producer_byte_rate=1),
        "fractional byte rate": alteration(ALICE, producer_byte_rate=1.5),
        "negative": alteration(ALICE, request_percentage=-1),
        "removing an unknown key": QuotaAlteration(ALICE, (QuotaOp("nope", 0, True),)),
    }
    for name, a in bad.items():
        records, [result] = alter_quotas({}, [a])
        assert records == [] and result.error is not None, name
        assert result.error.code == ErrorCode.INVALID_REQUEST, (name, result.error)
    # one entry's refusal leaves the others' changes in
    records, results = alter_quotas({}, [bad["unknown key"], alteration(ALICE_ANY_CLIENT, producer_byte_rate=10)])
    assert [r.error is None for r in results] == [False, True] and len(records) == 1


def test_describe_matches_exact_default_and_any_names_strictly_or_not():
    recs, _ = alter_quotas({}, [alteration(ALICE, producer_byte_rate=1),
                                alteration(ALICE_ANY_CLIENT, producer_byte_rate=2),
                                alteration((("user", None),), producer_byte_rate=3),
                                alteration((("user", "bob"), ("client-id", "app")), producer_byte_rate=4),
                                alteration((("ip", "10.0.0.1"),), connection_creation_rate=5)])
    quotas = image_with(recs).client_quotas.entities

    def rates(components: list[QuotaFilterComponent], strict: bool) -> list[float]:
        return sorted(next(iter(v.values())) for _, v in describe_quotas(quotas, components, strict))

    user = "user"
    assert rates([QuotaFilterComponent(user, MATCH_EXACT, "alice")], False) == [1, 2]
    assert rates([QuotaFilterComponent(user, MATCH_EXACT, "alice")], True) == [1]
    assert rates([QuotaFilterComponent(user, MATCH_DEFAULT)], False) == [3]
    assert rates([QuotaFilterComponent(user, MATCH_ANY)], False) == [1, 2, 4]
    assert rates([QuotaFilterComponent(user, MATCH_ANY), QuotaFilterComponent("client-id", MATCH_DEFAULT)],
                 True) == [2]
    assert rates([QuotaFilterComponent("ip", MATCH_ANY)], True) == [5]
    assert rates([], False) == [1, 2, 3, 4, 5]
    assert rates([], True) == []
    for components in ([QuotaFilterComponent(user, MATCH_EXACT, None)], [QuotaFilterComponent(user, MATCH_DEFAULT, "a")],
                       [QuotaFilterComponent(user, 7)], [QuotaFilterComponent("group", MATCH_ANY)],
                       [QuotaFilterComponent(user, MATCH_ANY), QuotaFilterComponent(user, MATCH_DEFAULT)],
                       [QuotaFilterComponent(user, MATCH_ANY), QuotaFilterComponent("ip", MATCH_ANY)]):
        with pytest.raises(KafkaError) as e:
            describe_quotas(quotas, components, False)
        assert e.value.code == ErrorCode.INVALID_REQUEST, components


def test_the_operations_need_alter_configs_and_describe_configs_on_the_cluster(tmp_path):
    async def go() -> None:
        q = InProcessQuorum(tmp_path, n=1)
        await q.start()
        try:
            server = await q.active()
            authorizer = StandardAuthorizer(lambda: server.sm.image.acls, frozenset({"User:admin"}))
            ops = ControllerOperations(server.controller, authorizer)
            admin, alice = Access(authorizer, Session("User:admin", "h")), Access(authorizer, Session("User:alice", "h"))
            [checked] = await ops.alter_client_quotas(admin, [alteration(ALICE, producer_byte_rate=10)],
                                                      validate_only=True)
            assert checked.error is None and await ops.describe_client_quotas(admin, [], False) == []
            [ok] = await ops.alter_client_quotas(admin, [alteration(ALICE, producer_byte_rate=10)])
            assert ok.error is None
            for call in (ops.alter_client_quotas(alice, [alteration(ALICE, producer_byte_rate=1)]),
                         ops.describe_client_quotas(alice, [], False)):
                with pytest.raises(KafkaError) as e:
                    await call
                assert e.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            describe = StandardAcl(AclResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:alice", "*",
                                   AclOperation.DESCRIBE_CONFIGS, AclPermissionType.ALLOW)
            await server.controller.write(lambda view: ([access_control_entry(uuid.uuid4(), describe)], None))
            assert await ops.describe_client_quotas(alice, [], False) == [(ALICE, {"producer_byte_rate": 10.0})]
        finally:
            await q.stop()
    asyncio.run(go())


# -- the Kafka listener and the CLI, against brokers -------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[BrokerCluster]:
    with running_cluster(tmp_path_factory.mktemp("quotas"), {}, brokers=1) as c:
        yield c


def kafka_call(c: BrokerCluster, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    """One request on the broker's Kafka listener, its response read with kio's schema."""
    from brokerd.kafka.codec import build, frame_request, read_response, request_schema
    with socket.create_connection(("127.0.0.1", c.kafka_ports[c.ids[0]]), 5) as s:
        s.settimeout(20)
        s.sendall(frame_request(api_key, version, 7, "pytest", build(request_schema(api_key, version), fields)))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        return read_response(s.recv(size, socket.MSG_WAITALL), api_key, version)[1]


def test_alter_and_describe_client_quotas_on_the_kafka_listener(cluster):
    for version in (0, 1):
        entry = {"entity": [{"entity_type": "user", "entity_name": f"kio-{version}"},
                            {"entity_type": "client-id", "entity_name": None}],
                 "ops": [{"key": "producer_byte_rate", "value": 4096.0, "remove": False}]}
        bad = {"entity": [{"entity_type": "user", "entity_name": "x"}],
               "ops": [{"key": "no_such_quota", "value": 1.0, "remove": False}]}
        checked = kafka_call(cluster, 49, version, {"entries": [entry], "validate_only": True})
        assert [e.error_code for e in checked.entries] == [0]
        r = kafka_call(cluster, 49, version, {"entries": [entry, bad], "validate_only": False})
        assert [int(e.error_code) for e in r.entries] == [0, int(ErrorCode.INVALID_REQUEST)]
        assert r.entries[1].error_message == "Invalid configuration key no_such_quota"
        assert [(p.entity_type, p.entity_name) for p in r.entries[0].entity] == [("user", f"kio-{version}"),
                                                                                 ("client-id", None)]
        d = kafka_call(cluster, 48, version, {"strict": False, "components": [
            {"entity_type": "user", "match_type": 0, "match": f"kio-{version}"}]})
        assert d.error_code == 0
        assert [({(p.entity_type, p.entity_name) for p in e.entity}, [(v.key, v.value) for v in e.values])
                for e in d.entries] == [({("user", f"kio-{version}"), ("client-id", None)},
                                         [("producer_byte_rate", 4096.0)])]
    refused = kafka_call(cluster, 48, 1, {"strict": False, "components": [
        {"entity_type": "user", "match_type": 0, "match": None}]})
    assert refused.error_code == ErrorCode.INVALID_REQUEST and refused.entries is None


def cli(*args: str) -> Result:
    result = CliRunner().invoke(kraft, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output
    return result


def test_kraft_configs_sets_describes_and_deletes_quotas(cluster):
    b = ["configs", "--bootstrap-controller", cluster.quorum.bootstrap]
    r = cli(*b, "--alter", "--entity-type", "users", "--entity-name", "carol", "--entity-type", "clients",
            "--entity-default", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    assert r.exit_code == 0 and r.output == ("Completed updating quotas for user-principal 'carol', the default "
                                             "client-id.\n"), r.output
    r = cli(*b, "--alter", "--entity-type", "clients", "--entity-default", "--add-config", "request_percentage=25")
    assert r.exit_code == 0, r.output
    out = cli(*b, "--describe", "--entity-type", "users", "--entity-name", "carol", "--entity-type", "clients",
              "--entity-default").output
    assert out == ("Quota configs for user-principal 'carol', the default client-id are "
                   "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n")
    assert cli(*b, "--describe", "--entity-type", "clients").output == (
        "Quota configs for the default client-id are request_percentage=25.0\n")
    # a user with quotas and no SCRAM credential: its quotas, and no error
    r = cli(*b, "--alter", "--entity-type", "users", "--entity-name", "dave", "--add-config",
            "controller_mutation_rate=5")
    assert r.exit_code == 0, r.output
    r = cli(*b, "--describe", "--entity-type", "users", "--entity-name", "dave")
    assert (r.exit_code, r.output) == (0, "Quota configs for user-principal 'dave' are controller_mutation_rate=5.0\n")
    r = cli(*b, "--alter", "--entity-type", "users", "--entity-name", "dave", "--delete-config",
            "controller_mutation_rate")
    assert r.exit_code == 0, r.output
    r = cli(*b, "--describe", "--entity-type", "users", "--entity-name", "dave")
    assert r.exit_code == 1 and "RESOURCE_NOT_FOUND" in r.output  # neither quotas nor credentials left
    r = cli(*b, "--alter", "--entity-type", "ips", "--entity-name", "10.1.1.1", "--add-config", "producer_byte_rate=1")
    assert (r.exit_code, r.output) == (1, "Error: INVALID_REQUEST: Invalid configuration key producer_byte_rate\n")
    r = cli(*b, "--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config", "producer_byte_rate=x")
    assert r.exit_code == 1 and r.output.startswith("Error: 'producer_byte_rate=x': a quota is KEY=NUMBER"), r.output
    r = cli(*b, "--alter", "--entity-type", "users", "--entity-type", "clients", "--entity-name", "a",
            "--add-config", "producer_byte_rate=1")
    assert r.exit_code == 1 and "--entity-name or --entity-default" in r.output
