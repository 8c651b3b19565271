"""The one exception of the analytics tools that is meant for the user's eyes."""
from __future__ import annotations


class AnalyticsError(Exception):
    """A problem the user can fix (bad option, missing file, no Java); one line, no traceback.
    Errors in the metadata itself are ``metadata.log_dir.MetadataLogError``."""
