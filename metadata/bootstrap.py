"""The records a new cluster starts with besides its metadata.version (Kafka's
``bootstrap.checkpoint``, KIP-900): ``kraft storage format --add-scram`` writes the first
admin's SCRAM credential here, so that a cluster whose listeners all require SASL can be
administered from its first start. The first active controller writes them, once, with the
cluster's metadata.version; later starts ignore the file.

The file is one encoded ``RecordBatch`` (``metadata.records``): salted hashes, never a password.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from .records import MetadataRecord, RecordError, decode_batch, encode_batch

BOOTSTRAP_RECORDS = "bootstrap.checkpoint"


def write_bootstrap_records(directory: str, records: Sequence[MetadataRecord]) -> None:
    """Durably, next to meta.properties in ``metadata.log.dir``."""
    path = os.path.join(directory, BOOTSTRAP_RECORDS)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(encode_batch(records))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_bootstrap_records(directory: str) -> tuple[MetadataRecord, ...]:
    """The records formatted into ``directory``; none when it has no bootstrap file. RecordError
    for a file that cannot be read as records."""
    path = os.path.join(directory, BOOTSTRAP_RECORDS)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return ()
    except OSError as e:
        raise RecordError(f"cannot read {path}: {e.strerror}") from None
    try:
        return tuple(decode_batch(data).records)
    except RecordError as e:
        raise RecordError(f"{path}: {e}") from None
