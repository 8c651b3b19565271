"""Every tool says "not authorized" in one line: `kraft` commands, the console producer and
consumer and the consumer-groups tool, over plaintext, against a combined node where DENY ACLs
refuse the plaintext principal (User:ANONYMOUS) a topic, a group and operations on the cluster
(allow.everyone.if.no.acl.found=true lets everything else through, the node's own requests
included); and a bad authorization setting stops a server with one line."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from kraft.cli import main as kraft
from metadata.acls import CLUSTER_NAME, AclOperation, AclPermissionType, AclResourceType, PatternType
from metadata.client import ControllerClient
from protos import controller_pb2 as pb
from tests.acl_node import CombinedNode
from tests.brokercluster import REPO

O = AclOperation  # noqa: E741 -- read as O.READ, O.WRITE: never a bare value to mistake for 0
TOPIC = "Not authorized to access topics: [secret] (User:ANONYMOUS may not {} it)"
CLUSTER = "Cluster authorization failed: User:ANONYMOUS may not {} the cluster"


def binding(rtype: AclResourceType, name: str, op: AclOperation, permission: AclPermissionType) -> pb.AclBinding:
    return pb.AclBinding(resource_type=rtype, resource_name=name, pattern_type=PatternType.LITERAL,
                         principal="User:*", host="*", operation=op, permission_type=permission)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CombinedNode]:
    n = CombinedNode(tmp_path_factory.mktemp("acl-cli"), **{"allow.everyone.if.no.acl.found": "true"})
    n.run(n.call(ControllerClient.create_topics, pb.CreateTopicsRequest(topics=[
        pb.CreatableTopic(name=t, num_partitions=1, replication_factor=1) for t in ("secret", "open")])))
    allow, deny = AclPermissionType.ALLOW, AclPermissionType.DENY
    r = n.run(n.call(ControllerClient.create_acls, pb.CreateAclsRequest(creations=[
        binding(AclResourceType.CLUSTER, CLUSTER_NAME, O.ALL, allow),  # the node's own requests
        *(binding(AclResourceType.CLUSTER, CLUSTER_NAME, op, deny)
          for op in (O.DESCRIBE, O.ALTER, O.ALTER_CONFIGS, O.CREATE)),
        binding(AclResourceType.TOPIC, "secret", O.ALL, deny),
        binding(AclResourceType.GROUP, "locked", O.ALL, deny)])))
    assert all(x.error_code == 0 for x in r.results), r
    yield n
    n.close()


def run(*args: str, input: str | None = None) -> Result:
    result = CliRunner().invoke(kraft, list(args), input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert "Traceback" not in result.output
    return result


def refused(*args: str, input: str | None = None) -> list[str]:
    """What a refused command wrote on stderr (it must exit 1)."""
    result = run(*args, input=input)
    assert result.exit_code == 1, result.output
    return result.stderr.splitlines()


def test_kraft_commands(node: CombinedNode) -> None:
    c = ["--bootstrap-controller", node.bootstrap]
    for args, line in [
        (["topics", *c, "create", "--topic", "secret"], f"Error: TOPIC_AUTHORIZATION_FAILED: {TOPIC.format('CREATE')}"),
        (["topics", *c, "describe", "--topic", "secret"],
         f"Error: TOPIC_AUTHORIZATION_FAILED: {TOPIC.format('DESCRIBE')}"),
        (["topics", *c, "delete", "--topic", "secret"], f"Error: TOPIC_AUTHORIZATION_FAILED: {TOPIC.format('DELETE')}"),
        (["topics", *c, "alter", "--topic", "secret", "--partitions", "3"],
         f"Error: TOPIC_AUTHORIZATION_FAILED: {TOPIC.format('ALTER')}"),
        (["cluster", *c, "describe"], f"Error: CLUSTER_AUTHORIZATION_FAILED: {CLUSTER.format('DESCRIBE')}"),
        (["quorum", *c, "describe", "--status"], f"Error: CLUSTER_AUTHORIZATION_FAILED: {CLUSTER.format('DESCRIBE')}"),
        (["configs", *c, "--entity-type", "brokers", "--entity-default", "--alter", "--add-config",
          "min.insync.replicas=1"], f"Error: CLUSTER_AUTHORIZATION_FAILED: {CLUSTER.format('ALTER_CONFIGS')}"),
        (["acls", *c, "--list"], f"Error: CLUSTER_AUTHORIZATION_FAILED: {CLUSTER.format('DESCRIBE')}"),
        (["acls", *c, "--add", "--allow-principal", "User:x", "--topic", "t"],
         f"Error: CLUSTER_AUTHORIZATION_FAILED: {CLUSTER.format('ALTER')}"),
        (["leader-election", "--bootstrap-controller", node.bootstrap, "--election-type", "preferred",
          "--all-topic-partitions"], f"Error: CLUSTER_AUTHORIZATION_FAILED: {CLUSTER.format('ALTER')}"),
        (["reassign-partitions", "--bootstrap-controller", node.bootstrap, "--list"],
         f"Error: CLUSTER_AUTHORIZATION_FAILED: {CLUSTER.format('DESCRIBE')}"),
        (["get-offsets", "--bootstrap-server", node.bootstrap_server, "--topic", "secret"],
         "Error: TOPIC_AUTHORIZATION_FAILED: Not authorized to access topics: [secret]"),
        (["log-dirs", "--bootstrap-server", node.bootstrap_server, "--describe"],
         f"Error: CLUSTER_AUTHORIZATION_FAILED: {CLUSTER.format('DESCRIBE')}"),
    ]:
        assert refused(*args) == [line], args
    assert run("topics", *c, "describe", "--topic", "open").exit_code == 0  # no ACL, no refusal


def test_console_producer_and_consumer(node: CombinedNode) -> None:
    s = ["--bootstrap-server", node.bootstrap_server]
    sent = refused("console-producer", *s, "--topic", "secret", "--max-block-ms", "5000", input="a\nbb\n")
    assert sent == [f"Error when sending message to topic secret with key: null, value: {n} bytes with error: "
                    "TOPIC_AUTHORIZATION_FAILED: Not authorized to access topics: [secret]" for n in (1, 2)]
    assert refused("console-consumer", *s, "--topic", "secret", "--timeout-ms", "5000") == [
        "Error processing message, terminating consumer process: TOPIC_AUTHORIZATION_FAILED: Not authorized to "
        "access topics: [secret]", "Processed a total of 0 messages"]
    lines = refused("console-consumer", *s, "--topic", "open", "--group", "locked", "--timeout-ms", "5000")
    assert lines == ["Error processing message, terminating consumer process: GROUP_AUTHORIZATION_FAILED: Not "
                     "authorized to access group: locked (User:ANONYMOUS may not DESCRIBE it)",
                     "Processed a total of 0 messages"]
    assert refused("consumer-groups", *s, "--describe", "--group", "locked") == [
        "Error: GROUP_AUTHORIZATION_FAILED: Not authorized to access group: locked (User:ANONYMOUS may not "
        "DESCRIBE it)"]


def test_bad_authorization_settings_stop_a_server_with_one_line(tmp_path: Path) -> None:
    from metadata.ids import random_id
    from raft.storage import format_storage
    from tests.kvcluster import free_ports

    port = free_ports(1)[0]
    format_storage(str(tmp_path / "meta"), random_id(), 1)
    base = {"node.id": "1", "process.roles": "controller", "controller.quorum.voters": f"1@127.0.0.1:{port}",
            "listeners": f"CONTROLLER://127.0.0.1:{port}", "metadata.log.dir": str(tmp_path / "meta"),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    for bad, line in [
        ({"super.users": "admin"}, "Error: super.users: 'admin' is not a principal; expected e.g. "
                                   "User:admin;User:broker"),
        ({"ssl.principal.mapping.rules": "RULE:^CN=(.*$/$1/"}, "Error: ssl.principal.mapping.rules: rule "
         "'RULE:^CN=(.*$/$1/': bad pattern: missing ), unterminated subpattern at position 4"),
        ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}, "Error: authorizer.class.name="
         "kafka.security.authorizer.AclAuthorizer: the only authorizer is "
         "org.apache.kafka.metadata.authorizer.StandardAuthorizer (or leave it empty for none)"),
    ]:
        config = tmp_path / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in {**base, **bad}.items()))
        p = subprocess.run([sys.executable, "-m", "kraft.cli", "server-start", str(config)], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
        assert (p.returncode, p.stderr.splitlines()) == (1, [line])
