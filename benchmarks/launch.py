"""Host cost per launch: everything `rocke.runtime.launch` does before the device call, for a
compiled (cached) kernel variant. Prints figures; asserts nothing. Target: <= 20 us per launch.

Parts (median and best over --batches batches of --batch calls, mean per call):
  validate = the family's kernel_args (per-tensor dtype/shape/stride checks, argument order);
  dispatch = get_device(None): the default-device decision (ROCKE_DEVICE, else cached probe);
  prepare  = prepare_launch: geometry, the signature check once merged, kernarg packing;
  host     = the three in a row, as a caller of launch() pays them;
  hip      = HipDevice.launch_params: module-cache lookup, stream, kernarg buffer and `extra`
             array (only with --standin, which runs it under tests/hip_stub's stand-in
             libamdhip64.so, or on a machine with a gfx942 GPU).
--profile prints where the host path's time goes (cProfile, by own time).

    .venv/bin/python benchmarks/launch.py [--variant flash_attention/f16_d64_causal] [--standin]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from rocke import runtime
from rocke.kernels.registry import get_variant

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile import machine  # noqa: E402  (sibling benchmark: one definition of the machine line)


def per_call_us(fn, batch: int, batches: int) -> tuple[float, float]:
    """(median, best) over batches of the mean time per call, in microseconds. On a shared
    machine the best batch is the closest to the uncontended cost."""
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch)
    return statistics.median(samples) * 1e6, min(samples) * 1e6


def flash_attention_case(variant, B=1, H=8, S=512):
    from rocke.kernels.samples import flash_attention as fa
    spec = variant.spec
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[spec.dtype]
    q, k, v, o = (torch.zeros(B, H, S, spec.head_dim, dtype=dtype) for _ in range(4))
    grid, block = fa.launch_geometry(spec, B, H, S)
    return (lambda: fa.kernel_args(spec, q, k, v, o)), grid, block


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="flash_attention/f16_d64_causal")
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--standin", action="store_true",
                    help="also time the HIP device's host side under the stand-in libamdhip64.so")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args(argv)
    if a.batch < 1 or a.batches < 1:
        ap.error("--batch and --batches must be >= 1")
    variant = get_variant(a.variant)
    if variant.family != "flash_attention":
        ap.error("only flash_attention variants have a case here so far")
    compiled = variant.compile()                     # cached: the launch path is what we time
    make_args, grid, block = flash_attention_case(variant)
    args = make_args()
    runtime.get_device(None)                         # the one-time probe is not per launch

    def host():
        values = make_args()
        runtime.get_device(None)
        return runtime.prepare_launch(compiled, grid, block, values)

    print(f"machine: {machine()}")
    print(f"variant: {a.variant} (kernel {compiled.name}), grid {grid}, block {block}, "
          f"{len(compiled.info.args)} kernarg entries, {compiled.info.kernarg_size} B segment; "
          f"default device {runtime.default_device_kind()}")
    rows = [("validate", lambda: make_args()),
            ("dispatch", lambda: runtime.get_device(None)),
            ("prepare", lambda: runtime.prepare_launch(compiled, grid, block, args)),
            ("host", host)]
    if a.standin:
        rows.append(("hip", hip_side(compiled, grid, block, args)))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'part':10s} {'median us':>10s} {'best us':>10s}   ({a.batches} batches x {a.batch} "
          "calls, mean per call)")
    for name, fn in rows:
        median, best = per_call_us(fn, a.batch, a.batches)
        print(f"{name:10s} {median:10.2f} {best:10.2f}")
    if a.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(a.batch * a.batches):
            host()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    return 0


def hip_side(compiled, grid, block, args):
    """HipDevice.launch_params under the stand-in (device memory from hipMalloc)."""
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from tests.hip_stub import standin as standin_module
    stand_in = standin_module.load(Path(tempfile.mkdtemp(prefix="rocke-standin-")))
    stand_in.active = True
    stand_in.register(compiled)
    os.environ.pop("ROCKE_DEVICE", None)
    device = runtime.get_device("hip")
    buffers = [device.alloc(t.numel() * t.element_size()) if hasattr(t, "data_ptr") else t
               for t in args]
    prepared = runtime.prepare_launch(compiled, grid, block, buffers)
    device.launch_params(prepared)                   # loads the module once
    return lambda: device.launch_params(prepared)


if __name__ == "__main__":
    sys.exit(main())
