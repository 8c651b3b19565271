"""Byte-rate quotas at the Kafka listener's request boundary (Kafka's KafkaApis quota calls):
a produce counts its record bytes, a fetch the bytes it answers with; a client over its quota
gets ``throttle_time_ms``, and the listener mutes its connection for that long (KIP-219).

As Kafka: a fetch under a consumer quota asks for at most the quota's window of bytes, and a
fetch that is throttled is answered empty (its bytes taken back from the client's rate) so that
the client comes back for them after the throttle; a throttled produce is written and answered
at once. Clients from before KIP-219 (produce v5 and below, fetch v7 and below) do not hold
back by themselves: their answer is sent once the throttle ends."""
from __future__ import annotations

import dataclasses
from typing import Any

from metadata.principal import Session

from ..quotas import ClientQuotas, user_of

PRODUCE, FETCH = 0, 1
#: The first version of each API whose client throttles itself (KIP-219); older ones wait for the answer.
CLIENT_THROTTLES = {PRODUCE: 6, FETCH: 8}


class KafkaThrottling:
    def __init__(self, quotas: ClientQuotas) -> None:
        self.quotas = quotas

    def before(self, api_key: int, request: Any, session: Session, client_id: str) -> Any:
        """The request as handled: a fetch asks for no more than the client's quota window."""
        if api_key == FETCH:
            most = self.quotas.fetch.max_in_window(user_of(session.principal), client_id)
            if most is not None and request.max_bytes > most:
                return dataclasses.replace(request, max_bytes=most)
        return request

    def after(self, api_key: int, request: Any, answer: dict[str, Any], session: Session, client_id: str) -> None:
        """Count the bytes and put the throttle time in the answer (trimming a throttled fetch)."""
        if api_key == PRODUCE:
            size = sum(len(p.records or b"") for t in request.topic_data for p in t.partition_data)
            throttle = self.quotas.produce.record(user_of(session.principal), client_id, size)
        elif api_key == FETCH:
            user = user_of(session.principal)
            size = sum(len(p["records"]) for t in answer["responses"] for p in t["partitions"])
            throttle = self.quotas.fetch.record(user, client_id, size)
            if throttle:
                self.quotas.fetch.unrecord(user, client_id, size)
                answer["responses"] = []
        else:
            return
        if throttle:
            answer["throttle_time"] = throttle


def throttle_ms(response: Any) -> int:
    """The throttle time a response carries (0: none, or a response without the field)."""
    t = getattr(response, "throttle_time", None)
    return round(t.total_seconds() * 1000) if t is not None else 0
