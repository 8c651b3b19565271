"""Broker restarts as Kafka handles them (issue 33, docs/brokers.md "Restarts"): a new
incarnation fences the previous one in the registration's own batch, so leaderships move with
a bumped leader epoch; a restarting broker serves clients only once it has caught up with the
metadata log; a leader does not retry AlterPartition without backoff."""
from __future__ import annotations

import uuid

import pytest

from metadata import records as R
from metadata.brokers import BrokerLifecycle, Heartbeat
from metadata.delta import MetadataDelta
from metadata.errors import ApiError, ErrorCode
from metadata.image import MetadataImage
from metadata.records import NO_LEADER

TOPIC = uuid.UUID(int=7)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _image() -> MetadataImage:
    """Brokers 1-3 unfenced; t-0 led by 1 with ISR [1, 2, 3], t-1 led by 1 alone."""
    d = MetadataDelta(MetadataImage.empty("cluster"))
    d.replay_batch([R.register_broker(b, uuid.UUID(int=b), 10 + b, fenced=False) for b in (1, 2, 3)], 14, 1)
    d.replay_batch([R.topic("t", TOPIC), R.partition(TOPIC, 0, [1, 2, 3]), R.partition(TOPIC, 1, [1, 2], isr=[1])],
                   15, 1)
    return d.apply()


def _replay(image: MetadataImage, records: list, offset: int) -> MetadataImage:
    d = MetadataDelta(image)
    d.replay_batch(records, offset, 1)
    return d.apply()


def test_a_new_incarnation_fences_the_previous_one_in_the_same_batch():
    """Killed and restarted before the controller's session check fenced it: the registration
    itself ends the old incarnation (Kafka's KIP-966 unclean-shutdown handling)."""
    clock = Clock()
    lifecycle = BrokerLifecycle(3.0, clock)
    image = _image()
    lifecycle.reset(image)
    clock.now += 3.5  # broker 1's session has expired; the session check has not run yet
    records, epoch = lifecycle.register(image, 1, uuid.uuid4(), "cluster", [], None, 20)
    assert epoch == 20
    after = _replay(image, records, 20)
    assert after.brokers[1].fenced and after.brokers[1].epoch == 20
    p0, p1 = (after.partition(TOPIC, i) for i in (0, 1))
    assert p0.leader == 2 and p0.isr == (2, 3) and p0.leader_epoch == 1  # moved, with a new epoch
    # broker 1 alone was in sync: it stays the last ISR member, without leading, until unfenced
    assert p1.leader == NO_LEADER and p1.isr == (1,) and p1.leader_epoch == 1
    # caught up, it is unfenced and leads t-1 again, at yet another epoch
    records, answer = lifecycle.heartbeat(after, Heartbeat(1, 20, 20))
    assert not answer.is_fenced
    back = _replay(after, records, 21)
    assert back.partition(TOPIC, 1).leader == 1 and back.partition(TOPIC, 1).leader_epoch == 2
    assert back.partition(TOPIC, 0).leader == 2


def test_a_registration_while_the_old_session_lives_is_refused_and_a_retry_is_answered_alike():
    clock = Clock()
    lifecycle = BrokerLifecycle(3.0, clock)
    image = _image()
    lifecycle.reset(image)
    with pytest.raises(ApiError) as refused:
        lifecycle.register(image, 1, uuid.uuid4(), "cluster", [], None, 20)
    assert refused.value.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    # the same incarnation registering again (a retried request) writes nothing
    assert lifecycle.register(image, 1, uuid.UUID(int=1), "cluster", [], None, 20) == ([], 11)
