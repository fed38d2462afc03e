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
