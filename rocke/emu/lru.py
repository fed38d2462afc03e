"""A bounded map that keeps its most recently used entries: the emulator's per-process caches
(parsed programs, decoded kernels, code-object disassemblies) are all this."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class RecentCache(Generic[V]):
    """At most ``size`` entries; a hit makes its entry the most recent, an insert past the
    bound drops the least recent. Safe from several threads: the map is changed under a lock,
    ``make`` runs outside it (two threads missing one key at once may both make it; the first
    stored is kept and returned to both)."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = make()
        with self._lock:
            if key in self._entries:              # another thread stored it meanwhile
                self._entries.move_to_end(key)
                return self._entries[key]
            self._entries[key] = value
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return value

    def values(self) -> list[V]:
        """The entries, least recent first."""
        with self._lock:
            return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
