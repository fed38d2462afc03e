"""`profiling()`: within the block, every emulator launch of this thread -- direct or a graph
replay -- collects exact counters (its LaunchReport's `.profile`), so code that launches through
an entry point (e.g. run_unified_attention_torch) can be profiled without a profile= argument."""
from __future__ import annotations

import contextlib
import threading

_local = threading.local()


@contextlib.contextmanager
def profiling():
    previous = getattr(_local, "on", False)
    _local.on = True
    try:
        yield
    finally:
        _local.on = previous


def active() -> bool:
    return getattr(_local, "on", False)
