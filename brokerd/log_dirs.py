"""DescribeLogDirs (Kafka's ReplicaManager.describeLogDirs): each of this broker's log
directories (``log.dirs``) with the replicas whose logs it holds, their sizes, and the room
left on its file system, for both front ends (``kafka-log-dirs.sh``, admin clients' describe_log_dirs)."""
from __future__ import annotations

import shutil

from common.errors import ErrorCode

from .replica_manager import ReplicaManager
from .requests import DescribeLogDirsRequest, DescribeLogDirsResponse, LogDir, LogDirPartition, LogDirTopic


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
