"""Example services built on the library: ``kv``, a replicated key-value store (``raft-kv``)."""
