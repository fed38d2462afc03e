"""vLLM 0.33's INT4_PER_TOKEN_HEAD caches (ALGORITHM.md §13.4): K and V rows rotated by the
randomized Hadamard transform, quantized to two unsigned 4-bit codes a byte (low nibble first)
with a per-(token, head) fp32 scale carrying the row's zero point in its low mantissa bits. The
caches are written here by the test's own quantizer and rotation (a Sylvester matrix built by
Kronecker products, vLLM's signs from a fixture recorded off vLLM's code); the reference is
fp32 attention over the decoded rows rotated back, which the kernels never see. On the emulator:
2D narrow and transposed-x8, 3D, plain and vLLM's inline scale layout, through the entry point
and rocke.vllm; what int4 does not take is refused before launch."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rocke.kernels.common import attention_unified as au
from rocke.kernels.common import hadamard
from rocke.kernels.common.tolerances import attention_atol
from tests.kernels.test_attention_inline_scales import inline_caches
from tests.kernels.test_vllm_033_contract import no_launch
from tests.kernels.test_vllm_contract import _workspaces
from tests.kernels.unified_inputs import make_inputs, reference

FIXTURE = json.loads((Path(__file__).resolve().parents[1] / "fixtures" /
                      "vllm_int4_rht_signs_0.33.json").read_text())


def vllm_signs(d: int) -> torch.Tensor:
    return torch.tensor([1.0 if b == "1" else -1.0 for b in FIXTURE["signs"][str(d)]])


def sylvester(d: int) -> torch.Tensor:
    h = torch.ones(1, 1)
    while h.shape[0] < d:
        h = torch.kron(torch.tensor([[1.0, 1.0], [1.0, -1.0]]), h)
    return h


def _round_away(x):
    return torch.where(x >= 0, torch.floor(x + 0.5), torch.ceil(x - 0.5))


def quantize_int4(rows: torch.Tensor):
    """(packed uint8 [..., D/2], fp32 scale words [...]) of rotated rows [..., D], in vLLM's
    format: asymmetric 4-bit codes, the zero point in the scale's low four bits."""
    lo, hi = rows.amin(-1), rows.amax(-1)
    scale = ((hi - lo) / 15).clamp(min=1e-6)
    zero = _round_away(-lo / scale).clamp(0, 15)
    codes = _round_away(rows / scale[..., None] + zero[..., None]).clamp(0, 15).to(torch.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    word = (scale.view(torch.int32) & ~0xF) | zero.to(torch.int32)
    return packed, word.view(torch.float32)


def decode_int4(packed: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
    """The rotated rows the caches hold: (code - zero) * scale (its low bits cleared)."""
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2).float()
    bits = words.view(torch.int32)
    scale = (bits & ~0xF).view(torch.float32)
    return (codes - (bits & 0xF).float()[..., None]) * scale[..., None]


def _setup(seqs, *, d=64, hq=4, hk=2, bs=16, dtype="f16", seed=0, inline=None):
    args = make_inputs(seqs, hq=hq, hk=hk, d=d, bs=bs, dtype=dtype, seed=seed)
    g = torch.Generator().manual_seed(seed + 7)
    h, signs = sylvester(d), vllm_signs(d)
    caches, words, decoded = [], [], []
    for _ in range(2):
        true = torch.randn(*args["k"].shape, generator=g) * 0.5
        packed, word = quantize_int4((true * signs) @ h)           # vLLM's write: H D x
        caches.append(packed)
        words.append(word)
        decoded.append((decode_int4(packed, word) @ h) * signs / d)   # rotated back
    want = reference(dict(args, k=decoded[0], v=decoded[1]))
    unrotated = reference(dict(args, k=decode_int4(caches[0], words[0]),
                               v=decode_int4(caches[1], words[1])))
    assert (want - unrotated).abs().max() > 0.1, "the rotation changes nothing"
    k, v, ks, vs = (inline_caches(caches, words, inline) if inline else
                    (caches[0], caches[1], words[0], words[1]))
    args.update(k=k, v=v, k_scale_cache=ks, v_scale_cache=vs, kv_quant_mode="int4_per_token_head")
    return args, want


def test_rockes_rotation_is_vllms():
    for d in (64, 128, 256):
        x = torch.randn(3, d)
        assert torch.equal(hadamard.rht_signs(d), vllm_signs(d))
        torch.testing.assert_close(hadamard.rotate(x), (x * vllm_signs(d)) @ sylvester(d),
                                   atol=1e-4, rtol=1e-5)       # sums in another order
        torch.testing.assert_close(hadamard.rotate_back(hadamard.rotate(x)), x, atol=1e-5, rtol=1e-5)
    x = torch.randn(2, 96)              # not a power of two: blocks of 32
    blocks = (x.reshape(2, 3, 32) * vllm_signs(32)) @ sylvester(32)
    torch.testing.assert_close(hadamard.rotate(x), blocks.reshape(2, 96), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("backend, seqs, dtype, d, hq, hk, bs, inline", [
    ("2d", [(5, 40), (9, 9), (1, 23)], "f16", 64, 4, 2, 16, None),     # transposed-x8
    ("2d", [(5, 40), (9, 9)], "bf16", 128, 8, 2, 32, "HND"),           # narrow, inline layout
    ("2d", [(3, 33)], "f16", 256, 4, 4, 16, None),                     # d256
    ("3d", [(1, 70), (1, 23)], "f16", 64, 4, 1, 16, "NHD"),
])
def test_int4_caches_match_the_reference(backend, seqs, dtype, d, hq, hk, bs, inline):
    args, want = _setup(seqs, d=d, hq=hq, hk=hk, bs=bs, dtype=dtype, seed=d + hq, inline=inline)
    record = au.run_unified_attention_torch(**args, backend=backend)
    assert record.plan.path == backend
    assert all(s.kv_dtype == "int4" and "_kvi4tok" in s.kernel_name
               for s in record.plan.specs if hasattr(s, "kv_dtype"))
    err = (args["out"].float() - want).abs().max().item()
    assert err <= attention_atol(dtype), f"max |out - ref| {err}"


def test_rocke_vllm_runs_int4_on_both_paths():
    from rocke.vllm import KVQuantMode, unified_attention
    args, want = _setup([(1, 40), (1, 23)], seed=11, inline="HND")
    args["kv_quant_mode"] = KVQuantMode.INT4_PER_TOKEN_HEAD
    hq, d = args["q"].shape[1:]
    ws = _workspaces(2, 3, hq, d)              # one row per token: the 3D path writes them all
    unified_attention(**args, seq_threshold_3D=4, num_par_softmax_segments=3, **ws)
    assert not ws["softmax_segm_expsum"].isnan().any()           # the 3D path ran
    assert (args["out"].float() - want).abs().max() <= attention_atol("f16")
    args["out"].zero_()
    unified_attention(**args)                                    # 2D
    assert (args["out"].float() - want).abs().max() <= attention_atol("f16")


@pytest.mark.parametrize("mutate, error, match", [
    (lambda a: a.update(k=a["k"].view(torch.int8), v=a["v"].view(torch.int8)), ValueError,
     r"^k: kv_quant_mode int4_per_token_head needs torch.uint8 caches"),
    (lambda a: a.update(k=torch.zeros(*a["k"].shape[:3], 64, dtype=torch.uint8),
                        v=torch.zeros(*a["k"].shape[:3], 64, dtype=torch.uint8)), ValueError,
     r"^k: head_size 64 differs from q's 64 \(rows of 32: two int4 codes a byte\)"),
    (lambda a: a.update(output_scale=torch.tensor([0.5]),
                        out=torch.zeros(a["out"].shape).to(torch.float8_e4m3fnuz)),
     NotImplementedError, r"^kv_dtype: int4 caches .* fp8 output"),
])
def test_what_int4_does_not_take_is_refused_before_launch(monkeypatch, mutate, error, match):
    no_launch(monkeypatch)
    args, _ = _setup([(5, 40), (1, 23)], seed=3)
    mutate(args)
    before = args["out"].clone()
    with pytest.raises(error, match=match):
        au.run_unified_attention_torch(**args)
    assert torch.equal(args["out"], before)


def test_rocke_vllm_runs_int4_speculative_batches_on_2d(monkeypatch):
    """vLLM's INT4 launcher takes 3D for one-token queries only: a verify batch (2..8 tokens),
    which 3D takes with other caches, runs on 2D, the workspaces untouched."""
    from rocke.vllm import KVQuantMode, unified_attention
    taken = []
    real = au.run_unified_attention_torch

    def recording(*a, backend="auto", **kw):
        taken.append(backend)
        return real(*a, backend=backend, **kw)
    monkeypatch.setattr(au, "run_unified_attention_torch", recording)
    args, want = _setup([(3, 40), (2, 23)], seed=13)
    args["kv_quant_mode"] = KVQuantMode.INT4_PER_TOKEN_HEAD
    hq, d = args["q"].shape[1:]
    ws = _workspaces(8, 3, hq, d)
    unified_attention(**args, seq_threshold_3D=4, num_par_softmax_segments=3, **ws)
    assert taken == ["2d"] and all(t.isnan().all() for t in ws.values())
    assert (args["out"].float() - want).abs().max() <= attention_atol("f16")
