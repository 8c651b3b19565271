"""DescribeProducers (Kafka's ReplicaManager.activeProducerState, KIP-664): the idempotent and
transactional producers a partition's leader knows (``producer_state``), for both front ends;
what ``kafka-transactions.sh describe-producers`` shows to find a hanging transaction."""
from __future__ import annotations

from common.errors import KafkaError

from .replica_manager import ReplicaManager
from .requests import (DescribeProducersPartitionResponse, DescribeProducersRequest, DescribeProducersResponse,
                       DescribeProducersTopicResponse)


def describe_producers(rm: ReplicaManager, request: DescribeProducersRequest) -> DescribeProducersResponse:
    resp = DescribeProducersResponse()
    for t in request.topics:
        tr = DescribeProducersTopicResponse(name=t.name)
        resp.topics.append(tr)
        for index in t.partitions:
            a = DescribeProducersPartitionResponse(partition=index)
            tr.partitions.append(a)
            try:
                p = rm.leader(t.name, index)
            except KafkaError as e:
                a.error_code, a.error_message = int(e.code), e.message
                continue
            a.active_producers = p.log.producers.describe()
    return resp
