"""rocke.runtime.kernel_cache: bounded, least-recently-used, one build per spec from any thread."""
import threading
import time

import pytest

from rocke.runtime.kernel_cache import CompiledSpecCache, GraphCache


def test_one_build_per_spec_and_lru_eviction():
    made = []
    cache = CompiledSpecCache(lambda spec: made.append(spec) or f"kernel-{spec}", capacity=2)
    assert cache.get("a") == "kernel-a" and cache.get("b") == "kernel-b"
    assert cache.get("a") == "kernel-a"             # a is now the most recent
    cache.get("c")                                  # evicts b
    assert "a" in cache and "b" not in cache and len(cache) == 2
    assert (cache.hits, cache.builds, made) == (1, 3, ["a", "b", "c"])


def test_concurrent_first_use_builds_once():
    made = []

    def slow(spec):
        made.append(spec)
        time.sleep(0.05)
        return spec * 2

    cache = CompiledSpecCache(slow)
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get(3))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [6] * 8 and made == [3] and cache.builds == 1 and cache.hits == 7


class FakeGraph:
    def __init__(self, name):
        self.name, self.closed, self.replays = name, False, 0

    def replay(self):
        assert not self.closed, "replayed after close"
        self.replays += 1
        return [self.name]

    def close(self):
        self.closed = True


def test_graph_cache_captures_once_and_closes_what_it_evicts():
    cache = GraphCache(capacity=1)
    first = FakeGraph("a")
    assert cache.replay("a", lambda: first) == (["a"], False)
    assert cache.replay("a", lambda: pytest.fail("captured twice")) == (["a"], True)
    cache.replay("b", lambda: FakeGraph("b"))
    assert first.closed and len(cache) == 1


def test_eviction_never_closes_a_graph_another_thread_replays():
    cache = GraphCache(capacity=1)
    errors = []

    def worker(key):
        try:
            for _ in range(200):
                cache.replay(key, lambda: FakeGraph(key))
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
def test_capacity_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="capacity: must be a positive int"):
        CompiledSpecCache(lambda s: s, capacity=bad)
    with pytest.raises(ValueError, match="capacity: must be a positive int"):
        GraphCache(capacity=bad)


def test_compiled_spec_cache_clear_builds_again():
    made = []
    cache = CompiledSpecCache(lambda spec: made.append(spec) or f"kernel-{spec}")
    cache.get("a")
    cache.get("a")
    cache.clear()
    assert len(cache) == 0 and "a" not in cache
    assert cache.get("a") == "kernel-a" and made == ["a", "a"]
