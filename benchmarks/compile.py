"""Build latency per shipped kernel variant: cold (no cache) and warm (cache hit).

Prints figures; asserts nothing. Cold = DSL build + LLVM verify/O3/codegen + ld.lld link, with
the compile cache bypassed (LLVM's target initialisation is paid once, up front, and reported).
Warm = DSL build + IR hash + cache hit. Median of --repeats runs.

    .venv/bin/python benchmarks/compile.py [--repeats 5] [VARIANT ...]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

from rocke.compiler import CompileCache, llvm_version
from rocke.compiler.toolchain import target_machine
from rocke.compiler.pipeline import DEFAULT_TARGET
from rocke.kernels.registry import all_variants, get_variant


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, LLVM {llvm_version()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="*")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    variants = [get_variant(v) for v in a.variants] if a.variants else list(all_variants().values())
    print(f"machine: {machine()}")
    t0 = time.perf_counter()
    target_machine(DEFAULT_TARGET, 3)
    print(f"LLVM target init (once per process): {(time.perf_counter() - t0) * 1e3:.1f} ms")
    print(f"{'variant':48s} {'cold ms':>9s} {'warm ms':>9s}   (median of {a.repeats})")
    with tempfile.TemporaryDirectory() as tmp:
        store = CompileCache(tmp)
        for v in variants:
            cold = []
            for _ in range(a.repeats):
                t = time.perf_counter()
                v.compile(cache=False)
                cold.append(time.perf_counter() - t)
            v.compile(cache=store)
            warm = []
            for _ in range(a.repeats):
                t = time.perf_counter()
                ck = v.compile(cache=store)
                warm.append(time.perf_counter() - t)
                assert ck.cache_hit
            print(f"{v.name:48s} {statistics.median(cold) * 1e3:9.1f} {statistics.median(warm) * 1e3:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
