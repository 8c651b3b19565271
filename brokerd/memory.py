"""The broker process's heap: freed buffers kept for the next request instead of handed back.

A broker's data path allocates and frees buffers of hundreds of KB to a few MB per request
(a RocksDB value read into a ``bytes``, a Fetch answer's partitions joined, protobuf's arena
and its serialization, a Produce request read whole). glibc hands such memory back to the
kernel whenever more than ``M_TRIM_THRESHOLD`` (by default twice the largest block freed
since the dynamic mmap threshold last moved: a few hundred KB) lies free at the top of the
heap, and serves blocks over ``M_MMAP_THRESHOLD`` with mmap/munmap: the next request's buffers
then fault every page in afresh, and the kernel zeroes each. One Fetch answer of 1 MiB built and
serialized as the gRPC service does cost 3.4 ms of CPU (3.0 ms of it system time, 992 page
faults) against 0.2 ms with the thresholds below (docs/brokers.md, "The broker's heap").
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: Free memory at the heap's top kept rather than trimmed: a few answers' worth.
TRIM_THRESHOLD = 64 << 20
#: Blocks served from the heap up to this size (glibc's own ceiling for its dynamic threshold).
MMAP_THRESHOLD = 32 << 20


def keep_freed_memory() -> bool:
    """Set glibc's thresholds for this process; False where the C library is not glibc (its
    ``mallopt`` is missing) or refuses them, which changes nothing but the speed."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    ok = bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    if not ok:
        log.info("glibc's malloc thresholds not set: freed buffers go back to the kernel")
    return ok
