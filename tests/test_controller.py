"""The controller's behaviour through its RPCs: topics, placement, every error code, the
broker lifecycle, AlterPartition, FetchMetadata and snapshot reproduction."""
import asyncio
import io
import uuid

import grpc

from common.errors import ErrorCode as E
from protos import controller_pb2 as pb
from protos import controller_pb2_grpc
from tests.controllers import InProcessQuorum, TestBroker, start_brokers
from tests.eventually import eventually


def run(coro):
    return asyncio.run(coro)


def topic(name, partitions=-1, rf=-1, configs=None, assignment=None):
    t = pb.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf, configs=configs or {})
    for p, reps in enumerate(assignment or []):
        t.assignments.add(partition=p, replicas=reps)
    return t


async def create(c, *topics, validate_only=False):
    r = await c.create_topics(pb.CreateTopicsRequest(topics=list(topics), validate_only=validate_only))
    return [(t.name, E(t.error_code), t.error_message) for t in r.topics]


async def describe(c, *names):
    r = await c.describe_topics(pb.DescribeTopicsRequest(names=list(names)))
    return {t.name: t for t in r.topics}


def test_topics_placement_and_every_create_error(tmp_path):
    async def go():
        q = InProcessQuorum(tmp_path)
        await q.start()
        brokers = await start_brokers(q, [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")])
        c = q.client()
        # placement: distinct brokers, spread across racks, leaders balanced
        assert await create(c, topic("orders", 12, 3)) == [("orders", E.NONE, "")]
        t = (await describe(c, "orders"))["orders"]
        rack = {b: "abc"[(b - 1) // 2] for b in range(1, 7)}
        for p in t.partitions:
            assert len(set(p.replicas)) == 3
            assert len({rack[b] for b in p.replicas}) == 3, list(p.replicas)
            assert p.leader == p.replicas[0] and list(p.isr) == list(p.replicas)
        leaders = [p.leader for p in t.partitions]
        assert max(leaders.count(b) for b in range(1, 7)) == 2  # 12 leaders over 6 brokers
        # defaults, configs, explicit assignment, validate-only
        assert (await create(c, topic("one")))[0][1] == E.NONE
        assert len((await describe(c, "one"))["one"].partitions) == 1
        assert (await create(c, topic("cfg", 1, 1, {"retention.ms": "1000", "cleanup.policy": "compact"})))[0][1] == E.NONE
        assert dict((await describe(c, "cfg"))["cfg"].configs) == {"retention.ms": "1000", "cleanup.policy": "compact"}
        assert (await create(c, topic("manual", assignment=[[1, 2], [3, 4]])))[0][1] == E.NONE
        assert [list(p.replicas) for p in (await describe(c, "manual"))["manual"].partitions] == [[1, 2], [3, 4]]
        assert (await create(c, topic("dry", 3, 3), validate_only=True))[0][1] == E.NONE
        assert (await describe(c, "dry"))["dry"].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        # every error, each with Kafka's code
        cases = [
            (topic("orders", 1, 1), E.TOPIC_ALREADY_EXISTS, "already exists"),
            (topic("bad name", 1, 1), E.INVALID_TOPIC_EXCEPTION, "illegal"),
            (topic(".", 1, 1), E.INVALID_TOPIC_EXCEPTION, "cannot be"),
            (topic("x" * 250, 1, 1), E.INVALID_TOPIC_EXCEPTION, "249"),
            (topic("orders_also", 1, 1), E.NONE, ""),
            (topic("orders.also", 1, 1), E.INVALID_TOPIC_EXCEPTION, "collides"),
            (topic("zero", 0, 1), E.INVALID_PARTITIONS, "non-positive"),
            (topic("toomany", 1, 7), E.INVALID_REPLICATION_FACTOR, "only 6 broker"),
            (topic("norep", 1, 0), E.INVALID_REPLICATION_FACTOR, "larger than 0"),
            (topic("dupbroker", assignment=[[1, 1]]), E.INVALID_REPLICA_ASSIGNMENT, "more than once"),
            (topic("unknown", assignment=[[1, 99]]), E.INVALID_REPLICA_ASSIGNMENT, "99"),
            (topic("ragged", assignment=[[1, 2], [3]]), E.INVALID_REPLICA_ASSIGNMENT, ""),
            (topic("cfgkey", 1, 1, {"no.such.key": "1"}), E.INVALID_CONFIG, "Unknown topic config name"),
            (topic("cfgval", 1, 1, {"retention.ms": "soon"}), E.INVALID_CONFIG, "not an integer"),
        ]
        for t_, code, text in cases:
            (name, got, msg), = await create(c, t_)
            assert got == code and text in msg, (t_.name, got, msg)
        # CreatePartitions only grows; DeleteTopics of unknown topics
        r = await c.create_partitions(pb.CreatePartitionsRequest(topics=[
            pb.CreatePartitionsRequest.Topic(name="orders", count=6),
            pb.CreatePartitionsRequest.Topic(name="one", count=3),
            pb.CreatePartitionsRequest.Topic(name="nope", count=3)]))
        assert [E(t.error_code) for t in r.topics] == [E.INVALID_PARTITIONS, E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION]
        assert len((await describe(c, "one"))["one"].partitions) == 3
        r = await c.delete_topics(pb.DeleteTopicsRequest(names=["manual", "missing"]))
        assert [E(t.error_code) for t in r.topics] == [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION]
        assert (await describe(c, "manual"))["manual"].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        # configs: alter and describe
        r = await c.incremental_alter_configs(pb.IncrementalAlterConfigsRequest(resources=[
            pb.AlterConfigsResource(resource_type=pb.TOPIC, resource_name="orders",
                                    configs=[pb.AlterableConfig(name="min.insync.replicas", value="2")]),
            pb.AlterConfigsResource(resource_type=pb.TOPIC, resource_name="orders",
                                    configs=[pb.AlterableConfig(name="min.insync.replicas", value="0")]),
            pb.AlterConfigsResource(resource_type=pb.TOPIC, resource_name="ghost",
                                    configs=[pb.AlterableConfig(name="retention.ms", value="1")])]))
        assert [E(x.error_code) for x in r.resources] == [E.NONE, E.INVALID_CONFIG, E.UNKNOWN_TOPIC_OR_PARTITION]
        r = await c.describe_configs(pb.DescribeConfigsRequest(resources=[
            pb.AlterConfigsResource(resource_type=pb.TOPIC, resource_name="orders")]))
        got = {e.name: (e.value, e.is_default) for e in r.resources[0].configs}
        assert got["min.insync.replicas"] == ("2", False) and got["retention.ms"] == ("604800000", True)
        # a standby answers NOT_CONTROLLER with the active controller's id and endpoint
        active = await q.active()
        standby = next(s for i, s in q.servers.items() if s is not active)
        async with grpc.aio.insecure_channel(standby.node.address) as ch:
            r = await controller_pb2_grpc.ControllerStub(ch).CreateTopics(
                pb.CreateTopicsRequest(topics=[topic("via-standby", 1, 1)]))
        assert E(r.status.error_code) == E.NOT_CONTROLLER
        assert r.status.controller_id == active.node.id and r.status.controller_endpoint == active.node.address
        # producer ids are never handed out twice
        b1 = brokers[0].lifecycle
        blocks = [await c.allocate_producer_ids(pb.AllocateProducerIdsRequest(broker_id=1, broker_epoch=b1.epoch))
                  for _ in range(3)]
        starts = [b.producer_id_start for b in blocks]
        assert starts == sorted(set(starts)) and all(b.producer_id_len == 1000 for b in blocks)
        assert starts[1] - starts[0] == 1000
        for b in brokers:
            await b.stop()
        await c.close()
        await q.stop()
    run(go())


def test_broker_lifecycle_fencing_and_alter_partition(tmp_path):
    async def go():
        q = InProcessQuorum(tmp_path)
        await q.start()
        brokers = await start_brokers(q, [(1, ""), (2, ""), (3, "")])
        c = q.client()
        assert (await create(c, topic("t", 3, 3)))[0][1] == E.NONE
        # registration errors
        def reg(**kw):
            return c.broker_registration(pb.BrokerRegistrationRequest(**{
                "broker_id": 1, "cluster_id": q.cluster_id, "incarnation_id": uuid.uuid4().bytes, **kw}))
        assert E((await reg(cluster_id="someone-else")).error_code) == E.INCONSISTENT_CLUSTER_ID
        assert E((await reg()).error_code) == E.DUPLICATE_BROKER_REGISTRATION  # broker 1 is alive
        def hb(bid, epoch):
            return c.broker_heartbeat(pb.BrokerHeartbeatRequest(
                broker_id=bid, broker_epoch=epoch, current_metadata_offset=10**6))
        assert E((await hb(1, brokers[0].lifecycle.epoch - 1)).error_code) == E.STALE_BROKER_EPOCH
        future = await hb(1, brokers[0].lifecycle.epoch + 1000)
        assert E(future.error_code) == E.STALE_BROKER_EPOCH and "was never issued" in future.error_message
        deleted = await c.delete_topics(pb.DeleteTopicsRequest(names=[""]))
        assert deleted.topics[0].error_message == "This server does not host this topic: no name or id was given"
        assert E((await hb(42, 1)).error_code) == E.BROKER_ID_NOT_REGISTERED
        # AlterPartition: the leader shrinks its ISR; stale epochs and outsiders are refused
        t = (await describe(c, "t"))["t"]
        p0 = t.partitions[0]
        leader = p0.leader
        epoch = next(b.lifecycle.epoch for b in brokers if b.lifecycle.broker_id == leader)
        follower = [r for r in p0.replicas if r != leader][0]
        def alter(**kw):
            return c.alter_partition(pb.AlterPartitionRequest(**{
                "broker_id": leader, "broker_epoch": epoch, "topic_id": t.topic_id, "partition": 0,
                "leader_epoch": p0.leader_epoch, "partition_epoch": p0.partition_epoch,
                "new_isr": [r for r in p0.isr if r != follower], **kw}))
        r = await alter()
        assert E(r.error_code) == E.NONE and follower not in r.isr and r.partition_epoch == p0.partition_epoch + 1
        assert E((await alter()).error_code) == E.INVALID_UPDATE_VERSION  # the old partition epoch
        assert E((await alter(leader_epoch=p0.leader_epoch - 1)).error_code) == E.FENCED_LEADER_EPOCH
        assert E((await alter(broker_id=follower, broker_epoch=next(
            b.lifecycle.epoch for b in brokers if b.lifecycle.broker_id == follower))).error_code) == E.NOT_LEADER_OR_FOLLOWER
        assert E((await alter(broker_epoch=epoch - 1)).error_code) == E.STALE_BROKER_EPOCH
        # a broker that goes silent is fenced; its partitions are re-led from the ISR
        victim = brokers[1]
        vid = victim.lifecycle.broker_id
        led = [p.partition for p in (await describe(c, "t"))["t"].partitions if p.leader == vid]
        victim.lifecycle.go_silent()

        async def victim_fenced() -> bool:  # broker.session.timeout.ms is 2000 here
            cl = await c.describe_cluster(pb.DescribeClusterRequest())
            return {b.id: b.fenced for b in cl.brokers}[vid]
        await eventually(victim_fenced, 10)
        after = (await describe(c, "t"))["t"]
        assert led
        for p in after.partitions:
            assert vid not in p.isr and p.leader != vid and p.leader in p.isr
            if p.partition in led:
                assert p.leader_epoch > 0
        cl = await c.describe_cluster(pb.DescribeClusterRequest())
        assert {b.id: b.fenced for b in cl.brokers}[vid] is True
        # a fenced broker cannot join an ISR
        p = after.partitions[0]
        lead_epoch = next(b.lifecycle.epoch for b in brokers if b.lifecycle.broker_id == p.leader)
        r = await c.alter_partition(pb.AlterPartitionRequest(
            broker_id=p.leader, broker_epoch=lead_epoch, topic_id=t.topic_id, partition=0,
            leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch, new_isr=[*p.isr, vid]))
        assert E(r.error_code) == E.INELIGIBLE_REPLICA
        # it registers again (a new incarnation, a higher epoch) and is unfenced once caught up
        old_epoch = victim.lifecycle.epoch
        await victim.stop()
        back = await TestBroker(q.bootstrap, q.cluster_id, vid).start()
        assert back.lifecycle.epoch > old_epoch
        assert E((await hb(vid, old_epoch)).error_code) == E.STALE_BROKER_EPOCH  # the stale incarnation
        # controlled shutdown moves leadership away first
        leader_b = next(b for b in brokers if b.lifecycle.broker_id == after.partitions[0].leader)
        assert await leader_b.lifecycle.controlled_shutdown(timeout=10)
        final = (await describe(c, "t"))["t"]
        assert all(p.leader != leader_b.lifecycle.broker_id for p in final.partitions)
        for b in (brokers[0], brokers[2], back):
            await b.stop()
        await c.close()
        await q.stop()
    run(go())


def test_fetch_metadata_from_zero_middle_and_before_the_log_start(tmp_path):
    async def go():
        q = InProcessQuorum(tmp_path, **{"metadata.log.max.records.between.snapshots": "20",
                                         "metadata.log.snapshot.trailing.records": "0"})
        await q.start()
        brokers = await start_brokers(q, [(1, "")])
        c = q.client()
        early = await c.fetch_metadata(pb.FetchMetadataRequest(offset=1, broker_id=-1))
        assert E(early.error_code) == E.NONE and early.batches[0].offset == 1
        for i in range(40):
            await create(c, topic(f"t{i}", 1, 1))

        async def compacted():  # snapshots happen in the background
            r = await c.fetch_metadata(pb.FetchMetadataRequest(offset=1, broker_id=-1))
            return r if E(r.error_code) == E.OFFSET_OUT_OF_RANGE and r.snapshot_offset >= 20 else None
        r = await eventually(compacted, 10)
        assert r.log_start_offset == r.snapshot_offset + 1
        mid = await c.fetch_metadata(pb.FetchMetadataRequest(offset=r.log_start_offset, broker_id=-1))
        assert E(mid.error_code) == E.NONE and mid.batches[0].offset == r.log_start_offset
        assert mid.batches[-1].offset == mid.high_watermark - 1
        # a new broker starting from zero falls back to the snapshot, then follows the log
        late = await TestBroker(q.bootstrap, q.cluster_id, 2).start()
        assert late.fetcher.snapshots_loaded == 1
        await late.fetcher.wait_caught_up(10)
        active = await q.active()
        assert set(late.fetcher.image.topics_by_name.keys()) == set(active.sm.image.topics_by_name.keys())
        assert len(late.fetcher.image.topics_by_name) == 40
        # DescribeQuorum shows both brokers as observers
        dq = await c.describe_quorum(pb.DescribeQuorumRequest())
        assert {o.replica_id for o in dq.observers} >= {1, 2} and len(dq.voters) == 3
        for b in (*brokers, late):
            await b.stop()
        await c.close()
        await q.stop()
    run(go())


def test_restart_from_snapshot_and_log_reproduces_the_image_byte_for_byte(tmp_path):
    async def go():
        q = InProcessQuorum(tmp_path, **{"metadata.log.max.records.between.snapshots": "15"})
        await q.start()
        brokers = await start_brokers(q, [(1, "r1"), (2, "r2")])
        c = q.client()
        for i in range(30):
            await create(c, topic(f"t{i}", 2, 2, {"retention.ms": str(1000 + i)} if i % 3 else None))
        await c.delete_topics(pb.DeleteTopicsRequest(names=["t3", "t7"]))
        last = (await q.active()).sm.image.offset
        await eventually(lambda: all(s.sm.image.offset >= last and s.node.snapshot_index > 0
                                     for s in q.servers.values()), 10, what="every controller applied and snapshotted")
        for b in brokers:
            await b.stop()

        async def quiet() -> bool:
            """The stopped brokers fenced (the controller's last write, once their sessions
            expire) and applied by every controller: nothing is written after the images taken
            below, before or after the restart."""
            image = (await q.active()).sm.image
            return all(image.brokers[b.lifecycle.broker_id].fenced for b in brokers) and \
                all(s.sm.image.offset == image.offset for s in q.servers.values())
        await eventually(quiet, 10, what="the stopped brokers fenced on every controller")
        before = {}
        for nid, s in q.servers.items():
            buf = io.BytesIO()
            s.sm.snapshot()(buf)
            before[nid] = (s.sm.image.offset, buf.getvalue())
        assert len({v for v in before.values()}) == 1  # every controller holds the same image
        await c.close()
        await q.stop()
        await q.start()  # from each directory's snapshot plus the log after it
        for nid, s in q.servers.items():
            assert s.node.snapshot_index > 0
            await eventually(lambda s=s, nid=nid: s.sm.image.offset >= before[nid][0], 10)
            buf = io.BytesIO()
            s.sm.snapshot()(buf)
            assert buf.getvalue() == before[nid][1], f"controller {nid} rebuilt a different image"
        await q.stop()
    run(go())
