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
from metadata.image import ConfigResource, ResourceType
from metadata.operations import (BROKER_LOGGER, BrokerRegistrationRequest, ConfigChange, ControllerOperations, Listener,
                                 NewPartitions)
from metadata.principal import Session
from metadata.topics import ConfigOp, NewTopic
from tests.controllers import InProcessQuorum
from tests.eventually import eventually

ANYONE = Session("User:alice", "127.0.0.1")


async def unfenced_broker(ops: ControllerOperations, allowed: Access, q: InProcessQuorum) -> int:
    """Broker 1 registered and heartbeating until unfenced; its epoch."""
    server = await q.active()
    registered = await ops.register_broker(allowed, BrokerRegistrationRequest(
        1, uuid.uuid4(), q.cluster_id, (Listener("PLAINTEXT", "127.0.0.1", 9092),), None))
    epoch = registered.value
    assert registered.error is None and isinstance(epoch, int)

    async def unfenced() -> bool:
        hb = await ops.broker_heartbeat(allowed, Heartbeat(1, epoch, server.sm.image.offset))
        assert hb.error is None and hb.value is not None, hb.error
        return not hb.value.is_fenced
    await eventually(unfenced, what="broker 1 unfenced")
    return epoch


def test_operations_without_grpc(tmp_path):
    async def go() -> None:
        q = InProcessQuorum(tmp_path, n=1)
        await q.start()
        try:
            server = await q.active()
            ops = ControllerOperations(server.controller)  # no authorizer: everything allowed
            allowed = Access(None, ANYONE)
            # a broker registers and is unfenced once caught up
            epoch = await unfenced_broker(ops, allowed, q)
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


def test_alter_configs_replaces_the_whole_set_per_resource(tmp_path):
    """AlterConfigs (API 33) is IncrementalAlterConfigs' operation with ``replace``: the keys
    not given return to their defaults; each resource is authorized and refused alone; a dry
    run writes nothing; BROKER_LOGGER is refused as unsupported (issue 27)."""
    async def go() -> None:
        q = InProcessQuorum(tmp_path, n=1)
        await q.start()
        try:
            server = await q.active()
            ops = ControllerOperations(server.controller)
            allowed = Access(None, ANYONE)
            await unfenced_broker(ops, allowed, q)
            assert [r.error for r in await ops.create_topics(allowed, [
                NewTopic("legacy", 1, 1, configs={"retention.ms": "1000", "flush.ms": "5"}),
                NewTopic("other", 1, 1)])] == [None, None]

            def configs(name: str) -> dict[str, str]:
                return dict(server.sm.image.config(ConfigResource(ResourceType.TOPIC, name)))

            def change(name: str, rtype: int = ResourceType.TOPIC, **kv: str) -> ConfigChange:
                return ConfigChange(rtype, name, [ConfigOp(k.replace("_", "."), value=v) for k, v in kv.items()],
                                    replace=True)

            [dry] = await ops.incremental_alter_configs(allowed, [change("legacy", cleanup_policy="compact")],
                                                        validate_only=True)
            assert dry.error is None and configs("legacy") == {"retention.ms": "1000", "flush.ms": "5"}
            good, bad, unknown, logger = await ops.incremental_alter_configs(allowed, [
                change("legacy", cleanup_policy="compact", flush_ms="7"), change("other", flush_ms="-1"),
                change("nowhere", flush_ms="1"), change("101", rtype=BROKER_LOGGER, root="DEBUG")])
            assert good.error is None and configs("legacy") == {"cleanup.policy": "compact", "flush.ms": "7"}
            assert bad.error is not None and bad.error.code == ErrorCode.INVALID_CONFIG and configs("other") == {}
            assert unknown.error is not None and unknown.error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert logger.error is not None and logger.error.code == ErrorCode.INVALID_REQUEST
            assert "BROKER_LOGGER" in logger.error.message
            [cleared] = await ops.incremental_alter_configs(allowed, [change("legacy")])
            assert cleared.error is None and configs("legacy") == {}

            # ALTER_CONFIGS on the topic, and on the cluster for brokers' configs
            deny = Access(StandardAuthorizer(lambda: server.sm.image.acls), ANYONE)
            topic, broker = await ops.incremental_alter_configs(deny, [
                change("other", retention_ms="1"), change("", rtype=ResourceType.BROKER, log_retention_ms="1")])
            assert topic.error is not None and topic.error.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            assert broker.error is not None and broker.error.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            assert configs("other") == {}
        finally:
            await q.stop()
    asyncio.run(go())
