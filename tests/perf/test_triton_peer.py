"""benchmarks/triton_peer.py: our vLLM-style Triton kernels, compiled for gfx942 by Triton on the
CPU, run in rocke's emulator on rocke's inputs -- they must match ref_paged_attn (2D with a window
and softcap, 3D decode with an empty trailing segment) and come back with exact counters."""
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import profile as bench  # noqa: E402
from benchmarks.triton_peer import NUM_SEGMENTS, run_peer  # noqa: E402
from rocke.kernels.common.attention_reference import ref_paged_attn  # noqa: E402
from tests.kernels.unified_inputs import make_inputs  # noqa: E402


def _ref(a):
    return ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                          a["block_table"], a["softmax_scale"], window_size=a["window_size"],
                          softcap=a["softcap"])


@pytest.mark.parametrize("seqs, extra, dtype, path", [
    # decode: 3D, 16 segments; kv 40 over TILE 16 leaves segments 3.. empty (no partial written)
    ([(1, 300), (1, 40)], {}, "f16", "3d"),
    ([(20, 90), (1, 33)], {"window_size": (15, 0), "softcap": 20.0}, "bf16", "2d"),
])
def test_peer_matches_reference(seqs, extra, dtype, path):
    a = make_inputs(seqs, hq=8, hk=2, d=64, bs=16, dtype=dtype)
    a.update(extra)
    peer = run_peer(**a)
    assert peer.path == path
    assert len(peer.reports) == (2 if path == "3d" else 1)
    tol = 2e-3 if dtype == "f16" else 1.6e-2
    torch.testing.assert_close(a["out"].float(), _ref(a), atol=tol, rtol=tol)
    c = peer.reports[0].profile.counters()
    assert c["mfma"] > 0 and c["global_read_bytes"] > 0
    if path == "3d":
        assert peer.reports[0].profile.grid[2] == NUM_SEGMENTS


def test_peer_refuses_what_it_cannot_run():
    a = make_inputs([(1, 20)], hq=4, hk=2, d=64, bs=16, causal=False)
    with pytest.raises(ValueError, match="causal only"):
        run_peer(**a)
    a = make_inputs([(1, 20)], hq=4, hk=2, d=64, bs=16)
    with pytest.raises(ValueError, match="path must be"):
        run_peer(**a, path="4d")


def test_benchmark_summary_ratio_and_goal():
    """The closing table's arithmetic on two hand-made rows (ratio = rocke / peer)."""
    def row(backend, us):
        return {"shape": "s", "dtype": "f16", "head_size": 64, "backend": backend, "path": "2d",
                "counters": {}, "modelled_us": us, "launches": [{"binding": "dram"}],
                "modelled_us_at_latency": {c: us for c in bench.LATENCIES}}
    (g,) = bench.summary([row("auto", 8.0), row("peer", 10.0)])
    assert g["ratio"] == 0.8 and g["goal_met"]
    (g,) = bench.summary([row("auto", 9.0), row("peer", 10.0)])
    assert g["ratio"] == 0.9 and not g["goal_met"]
