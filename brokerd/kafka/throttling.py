"""Client quotas at the Kafka listener's request boundary (Kafka's KafkaApis quota calls):
a produce counts its record bytes, a fetch the bytes it answers with, CreateTopics,
CreatePartitions and DeleteTopics the partitions they create or delete
(``controller_mutation_rate``, KIP-599); a client over its quota gets ``throttle_time_ms``, and
the listener mutes its connection for that long (KIP-219). ``request_percentage`` (KIP-124)
counts the time the handler of each request runs on the event loop (``quotas.HandlerTime``), except
for the requests Kafka exempts: inter-broker ones (WriteTxnMarkers here) and the SASL exchange
(which the listener answers before this boundary); a client over both quotas is throttled for
the longer time.

As Kafka: a fetch under a consumer quota asks for at most the quota's window of bytes, and a
fetch that is throttled is answered empty (its bytes taken back from the client's rate) so that
the client comes back for them after the throttle; a throttled produce is written and answered
at once. Clients from before KIP-219 (produce v5 and below, fetch v7 and below) do not hold
back by themselves: their answer is sent once the throttle ends. A mutation while the client's
bucket is in debt is refused THROTTLING_QUOTA_EXCEEDED, topic by topic, for the versions that
know that error (CreateTopics v6+, CreatePartitions v3+, DeleteTopics v5+); older ones are let
through and throttled, as Kafka does."""
from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from typing import Any

from common.errors import ErrorCode
from metadata.image import MetadataImage
from metadata.principal import Session

from ..quotas import ClientQuotas, HandlerTime, user_of

PRODUCE, FETCH, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, WRITE_TXN_MARKERS = 0, 1, 19, 20, 37, 27
#: Requests whose time no client is charged for (Kafka: cluster actions, sent by brokers).
EXEMPT = frozenset({WRITE_TXN_MARKERS})
#: The first version of each API whose client throttles itself (KIP-219); older ones wait for the answer.
CLIENT_THROTTLES = {PRODUCE: 6, FETCH: 8, CREATE_TOPICS: 3, DELETE_TOPICS: 2, CREATE_PARTITIONS: 1}
#: The first version of each mutation that may be refused THROTTLING_QUOTA_EXCEEDED (KIP-599).
STRICT = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}
EXCEEDED = "The throttling quota has been exceeded."


class KafkaThrottling:
    def __init__(self, quotas: ClientQuotas) -> None:
        self.quotas = quotas

    def timed(self, api_key: int, session: Session, client_id: str, work: Awaitable[Any]) -> HandlerTime | None:
        """The handler timed when the client has a ``request_percentage``; None: not counted."""
        if api_key in EXEMPT:
            return None
        sensor = self.quotas.request.sensor(user_of(session.principal), client_id)
        return None if sensor is None else HandlerTime(work, sensor)

    def before(self, api_key: int, request: Any, session: Session, client_id: str) -> Any:
        """The request as handled: a fetch asks for no more than the client's quota window."""
        if api_key == FETCH:
            most = self.quotas.fetch.max_in_window(user_of(session.principal), client_id)
            if most is not None and request.max_bytes > most:
                return dataclasses.replace(request, max_bytes=most)
        return request

    def refusal(self, api_key: int, version: int, request: Any, session: Session, client_id: str
                ) -> dict[str, Any] | None:
        """The answer to a mutation from a client whose bucket is in debt, or None: handle it."""
        if version < STRICT.get(api_key, 1 << 16):
            return None
        throttle = self.quotas.mutations.throttle_ms(user_of(session.principal), client_id)
        if not throttle:
            return None
        refused = {"error_code": int(ErrorCode.THROTTLING_QUOTA_EXCEEDED), "error_message": EXCEEDED}
        if api_key == CREATE_TOPICS:
            return {"throttle_time": throttle, "topics": [{"name": t.name, **refused, "num_partitions": -1,
                                                           "replication_factor": -1, "configs": None}
                                                          for t in request.topics]}
        if api_key == CREATE_PARTITIONS:
            return {"throttle_time": throttle, "results": [{"name": t.name, **refused} for t in request.topics]}
        names = [t.name for t in request.topics] if version >= 6 else list(request.topic_names)
        return {"throttle_time": throttle, "responses": [{"name": n, **refused} for n in names]}

    def charge(self, timer: HandlerTime, seconds: float) -> None:
        """Count time spent after the throttle was decided (encoding the response, as Kafka
        counts its network thread's time): it weighs on the client's next request. Counted at
        the time the handler's was (the clock is read once a request)."""
        if timer.sensor is not None:
            timer.sensor.rate.record(seconds * 100, timer.sensor.rate.used)

    def after(self, api_key: int, request: Any, answer: dict[str, Any], session: Session, client_id: str,
              image: MetadataImage, timer: HandlerTime | None = None) -> None:
        """Count the bytes, partitions or handler time and put the throttle time in the answer
        (trimming a throttled fetch); ``image``: the metadata as the request found it. The
        bytes are summed only for a client that has a quota of them."""
        if "throttle_time" in answer:  # refused above
            return
        quotas = self.quotas
        now = quotas.clock()
        busy = quotas.request.spent(timer.sensor, timer.spent, now) if timer is not None and timer.sensor else 0
        throttle = 0
        if api_key == PRODUCE:
            if (sensor := quotas.produce.sensor(user_of(session.principal), client_id)) is not None:
                throttle = sensor.record(sum(len(p.records or b"") for t in request.topic_data
                                             for p in t.partition_data), now)
        elif api_key == FETCH:
            if (sensor := quotas.fetch.sensor(user_of(session.principal), client_id)) is not None:
                size = sum(len(p["records"]) for t in answer["responses"] for p in t["partitions"])
                throttle = sensor.record(size, now)
                if throttle or busy:
                    sensor.rate.record(-size, now)  # answered empty: fetched again after the throttle
            if throttle or busy:
                answer["responses"] = []
        elif api_key in STRICT:
            throttle = quotas.mutations.record(user_of(session.principal), client_id,
                                               _mutated(api_key, request, answer, image))
        if throttle or busy:
            answer["throttle_time"] = max(throttle, busy)


def _mutated(api_key: int, request: Any, answer: dict[str, Any], image: MetadataImage) -> int:
    """The partitions a mutation created or deleted (nothing for validate_only)."""
    if getattr(request, "validate_only", False):
        return 0
    if api_key == CREATE_TOPICS:
        return sum(max(0, t["num_partitions"]) for t in answer["topics"] if not t["error_code"])
    if api_key == CREATE_PARTITIONS:
        counts = {t.name: t.count for t in request.topics}
        return sum(max(0, counts[t["name"]] - len(found.partitions)) for t in answer["results"]
                   if not t["error_code"] and (found := image.topic(t["name"])) is not None)
    return sum(len(found.partitions) for t in answer["responses"]
               if not t["error_code"] and t["name"] and (found := image.topic(t["name"])) is not None)


def throttle_ms(response: Any) -> int:
    """The throttle time a response carries (0: none, or a response without the field)."""
    t = getattr(response, "throttle_time", None)
    return round(t.total_seconds() * 1000) if t is not None else 0
