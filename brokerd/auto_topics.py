"""Automatic topic creation (Kafka's ``auto.create.topics.enable`` and its
AutoTopicCreationManager): a Metadata request naming a topic that does not exist, from a
client that allows it (Metadata v4+ ``allow_auto_topic_creation``, a consumer's
``allow.auto.create.topics``), has the broker ask the active controller to create it with
``num.partitions`` and ``default.replication.factor``.

Kafka's rules, from ``kafka.server.AutoTopicCreationManager`` and ``KafkaApis.getTopicMetadata``
(3.x): a name that is not a legal topic name is INVALID_TOPIC_EXCEPTION and never sent; the
client needs CREATE on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED; one
creation per name is in flight at a time (``inflightTopics``), so concurrent requests share
it; a listing of every topic creates nothing. The answer for a created topic (or one that
already exists) is LEADER_NOT_AVAILABLE, retriable, so the client asks again and finds it;
a controller's refusal is answered with the controller's code (e.g. INVALID_REPLICATION_FACTOR
when fewer brokers are live than ``default.replication.factor``), as ``createTopicsInZk`` does.
Kafka's KRaft broker sends the CreateTopics without waiting and answers
UNKNOWN_TOPIC_OR_PARTITION meanwhile, so its clients never see the controller's reason; we
wait for the controller's answer (bounded) so that they do.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from common.errors import ErrorCode, KafkaError, capped
from metadata.acls import AclOperation
from metadata.authorizer import Access
from metadata.client import ControllerClient
from clients.topics import INTERNAL_TOPICS
from metadata.topics import validate_name
from protos import controller_pb2 as cpb

from .requests import MetadataResponse

if TYPE_CHECKING:
    from metadata.principal import Session

log = logging.getLogger("brokerd.auto_topics")

#: How long a Metadata request waits for the controller to create a topic before answering
#: UNKNOWN_TOPIC_OR_PARTITION (retriable) and letting the creation finish in the background.
CREATE_WAIT_S = 10.0


@dataclass(frozen=True, slots=True)
class AutoCreateConfig:
    """The broker keys of automatic creation, with Kafka's defaults."""

    enable: bool = True               # auto.create.topics.enable
    num_partitions: int = 1           # num.partitions
    replication_factor: int = 1       # default.replication.factor


class TopicAutoCreator:
    """Creates the unknown topics a Metadata answer names, through the active controller."""

    def __init__(self, config: AutoCreateConfig, controller: ControllerClient) -> None:
        self.config = config
        self.controller = controller
        self._inflight: dict[str, asyncio.Task[tuple[ErrorCode, str]]] = {}

    async def resolve(self, resp: MetadataResponse, access: Access, *, allowed: bool,
                      named: Collection[str] | None = None) -> None:
        """Rewrite, in place, the UNKNOWN_TOPIC_OR_PARTITION topics of ``resp`` (those the
        client named, ``named``: all when None) to the outcome of creating them, when the
        broker and the client (``allowed``) both allow it."""
        if not (self.config.enable and allowed):
            return
        unknown = [t for t in resp.topics if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                   and t.name not in INTERNAL_TOPICS and (named is None or t.name in named)]
        if not unknown:
            return
        outcomes = await asyncio.gather(*(self._create(t.name, access) for t in unknown))
        for t, (code, message) in zip(unknown, outcomes, strict=True):
            t.error_code, t.error_message = int(code), capped(message)

    async def _create(self, name: str, access: Access) -> tuple[ErrorCode, str]:
        try:
            validate_name(name)
        except KafkaError as e:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, e.message
        if not access.cluster(AclOperation.CREATE, log_denial=False) and not access.topic(AclOperation.CREATE, name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, access.topic_denied(AclOperation.CREATE, name)
        task = self._inflight.get(name)
        if task is None:
            task = self._inflight[name] = asyncio.get_running_loop().create_task(self._ask_controller(name, access))
            task.add_done_callback(lambda _: self._inflight.pop(name, None))
        try:
            async with asyncio.timeout(CREATE_WAIT_S):
                return await asyncio.shield(task)
        except TimeoutError:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} is being created."

    async def _ask_controller(self, name: str, access: Access) -> tuple[ErrorCode, str]:
        cfg = self.config
        try:
            code, message = await create_topic(self.controller, cpb.CreatableTopic(
                name=name, num_partitions=cfg.num_partitions, replication_factor=cfg.replication_factor),
                access.session)
        except KafkaError as e:  # refused whole (authorization), or no controller answered: retriable
            code = ErrorCode.of(int(e.code))
            log.warning("could not create topic %s automatically: %s", name, e)
            if code in (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
                return code, e.message
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} could not be created yet: {e.message}"
        if code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            return ErrorCode.LEADER_NOT_AVAILABLE, ""
        log.info("automatic creation of topic %s refused: %s: %s", name, code.name, message)
        return code, message


async def create_topic(controller: ControllerClient, topic: cpb.CreatableTopic,
                       on_behalf_of: Session | None = None) -> tuple[ErrorCode, str]:
    """Have the active controller create ``topic``, for the broker itself (``__consumer_offsets``)
    or for a client (``on_behalf_of``): the controller's code and message for it (a creation is
    logged here, a refusal by the caller). KafkaError when the request was refused whole or
    not answered."""
    r = await controller.create_topics(cpb.CreateTopicsRequest(topics=[topic]), on_behalf_of=on_behalf_of)
    t = r.topics[0]
    code = ErrorCode.of(t.error_code)
    if code == ErrorCode.NONE:
        log.info("created topic %s with %d partition(s), replication factor %d", topic.name, topic.num_partitions,
                 topic.replication_factor)
    return code, t.error_message
