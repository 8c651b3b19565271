"""Server logs as tests read them: after a fault suite, no process may have logged a traceback
or an unretrieved future (issue 11 item 4: users see one clear line, logs too)."""
from __future__ import annotations

from pathlib import Path

BAD = ("Traceback (most recent call last)", "exception was never retrieved", "Task was destroyed but it is pending",
       # a handler's own exception, which gRPC's core logs and raft.transport folds into one line
       # (gRPC's benign "... raised in core by servicer method" is not this)
       "raised by servicer method")


def assert_no_tracebacks(directory: Path | str, pattern: str = "**/*.log") -> None:
    found = []
    for path in sorted(Path(directory).glob(pattern)):
        text = path.read_text(errors="replace")
        for bad in BAD:
            at = text.find(bad)
            if at >= 0:
                found.append(f"{path.name}: {text[max(0, at - 300):at + 1500]}")
                break
    assert not found, "a server logged a traceback:\n" + "\n---\n".join(found)
