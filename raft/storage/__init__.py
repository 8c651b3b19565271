"""Where a node keeps its log, hard state and snapshots."""
from .disk import (DiskStorage, RecoveredState, ReplayedLog, check_formatted, format_storage,
                   read_properties, replay, snapshot_files)
from .memory import MemoryStorage
from .snapshot_file import FileSnapshotSource

__all__ = ["DiskStorage", "FileSnapshotSource", "MemoryStorage", "RecoveredState", "ReplayedLog",
           "check_formatted", "format_storage", "read_properties", "replay", "snapshot_files"]
