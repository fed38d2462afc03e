"""A bounded map that keeps its most recently used entries: the emulator's per-process caches
(parsed programs, decoded kernels, code-object disassemblies) are all this."""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class RecentCache(Generic[V]):
    """At most ``size`` entries; a hit makes its entry the most recent, an insert past the
    bound drops the least recent."""

    def __init__(self, size: int):
        self.size = size
        self._entries: OrderedDict[Hashable, V] = OrderedDict()

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        try:
            value = self._entries[key]
        except KeyError:
            value = self._entries[key] = make()
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        return value

    def values(self) -> list[V]:
        """The entries, least recent first."""
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)
