"""Requested (waves_per_eu) vs achieved occupancy in KernelInfo and `rocke report`, with the miss
flagged -- before, a miss was only LLVM's "failed to meet occupancy target" warning on stderr.
This module is also a tiny kernel family so the CLI can report it."""
from dataclasses import dataclass

from click.testing import CliRunner

from rocke.cli import main as cli
from rocke.compiler import compile_ir
from rocke.compiler.cache import CompileCache
from rocke.compiler.metadata import requested_waves_per_eu
from rocke.dsl import Kernel, f32
from rocke.kernels.registry import register_family, unregister_family


@dataclass(frozen=True)
class LdsHeavySpec:
    waves_per_eu: int = 0       # 0 = no request
    lds_floats: int = 12000     # 48000 B: one 256-item workgroup per CU, one wave per SIMD

    def __post_init__(self):
        if self.waves_per_eu not in range(0, 9):
            raise ValueError(f"waves_per_eu: must be an int in [0, 8], got {self.waves_per_eu!r}")


VARIANTS = {"want8": LdsHeavySpec(8), "want1": LdsHeavySpec(1), "free": LdsHeavySpec(0)}
GOLDEN_PERTURBATION = ("waves_per_eu", {8: 4, 1: 2, 0: 8})


def build(spec: LdsHeavySpec):
    k = Kernel(f"lds_heavy_w{spec.waves_per_eu}", workgroup_size=256,
               waves_per_eu=spec.waves_per_eu or None)
    x = k.arg_ptr("x", f32)
    t = k.thread_id(0)
    tile = k.lds("tile", (spec.lds_floats,), f32)
    tile.store(t, x.load(t))
    k.barrier()
    x.store(t, tile.load((t + 1) % 256))
    return k


def test_a_missed_waves_per_eu_is_flagged_with_its_limiter_and_what_to_try():
    info = compile_ir(build(LdsHeavySpec(8)), cache=False).info
    assert info.requested_waves_per_eu == 8 and info.occupancy.waves_per_simd == 1
    assert info.occupancy_missed
    first, *advice = info.report().splitlines()
    assert "requested waves_per_eu=8: MISSED" in first
    assert "limited by lds" in advice[0] and "48000 B of LDS" in advice[1] and "<= 8192 B" in advice[1]


def test_a_met_or_absent_request_is_not_flagged():
    met = compile_ir(build(LdsHeavySpec(1)), cache=False).info
    assert met.requested_waves_per_eu == 1 and not met.occupancy_missed
    assert "requested waves_per_eu=1: met" in met.report() and met.occupancy_advice() == ""
    free = compile_ir(build(LdsHeavySpec(0)), cache=False).info
    assert free.requested_waves_per_eu is None and "requested" not in free.report()


def test_a_cache_hit_reports_the_request_too(tmp_path):
    store = CompileCache(tmp_path)
    k = build(LdsHeavySpec(8))
    compile_ir(k.ir(), name=k.name, cache=store)
    again = compile_ir(k.ir(), name=k.name, cache=store)
    assert again.cache_hit and again.info.occupancy_missed


def test_the_request_is_read_from_the_define_line_or_an_attribute_group():
    inline = 'define amdgpu_kernel void @"k"(ptr %p) "amdgpu-waves-per-eu"="4,8" {\n'
    grouped = ('define amdgpu_kernel void @k(ptr %p) #0 {\n}\n'
               'attributes #0 = { nounwind "amdgpu-waves-per-eu"="3" }\n')
    assert requested_waves_per_eu(inline, "k") == 4
    assert requested_waves_per_eu(grouped, "k") == 3
    assert requested_waves_per_eu(grouped, "other") is None
    assert requested_waves_per_eu('define amdgpu_kernel void @k() #0 {\n}\nattributes #0 = { }\n', "k") is None


def test_rocke_report_shows_requested_vs_achieved_and_counts_misses():
    register_family("occupancy_demo", __name__)
    try:
        r = CliRunner().invoke(cli, ["report", "--no-cache", "occupancy_demo/want8", "occupancy_demo/want1"])
    finally:
        unregister_family("occupancy_demo")
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line for line in r.output.splitlines() if line.startswith("occupancy_demo/")}
    assert "1w/SIMD" in rows["occupancy_demo/want8"] and "want 8: MISSED" in rows["occupancy_demo/want8"]
    assert "want 1: met" in rows["occupancy_demo/want1"]
    assert "1 miss their requested occupancy" in r.output
    assert "asked for waves_per_eu=8 but gets 1 wave(s) per SIMD" in r.output
