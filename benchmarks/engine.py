"""The benchmarks' and tools' side of rocke.tasks: ``--jobs N`` / ``--ray [ADDRESS]`` on an
argparse parser, the engine they name (a bad one is an argparse error before any work), and the
results in the items' order (what a script prints or writes is the serial run's).

On Ray the workers import this checkout's benchmarks/ and tools/ (and tests/kernels' inputs):
its root joins PYTHONPATH, which a local cluster's workers inherit (a running cluster's workers
get the driver's working directory: run from the checkout's root). A script whose tasks must
reach workers by reference runs as its importable module (``benchmarks.NAME``, not __main__).
"""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def add_engine_options(ap, unit: str = "problem") -> None:
    from rocke import tasks
    tasks.add_arguments(ap, unit)


def engine_of(ap, a):
    """The rocke.tasks engine of ``--jobs`` / ``--ray``; its refusal is ``ap.error``."""
    from rocke import tasks
    try:
        engine = tasks.from_arguments(a.jobs, a.ray)
    except tasks.EngineError as e:
        ap.error(str(e))
    if engine.kind == "ray":
        path = os.environ.get("PYTHONPATH", "")
        if str(ROOT) not in path.split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    return engine


def run_ordered(fn, items, engine, label: str, describe=lambda result: ""):
    """rocke.tasks.run_in_order: fn's results in the items' order, progress on stderr."""
    from rocke import tasks
    return tasks.run_in_order(fn, items, engine, label, describe)
