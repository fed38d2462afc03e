"""benchmarks/vllm_peer.py: vLLM 0.33's own Triton unified-attention kernels, read from a vLLM 0.33
wheel at run time (never copied into this repository), compiled for gfx942 by Triton on the CPU
and run in rocke's emulator on rocke's inputs -- they must match the fp32 reference on a small 2D
case (prefill with a sliding window and softcap) and a small 3D case (decode: split-KV kernel +
reduce_segments, with empty trailing segments) and come back with exact counters. The
host-side launch rule (our mirror of vLLM 0.33's unified_attention) is checked without Triton."""
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import vllm_peer as vp  # noqa: E402
from rocke.kernels.common.attention_reference import ref_paged_attn  # noqa: E402
from rocke.kernels.common.tolerances import attention_atol  # noqa: E402
from tests.kernels.unified_inputs import make_inputs  # noqa: E402


def _peer_or_skip():
    try:
        import triton  # noqa: F401
    except ImportError:
        pytest.skip("Triton is not installed (pip install 'triton>=3.2'): it compiles vLLM's "
                    "kernels for gfx942")
    try:
        return vp.find_vllm()
    except vp.VllmNotFound as e:
        pytest.skip(f"no vLLM 0.33 wheel to read the kernels from ({e})")


@pytest.mark.parametrize("seqs, extra, dtype, path", [
    # a short prefill + a decode row: 2D (max_seqlen_q 20 > MAX_3D_QUERY_LEN), window + softcap
    ([(20, 90), (1, 33)], {"window_size": (15, 0), "softcap": 20.0}, "bf16", "2d"),
    # pure decode, 2 sequences: 3D, 16 segments; kv 40 over TILE 16 leaves segments 3.. empty
    ([(1, 300), (1, 40)], {}, "f16", "3d"),
])
def test_vllm_peer_matches_reference(seqs, extra, dtype, path):
    found = _peer_or_skip()
    a = make_inputs(seqs, hq=8, hk=2, d=64, bs=16, dtype=dtype)
    a.update(extra)
    peer = vp.run_vllm_peer(**a)
    assert peer.path == path and peer.vllm == found.version
    assert len(peer.reports) == (2 if path == "3d" else 1)
    ref = ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                         a["block_table"], a["softmax_scale"], window_size=a["window_size"],
                         softcap=a["softcap"])
    tol = attention_atol(dtype)
    torch.testing.assert_close(a["out"].float(), ref, atol=tol, rtol=0)
    c = peer.reports[0].profile.counters()
    assert c["mfma"] > 0 and c["global_read_bytes"] > 0
    assert tuple(peer.reports[0].profile.grid) == tuple(peer.plan.grid) + (1,) * (
        3 - len(peer.plan.grid))
    if path == "3d":
        assert peer.reports[0].profile.grid[2] == vp.NUM_PAR_SOFTMAX_SEGMENTS
        assert tuple(peer.reports[1].profile.grid[:2]) == (2, 8)       # (tokens, q heads)


def test_launch_plan_follows_vllm_033():
    """Our mirror of vLLM 0.33's host side (unified_attention + the Triton backend's builder)."""
    plan = vp.launch_plan            # tokens, seqs, max q, hq, hk, d, element size, window
    p = plan(2, 2, 1, 32, 8, 128, 2, (-1, -1))
    # decode: 3D, grid (tokens // BLOCK_Q + seqs, hk, 16), decode tile 16, threshold 128 // 8
    assert (p.use_3d, p.block_m, p.block_q, p.grid, p.tile_size, p.seq_threshold_3d) == (
        True, 16, 4, (2 // 4 + 2, 8, 16), 16, 16)
    # more decode sequences than the threshold (16 for 8 KV heads): 2D, prefill tile 32
    p = plan(17, 17, 1, 32, 8, 128, 2, (-1, -1))
    assert (p.use_3d, p.grid, p.tile_size) == (False, (17 // 4 + 17, 8), 32)
    # a query longer than MAX_3D_QUERY_LEN: 2D; a short one (spec-decode size) on few
    # sequences: 3D if the scratch (threshold rows, one token each) holds every token
    assert not plan(48, 3, 48, 32, 8, 128, 2, (-1, -1)).use_3d
    assert plan(8, 2, 4, 32, 8, 128, 2, (-1, -1)).use_3d
    assert not plan(20, 5, 4, 32, 8, 128, 2, (-1, -1)).use_3d       # 20 tokens > 16 rows
    assert not plan(4, 1, 4, 32, 8, 128, 2, (-1, -1), causal=False).use_3d
    # GQA group above 16: BLOCK_M the next power of two, BLOCK_Q 1
    p = plan(1, 1, 1, 40, 2, 128, 2, (-1, -1))
    assert (p.block_m, p.block_q) == (32, 1)
    # Gemma3's window 1024 at d 128 / 256 takes tile 32 for decode; fp8 takes 32
    assert plan(1, 1, 1, 8, 2, 256, 2, (1023, 0)).tile_size == 32
    assert plan(1, 1, 1, 8, 2, 256, 1, (-1, -1)).tile_size == 32
    # the threshold snaps to the closest CUDA-graph capture size (128 // 3 = 42 -> 40)
    assert plan(1, 1, 1, 6, 3, 64, 2, (-1, -1)).seq_threshold_3d == 40
    assert plan(1, 1, 1, 6, 3, 64, 2, (-1, -1), cudagraphs=False).seq_threshold_3d == 42


def test_find_vllm_refuses_what_is_not_vllm_033(tmp_path):
    with pytest.raises(vp.VllmNotFound, match="neither a vLLM wheel"):
        vp.find_vllm(tmp_path / "nothing-here")
    with pytest.raises(vp.VllmNotFound, match="not a vLLM package"):
        vp.find_vllm(tmp_path)
    pkg = tmp_path / "vllm"
    (pkg / "v1/attention/ops").mkdir(parents=True)
    for rel in (vp.KERNEL_FILE, vp.HELPERS_FILE):
        (pkg / rel).write_text("# stand-in\n")
    (pkg / "_version.py").write_text("__version__ = version = '0.34.1'\n")
    with pytest.raises(ValueError, match="vLLM 0.34.1; the peer mirrors vLLM 0.33"):
        vp.find_vllm(tmp_path)


def test_profile_vllm033_shape_set_and_peer_tables():
    """profile.py --grid vllm033: the plain cases of vLLM 0.33's test grid, one shape each, at
    their own dtype / head size / heads; a closing table per peer backend."""
    from benchmarks import profile as bench
    shapes = bench.vllm033_shapes()
    assert len(shapes) == 13
    assert all(s.dtype in ("f16", "bf16") and s.head_size in (96, 128, 256) and s.block_size == 16
               for s in shapes.values())
    assert {(s.hq, s.hk) for s in shapes.values()} == {(4, 4), (8, 2), (5, 1)}

    def row(backend, us):
        return {"shape": "s", "dtype": "f16", "head_size": 64, "backend": backend, "path": "2d",
                "counters": {}, "modelled_us": us, "launches": [{"binding": "dram"}],
                "modelled_us_at_latency": {c: us for c in bench.LATENCIES}}
    rows = [row("auto", 8.0), row("peer", 10.0), row("peer-own", 16.0)]
    (g,) = bench.summary(rows)
    assert g["ratio"] == 0.8 and g["goal_met"] and g["peer_us"] == 10.0
    (g,) = bench.summary(rows, "peer-own")
    assert g["ratio"] == 0.5 and g["peer_us"] == 16.0
