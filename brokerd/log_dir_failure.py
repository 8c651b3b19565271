"""A failed log directory halts the broker (Kafka's LogDirFailureChannel and
ReplicaManager.handleLogDirFailure), and a store whose data could not be read back keeps it
from starting again.

Kafka takes only the failed directory's replicas offline when the controller records which
directory holds each replica (KIP-858, metadata.version 3.7-IV2 and later), and the broker
tells it. Our controllers do not record directories, as KRaft before KIP-858, and there Kafka
halts the broker: ``Exit.halt(1)`` when every directory has failed ("Shutdown broker because
all log dirs in ... have failed"), and when a directory without a directory id fails while
others are fine ("Unable to propagate directory failure"); KRaft brokers before 3.7 could not
have more than one. So any directory's failure halts ours, other directories fine or not.

The exit is ``os._exit(1)``, Kafka's halt: no controlled shutdown (it would keep the broker
serving, and leading, while leadership moves), no closing of stores, no goodbyes. It is what
``kill -9`` does, which the broker is built to survive: every write is in RocksDB's
write-ahead log before it is answered, and acks=all writes are on the in-sync followers. The
controller fences the silent broker when its session expires (``broker.session.timeout.ms``)
and elects new leaders from the ISR; clients meanwhile find the connection refused and retry.
The halt happens where the failure is found, before the failing request is answered: nothing
more is answered from the failed store.

A write failure (a full disk, an I/O error) leaves RocksDB's files consistent: at restart the
store is opened again, RocksDB's recovery checks its write-ahead log, and a store that cannot
be opened stops the start with one line. A failed *read* (a block or blob whose checksum
fails) is data on the disk that RocksDB's opening does not look at: the broker would start,
lead again, and halt again at the same read. Kafka's log recovery truncates a log at its first
corrupted batch, after an unclean shutdown and only past the recovery point; we cannot tell
which batches a bad blob file holds without reading every one. So the halt leaves a marker,
``partitions.failed`` beside the store, and the broker refuses to start while it is there,
with one line saying how to start again: remove the store (and the marker) and the broker
copies its replicas from the others, as after a disk replacement.
"""
from __future__ import annotations

import datetime
import logging
import os
import sys
from typing import NoReturn

from .log_store import PARTITIONS_DIR, StorageFailure

log = logging.getLogger("brokerd.log")

#: Beside ``partitions/`` in a log directory: its store failed a read; what the failure was.
MARKER = PARTITIONS_DIR + ".failed"


def halt(status: int) -> NoReturn:
    """Kafka's Exit.halt (the one place the broker ends this way; a test replaces it)."""
    os._exit(status)


def halt_broker(failure: StorageFailure) -> NoReturn:
    """A log directory failed: say so in one line, mark an unreadable store, halt. Called
    where the failure is found, on the event loop or in a store's flush thread."""
    log.critical("Shutdown broker because log directory %s has failed: %s (halting without a controlled "
                 "shutdown: the controller fences this broker when its session expires and elects new "
                 "leaders from the in-sync replicas)", failure.log_dir, failure.cause)
    if failure.unreadable:
        try:
            _write_marker(failure)
        except OSError as e:
            log.critical("could not mark %s as failed (%s): check it before starting this broker again",
                         failure.log_dir, e)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    halt(1)


def _write_marker(failure: StorageFailure) -> None:
    path = os.path.join(failure.log_dir, MARKER)
    at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    with open(path + ".tmp", "w") as f:
        f.write(f"at {at}: {failure.cause}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    fd = os.open(failure.log_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def refuse_failed(log_dirs: tuple[str, ...]) -> None:
    """StorageFailure, one line, for the first directory whose store was marked unreadable."""
    for d in log_dirs:
        path = os.path.join(d, MARKER)
        try:
            with open(path) as f:
                what = " ".join(f.read().split())
        except FileNotFoundError:
            continue
        except OSError as e:
            what = f"(unreadable marker: {e.strerror or e})"
        raise StorageFailure(
            f"log directory {d} holds a partition store that failed a read ({what}); this broker does not "
            f"serve from it: remove {os.path.join(d, PARTITIONS_DIR)} and {path} to have it copy its replicas "
            f"again from the other brokers (check first that each of its partitions has another in-sync "
            f"replica), or take {d} out of log.dirs", d, what, unreadable=True)
