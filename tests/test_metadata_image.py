"""The metadata image and MetadataDelta: every record's effect, what a delta reports as
changed, immutability of the images it leaves behind, and refusing a corrupt log."""
from __future__ import annotations

import uuid
from dataclasses import FrozenInstanceError

import pytest
from immutables import Map

from metadata import records as R
from metadata.delta import MetadataDelta, TopicIdPartition, changes_between
from metadata.image import (BrokerRegistration, ConfigResource, Endpoint, MetadataImage,
                            PartitionRegistration, ResourceType, SecurityProtocol)
from metadata.records import NO_LEADER, RecordError

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
T3 = uuid.UUID(int=3)
INC = uuid.UUID(int=0xB0)
TOPIC_CFG = ConfigResource(ResourceType.TOPIC, "orders")


def apply(image: MetadataImage, *batches: list) -> MetadataImage:
    """Replay each batch as one Raft entry after the image's offset, and apply."""
    d = MetadataDelta(image)
    for i, batch in enumerate(batches):
        d.replay_batch(batch, image.offset + 1 + i, max(image.epoch, 1))
    return d.apply()


def delta_of(image: MetadataImage, *batches: list) -> MetadataDelta:
    d = MetadataDelta(image)
    for i, batch in enumerate(batches):
        d.replay_batch(batch, image.offset + 1 + i, max(image.epoch, 1))
    return d


@pytest.fixture
def cluster() -> MetadataImage:
    """Three unfenced brokers; topic orders (T1) with 3 partitions; topic audit (T2) with 1."""
    return apply(
        MetadataImage.empty("cluster-1"),
        [R.feature_level("metadata.version", 1)]
        + [R.register_broker(b, uuid.UUID(int=b), 10 + b, [R.endpoint("PLAINTEXT", f"b{b}", 9092)],
                             rack=f"r{b}", fenced=False) for b in (1, 2, 3)],
        [R.topic("orders", T1)] + [R.partition(T1, p, [1, 2, 3][p:] + [1, 2, 3][:p])
                                   for p in range(3)]
        + [R.config(ResourceType.TOPIC, "orders", "retention.ms", "1000")],
        [R.topic("audit", T2), R.partition(T2, 0, [2, 3])],
    )


def test_empty_image() -> None:
    img = MetadataImage.empty("c")
    assert (img.cluster_id, img.offset, img.epoch, img.next_producer_id) == ("c", 0, 0, 0)
    assert len(img.brokers) == len(img.topics_by_id) == len(img.configs) == 0
    assert img.metadata_version == 0 and img.partition_count() == 0
    assert img.topic("x") is None and img.partition(T1, 0) is None


def test_register_broker_and_reregistration_replaces(cluster: MetadataImage) -> None:
    b = cluster.brokers[1]
    assert b == BrokerRegistration(1, uuid.UUID(int=1), 11,
                                   (Endpoint("PLAINTEXT", "b1", 9092, SecurityProtocol.PLAINTEXT),),
                                   "r1", False, False)
    img = apply(cluster, [R.register_broker(1, INC, 99, [R.endpoint("SSL", "new", 1, 1)])])
    assert img.brokers[1] == BrokerRegistration(
        1, INC, 99, (Endpoint("SSL", "new", 1, SecurityProtocol.SSL),), None, True, False)
    assert cluster.brokers[1] is b  # the old image still has the old registration


def test_fence_unfence_and_registration_change(cluster: MetadataImage) -> None:
    img = apply(cluster, [R.fence_broker(1, 11)])
    assert img.brokers[1].fenced and not cluster.brokers[1].fenced
    img = apply(img, [R.unfence_broker(1, 11)])
    assert not img.brokers[1].fenced
    img = apply(img, [R.broker_registration_change(1, 11, in_controlled_shutdown=True)])
    assert img.brokers[1].in_controlled_shutdown and not img.brokers[1].fenced
    img = apply(img, [R.broker_registration_change(1, 11, fenced=True)])
    assert img.brokers[1].fenced and img.brokers[1].in_controlled_shutdown
    img = apply(img, [R.broker_registration_change(1, 11)])  # nothing given: nothing changes
    assert img.brokers[1].fenced and img.brokers[1].in_controlled_shutdown


@pytest.mark.parametrize("record, message", [
    (R.fence_broker(9, 1), "FenceBrokerRecord at offset 4: cannot fence broker 9: it is not "
                           "registered"),
    (R.unfence_broker(1, 10), "UnfenceBrokerRecord at offset 4: cannot unfence broker 1: its "
                              "registration has epoch 11, not 10"),
    (R.broker_registration_change(2, 1), "cannot change broker 2: its registration has epoch "
                                         "12, not 1"),
    (R.unregister_broker(1, 12), "cannot unregister broker 1: its registration has epoch 11"),
    (R.unregister_broker(5, 12), "cannot unregister broker 5: it is not registered"),
])
def test_records_about_unknown_or_stale_brokers_are_refused(cluster: MetadataImage, record,
                                                            message: str) -> None:
    with pytest.raises(RecordError, match=message):
        apply(cluster, [record])


def test_unregister_broker(cluster: MetadataImage) -> None:
    d = delta_of(cluster, [R.unregister_broker(3, 13)])
    img = d.apply()
    assert 3 not in img.brokers and 3 in cluster.brokers
    # Partitions keep naming it, as in Kafka: replicas outlive registrations.
    assert 3 in img.partition(T1, 0).replicas
    ch = d.changes()
    assert ch.brokers_removed == {3} and ch.brokers_changed == frozenset()


def test_topics_by_name_and_id(cluster: MetadataImage) -> None:
    orders = cluster.topic("orders")
    assert orders is cluster.topics_by_id[T1]
    assert (orders.name, orders.id, sorted(orders.partitions)) == ("orders", T1, [0, 1, 2])
    assert orders.partitions[1] == PartitionRegistration((2, 3, 1), (2, 3, 1), 2, 0, 0)
    assert cluster.partition_count() == 4
    assert sorted((t.name, pid) for t, pid, _ in cluster.partitions()) == [
        ("audit", 0), ("orders", 0), ("orders", 1), ("orders", 2)]


@pytest.mark.parametrize("record, message", [
    (R.topic("orders", T3), f"topic 'orders' already exists with id {T1}"),
    (R.topic("other", T1), f"topic id {T1} already exists \\(topic 'orders'\\)"),
    (R.topic("", T3), "empty name"),
    (R.partition(T3, 0, [1]), f"PartitionRecord at offset 4: topic {T3} does not exist"),
    (R.partition_change(T1, 7, leader=1), "partition 7 of topic 'orders' .* does not exist"),
    (R.remove_topic(T3), f"topic {T3} does not exist"),
    (R.partition(T1, 5, [1, 1, 2]), "duplicate broker ids in \\[1, 1, 2\\]"),
    (R.partition(T1, 5, [1, 2], isr=[1, 3]), "isr \\[1, 3\\] is not a subset of the replicas"),
    (R.partition(T1, 5, [1, 2], leader=3), "leader 3 is not one of the replicas \\[1, 2\\]"),
    (R.partition(T1, 5, []), "no replicas"),
    (R.partition(T1, -1, [1]), "negative partition id"),
    (R.partition_change(T1, 0, replicas=[2, 3], isr=[2, 3]), "leader 1 is not one of the "
                                                             "replicas"),
    (R.config(ResourceType.TOPIC, "nope", "k", "v"), "topic 'nope' does not exist"),
    (R.config(ResourceType.BROKER, "abc", "k", "v"), "neither a broker id nor empty"),
    (R.config(0, "", "k", "v"), "unknown config resource type 0"),
    (R.feature_level("metadata.version", 0), "metadata.version cannot be removed"),
    (R.producer_ids(1, 11, 0), "next producer id 0 is not greater than the current one, 0"),
])
def test_records_that_do_not_fit_the_image_are_refused(cluster: MetadataImage, record,
                                                       message: str) -> None:
    with pytest.raises(RecordError, match=message) as e:
        apply(cluster, [record])
    assert "\n" not in str(e.value)


def test_malformed_ids_in_records_are_refused(cluster: MetadataImage) -> None:
    bad = R.partition(T1, 0, [1])
    bad.partition.topic_id = b"short"
    with pytest.raises(RecordError, match="topic_id must be 16 bytes, got 5"):
        apply(cluster, [bad])
    bad = R.register_broker(4, INC, 1)
    bad.register_broker.incarnation_id = b""
    with pytest.raises(RecordError, match="incarnation_id must be 16 bytes"):
        apply(cluster, [bad])


def test_partition_record_adds_and_overwrites(cluster: MetadataImage) -> None:
    img = apply(cluster, [R.partition(T1, 3, [3, 1], isr=[3], leader=3, leader_epoch=4,
                                      partition_epoch=5)])
    assert img.partition(T1, 3) == PartitionRegistration((3, 1), (3,), 3, 4, 5)
    assert cluster.partition(T1, 3) is None
    img = apply(img, [R.partition(T1, 3, [1], leader=NO_LEADER)])
    assert img.partition(T1, 3) == PartitionRegistration((1,), (1,), NO_LEADER, 0, 0)
    assert not img.partition(T1, 3).has_leader


def test_partition_change_changes_only_given_fields(cluster: MetadataImage) -> None:
    before = cluster.partition(T1, 0)  # replicas (1, 2, 3), leader 1, epochs 0
    img = apply(cluster, [R.partition_change(T1, 0, isr=[1, 2])])
    assert img.partition(T1, 0) == PartitionRegistration((1, 2, 3), (1, 2), 1, 0, 1)
    img = apply(img, [R.partition_change(T1, 0, leader=2)])
    assert img.partition(T1, 0) == PartitionRegistration((1, 2, 3), (1, 2), 2, 1, 2)
    img = apply(img, [R.partition_change(T1, 0, leader=2)])  # same leader: still a new epoch
    assert img.partition(T1, 0) == PartitionRegistration((1, 2, 3), (1, 2), 2, 2, 3)
    img = apply(img, [R.partition_change(T1, 0, replicas=[2, 3, 4], isr=[2, 3])])
    assert img.partition(T1, 0) == PartitionRegistration((2, 3, 4), (2, 3), 2, 2, 4)
    img = apply(img, [R.partition_change(T1, 0, leader=NO_LEADER, isr=[])])
    assert img.partition(T1, 0) == PartitionRegistration((2, 3, 4), (), NO_LEADER, 3, 5)
    img = apply(img, [R.partition_change(T1, 0)])  # nothing given: only the epoch moves
    assert img.partition(T1, 0).partition_epoch == 6
    assert cluster.partition(T1, 0) == before
    assert img.partition(T1, 1) is cluster.partition(T1, 1)


def test_remove_topic_removes_partitions_and_configs(cluster: MetadataImage) -> None:
    d = delta_of(cluster, [R.remove_topic(T1)])
    img = d.apply()
    assert img.topic("orders") is None and T1 not in img.topics_by_id
    assert img.partition(T1, 0) is None and img.config(TOPIC_CFG) == Map()
    assert TOPIC_CFG not in img.configs
    assert img.topic("audit") is cluster.topic("audit")
    ch = d.changes()
    assert ch.topics_removed == {T1} and ch.partitions_changed == frozenset()
    assert ch.configs_changed == {TOPIC_CFG}
    # The name is free again; the new topic starts without the old one's configs.
    img = apply(img, [R.topic("orders", T3), R.partition(T3, 0, [1])])
    assert img.topic("orders").id == T3 and img.config(TOPIC_CFG) == Map()


def test_configs_set_overwrite_and_remove(cluster: MetadataImage) -> None:
    broker_default = ConfigResource(ResourceType.BROKER, "")
    img = apply(cluster, [R.config(ResourceType.TOPIC, "orders", "cleanup.policy", "compact"),
                          R.config(ResourceType.TOPIC, "orders", "retention.ms", "5"),
                          R.config(ResourceType.BROKER, "", "log.retention.ms", "7"),
                          R.config(ResourceType.BROKER, "2", "log.retention.ms", "8")])
    assert dict(img.config(TOPIC_CFG)) == {"cleanup.policy": "compact", "retention.ms": "5"}
    assert dict(img.config(broker_default)) == {"log.retention.ms": "7"}
    assert dict(img.config(ConfigResource(ResourceType.BROKER, "2"))) == {"log.retention.ms": "8"}
    assert dict(cluster.config(TOPIC_CFG)) == {"retention.ms": "1000"}
    img = apply(img, [R.config(ResourceType.TOPIC, "orders", "retention.ms", None),
                      R.config(ResourceType.TOPIC, "orders", "never.set", None)])
    assert dict(img.config(TOPIC_CFG)) == {"cleanup.policy": "compact"}
    img = apply(img, [R.config(ResourceType.TOPIC, "orders", "cleanup.policy", None)])
    assert TOPIC_CFG not in img.configs  # no empty resources left behind


def test_features_producer_ids_and_noop(cluster: MetadataImage) -> None:
    assert cluster.metadata_version == 1
    img = apply(cluster, [R.feature_level("metadata.version", 4),
                          R.feature_level("transaction.version", 2)])
    assert img.metadata_version == 4 and img.features["transaction.version"] == 2
    img = apply(img, [R.feature_level("transaction.version", 0)])
    assert "transaction.version" not in img.features
    img = apply(img, [R.producer_ids(1, 11, 1000)], [R.producer_ids(2, 12, 2000)])
    assert img.next_producer_id == 2000 and cluster.next_producer_id == 0
    d = delta_of(img, [R.no_op()])
    after = d.apply()
    assert after.offset == img.offset + 1
    assert (after.brokers, after.topics_by_id, after.configs, after.features) == (
        img.brokers, img.topics_by_id, img.configs, img.features)
    assert d.changes().empty


def test_offsets_and_epochs(cluster: MetadataImage) -> None:
    assert (cluster.offset, cluster.epoch) == (3, 1)
    d = MetadataDelta(cluster)
    d.replay(R.no_op(), 4, 2)
    d.replay(R.no_op(), 4, 2)  # records of one entry share its offset
    d.replay_batch([], 6, 3)  # an entry without records still moves the image
    img = d.apply()
    assert (img.offset, img.epoch) == (6, 3)
    assert img.at(9, 4).offset == 9 and img.at(9, 4).topics_by_id is img.topics_by_id

    with pytest.raises(RecordError, match="NoOpRecord at offset 3 .* out of order"):
        MetadataDelta(cluster).replay(R.no_op(), 3, 1)  # already applied
    with pytest.raises(RecordError, match="entry at offset 5 .* is not after offset 5"):
        d2 = MetadataDelta(cluster)
        d2.replay_batch([R.no_op()], 5, 1)
        d2.replay_batch([R.no_op()], 5, 1)
    with pytest.raises(RecordError, match="out of order"):
        d3 = MetadataDelta(cluster)
        d3.replay(R.no_op(), 5, 2)
        d3.replay(R.no_op(), 6, 1)  # terms never go back along a log


def test_apply_leaves_the_old_image_untouched_and_shares_the_rest(cluster: MetadataImage) -> None:
    snapshot = (cluster.brokers, cluster.topics_by_id, cluster.topics_by_name, cluster.configs,
                cluster.features, dict(cluster.topic("orders").partitions))
    d = delta_of(cluster, [R.partition_change(T1, 2, isr=[3]), R.fence_broker(2, 12),
                           R.config(ResourceType.TOPIC, "orders", "x", "y")])
    img = d.apply()
    assert (cluster.brokers, cluster.topics_by_id, cluster.topics_by_name, cluster.configs,
            cluster.features, dict(cluster.topic("orders").partitions)) == snapshot
    assert img.topic("audit") is cluster.topic("audit")  # untouched topic: the same object
    assert img.topic("orders").partitions[0] is cluster.topic("orders").partitions[0]
    assert img.topics_by_name["orders"] is img.topics_by_id[T1]
    assert img.brokers[1] is cluster.brokers[1]
    assert img.features is cluster.features
    with pytest.raises(FrozenInstanceError):
        img.topic("orders").name = "x"  # frozen


def test_changes_list_exactly_what_changed(cluster: MetadataImage) -> None:
    d = delta_of(
        cluster,
        [R.topic("new", T3), R.partition(T3, 0, [1]), R.partition(T3, 1, [2])],
        [R.partition_change(T1, 1, isr=[2, 3]), R.remove_topic(T2)],
        [R.register_broker(4, INC, 50), R.unfence_broker(4, 50), R.fence_broker(1, 11)],
        [R.feature_level("x.version", 1), R.producer_ids(1, 11, 100)],
        [R.config(ResourceType.BROKER, "1", "a", "b")],
    )
    ch = d.changes()
    assert (ch.base_offset, ch.offset) == (3, 8)
    assert ch.topics_created == {T3}
    assert ch.topics_changed == {T1}
    assert ch.topics_removed == {T2}
    assert ch.partitions_changed == {TopicIdPartition(T3, 0), TopicIdPartition(T3, 1),
                                     TopicIdPartition(T1, 1)}
    assert ch.brokers_changed == {1, 4} and ch.brokers_removed == frozenset()
    assert ch.configs_changed == {ConfigResource(ResourceType.BROKER, "1")}
    assert ch.features_changed == {"x.version"} and ch.producer_ids_changed
    assert not ch.empty


def test_changes_between_any_two_images(cluster: MetadataImage) -> None:
    batches = [
        [R.topic("new", T3), R.partition(T3, 0, [1]), R.partition(T3, 1, [2])],
        [R.partition_change(T1, 1, isr=[2, 3]), R.remove_topic(T2)],
        [R.register_broker(4, INC, 50), R.unfence_broker(4, 50), R.fence_broker(1, 11)],
        [R.feature_level("x.version", 1), R.producer_ids(1, 11, 100)],
        [R.config(ResourceType.BROKER, "1", "a", "b")],
    ]
    one_delta = delta_of(cluster, *batches)
    # The same records applied one delta per entry: a reader that kept the first image.
    img = cluster
    for batch in batches:
        img = apply(img, batch)
    assert changes_between(cluster, img) == one_delta.changes()
    assert changes_between(img, img).empty
    back = changes_between(img, cluster)  # and backwards
    assert back.topics_created == {T2} and back.topics_removed == {T3}
    assert back.brokers_removed == {4} and back.brokers_changed == {1}


def test_changes_are_net(cluster: MetadataImage) -> None:
    d = delta_of(
        cluster,
        [R.topic("tmp", T3), R.partition(T3, 0, [1])],
        [R.remove_topic(T3)],
        [R.config(ResourceType.TOPIC, "orders", "k", "v")],
        [R.config(ResourceType.TOPIC, "orders", "k", None)],
        [R.register_broker(7, INC, 1)],
        [R.unregister_broker(7, 1)],
        [R.feature_level("f", 1), R.feature_level("f", 0)],
        [R.fence_broker(1, 11), R.unfence_broker(1, 11)],
    )
    assert d.changes().empty
    assert d.apply().topics_by_id == cluster.topics_by_id


def test_a_delta_keeps_going_after_apply(cluster: MetadataImage) -> None:
    d = MetadataDelta(cluster)
    d.replay_batch([R.partition_change(T1, 0, isr=[1])], 4, 1)
    first = d.apply()
    assert d.apply() is first  # nothing new: the same image
    d.replay_batch([R.partition_change(T1, 2, isr=[3]), R.topic("late", T3)], 5, 1)
    d.replay_batch([R.partition(T3, 0, [2])], 6, 1)
    second = d.apply()
    assert first.partition(T1, 2) == cluster.partition(T1, 2)
    assert second.partition(T1, 0) == first.partition(T1, 0)
    assert second.partition(T1, 2).isr == (3,) and second.partition(T3, 0).replicas == (2,)
    assert d.changes().partitions_changed == {TopicIdPartition(T1, 0), TopicIdPartition(T1, 2),
                                              TopicIdPartition(T3, 0)}
    assert d.changes().topics_created == {T3}


def test_a_failed_delta_stays_failed_and_the_base_survives(cluster: MetadataImage) -> None:
    d = MetadataDelta(cluster)
    with pytest.raises(RecordError):
        d.replay_batch([R.partition_change(T1, 0, isr=[1]), R.remove_topic(T3)], 4, 1)
    with pytest.raises(RecordError, match="RemoveTopicRecord at offset 4"):
        d.apply()
    with pytest.raises(RecordError):
        d.replay(R.no_op(), 5, 1)
    assert cluster.partition(T1, 0).isr == (1, 2, 3)
    assert apply(cluster, [R.partition_change(T1, 0, isr=[1])]).partition(T1, 0).isr == (1,)


def test_interned_values_do_not_leak_between_topics(cluster: MetadataImage) -> None:
    # Equal registrations are shared objects; changing one partition must not move another.
    img = apply(cluster, [R.topic("twin", T3), R.partition(T3, 0, [1, 2, 3])])
    assert img.partition(T3, 0) == img.partition(T1, 0)
    img = apply(img, [R.partition_change(T3, 0, isr=[1])])
    assert img.partition(T3, 0).isr == (1,) and img.partition(T1, 0).isr == (1, 2, 3)
