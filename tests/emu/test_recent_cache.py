"""RecentCache: the emulator's bounded per-process caches keep the most recently used."""
from rocke.emu.lru import RecentCache


def test_a_hit_is_not_remade_and_the_least_recent_entry_goes_first():
    made = []
    cache = RecentCache(2)

    def make(key):
        return lambda: made.append(key) or key.upper()
    assert cache.get_or_make("a", make("a")) == "A"
    assert cache.get_or_make("b", make("b")) == "B"
    assert cache.get_or_make("a", make("a")) == "A"          # a hit: "a" is now the most recent
    assert cache.get_or_make("c", make("c")) == "C"          # past the bound: "b" goes
    assert len(cache) == 2
    assert cache.get_or_make("a", make("a")) == "A"
    assert cache.get_or_make("b", make("b")) == "B"
    assert made == ["a", "b", "c", "b"]




def test_a_hit_is_not_lost_to_another_threads_eviction():
    """A thread switch between a hit's lookup and its move to the front, where another thread
    evicts the entry: the unlocked map raised KeyError there. Here the switch is forced (the
    map's move to the front first lets the other thread run); locked, that thread waits, and
    the hit returns its value."""
    import threading
    from collections import OrderedDict
    cache = RecentCache(2)
    evicted = threading.Event()

    def evict():
        cache.get_or_make("x", lambda: "X")
        cache.get_or_make("y", lambda: "Y")
        evicted.set()
    other = threading.Thread(target=evict)

    class SwitchingMap(OrderedDict):
        def move_to_end(self, key, last=True):
            if key == "k" and not other.is_alive() and not evicted.is_set():
                other.start()
                evicted.wait(0.5)      # locked: the other thread cannot evict before we return
            super().move_to_end(key, last)
    cache._entries = SwitchingMap()
    assert cache.get_or_make("k", lambda: "K") == "K"
    assert cache.get_or_make("k", lambda: "remade") == "K"
    other.join()
    assert len(cache) == 2
