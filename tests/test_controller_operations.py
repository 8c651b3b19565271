"""The controller's typed operations (metadata/operations.py) called directly, without gRPC:
Kafka's ControllerResult semantics (a response with a typed error per item, a refusal of the
whole request raised) and authorization decided by the operation from the caller's Access."""
from __future__ import annotations

import asyncio
import uuid

import pytest

from metadata.acls import AclBindingFilter, AclOperation
from metadata.authorizer import Access, StandardAuthorizer
from metadata.brokers import Heartbeat
from common.errors import ErrorCode, KafkaError
from metadata.operations import BrokerRegistrationRequest, ControllerOperations, Listener, NewPartitions
from metadata.principal import Session
from metadata.topics import NewTopic
from tests.controllers import InProcessQuorum
from tests.eventually import eventually

ANYONE = Session("User:alice", "127.0.0.1")


def test_operations_without_grpc(tmp_path):
    async def go() -> None:
        q = InProcessQuorum(tmp_path, n=1)
        await q.start()
        try:
            server = await q.active()
            ops = ControllerOperations(server.controller)  # no authorizer: everything allowed
            allowed = Access(None, ANYONE)
            # a broker registers and is unfenced once caught up
            registered = await ops.register_broker(allowed, BrokerRegistrationRequest(
                1, uuid.uuid4(), q.cluster_id, (Listener("PLAINTEXT", "127.0.0.1", 9092),), None))
            epoch = registered.value
            assert registered.error is None and isinstance(epoch, int)

            async def unfenced() -> bool:
                hb = await ops.broker_heartbeat(allowed, Heartbeat(1, epoch, server.sm.image.offset))
                assert hb.error is None and hb.value is not None, hb.error
                return not hb.value.is_fenced
            await eventually(unfenced, what="broker 1 unfenced")
            wrong = await ops.broker_heartbeat(allowed, Heartbeat(1, epoch + 1, 0))
            assert wrong.error is not None and wrong.error.code == ErrorCode.STALE_BROKER_EPOCH

            # create: per-item results, a typed error for the item refused
            [dry] = await ops.create_topics(allowed, [NewTopic("orders", 3, 1)], validate_only=True)
            assert dry.error is None and "orders" not in server.sm.image.topics_by_name
            [made, bad] = await ops.create_topics(allowed, [NewTopic("orders", 3, 1), NewTopic("bad name", 1, 1)])
            assert made.error is None and made.topic_id is not None and made.partitions == 3
            assert bad.error is not None and bad.error.code == ErrorCode.INVALID_TOPIC_EXCEPTION
            [again] = await ops.create_topics(allowed, [NewTopic("orders", 1, 1)])
            assert again.error is not None and again.error.code == ErrorCode.TOPIC_ALREADY_EXISTS
            [grown] = await ops.create_partitions(allowed, [NewPartitions("orders", 5)])
            assert grown.error is None
            described = await ops.describe_topics(allowed, ["orders", "nowhere"])
            orders, nowhere = described.topics
            assert orders.topic is not None and len(orders.topic.partitions) == 5 and described.live == {1}
            assert nowhere.topic is None and nowhere.error is not None
            assert nowhere.error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            cluster = await ops.describe_cluster(allowed)
            assert [b.id for b in cluster.brokers] == [1] and cluster.cluster_id == q.cluster_id
            block = await ops.allocate_producer_ids(allowed, 1, epoch)
            assert block.error is None and block.length > 0

            # a refusal of the whole request is raised, before anything is written
            with pytest.raises(KafkaError) as e:
                await ops.delete_topics(allowed, [], [None])
            assert e.value.code == ErrorCode.INVALID_REQUEST
            with pytest.raises(KafkaError) as e:
                await ops.describe_acls(allowed, AclBindingFilter())
            assert e.value.code == ErrorCode.SECURITY_DISABLED

            # authorization is the operation's: with an authorizer and no ACLs, alice may do nothing
            deny = Access(StandardAuthorizer(lambda: server.sm.image.acls), ANYONE)
            [refused] = await ops.create_topics(deny, [NewTopic("hers", 1, 1)])
            assert refused.error is not None and refused.error.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            assert "hers" not in server.sm.image.topics_by_name
            assert (await ops.describe_topics(deny, [])).topics == []  # a listing hides what she may not see
            with pytest.raises(KafkaError) as e:
                await ops.describe_cluster(deny)
            assert e.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            assert not Access(StandardAuthorizer(lambda: server.sm.image.acls), ANYONE).cluster(AclOperation.ALTER)

            [deleted] = await ops.delete_topics(allowed, ["orders"], [])
            assert deleted.error is None and "orders" not in server.sm.image.topics_by_name
        finally:
            await q.stop()
    asyncio.run(go())
