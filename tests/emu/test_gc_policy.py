"""relax_garbage_collection: opt-in, returns what it replaced, and cycles are still collected."""
import gc
import importlib
import weakref

from rocke.emu import relax_garbage_collection

emu_launch = importlib.import_module("rocke.emu.launch")     # rocke.emu.launch is also a function


def test_relaxing_the_collector_sets_the_thresholds_and_still_collects_cycles():
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        assert relax_garbage_collection() == (700, 10, 10)
        assert gc.get_threshold() == emu_launch.RELAXED_GC_THRESHOLDS

        class Node:
            pass
        a, b = Node(), Node()
        a.other, b.other = b, a          # a cycle only the cyclic collector frees
        gone = weakref.ref(a)
        del a, b
        # live allocations drive the collector (freed ones do not count): no explicit collect
        kept = [[] for _ in range(2 * emu_launch.RELAXED_GC_THRESHOLDS[0])]
        assert gone() is None and len(kept)
    finally:
        gc.set_threshold(*saved)
