"""The shared shape of a domain delta over one persistent map: reads see the changes so far,
the first write starts a mutation, ``finish`` seals it into the next image's map."""
from __future__ import annotations

from typing import Generic, TypeVar

from immutables import Map, MapMutation

K = TypeVar("K")
V = TypeVar("V")


class MapDelta(Generic[K, V]):
    def __init__(self, current: Map[K, V]) -> None:
        self._current = current  # as of the last finish()
        self._mutation: MapMutation[K, V] | None = None

    def view(self) -> Map[K, V] | MapMutation[K, V]:
        return self._current if self._mutation is None else self._mutation

    def finish(self) -> Map[K, V]:
        if self._mutation is not None:
            self._current, self._mutation = self._mutation.finish(), None
        return self._current

    def _write(self) -> MapMutation[K, V]:
        if self._mutation is None:
            self._mutation = self._current.mutate()
        return self._mutation
