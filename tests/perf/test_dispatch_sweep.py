"""benchmarks/dispatch_sweep.py's sampling: one KV head x one repeat of the sequence pattern,
modelled over the full grid, gives the modelled time of emulating the whole problem."""
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import dispatch_sweep as sweep  # noqa: E402
from rocke.arch.costs import MI300X, MI355X  # noqa: E402
from rocke.kernels.common import attention_unified as au  # noqa: E402
from rocke.kernels.gfx942 import attention_tiled_3d as k3, reduce_segments as kr  # noqa: E402
from rocke.perf import model_time  # noqa: E402
from rocke.runtime import launch  # noqa: E402
from tests.kernels.unified_inputs import make_inputs  # noqa: E402


def full_3d(seqs, hq, hk, d, ns, target="gfx942", costs=MI300X):
    """Modelled us per latency of the whole problem, every workgroup emulated."""
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=64, dtype="f16", seed=0)
    p = au.describe_problem(*(args[n] for n in sweep.NAMES))
    spec3, spec_r = au.attention_target(target).plan(p, "3d").specs
    so = torch.empty(p.total_q, hq, ns, d)
    sm, se = torch.empty(p.total_q, hq, ns), torch.empty(p.total_q, hq, ns)
    a3 = k3.kernel_args(spec3, args["q"], args["k"], args["v"], so, sm, se, args["block_table"],
                        args["cu_seqlens_q"], args["seqused_k"], float(args["softmax_scale"]), ns)
    g3, b3 = k3.launch_geometry(spec3, p.num_seqs, p.total_q, hk, ns)
    ar = kr.kernel_args(spec_r, so, sm, se, args["out"], ns)
    gr, br = kr.launch_geometry(spec_r, p.total_q, hq)
    out = dict.fromkeys(sweep.LATENCIES, 0.0)
    for c, g, b, a in ((au.compiled(spec3), g3, b3, a3), (au.compiled(spec_r), gr, br, ar)):
        with sweep.emulating_as(target):
            prof = launch(c, g, b, a, device="emu", profile=True).profile
        for cycles in sweep.LATENCIES:
            out[cycles] += model_time(prof, costs=replace(costs, memory_latency_cycles=cycles)).us
    return out


def test_sampled_sweep_models_the_full_problem():
    case = sweep.Case("decode", ((1, 256),), 2, 8, 2, "f16", 64)
    sampled = sweep.modelled(case, "3d", 4)
    full = full_3d([(1, 256)] * 2, 8, 2, 64, 4)
    for cycles in sweep.LATENCIES:
        assert sampled[cycles] == pytest.approx(full[cycles], rel=0.02), cycles


def test_gfx950_sweep_runs_gfx950_kernels_modelled_as_mi355x():
    """--target gfx950: gfx950's plan, the emulator as gfx950 and MI355X's costs, sampled as on
    gfx942 (one KV head, one repeat) and equal to emulating every workgroup."""
    case = sweep.Case("decode", ((1, 256),), 2, 8, 2, "f16", 64, target="gfx950")
    (prof3, _), = [sweep.profiles(case, "3d", 4)]
    assert prof3.kernel.endswith("_gfx950")
    sampled = sweep.modelled(case, "3d", 4)
    full = full_3d([(1, 256)] * 2, 8, 2, 64, 4, target="gfx950", costs=MI355X)
    for cycles in sweep.LATENCIES:
        assert sampled[cycles] == pytest.approx(full[cycles], rel=0.02), cycles
    assert sampled[2000] != pytest.approx(sweep.modelled(replace(case, target="gfx942"), "3d", 4)[2000])


def test_heads_argument_is_checked_before_any_run(capsys):
    with pytest.raises(SystemExit):
        sweep.main(["--heads", "32/5"])
    assert "--heads" in capsys.readouterr().err
