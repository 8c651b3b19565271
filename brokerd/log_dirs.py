"""DescribeLogDirs and AlterReplicaLogDirs (Kafka's ReplicaManager.describeLogDirs and
alterReplicaLogDirs), for both front ends: each of this broker's log directories
(``log.dirs``) with the replicas whose logs it holds (future logs of replicas being moved
too), their sizes, and the room left on its file system (``kafka-log-dirs.sh``, admin clients'
describe_log_dirs); and moving a replica to another of them (``log_dir_moves``)."""
from __future__ import annotations

import os
import shutil

from common.errors import ErrorCode, KafkaError

from .log_store import LogStore
from .partition import Partition
from .replica_manager import ReplicaManager
from .requests import (AlterReplicaLogDirsPartitionResult, AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse,
                       AlterReplicaLogDirsTopicResult, DescribeLogDirsRequest, DescribeLogDirsResponse, LogDir,
                       LogDirPartition, LogDirTopic)


def describe_log_dirs(rm: ReplicaManager, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    wanted = None if request.topics is None else {(t.name, i) for t in request.topics for i in t.partitions}
    dirs: dict[str, dict[str, LogDirTopic]] = {s.log_dir: {} for s in rm.logs.stores}
    for p in sorted(rm.partitions.values(), key=lambda p: (p.topic, p.index)):
        if wanted is not None and (p.topic, p.index) not in wanted:
            continue
        topics = dirs.setdefault(p.log.store.log_dir, {})
        t = topics.get(p.topic) or topics.setdefault(p.topic, LogDirTopic(name=p.topic))
        t.partitions.append(LogDirPartition(partition=p.index, size_bytes=p.log.size_bytes,
                                            offset_lag=max(0, p.log.high_watermark - p.log.log_end_offset)))
        future = rm.moves.future(p)
        if future is not None:
            topics = dirs.setdefault(future.store.log_dir, {})
            t = topics.get(p.topic) or topics.setdefault(p.topic, LogDirTopic(name=p.topic))
            t.partitions.append(LogDirPartition(partition=p.index, size_bytes=future.size_bytes, is_future=True,
                                                offset_lag=max(0, p.log.log_end_offset - future.log_end_offset)))
    resp = DescribeLogDirsResponse()
    for path, topics in dirs.items():
        d = LogDir(log_dir=path, topics=list(topics.values()))
        try:
            usage = shutil.disk_usage(path)
            d.total_bytes, d.usable_bytes = usage.total, usage.free
        except OSError:
            d.error_code = int(ErrorCode.KAFKA_STORAGE_ERROR)
        resp.log_dirs.append(d)
    return resp


def alter_replica_log_dirs(rm: ReplicaManager, request: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
    """Start moving each named replica to its directory, as Kafka answers: LOG_DIR_NOT_FOUND for a
    path not in ``log.dirs``, KAFKA_STORAGE_ERROR for an offline directory (destination or
    current), REPLICA_NOT_AVAILABLE for a partition this broker does not host (yet: should it
    get a replica, it goes to that directory), UNKNOWN_TOPIC_OR_PARTITION for one that does not exist; NONE once the move has started (or
    the replica is already there). The answer does not wait for the copy."""
    stores = {os.path.abspath(s.log_dir): s for s in rm.logs.stores}
    results: dict[str, AlterReplicaLogDirsTopicResult] = {}
    for d in request.dirs:
        dest = stores.get(os.path.abspath(d.path)) if d.path else None
        for t in d.topics:
            out = results.get(t.name) or results.setdefault(t.name, AlterReplicaLogDirsTopicResult(name=t.name))
            for index in t.partitions:
                code, message = ErrorCode.NONE, ""
                try:
                    if dest is None:
                        raise KafkaError(ErrorCode.LOG_DIR_NOT_FOUND, f"Log dir {d.path} is not found in the config.")
                    if dest.failure is not None:
                        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"Log directory {dest.log_dir} is offline")
                    p = _hosted(rm, t.name, index, dest)
                    if p.log.store.failure is not None:
                        raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                         f"Partition {p.name} is in an offline log directory")
                    rm.moves.start(p, dest)
                except KafkaError as e:
                    # Kafka keeps REPLICA_NOT_AVAILABLE here for a replica not on this broker.
                    code = ErrorCode.REPLICA_NOT_AVAILABLE if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER else e.code
                    message = e.message if code == e.code else f"Broker {rm.broker_id} does not host {t.name}-{index}"
                out.partitions.append(AlterReplicaLogDirsPartitionResult(partition=index, error_code=int(code),
                                                                         error_message=message))
    return AlterReplicaLogDirsResponse(topics=list(results.values()))


def _hosted(rm: ReplicaManager, topic: str, index: int, dest: LogStore) -> Partition:
    """The local replica; if the partition exists but is not here (yet), its log will be created
    in ``dest`` when it comes (Kafka's maybeUpdatePreferredLogDir), and NOT_LEADER_OR_FOLLOWER."""
    try:
        return rm.partition(topic, index)
    except KafkaError as e:
        t = rm.image.topics_by_name.get(topic)
        if e.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and t is not None:
            rm.logs.prefer(t.id, index, dest)
        raise
