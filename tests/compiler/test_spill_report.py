"""A spilling kernel's compile-time report says what to try (smaller tile, fewer warps, a lower
`waves_per_eu`) with the kernel's own register numbers, in `KernelInfo.report()` and in
`rocke report` (which still exits 1: shipped kernels are gated at 0 spills). This module is
also a tiny kernel family (the registry's contract) so the CLI can report a spilling variant."""
from dataclasses import dataclass, replace

from click.testing import CliRunner

from rocke.arch import occupancy
from rocke.cli import main as cli
from rocke.compiler.metadata import KernelInfo
from rocke.kernels.registry import register_family, unregister_family

from tests.emu.test_scratch import row_mean_var_kernel


@dataclass(frozen=True)
class RowMeanVarSpec:
    waves_per_eu: int = 0      # 0 = no occupancy hint

    def __post_init__(self):
        if self.waves_per_eu not in range(0, 9):
            raise ValueError(f"waves_per_eu: must be an int in [0, 8], got {self.waves_per_eu!r}")


VARIANTS = {"wpe8": RowMeanVarSpec(8), "free": RowMeanVarSpec(0)}
GOLDEN_PERTURBATION = ("waves_per_eu", {8: 4, 0: 8})


def build(spec: RowMeanVarSpec):
    return row_mean_var_kernel(spec.waves_per_eu or None)


def _info(**changes) -> KernelInfo:
    base = dict(name="k", target="gfx942", args=(), kernarg_size=0, vgprs=128, agprs=0, sgprs=30,
                accum_offset=0, lds_bytes=0, scratch_bytes=0, vgpr_spills=0, sgpr_spills=0,
                wave_size=64, max_workgroup_size=256)
    base.update(changes)
    occ = occupancy(vgprs=base["vgprs"], agprs=base["agprs"], sgprs=base["sgprs"],
                    workgroup_size=base["max_workgroup_size"])
    return KernelInfo(**base, occupancy=occ)


def test_a_kernel_without_spills_reports_one_line_and_no_advice():
    info = _info()
    assert info.spill_advice() == "" and "\n" not in info.report()
    assert "spills 0v/0s" in info.report()


def test_vgpr_spills_name_the_register_budget_and_each_lever():
    info = _info(vgprs=128, vgpr_spills=40, scratch_bytes=160, max_workgroup_size=1024)
    text = info.report()
    first, *advice = text.splitlines()
    assert "spills 40v/0s" in first and "scratch 160 B" in first
    assert "40 VGPR values to 160 B of scratch per work-item" in advice[0] and "SGPR" not in advice[0]
    assert any("smaller tile" in line and "128 registers per lane" in line for line in advice)
    # 1024 work-items = 16 waves over 4 SIMDs: 4 waves per SIMD, 512 / 4 = 128 registers each
    assert any("fewer warps" in line and "16 waves" in line and "at most 128 of the 512" in line
               for line in advice)
    # 128 registers = 4 waves per SIMD; waves_per_eu=2 would allow 256
    assert any("waves_per_eu" in line and "4 waves per SIMD" in line and
               "waves_per_eu=2 allows 256" in line for line in advice)
    assert not any("uniform values" in line for line in advice)


def test_one_wave_workgroups_get_no_fewer_warps_advice_and_sgpr_spills_get_their_own():
    info = _info(vgprs=64, vgpr_spills=3, sgpr_spills=5, max_workgroup_size=64)
    advice = info.spill_advice()
    assert "fewer warps" not in advice
    assert "waves_per_eu=4 allows 128" in advice and "uniform values" in advice
    assert replace(info, vgpr_spills=0).spill_advice().count("\n  - ") == 1


def test_rocke_report_prints_the_advice_and_still_fails_on_spills():
    register_family("spill_demo", __name__)
    try:
        r = CliRunner().invoke(cli, ["report", "--no-cache", "spill_demo/wpe8"])
    finally:
        unregister_family("spill_demo")
    assert r.exit_code == 1, r.output
    assert "total spills: 0" not in r.output
    assert "row_mean_var_wpe8 spills" in r.output and "smaller tile" in r.output
    assert "waves_per_eu=4 allows 128 registers" in r.output


def _sgpr_heavy_kernel(count: int):
    """`count` f32 arguments all live across a runtime loop: more uniform values than SGPRs."""
    from rocke.dsl import Kernel, f32
    k = Kernel("sgpr_heavy", workgroup_size=64)
    x = k.arg_ptr("x", f32)
    n = k.arg_i32("n")
    scales = [k.arg_f32(f"a{j}") for j in range(count)]
    t = k.thread_id(0)
    with k.for_range(0, n, carry=x.load(t)) as loop:
        acc = loop.carry
        for a in scales:
            acc = acc * a + 1.0
        loop.yield_(acc)
    x.store(t, loop.results)
    return k


def test_sgpr_only_spills_say_they_go_to_vgpr_lanes_and_explain_the_sgpr_count():
    import re
    import torch
    from rocke.compiler import compile_ir
    from rocke.runtime import launch
    k = _sgpr_heavy_kernel(110)
    ck = compile_ir(k, cache=False)
    info = ck.info
    assert info.sgpr_spills > 0 and info.vgpr_spills == 0 and info.scratch_bytes == 0
    # what LLVM really emitted: lane writes/reads, no scratch traffic
    assert re.search(r"\bv_writelane_b32\b", ck.asm) and re.search(r"\bv_readlane_b32\b", ck.asm)
    assert not re.search(r"\bscratch_(store|load)|buffer_(store|load)_dword\S* v\d+, off, s\[", ck.asm)
    first, *advice = info.report().splitlines()
    reserved = info.sgprs - info.numbered_sgprs
    assert info.numbered_sgprs <= 102 < info.sgprs and reserved == 6
    assert f"SGPR {info.sgprs} ({info.numbered_sgprs} + 6 reserved)" in first
    assert "SGPR values to VGPR lanes, not to memory" in advice[0] and "v_writelane_b32" in advice[0]
    assert "scratch store" not in "\n".join(advice)
    assert any(f"uses {info.numbered_sgprs} of the 102 addressable SGPRs" in a and
               f"SGPR {info.sgprs} reported adds the 6" in a and "VCC, FLAT_SCRATCH, XNACK_MASK" in a
               for a in advice)
    # and the spilled kernel still computes acc = acc * a + 1 with every argument
    x = torch.arange(64, dtype=torch.float32)
    args = [1.0 + (j % 3) / 8 for j in range(110)]
    want = x.clone().double()
    for _ in range(2):
        for a in args:
            want = want * a + 1.0
    launch(ck, (1,), (64,), [x, 2, *args])
    torch.testing.assert_close(x.double(), want, rtol=1e-5, atol=0)
