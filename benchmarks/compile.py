"""Build latency per shipped kernel variant. Prints figures; asserts nothing.

Columns (median of --repeats runs; LLVM's one-time target initialisation is reported apart):
  dsl   = running the builder to IR text (spec -> Kernel -> ir());
  cold  = dsl + compile_ir with the cache bypassed (verify, O3, codegen, ld.lld link, metadata);
  hit   = compile_ir on that IR with a warm cache (IR hash, entry load, metadata);
  warm  = dsl + hit, what rebuilding a variant in a new process costs with a warm cache;
  fork  = what crash isolation adds to cold (codegen in a forked child, so an LLVM abort becomes
          a CompileError): cold minus the same build with codegen in-process. A fork copies the
          process's page tables and the child's writes copy pages, so it grows with the
          resident memory of the process that compiles: --resident-gib G holds G GiB (touched)
          for the run, as a serving process would.

Then the first-call cost per variant with the prebuilt bundle (`rocke aot build`; one is written
for the measured variants into a temporary directory) against cold, the first call without it:
  by IR   = dsl + compile_ir served from the bundle (no link, no ld.lld);
  by spec = compiler.prebuilt.lookup_spec: no IR build either (checked against the golden table).

    .venv/bin/python benchmarks/compile.py [--repeats 5] [--resident-gib 0] [VARIANT ...]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

from rocke.compiler import CompileCache, compile_ir, llvm_version, prebuilt
from rocke.compiler.toolchain import target_machine
from rocke.compiler.pipeline import DEFAULT_TARGET
from rocke.kernels.registry import all_variants, get_variant


def cpu_name() -> str:
    """The CPU's model name (the benchmarks' one reading of /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def resident_mib() -> int:
    """This process's resident set, MiB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
    except (OSError, ValueError, IndexError):
        return 0


def machine() -> str:
    return (f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"LLVM {llvm_version()}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="*")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--resident-gib", type=float, default=0.0,
                    help="GiB of touched memory this process holds while it measures (default 0)")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error("--repeats must be >= 1")
    physical_gib = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / (1 << 30)
    if not 0 <= a.resident_gib <= physical_gib * 3 / 4:   # leave the builds room: no OOM kill
        ap.error(f"--resident-gib must be between 0 and 3/4 of this machine's memory "
                 f"({physical_gib * 3 / 4:.1f} GiB), got {a.resident_gib:g}")
    variants = [get_variant(v) for v in a.variants] if a.variants else list(all_variants().values())
    held = bytearray(int(a.resident_gib * (1 << 30)))
    for page in range(0, len(held), 4096):      # touched, so the pages are resident
        held[page] = 1
    print(f"machine: {machine()}")
    print(f"resident: {resident_mib()} MiB ({a.resident_gib:g} GiB held by --resident-gib)")
    t0 = time.perf_counter()
    target_machine(DEFAULT_TARGET, 3)
    print(f"LLVM target init (once per process): {(time.perf_counter() - t0) * 1e3:.1f} ms")
    print(f"{'variant':40s} {'dsl ms':>8s} {'cold ms':>8s} {'hit ms':>8s} {'warm ms':>8s} {'fork ms':>8s}"
          f"   (median of {a.repeats})")
    firsts = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = CompileCache(tmp)
        items = []
        for v in variants:
            dsl, cold, hit, warm, inproc = [], [], [], [], []
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                kern = v.kernel()
                ir = kern.ir()
                t1 = time.perf_counter()
                compile_ir(ir, name=kern.name, cache=False)
                t2 = time.perf_counter()
                dsl.append(t1 - t0)
                cold.append(t2 - t0)
                t3 = time.perf_counter()
                compile_ir(ir, name=kern.name, cache=False, isolate_codegen=False)
                inproc.append(time.perf_counter() - t3 + (t1 - t0))
            compile_ir(ir, name=kern.name, cache=store)
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                kern = v.kernel()
                ir = kern.ir()
                t1 = time.perf_counter()
                ck = compile_ir(ir, name=kern.name, cache=store)
                t2 = time.perf_counter()
                assert ck.cache_hit
                hit.append(t2 - t1)
                warm.append(t2 - t0)
            ms = [statistics.median(x) * 1e3 for x in (dsl, cold, hit, warm, inproc)]
            print(f"{v.name:40s} {ms[0]:8.1f} {ms[1]:8.1f} {ms[2]:8.2f} {ms[3]:8.1f} {ms[1] - ms[4]:8.1f}")
            items.append((v.name, v.spec, ck, kern.workgroup_size))
            firsts[v.name] = ms[1]
        first_call_with_bundle(variants, items, firsts, os.path.join(tmp, "bundle"), a.repeats)
    return 0


def first_call_with_bundle(variants, items, cold_ms, root, repeats) -> None:
    from rocke.kernels.golden import load_golden
    golden = load_golden()
    prebuilt.write_bundle(root, items)
    previous = os.environ.get("ROCKE_PREBUILT")
    os.environ["ROCKE_PREBUILT"] = root
    try:
        print(f"\nfirst call per variant, with and without the prebuilt bundle (median of {repeats})")
        print(f"{'variant':40s} {'no bundle':>10s} {'by IR':>8s} {'by spec':>8s}   ms")
        for v in variants:
            by_ir, by_spec = [], []
            for _ in range(repeats):
                t0 = time.perf_counter()
                kern = v.kernel()
                ck = compile_ir(kern.ir(), name=kern.name, workgroup_size=kern.workgroup_size)
                t1 = time.perf_counter()
                spec_ck = prebuilt.lookup_spec(v.spec, golden, DEFAULT_TARGET)
                t2 = time.perf_counter()
                assert ck.prebuilt and spec_ck is not None, f"{v.name}: not served from the bundle"
                by_ir.append(t1 - t0)
                by_spec.append(t2 - t1)
            print(f"{v.name:40s} {cold_ms[v.name]:10.1f} {statistics.median(by_ir) * 1e3:8.1f} "
                  f"{statistics.median(by_spec) * 1e3:8.2f}")
    finally:
        if previous is None:
            os.environ.pop("ROCKE_PREBUILT", None)
        else:
            os.environ["ROCKE_PREBUILT"] = previous


if __name__ == "__main__":
    sys.exit(main())
