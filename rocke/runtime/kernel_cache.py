"""Process-wide caches a kernel family's entry point keeps: compiled kernels by spec, and captured
graphs by everything their launches read. Both are bounded (least recently used goes first) and
safe to use from several threads (one lock each; a graph is replayed under its cache's lock, so a
graph is never closed by eviction while another thread replays it)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable


class CompiledSpecCache:
    """``get(spec)``: the compiled kernel of a hashable kernel spec, made once by ``make`` (a
    build + compile, itself over the on-disk compile cache) and kept while among the ``capacity``
    most recently used."""

    def __init__(self, make: Callable, capacity: int = 256):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity: must be a positive int, got {capacity!r}")
        self._make = make
        self.capacity = capacity
        self.hits = 0
        self.builds = 0          # calls of make (each may still hit the on-disk cache)
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.RLock()

    def get(self, spec: Hashable):
        with self._lock:
            hit = self._entries.get(spec)
            if hit is not None:
                self.hits += 1
                self._entries.move_to_end(spec)
                return hit
            result = self._make(spec)          # under the lock: one build per spec, ever
            self.builds += 1
            self._entries[spec] = result
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
            return result

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, spec) -> bool:
        return spec in self._entries

    def clear(self) -> None:
        """Forget every kernel: the next ``get`` of a spec builds it again (over the on-disk
        cache; with a new ``ROCKE_CACHE_DIR``, into that one)."""
        with self._lock:
            self._entries.clear()


class GraphCache:
    """Captured graphs by key (what their launches depend on); ``replay(key, capture)`` replays
    the cached graph of ``key`` or captures one with ``capture()`` first. An evicted graph is
    closed (its device memory released)."""

    def __init__(self, capacity: int = 8):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity: must be a positive int, got {capacity!r}")
        self.capacity = capacity
        self._graphs: OrderedDict = OrderedDict()
        self._lock = threading.RLock()

    def replay(self, key: Hashable, capture: Callable, *args):
        """(what the graph's replay returns, whether it was already cached); ``args`` go to the
        graph's replay (a stream)."""
        with self._lock:
            graph = self._graphs.get(key)
            cached = graph is not None
            if not cached:
                graph = capture()
                self._graphs[key] = graph
                while len(self._graphs) > self.capacity:
                    self._graphs.popitem(last=False)[1].close()
            self._graphs.move_to_end(key)
            return graph.replay(*args), cached

    def __len__(self) -> int:
        return len(self._graphs)

    def __contains__(self, key) -> bool:
        return key in self._graphs

    def discard(self, key: Hashable) -> None:
        """Close and forget the graph of ``key``, if any."""
        with self._lock:
            graph = self._graphs.pop(key, None)
        if graph is not None:
            graph.close()

    def clear(self) -> None:
        with self._lock:
            while self._graphs:
                self._graphs.popitem(last=False)[1].close()
