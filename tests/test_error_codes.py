"""One source of error codes for every wire, and messages that stay short whatever a request
names (issue 25 item 8): the controller's gRPC enum is clients.errors.ErrorCode, and an 8 MiB
topic name is echoed once (in the result's name), never again in its message."""
import asyncio

from clients.errors import MAX_MESSAGE_CHARS, BrokerError, ErrorCode, capped
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
    assert len(BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, BIG).message) <= MAX_MESSAGE_CHARS


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
