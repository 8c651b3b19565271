"""Where a node keeps its log, hard state and snapshots."""
from .disk import DiskStorage, RecoveredState, check_formatted, format_storage, read_properties
from .memory import MemoryStorage
from .snapshot_file import FileSnapshotSource

__all__ = ["DiskStorage", "FileSnapshotSource", "MemoryStorage", "RecoveredState",
           "check_formatted", "format_storage", "read_properties"]
