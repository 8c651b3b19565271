"""Authorization of every request family, in one process: a combined node with the authorizer
on, whose own principal (User:ANONYMOUS, plaintext) is a super user, asked by User:alice
through a fake gRPC context carrying her client certificate (as TLS would), and through the
Kafka listener with a fake principal. A principal without ACLs is refused with Kafka's exact
codes (TOPIC_/GROUP_/CLUSTER_AUTHORIZATION_FAILED) for produce, fetch, create, describe, the
groups and the cluster, then allowed once ACLs say so; `kraft acls` refuses bad input with
one line and writes nothing."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from click.testing import CliRunner
from immutables import Map

from brokerd.kafka.apis import KafkaApis
from brokerd.grpc_fetch_answer import serialized
from brokerd.service import BrokerService
from clients.records import build_batch
from kraft.cli import main as kraft
from metadata.acls import AclOperation, AclPermissionType, AclResourceType, PatternType
from metadata.authorizer import StandardAuthorizer
from metadata.client import ControllerClient
from common.errors import ErrorCode
from metadata.image import AclsImage
from metadata.principal import ANONYMOUS, FORWARDED_HOST, FORWARDED_PRINCIPAL, PrincipalMapper, Session
from metadata.server import RaftAccess
from metadata.service import ControllerService
from protos import broker_pb2 as bpb
from protos import controller_pb2 as pb
from tests.acl_node import CombinedNode
from tests.pki import CertificateAuthority, name

O = AclOperation  # noqa: E741 -- read as O.READ, O.WRITE: never a bare value to mistake for 0
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED = (ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                              ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                              ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
MAPPER = PrincipalMapper("RULE:^CN=([a-z]+),O=test$/$1/")
AUTHORITY = CertificateAuthority()
ALICE_CERT = AUTHORITY.issue(name(("O", "test"), ("CN", "alice")))[0]
STRANGER_CERT = AUTHORITY.issue(name(("O", "elsewhere"), ("CN", "eve")))[0]  # no rule maps it


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


class FakeContext:
    """What a gRPC server sees of a call: a TLS client certificate (or none) and the peer."""

    def __init__(self, cert: bytes | None = ALICE_CERT, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.cert, self.metadata = cert, metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"x509_pem_cert": [self.cert]} if self.cert else {"transport_security_type": [b"insecure"]}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)

    async def send_initial_metadata(self, metadata: Any) -> None:  # ProduceStream's first word
        pass


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CombinedNode]:
    n = CombinedNode(tmp_path_factory.mktemp("acl-node"), **{"super.users": ANONYMOUS})
    n.run(n.call(ControllerClient.create_topics, pb.CreateTopicsRequest(topics=[
        pb.CreatableTopic(name=t, num_partitions=1, replication_factor=1) for t in ("a-orders", "b-secret")])))
    yield n
    n.close()


def controller(node: CombinedNode) -> ControllerService:
    assert node.controller is not None
    return ControllerService(node.controller.controller, node.controller.authorizer, MAPPER)


def broker(node: CombinedNode) -> BrokerService:
    b = node.broker
    assert b is not None
    return BrokerService(b.rm, "PLAINTEXT", lambda: 1, b.describe, b.producer_ids, b.groups, b.authorizer, MAPPER)


def grant(node: CombinedNode, rtype: AclResourceType, resource: str, *ops: AclOperation,
          pattern: PatternType = PatternType.LITERAL, principal: str = "User:alice") -> None:
    r = node.run(node.call(ControllerClient.create_acls, pb.CreateAclsRequest(creations=[pb.AclBinding(
        resource_type=rtype, resource_name=resource, pattern_type=pattern, principal=principal, host="*",
        operation=op, permission_type=AclPermissionType.ALLOW) for op in ops])))
    assert all(x.error_code == 0 for x in r.results), r
    # the broker acts on the ACLs once it has applied them
    offset = node.run(node.call(ControllerClient.describe_cluster, pb.DescribeClusterRequest())).metadata_offset
    node.run(_until(lambda: node.broker is not None and node.broker.published_offset >= offset))


async def _until(check: Any) -> None:
    from tests.eventually import eventually
    await eventually(check, 10, what="the broker applied the ACLs")


def status(resp: Any) -> ErrorCode:
    return ErrorCode(resp.status.error_code)


# -- the controller: create, describe, configs, the cluster --------------------------------------------

def test_topics_without_acls_are_refused_then_allowed(node: CombinedNode) -> None:
    svc = controller(node)
    ctx = FakeContext()

    def create(name: str) -> pb.CreateTopicResult:
        r = node.run(svc.CreateTopics(pb.CreateTopicsRequest(topics=[pb.CreatableTopic(
            name=name, num_partitions=1, replication_factor=1)]), ctx))
        assert status(r) == ErrorCode.NONE
        return r.topics[0]

    refused = create("a-new")
    assert (refused.error_code, refused.error_message) == (
        TOPIC_DENIED, "Not authorized to access topics: [a-new] (User:alice may not CREATE it)")
    described = node.run(svc.DescribeTopics(pb.DescribeTopicsRequest(names=["a-orders", "nowhere"]), ctx)).topics
    assert [(t.name, t.error_code) for t in described] == [("a-orders", TOPIC_DENIED), ("nowhere", TOPIC_DENIED)]
    assert node.run(svc.DescribeTopics(pb.DescribeTopicsRequest(), ctx)).topics == []  # a listing hides them
    for method, request in [("DeleteTopics", pb.DeleteTopicsRequest(names=["a-orders"])),
                            ("CreatePartitions", pb.CreatePartitionsRequest(topics=[
                                pb.CreatePartitionsRequest.Topic(name="a-orders", count=2)]))]:
        r = node.run(getattr(svc, method)(request, ctx))
        assert [(t.name, t.error_code) for t in r.topics] == [("a-orders", TOPIC_DENIED)], method
    orders_id = node.run(node.call(ControllerClient.describe_topics, pb.DescribeTopicsRequest(names=["a-orders"]))).topics[0].topic_id
    by_id = node.run(svc.DeleteTopics(pb.DeleteTopicsRequest(topic_ids=[orders_id]), ctx)).topics
    assert [(t.name, t.topic_id, t.error_code) for t in by_id] == [("a-orders", orders_id, TOPIC_DENIED)]

    grant(node, AclResourceType.TOPIC, "a-", O.CREATE, O.DESCRIBE, pattern=PatternType.PREFIXED)
    assert create("a-new").error_code == ErrorCode.NONE
    assert create("b-new").error_code == TOPIC_DENIED  # the prefix is a-
    names = [t.name for t in node.run(svc.DescribeTopics(pb.DescribeTopicsRequest(), ctx)).topics]
    assert names == ["a-new", "a-orders"]
    still = node.run(svc.CreatePartitions(pb.CreatePartitionsRequest(topics=[
        pb.CreatePartitionsRequest.Topic(name="a-orders", count=2)]), ctx)).topics
    assert [t.error_code for t in still] == [TOPIC_DENIED]  # ALTER is not granted


def test_configs_need_their_resources_operation(node: CombinedNode) -> None:
    svc, ctx = controller(node), FakeContext()
    resources = [pb.AlterConfigsResource(resource_type=pb.TOPIC, resource_name="b-secret"),
                 pb.AlterConfigsResource(resource_type=pb.BROKER, resource_name="")]
    described = node.run(svc.DescribeConfigs(pb.DescribeConfigsRequest(resources=resources), ctx)).resources
    assert [d.error_code for d in described] == [TOPIC_DENIED, CLUSTER_DENIED]
    changes = [pb.AlterConfigsResource(resource_type=r.resource_type, resource_name=r.resource_name, configs=[
        pb.AlterableConfig(name="min.insync.replicas", value="1")]) for r in resources]
    altered = node.run(svc.IncrementalAlterConfigs(pb.IncrementalAlterConfigsRequest(resources=changes), ctx))
    assert [r.error_code for r in altered.resources] == [TOPIC_DENIED, CLUSTER_DENIED]
    grant(node, AclResourceType.TOPIC, "b-secret", O.ALTER_CONFIGS)
    described = node.run(svc.DescribeConfigs(pb.DescribeConfigsRequest(resources=resources), ctx)).resources
    assert [d.error_code for d in described] == [ErrorCode.NONE, CLUSTER_DENIED]  # ALTER_CONFIGS implies DESCRIBE_CONFIGS


CLUSTER_REQUESTS = [
    ("ElectLeaders", pb.ElectLeadersRequest(), O.ALTER),
    ("AlterPartitionReassignments", pb.AlterPartitionReassignmentsRequest(), O.ALTER),
    ("UnregisterBroker", pb.UnregisterBrokerRequest(broker_id=9), O.ALTER),
    ("ListPartitionReassignments", pb.ListPartitionReassignmentsRequest(), O.DESCRIBE),
    ("DescribeCluster", pb.DescribeClusterRequest(), O.DESCRIBE),
    ("DescribeQuorum", pb.DescribeQuorumRequest(), O.DESCRIBE),
    ("CreateAcls", pb.CreateAclsRequest(), O.ALTER),
    ("DeleteAcls", pb.DeleteAclsRequest(), O.ALTER),
    ("DescribeAcls", pb.DescribeAclsRequest(filter=pb.AclFilter(resource_type=1, pattern_type=1, operation=1,
                                                                 permission_type=1)), O.DESCRIBE),
    ("BrokerRegistration", pb.BrokerRegistrationRequest(broker_id=7), O.CLUSTER_ACTION),
    ("BrokerHeartbeat", pb.BrokerHeartbeatRequest(broker_id=1), O.CLUSTER_ACTION),
    ("AlterPartition", pb.AlterPartitionRequest(broker_id=1), O.CLUSTER_ACTION),
    ("AllocateProducerIds", pb.AllocateProducerIdsRequest(broker_id=1), O.CLUSTER_ACTION),
    ("FetchMetadata", pb.FetchMetadataRequest(offset=1), O.CLUSTER_ACTION),
    ("FetchSnapshot", pb.FetchSnapshotRequest(), O.CLUSTER_ACTION),
]


@pytest.mark.parametrize("method, request_, op", CLUSTER_REQUESTS, ids=[m for m, _, _ in CLUSTER_REQUESTS])
def test_cluster_requests_need_their_operation_on_the_cluster(node: CombinedNode, method: str, request_: Any,
                                                              op: AclOperation) -> None:
    r = node.run(getattr(controller(node), method)(request_, FakeContext()))
    assert (status(r), r.status.error_message) == (
        CLUSTER_DENIED, f"Cluster authorization failed: User:alice may not {op.name} the cluster")


def forwarded_for(principal: str, host: str = "10.1.1.1") -> tuple[tuple[str, bytes], ...]:
    """The metadata a broker adds to a request it forwards (UTF-8 in ``-bin`` keys)."""
    return (FORWARDED_PRINCIPAL, principal.encode()), (FORWARDED_HOST, host.encode())


def test_forwarded_principals_are_trusted_only_from_cluster_actors(node: CombinedNode) -> None:
    svc = controller(node)
    request = pb.CreateTopicsRequest(topics=[pb.CreatableTopic(name="fwd", num_partitions=1, replication_factor=1)])
    from_alice = node.run(svc.CreateTopics(request, FakeContext(ALICE_CERT, forwarded_for("User:bob"))))
    assert status(from_alice) == CLUSTER_DENIED and "may not forward" in from_alice.status.error_message
    from_broker = node.run(svc.CreateTopics(request, FakeContext(None, forwarded_for("User:bob"))))  # ANONYMOUS: a super user
    assert from_broker.topics[0].error_code == TOPIC_DENIED
    assert "User:bob may not CREATE" in from_broker.topics[0].error_message
    # A principal from a certificate may hold any Unicode (CN=Zoë): it travels and is checked.
    from_broker = node.run(svc.CreateTopics(request, FakeContext(None, forwarded_for("User:Zoë"))))
    assert "User:Zoë may not CREATE" in from_broker.topics[0].error_message


def test_no_acl_found_does_not_let_anyone_forward(node: CombinedNode) -> None:
    """With allow.everyone.if.no.acl.found and no cluster ACL, everyone passes CLUSTER_ACTION;
    forwarding still takes a super user or an ALLOW, or anyone could speak as a super user."""
    assert node.controller is not None
    permissive = StandardAuthorizer(lambda: AclsImage(Map(), Map()), frozenset({ANONYMOUS, "User:admin"}),
                                    allow_if_no_acl=True)
    svc = ControllerService(node.controller.controller, permissive, MAPPER)
    request = pb.CreateTopicsRequest(topics=[pb.CreatableTopic(name="fwd-admin", num_partitions=1, replication_factor=1)])
    r = node.run(svc.CreateTopics(request, FakeContext(ALICE_CERT, forwarded_for("User:admin"))))
    assert status(r) == CLUSTER_DENIED and "may not forward" in r.status.error_message
    assert node.run(svc.CreateTopics(request, FakeContext(ALICE_CERT))).topics[0].error_code == 0  # as herself: allowed


def test_a_certificate_no_rule_maps_ends_the_call(node: CombinedNode) -> None:
    with pytest.raises(Aborted) as refused:
        node.run(controller(node).DescribeCluster(pb.DescribeClusterRequest(), FakeContext(STRANGER_CERT)))
    assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "no rule of ssl.principal.mapping.rules" in refused.value.details
    with pytest.raises(Aborted):
        node.run(broker(node).Metadata(bpb.MetadataRequest(), FakeContext(STRANGER_CERT)))


def test_raft_services_need_cluster_action_or_describe(node: CombinedNode) -> None:
    assert node.controller is not None and node.controller.authorizer is not None
    access = RaftAccess(node.controller.authorizer, MAPPER)
    assert [access.operation(m) for m in ("/kraft.raft.RaftPeer/Send", "/kraft.raft.RaftAdmin/Status",
                                          "/kraft.raft.RaftAdmin/AddVoter", "/kraft.controller.Controller/X")] == [
        O.CLUSTER_ACTION, O.DESCRIBE, O.ALTER, None]

    async def status_call(cert: bytes | None) -> Any:
        async def inner(request: Any, context: Any) -> str:
            return "served"

        class Details:
            method = "/kraft.raft.RaftAdmin/Status"

        async def continuation(details: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(inner)
        handler = await access.intercept_service(continuation, Details())
        return await handler.unary_unary(b"", FakeContext(cert))
    assert node.run(status_call(None)) == "served"
    with pytest.raises(Aborted) as refused:
        node.run(status_call(ALICE_CERT))
    assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert refused.value.details.startswith("CLUSTER_AUTHORIZATION_FAILED: ")


def test_acl_requests_without_an_authorizer_answer_security_disabled(node: CombinedNode) -> None:
    assert node.controller is not None
    svc = ControllerService(node.controller.controller, None)
    r = node.run(svc.CreateAcls(pb.CreateAclsRequest(), FakeContext(None)))
    assert status(r) == ErrorCode.SECURITY_DISABLED


def test_bad_acls_are_refused_and_nothing_is_written(node: CombinedNode) -> None:
    def log_end() -> int:
        return node.run(node.call(ControllerClient.describe_quorum, pb.DescribeQuorumRequest())).voters[0].log_end_offset

    before = log_end()
    r = node.run(node.call(ControllerClient.create_acls, pb.CreateAclsRequest(creations=[pb.AclBinding(
        resource_type=2, resource_name="t", pattern_type=3, principal="User:x", host="*", operation=99,
        permission_type=3)])))
    assert [(x.error_code, x.error_message) for x in r.results] == [(ErrorCode.INVALID_REQUEST, "unknown operation 99")]
    cli = ["acls", "--bootstrap-controller", node.bootstrap, "--add"]
    for args, message in [
        (["--allow-principal", "User:x", "--operation", "Fly", "--topic", "t"], "Error: unknown operation 'Fly': use "
         "All, Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
         "IdempotentWrite"),
        (["--topic", "t"], "Error: --add needs --allow-principal or --deny-principal"),
        (["--allow-principal", "x", "--topic", "t"], "Error: principal 'x': expected a string in format "
         "principalType:principalName, e.g. User:alice"),
        (["--allow-principal", "User:x", "--allow-host", "somewhere", "--topic", "t"], "Error: host 'somewhere': "
         "expected an IP address or * (ACLs match the client's address, not its name)"),
        (["--allow-principal", "User:x", "--operation", "Write", "--group", "g"], "Error: ResourceType GROUP only "
         "supports operations All, Read, Delete, Describe; not Write"),
        (["--allow-principal", "User:x", "--resource-pattern-type", "match", "--topic", "t"],
         "Error: unknown --resource-pattern-type for --add 'match': use Literal, Prefixed"),
        (["--allow-principal", "User:x"], "Error: --add needs a resource: --topic, --group or --cluster"),
    ]:
        result = CliRunner().invoke(kraft, cli + args)
        assert (result.exit_code, result.stderr.splitlines()) == (1, [message]), args
        assert result.stdout == ""
    assert log_end() == before  # nothing was written
    listed = node.run(node.call(ControllerClient.describe_acls, pb.DescribeAclsRequest(filter=pb.AclFilter(
        resource_type=1, pattern_type=1, operation=1, permission_type=1, principal="User:x"))))
    assert list(listed.acls) == []


def test_kraft_acls_adds_lists_and_removes_as_kafka_acls_does(node: CombinedNode) -> None:
    base = ["acls", "--bootstrap-controller", node.bootstrap]
    added = CliRunner().invoke(kraft, base + ["--add", "--allow-principal", "User:carol", "--operation", "Read",
                                              "--operation", "describe", "--topic", "c-t", "--group", "c-g"])
    assert added.exit_code == 0, added.output
    assert added.stdout.splitlines() == [
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=c-t, patternType=LITERAL)`: ",
        " \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW) ",
        " \t(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW) ", "",
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=c-t, patternType=LITERAL)`: ",
        " \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW) ",
        " \t(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW) ", "",
        "Adding ACLs for resource `ResourcePattern(resourceType=GROUP, name=c-g, patternType=LITERAL)`: ",
        " \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW) ",
        " \t(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW) ", "",
        "Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=c-g, patternType=LITERAL)`: ",
        " \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW) ",
        " \t(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW) ", ""]
    listed = CliRunner().invoke(kraft, base + ["--list", "--principal", "User:carol"])
    assert listed.exit_code == 0 and listed.stdout.count("principal=User:carol") == 4
    removed = CliRunner().invoke(kraft, base + ["--remove", "--topic", "c-t", "--force"])
    assert removed.exit_code == 0, removed.output
    assert removed.stdout.splitlines()[0] == (
        "Removing ACLs for resource `ResourcePattern(resourceType=TOPIC, name=c-t, patternType=LITERAL)`: ")
    assert removed.stdout.splitlines()[-2:] == [
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=c-t, patternType=LITERAL)`: ", ""]
    left = CliRunner().invoke(kraft, base + ["--list", "--principal", "User:carol"]).stdout
    assert "name=c-t" not in left and left.count("principal=User:carol") == 2


# -- the broker: produce, fetch, offsets, metadata, producer ids, groups -----------------------------------

def produce_request(topic: str) -> bpb.ProduceRequest:
    req = bpb.ProduceRequest(acks=1, timeout_ms=5000)
    req.topics.add(name=topic).partitions.add(partition=0, batch=build_batch([(b"k", b"v", 1, ())]))
    return req


def fetched_by(node: CombinedNode, svc: BrokerService, req: bpb.FetchRequest, ctx: FakeContext) -> bpb.FetchResponse:
    """The service's Fetch answer as the client reads it (written by Fetch's response serializer)."""
    return bpb.FetchResponse.FromString(serialized(node.run(svc.Fetch(req, ctx))))


def test_produce_fetch_and_offsets_need_write_read_and_describe(node: CombinedNode) -> None:
    svc, ctx = broker(node), FakeContext()
    produced = node.run(svc.Produce(produce_request("b-secret"), ctx)).topics
    assert [(t.name, p.error_code, p.base_offset) for t in produced for p in t.partitions] == [
        ("b-secret", TOPIC_DENIED, -1)]
    streamed = node.run(_stream(svc, ctx, produce_request("b-secret")))  # ProduceStream checks the same
    assert [(a.correlation_id, p.error_code) for a in streamed for t in a.topics for p in t.partitions] == [
        (7, TOPIC_DENIED)]
    fetch = bpb.FetchRequest(replica_id=-1, max_wait_ms=0, topics=[bpb.FetchTopic(
        name="b-secret", partitions=[bpb.FetchPartition(partition=0, fetch_offset=0)])])
    assert [p.error_code for t in fetched_by(node, svc, fetch, ctx).topics for p in t.partitions] == [TOPIC_DENIED]
    follower = bpb.FetchRequest(replica_id=1, max_wait_ms=0, topics=fetch.topics)
    answer = fetched_by(node, svc, follower, ctx).topics[0].partitions[0]
    assert (answer.error_code, answer.error_message) == (
        TOPIC_DENIED, "Cluster authorization failed: User:alice may not CLUSTER_ACTION the cluster")
    offsets = bpb.ListOffsetsRequest(topics=[bpb.ListOffsetsTopic(name="b-secret", partitions=[
        bpb.ListOffsetsPartition(partition=0, timestamp=-1)])])
    assert [p.error_code for t in node.run(svc.ListOffsets(offsets, ctx)).topics for p in t.partitions] == [TOPIC_DENIED]
    epochs = bpb.OffsetsForLeaderEpochRequest(replica_id=-1, topics=[bpb.OffsetForLeaderTopic(
        name="b-secret", partitions=[bpb.OffsetForLeaderPartition(partition=0, leader_epoch=0)])])
    assert [p.error_code for t in node.run(svc.OffsetsForLeaderEpoch(epochs, ctx)).topics
            for p in t.partitions] == [TOPIC_DENIED]
    md = node.run(svc.Metadata(bpb.MetadataRequest(topics=["b-secret"]), ctx))
    assert [(t.name, t.error_code) for t in md.topics] == [("b-secret", TOPIC_DENIED)] and md.brokers
    listing = node.run(svc.Metadata(bpb.MetadataRequest(), ctx)).topics
    assert "b-secret" not in {t.name for t in listing}
    ids = node.run(svc.InitProducerId(bpb.InitProducerIdRequest(), ctx))
    assert (ids.error_code, ids.producer_id) == (CLUSTER_DENIED, -1)

    grant(node, AclResourceType.TOPIC, "b-secret", O.WRITE, O.READ)
    produced = node.run(svc.Produce(produce_request("b-secret"), ctx)).topics[0].partitions[0]
    assert (produced.error_code, produced.base_offset) == (ErrorCode.NONE, 0)
    fetched = fetched_by(node, svc, fetch, ctx).topics[0].partitions[0]
    assert fetched.error_code == ErrorCode.NONE and fetched.high_watermark == 1 and fetched.records
    assert node.run(svc.ListOffsets(offsets, ctx)).topics[0].partitions[0].offset == 1
    assert [t.name for t in node.run(svc.Metadata(bpb.MetadataRequest(), ctx)).topics if t.name == "b-secret"]
    assert node.run(svc.InitProducerId(bpb.InitProducerIdRequest(), ctx)).error_code == ErrorCode.NONE  # WRITE on a topic
    assert fetched_by(node, svc, follower, ctx).topics[0].partitions[0].error_code == TOPIC_DENIED
    refused = node.run(svc.DescribeBroker(bpb.DescribeBrokerRequest(), ctx))
    assert (refused.error_code, refused.replicas) == (CLUSTER_DENIED, [])
    streamed = node.run(_stream(svc, ctx, produce_request("b-secret")))
    assert [(p.error_code, p.base_offset) for t in streamed[0].topics for p in t.partitions] == [(ErrorCode.NONE, 1)]


async def _stream(svc: BrokerService, ctx: Any, request: Any) -> list[Any]:
    """``request`` alone on a ProduceStream, with correlation id 7: its answers."""
    request.correlation_id = 7

    async def requests() -> Any:
        yield request
    return [a async for a in svc.ProduceStream(requests(), ctx)]


def test_group_requests_need_the_group(node: CombinedNode) -> None:
    svc, ctx = broker(node), FakeContext()
    group = "g-billing"
    found = node.run(svc.FindCoordinator(bpb.FindCoordinatorRequest(key=group), ctx))
    assert (found.error_code, found.error_message) == (
        GROUP_DENIED, "Not authorized to access group: g-billing (User:alice may not DESCRIBE it)")
    member = dict(group_id=group, generation_id=1, member_id="m")
    for method, request in [
            ("JoinGroup", bpb.JoinGroupRequest(group_id=group, session_timeout_ms=6000, protocol_type="consumer")),
            ("SyncGroup", bpb.SyncGroupRequest(**member)), ("Heartbeat", bpb.HeartbeatRequest(**member)),
            ("LeaveGroup", bpb.LeaveGroupRequest(group_id=group)),
            ("OffsetFetch", bpb.OffsetFetchRequest(group_id=group))]:
        assert node.run(getattr(svc, method)(request, ctx)).error_code == GROUP_DENIED, method
    commit = bpb.OffsetCommitRequest(group_id=group, generation_id=-1, topics=[bpb.OffsetCommitTopic(
        name="a-orders", partitions=[bpb.OffsetCommitPartition(partition=0, offset=5)])])
    assert [p.error_code for t in node.run(svc.OffsetCommit(commit, ctx)).topics for p in t.partitions] == [
        GROUP_DENIED]
    described = node.run(svc.DescribeGroups(bpb.DescribeGroupsRequest(groups=[group]), ctx)).groups
    assert [(g.group_id, g.error_code) for g in described] == [(group, GROUP_DENIED)]
    deleted = node.run(svc.DeleteGroups(bpb.DeleteGroupsRequest(groups=[group]), ctx)).results
    assert [(g.group_id, g.error_code) for g in deleted] == [(group, GROUP_DENIED)]

    grant(node, AclResourceType.GROUP, group, O.READ)  # READ implies DESCRIBE
    # the group may commit, the topic not yet: a-orders has no READ for alice
    assert [p.error_code for t in node.run(svc.OffsetCommit(commit, ctx)).topics for p in t.partitions] == [
        TOPIC_DENIED]
    grant(node, AclResourceType.TOPIC, "a-orders", O.READ)
    assert node.run(svc.FindCoordinator(bpb.FindCoordinatorRequest(key=group), ctx)).error_code in (
        ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE)  # allowed (the offsets topic may be on its way)
    from tests.eventually import eventually

    async def committed() -> bool:
        r = await svc.OffsetCommit(commit, ctx)
        return [p.error_code for t in r.topics for p in t.partitions] == [ErrorCode.NONE]
    node.run(eventually(committed, 20, what="the commit allowed"))
    fetched = node.run(svc.OffsetFetch(bpb.OffsetFetchRequest(group_id=group), ctx))
    assert [(t.name, [p.offset for p in t.partitions]) for t in fetched.topics] == [("a-orders", [5])]
    # a named topic alice may not DESCRIBE is refused in the answer (which has no message field),
    # the others answered
    named = node.run(svc.OffsetFetch(bpb.OffsetFetchRequest(group_id=group, topics=[
        bpb.OffsetFetchTopic(name="a-orders", partitions=[0]), bpb.OffsetFetchTopic(name="z-hidden", partitions=[0])]),
        ctx))
    assert [(t.name, [(p.offset, p.error_code) for p in t.partitions]) for t in named.topics] == [
        ("a-orders", [(5, ErrorCode.NONE)]), ("z-hidden", [(-1, TOPIC_DENIED)])]
    # ListGroups without DESCRIBE on the cluster shows only the groups alice may describe
    assert [g.group_id for g in node.run(svc.ListGroups(bpb.ListGroupsRequest(), ctx)).groups] == [group]
    assert node.run(svc.DeleteGroups(bpb.DeleteGroupsRequest(groups=[group]), ctx)).results[0].error_code == \
        GROUP_DENIED  # DELETE is not granted


# -- the Kafka listener: real Kafka clients with a fake principal ------------------------------------------

@pytest.fixture
def kafka_principal(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The principal of the next Kafka connections (as a TLS certificate would give it)."""
    who = {"principal": "User:alice"}
    monkeypatch.setattr(KafkaApis, "session", lambda self, writer: Session(who["principal"], "127.0.0.1"))
    return who


def test_kafka_clients_are_refused_then_allowed(node: CombinedNode, kafka_principal: dict[str, str]) -> None:
    import kafka.errors as Errors
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    producer = KafkaProducer(bootstrap_servers=node.kafka_bootstrap, request_timeout_ms=5000, max_block_ms=5000)
    try:
        with pytest.raises(Errors.TopicAuthorizationFailedError):
            producer.send("k-topic", b"x").get(10)
    finally:
        producer.close(1)
    admin = KafkaAdminClient(bootstrap_servers=node.kafka_bootstrap, request_timeout_ms=5000)
    try:
        with pytest.raises(Errors.TopicAuthorizationFailedError):
            admin.create_topics([NewTopic("k-topic", 1, 1)])
        with pytest.raises(Errors.ClusterAuthorizationFailedError):
            admin.describe_cluster()
    finally:
        admin.close()

    grant(node, AclResourceType.TOPIC, "k-", O.ALL, pattern=PatternType.PREFIXED)
    grant(node, AclResourceType.GROUP, "k-group", O.READ)
    admin = KafkaAdminClient(bootstrap_servers=node.kafka_bootstrap, request_timeout_ms=5000)
    try:
        admin.create_topics([NewTopic("k-topic", 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=node.kafka_bootstrap, request_timeout_ms=5000, max_block_ms=10000)
    try:
        assert producer.send("k-topic", b"hello").get(10).offset == 0
    finally:
        producer.close(1)
    consumer = KafkaConsumer("k-topic", bootstrap_servers=node.kafka_bootstrap, group_id="k-group",
                             auto_offset_reset="earliest", consumer_timeout_ms=15000)
    try:
        assert [m.value for m in consumer][:1] == [b"hello"]
    finally:
        consumer.close()


def test_kafka_python_manages_acls_through_the_listener(node: CombinedNode, kafka_principal: dict[str, str]) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             ResourcePattern, ResourcePatternFilter, ResourceType)
    kafka_principal["principal"] = ANONYMOUS  # the super user
    pattern = ResourcePattern(ResourceType.TOPIC, "kp-", ACLResourcePatternType.PREFIXED)
    wanted = ACL("User:dave", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
    admin = KafkaAdminClient(bootstrap_servers=node.kafka_bootstrap, request_timeout_ms=5000)
    try:
        assert admin.create_acls([wanted])["failed"] == []
        everything = ACLFilter("User:dave", None, ACLOperation.ANY, ACLPermissionType.ANY,
                               ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
        found, error = admin.describe_acls(everything)
        assert [(a.principal, a.operation, a.resource_pattern.resource_name) for a in found] == [
            ("User:dave", ACLOperation.WRITE, "kp-")]
        (_, removed, error), = admin.delete_acls([everything])
        assert [a.resource_pattern.resource_name for a in removed] == ["kp-"]
        assert admin.describe_acls(everything)[0] == []
    finally:
        admin.close()
    # alice may not: the controller checks the principal the broker forwards
    kafka_principal["principal"] = "User:alice"
    admin = KafkaAdminClient(bootstrap_servers=node.kafka_bootstrap, request_timeout_ms=5000)
    try:
        import kafka.errors as Errors
        with pytest.raises(Errors.ClusterAuthorizationFailedError):
            admin.describe_acls(ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                          ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)))
        failed = admin.create_acls([wanted])["failed"]
        assert failed == [Errors.ClusterAuthorizationFailedError]  # kafka-python lists the error classes
    finally:
        admin.close()


def test_authorized_operations_are_the_callers_own(node: CombinedNode, kafka_principal: dict[str, str]) -> None:
    """KIP-430 with librdkafka: Metadata, DescribeCluster and DescribeGroups answer, when asked,
    the operations the caller's ACLs allow on each topic, the cluster and each group (an ACL
    implies DESCRIBE as in Kafka), and nothing (None) when not asked."""
    from confluent_kafka import Consumer, TopicCollection, TopicPartition
    from confluent_kafka.admin import AclOperation as Op
    from confluent_kafka.admin import AdminClient
    kafka_principal["principal"] = "User:olga"
    node.run(node.call(ControllerClient.create_topics, pb.CreateTopicsRequest(topics=[
        pb.CreatableTopic(name="ops-topic", num_partitions=1, replication_factor=1)])))
    grant(node, AclResourceType.TOPIC, "ops-topic", O.READ, O.ALTER_CONFIGS, principal="User:olga")
    grant(node, AclResourceType.CLUSTER, "kafka-cluster", O.DESCRIBE, principal="User:olga")
    grant(node, AclResourceType.GROUP, "ops-group", O.DELETE, O.READ, principal="User:olga")
    admin = AdminClient({"bootstrap.servers": node.kafka_bootstrap})
    asked = admin.describe_topics(TopicCollection(["ops-topic"]), include_authorized_operations=True)
    assert set(asked["ops-topic"].result(30).authorized_operations) == {
        Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    not_asked = admin.describe_topics(TopicCollection(["ops-topic"]))["ops-topic"].result(30)
    assert not_asked.authorized_operations is None
    assert admin.describe_cluster(include_authorized_operations=True).result(30).authorized_operations == [
        Op.DESCRIBE]
    c = Consumer({"bootstrap.servers": node.kafka_bootstrap, "group.id": "ops-group"})
    try:
        c.commit(offsets=[TopicPartition("ops-topic", 0, 0)], asynchronous=False)  # the group now exists
    finally:
        c.close()
    group = admin.describe_consumer_groups(["ops-group"], include_authorized_operations=True)["ops-group"].result(30)
    assert set(group.authorized_operations) == {Op.READ, Op.DESCRIBE, Op.DELETE}


def test_admin_apis_need_their_operations(node: CombinedNode, kafka_principal: dict[str, str]) -> None:
    """DeleteRecords DELETE on the topic, DescribeProducers READ on it, OffsetDelete DELETE on
    the group, DescribeLogDirs DESCRIBE on the cluster and AlterReplicaLogDirs ALTER on it (Kafka's), with
    kafka-python."""
    import asyncio

    import kafka.errors as Errors
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP

    from brokerd import authorization
    from brokerd.requests import (AlterReplicaLogDir, AlterReplicaLogDirsRequest, AlterReplicaLogDirsTopic,
                                  DescribeLogDirsRequest)
    from metadata.authorizer import Access
    from tests.eventually import eventually
    kafka_principal["principal"] = "User:rita"
    grant(node, AclResourceType.TOPIC, "a-orders", O.DESCRIBE, principal="User:rita")  # to find the leader
    grant(node, AclResourceType.GROUP, "rita-group", O.DESCRIBE, principal="User:rita")  # to find the coordinator
    tp = KTP("a-orders", 0)
    admin = KafkaAdminClient(bootstrap_servers=node.kafka_bootstrap, request_timeout_ms=5000)
    try:
        with pytest.raises(Errors.TopicAuthorizationFailedError):
            admin.delete_records({tp: 0})
        with pytest.raises(Errors.TopicAuthorizationFailedError):
            admin.describe_producers([tp])

        def group_refused() -> bool:
            try:
                admin.delete_group_offsets("rita-group", [tp])
            except Errors.GroupAuthorizationFailedError:
                return True
            except Errors.CoordinatorNotAvailableError:  # __consumer_offsets is still being created
                return False
            raise AssertionError("OffsetDelete without DELETE on the group was not refused")
        asyncio.run(eventually(group_refused, 30, interval=0.2, what="OffsetDelete refused"))
        grant(node, AclResourceType.TOPIC, "a-orders", O.DELETE, O.READ, principal="User:rita")
        assert admin.delete_records({tp: 0})[tp]["low_watermark"] == 0
        assert admin.describe_producers([tp])[tp].active_producers == []
    finally:
        admin.close()
    assert node.broker is not None
    rita = Access(node.broker.authorizer, Session("User:rita", "127.0.0.1"))
    refused = authorization.describe_log_dirs(node.broker.rm, DescribeLogDirsRequest(), rita)
    assert (ErrorCode(refused.error_code), refused.log_dirs) == (CLUSTER_DENIED, [])
    # AlterReplicaLogDirs: ALTER on the cluster, each partition refused without it
    move = AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDir(path=str(node.broker.cfg.log_dirs[0]), topics=[
        AlterReplicaLogDirsTopic(name="a-orders", partitions=[0])])])
    [t] = authorization.alter_replica_log_dirs(node.broker.rm, move, rita).topics
    assert [(p.partition, ErrorCode(p.error_code)) for p in t.partitions] == [(0, CLUSTER_DENIED)]
