"""Where a node keeps its log, hard state and snapshots."""
from .base import RecoveredState, Storage
from .disk import (DiskStorage, ReplayedLog, check_formatted, format_storage,
                   read_properties, replay, snapshot_files)
from .memory import MemoryStorage
from .snapshot_file import FileSnapshotSource

__all__ = ["DiskStorage", "FileSnapshotSource", "MemoryStorage", "RecoveredState", "ReplayedLog", "Storage",
           "check_formatted", "format_storage", "read_properties", "replay", "snapshot_files"]
