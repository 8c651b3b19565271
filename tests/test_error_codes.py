"""One source of error codes for every wire, and messages that stay short whatever a request
names (issue 25 item 8): the controller's gRPC enum is common.errors.ErrorCode, and an 8 MiB
topic name is echoed once (in the result's name), never again in its message."""
import asyncio

from common.errors import MAX_MESSAGE_CHARS, ErrorCode, KafkaError, capped
from metadata.client import ControllerClient
from protos import controller_pb2 as pb
from tests.controllers import InProcessQuorum
from tests.test_controller import topic

BIG = "x" * (8 << 20)


def test_the_controllers_wire_enum_is_the_one_enum():
    wire = {v.name: v.number for v in pb.DESCRIPTOR.enum_types_by_name["ErrorCode"].values}
    assert wire == {e.name: e.value for e in ErrorCode}


def test_a_long_message_keeps_its_start_and_its_reason():
    assert capped("short") == "short"
    m = capped(f'Topic name "{BIG}" is illegal, it contains a character other than ASCII alphanumerics')
    assert len(m) <= MAX_MESSAGE_CHARS
    assert m.startswith('Topic name "xxx') and m.endswith("is illegal, it contains a character other than "
                                                          "ASCII alphanumerics")
    assert "characters left out)" in m
    assert len(KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, BIG).message) <= MAX_MESSAGE_CHARS


def test_an_8_mib_topic_name_is_echoed_once(tmp_path):
    requests = [
        (ControllerClient.create_topics, pb.CreateTopicsRequest(topics=[topic(BIG, 1, 1)]), "topics"),
        (ControllerClient.create_topics, pb.CreateTopicsRequest(topics=[topic(BIG + " ", 1, 1)]), "topics"),
        (ControllerClient.describe_topics, pb.DescribeTopicsRequest(names=[BIG]), "topics"),
        (ControllerClient.delete_topics, pb.DeleteTopicsRequest(names=[BIG]), "topics"),
        (ControllerClient.create_partitions, pb.CreatePartitionsRequest(topics=[pb.CreatePartitionsRequest.Topic(name=BIG, count=2)]),
         "topics"),
        (ControllerClient.incremental_alter_configs, pb.IncrementalAlterConfigsRequest(resources=[pb.AlterConfigsResource(
            resource_type=pb.TOPIC, resource_name=BIG, configs=[pb.AlterableConfig(name="retention.ms", value="1")])]),
         "resources"),
        (ControllerClient.describe_configs, pb.DescribeConfigsRequest(resources=[pb.AlterConfigsResource(
            resource_type=pb.TOPIC, resource_name=BIG)]), "resources"),
    ]

    async def go():
        q = InProcessQuorum(tmp_path)
        await q.start()
        c = q.client(timeout=30)
        try:
            for rpc, request, items in requests:
                method = rpc.name
                r = await c.send(rpc, request)
                item, = getattr(r, items)
                assert item.error_code != ErrorCode.NONE, (method, item.error_message)
                assert 0 < len(item.error_message) <= MAX_MESSAGE_CHARS, method
                assert r.ByteSize() < (8 << 20) + 4096, (method, r.ByteSize())  # the name once, and little else
        finally:
            await c.close()
            await q.stop()
    asyncio.run(go())


def test_one_exception_class_carries_a_kafka_error_code():
    """The controller's rules, the brokers, the controller client and the clients raise one class
    (issue 26 item 3): no other class in the tree keeps a ``code`` of its own."""
    import ast
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    own_code = []
    for top in ("common", "raft", "clients", "metadata", "brokerd", "kraft"):
        for path in (root / top).rglob("*.py"):
            if "_pb2" in path.name:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and any(
                        isinstance(t, ast.Attribute) and t.attr == "code" and isinstance(t.value, ast.Name)
                        and t.value.id == "self" for n in ast.walk(node) if isinstance(n, ast.Assign)
                        for t in n.targets):
                    own_code.append(f"{path.relative_to(root)}:{node.name}")
    assert own_code == ["common/errors.py:KafkaError"]


def test_kafka_error_says_its_code_and_message_and_whether_to_retry():
    from metadata.client import QuorumUnreachable
    assert str(KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'orders' already exists.")) == \
        "TOPIC_ALREADY_EXISTS: Topic 'orders' already exists."
    assert str(KafkaError(ErrorCode.NOT_COORDINATOR)) == "NOT_COORDINATOR: This is not the correct coordinator."
    assert str(KafkaError(ErrorCode.NOT_CONTROLLER, "")) == "NOT_CONTROLLER"
    # Kafka's RetriableException subclasses, and two ApiExceptions that are not
    assert all(KafkaError(c).retriable for c in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT,
                                                 ErrorCode.NOT_CONTROLLER, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                                 ErrorCode.THROTTLING_QUOTA_EXCEEDED))
    assert not any(KafkaError(c).retriable for c in (ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.INVALID_CONFIG))
    unreachable = QuorumUnreachable("the controller quorum at h:1 did not answer")
    assert isinstance(unreachable, KafkaError) and unreachable.retriable
    assert str(unreachable) == "REQUEST_TIMED_OUT: the controller quorum at h:1 did not answer"


def test_one_config_exception_for_servers_tools_and_clients():
    import pytest

    from clients.producer import Producer
    from common.config_def import ConfigError
    with pytest.raises(ConfigError, match="Invalid value 7 for configuration acks"):
        Producer("127.0.0.1:1", acks="7")
