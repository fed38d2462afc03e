"""A Triton stand-in peer for rocke's unified attention (benchmarks/profile.py backend
"peer-own"; the "peer" backend is vLLM 0.33's own kernels, benchmarks/vllm_peer.py): our own
Triton kernels written in the style of vLLM's unified attention
(vllm/v1/attention/ops/triton_unified_attention.py: one q-block x KV head program per workgroup,
a 2D grid that walks a sequence's whole KV range, a 3D grid that splits it into segments whose
fp32 partials a reduce kernel combines), compiled by Triton for gfx942 on the CPU and run in
rocke's emulator on rocke's inputs.

What follows vLLM's algorithm (so the peer is the competitor rocke ships against):
  * BLOCK_M = 16 query rows per program (or the next power of two of the GQA group), i.e.
    BLOCK_Q = BLOCK_M // group query tokens times the group's heads, K/V loaded once per KV head;
  * a q-block -> sequence binary search over cu_seqlens_q in the kernel;
  * causal + sliding-window masks with window tile skipping, softcap as cap * tanh(s / cap);
  * 3D only for pure decode (max_seqlen_q == 1), 16 segments, TILE 16 (2-byte dtypes) for 3D and
    32 for 2D, num_warps 4 / num_stages 2 (Triton's HIP defaults).

Compiled assembly is cached in .rocke-cache/triton_peer/ (gitignored), keyed by this file's
kernel source, the constexprs, the divisibility hints and the Triton version; a fresh checkout
regenerates it with Triton (installed in the project's .venv). Without Triton, the assembly of
the configurations the tests run comes from tests/fixtures/triton_peer/ (generated from these
kernels by Triton: `ROCKE_WRITE_PEER_FIXTURES=1 pytest tests/perf/test_triton_peer.py`). Nothing here is GPU time: the
emulator gives exact counters, rocke.perf turns them into a *modelled* MI300X time.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".rocke-cache" / "triton_peer"
FIXTURES = ROOT / "tests" / "fixtures" / "triton_peer"
TRITON_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32",
                torch.int32: "i32"}
NUM_SEGMENTS = 16           # vLLM's NUM_PAR_SOFTMAX_SEGMENTS
OPTIONS = {"num_warps": 4, "num_stages": 2, "enable_fp_fusion": True}

KERNEL_SOURCE = r'''
import triton
import triton.language as tl


@triton.jit
def _sequence_of(cu_q_ptr, target, num_seqs, BLOCK_Q: tl.constexpr, IN_Q_BLOCKS: tl.constexpr):
    """The sequence owning `target` (a q-block index when IN_Q_BLOCKS, else a token index):
    the last s with start(s) <= target, where start counts q-blocks as cu_q[s] // BLOCK_Q + s."""
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first = tl.load(cu_q_ptr + mid)
        if IN_Q_BLOCKS:
            first = first // BLOCK_Q + mid
        if first <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def peer_attention(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr,
                   q_ptr, k_ptr, v_ptr, table_ptr, kv_lens_ptr, cu_q_ptr,
                   num_seqs, scale, softcap,
                   q_row, q_head, o_row, o_head, table_row,
                   kv_page, kv_slot, kv_head,
                   HQ: tl.constexpr, GROUP: tl.constexpr, PAGE: tl.constexpr,
                   TILE: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
                   BLOCK_Q: tl.constexpr, BLOCK_M: tl.constexpr, WINDOW: tl.constexpr,
                   SOFTCAP: tl.constexpr, SEGMENTS: tl.constexpr, SPLIT: tl.constexpr):
    qb = tl.program_id(0)
    hk = tl.program_id(1)
    seg = tl.program_id(2)
    s = _sequence_of(cu_q_ptr, qb, num_seqs, BLOCK_Q, True)
    q_start = tl.load(cu_q_ptr + s)
    q_len = tl.load(cu_q_ptr + s + 1) - q_start
    kv_len = tl.load(kv_lens_ptr + s)
    qb_local = qb - (q_start // BLOCK_Q + s)
    if qb_local * BLOCK_Q >= q_len:
        return
    tiles_per_seg = 0
    if SPLIT:
        tiles_per_seg = tl.cdiv(kv_len, SEGMENTS * TILE)
        if seg * tiles_per_seg * TILE >= kv_len:
            return

    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, DP)
    keys = tl.arange(0, TILE)
    q_pos = qb_local * BLOCK_Q + rows // GROUP          # position within the sequence's queries
    head = hk * GROUP + rows % GROUP
    row_ok = (q_pos < q_len) & (head < HQ)
    col_ok = cols < D
    token = q_start + q_pos
    qv = tl.load(q_ptr + token[:, None] * q_row + head[:, None] * q_head + cols[None, :],
                 mask=row_ok[:, None] & col_ok[None, :], other=0.0)

    context = kv_len - q_len
    # the last key any row of this block may see (causal), and the first (window)
    last_pos = tl.minimum(qb_local * BLOCK_Q + (BLOCK_M - 1) // GROUP, q_len - 1)
    visible = tl.minimum(context + qb_local * BLOCK_Q + (BLOCK_M - 1) // GROUP + 1, kv_len)
    lo = 0
    hi = tl.cdiv(visible, TILE)
    if WINDOW > 0:
        lo = tl.maximum(0, (context + qb_local * BLOCK_Q - WINDOW + 1) // TILE)
        hi = tl.minimum((context + last_pos) // TILE + 1, hi)
    if SPLIT:
        lo = tl.maximum(lo, seg * tiles_per_seg)
        hi = tl.minimum(hi, (seg + 1) * tiles_per_seg)

    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l = tl.full([BLOCK_M], 1.0, tl.float32)
    acc = tl.zeros([BLOCK_M, DP], tl.float32)
    q_abs = context + q_pos
    for t in range(lo, hi):
        key = t * TILE + keys
        key_ok = key < visible
        page = tl.load(table_ptr + s * table_row + key // PAGE).to(tl.int64)
        base = page * kv_page + (key % PAGE) * kv_slot + hk * kv_head
        kt = tl.load(k_ptr + base[None, :] + cols[:, None],
                     mask=col_ok[:, None] & key_ok[None, :], other=0.0)
        vt = tl.load(v_ptr + base[:, None] + cols[None, :],
                     mask=key_ok[:, None] & col_ok[None, :], other=0.0)
        sc = scale * tl.dot(qv, kt)
        if SOFTCAP:
            e = tl.exp(2.0 * sc / softcap)
            sc = softcap * (1.0 - 2.0 / (e + 1.0))
        ok = row_ok[:, None] & (key[None, :] <= q_abs[:, None])
        if WINDOW > 0:
            ok = ok & (q_abs[:, None] - key[None, :] < WINDOW)
        sc = tl.where(ok, sc, float("-inf"))
        m_new = tl.maximum(m, tl.max(sc, axis=1))
        m_new = tl.where(m_new > float("-inf"), m_new, 0.0)    # a fully masked row stays finite
        p = tl.exp(sc - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
        m = m_new

    if SPLIT:
        part = (token.to(tl.int64) * HQ + head) * SEGMENTS + seg
        tl.store(part_out_ptr + part[:, None] * DP + cols[None, :], acc,
                 mask=row_ok[:, None] & col_ok[None, :])
        tl.store(part_max_ptr + part, m, mask=row_ok)
        tl.store(part_sum_ptr + part, l, mask=row_ok)
    else:
        tl.store(out_ptr + token[:, None] * o_row + head[:, None] * o_head + cols[None, :],
                 acc / l[:, None], mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def peer_reduce(out_ptr, part_out_ptr, part_max_ptr, part_sum_ptr, kv_lens_ptr, cu_q_ptr,
                num_seqs, o_row, o_head,
                HQ: tl.constexpr, TILE: tl.constexpr, D: tl.constexpr, DP: tl.constexpr,
                SEGMENTS: tl.constexpr):
    token = tl.program_id(0)
    head = tl.program_id(1)
    s = _sequence_of(cu_q_ptr, token, num_seqs, 1, False)
    kv_len = tl.load(kv_lens_ptr + s)
    tiles_per_seg = tl.cdiv(kv_len, SEGMENTS * TILE)
    used = tl.cdiv(kv_len, tiles_per_seg * TILE)
    segs = tl.arange(0, SEGMENTS)
    cols = tl.arange(0, DP)
    seg_ok = segs < used
    part = (token.to(tl.int64) * HQ + head) * SEGMENTS + segs
    mx = tl.load(part_max_ptr + part, mask=seg_ok, other=float("-inf"))
    top = tl.max(mx, axis=0)
    w = tl.exp(mx - top)
    total = tl.sum(tl.load(part_sum_ptr + part, mask=seg_ok, other=0.0) * w, axis=0)
    parts = tl.load(part_out_ptr + part[:, None] * DP + cols[None, :],
                    mask=seg_ok[:, None] & (cols < D)[None, :], other=0.0)
    acc = tl.sum(parts * w[:, None], axis=0)
    acc = tl.where(total == 0.0, 0.0, acc / total)
    tl.store(out_ptr + token * o_row + head * o_head + cols, acc, mask=cols < D)
'''


@dataclass(frozen=True)
class Compiled:
    asm: str
    symbol: str
    block: tuple
    shared: int
    runtime_args: tuple     # names, in the kernel's argument order (constexprs left out)
    extra_pointers: int     # Triton's trailing scratch pointers (passed as None)

    @classmethod
    def from_json(cls, d: dict) -> "Compiled":
        """A cached entry (``json.dumps(compiled.__dict__, ...)``) back (benchmarks/vllm_peer.py
        caches the same record)."""
        return cls(d["asm"], d["symbol"], tuple(d["block"]), d["shared"],
                   tuple(d["runtime_args"]), d["extra_pointers"])


def _signature(names, values):
    sig, divisible = {}, []
    for n in names:
        v = values[n]
        if isinstance(v, torch.Tensor):
            sig[n] = "*" + TRITON_TYPES[v.dtype]
            divisible.append(n)             # torch allocations are 16-byte aligned
        elif isinstance(v, float):
            sig[n] = "fp32"
        elif isinstance(v, int):
            sig[n] = "i32"
            if v % 16 == 0:                 # what Triton's JIT specializes on at launch
                divisible.append(n)
        else:
            sig[n] = "constexpr"
    return sig, divisible


def compile_kernel(name: str, values: dict, constexprs: dict) -> Compiled:
    """Compile peer kernel `name` for gfx942 (Triton on the CPU), cached on disk."""
    names = [p for p in _parameters(name) if p not in constexprs]
    sig, divisible = _signature(names, values)
    sig.update({k: "constexpr" for k in constexprs})
    key_text = json.dumps([KERNEL_SOURCE, name, sig, sorted(constexprs.items()), divisible,
                           OPTIONS, _triton_version()], sort_keys=True, default=str)
    key = hashlib.sha256(key_text.encode()).hexdigest()[:20]
    path = CACHE / f"{name}-{key}.json"
    # the committed assembly of the configurations the tests run (our own kernels, generated by
    # Triton), keyed without Triton's version: used where Triton is not installed
    fixture_key = hashlib.sha256(json.dumps([KERNEL_SOURCE, name, sig, sorted(constexprs.items()),
                                             divisible, OPTIONS], sort_keys=True,
                                            default=str).encode()).hexdigest()[:20]
    fixture = FIXTURES / f"{name}-{fixture_key}.json"
    if not path.exists() and _triton_version() == "absent" and fixture.exists():
        path = fixture
    if path.exists():
        d = json.loads(path.read_text())
        return Compiled.from_json(d)
    compiled = _triton_compile(name, sig, constexprs, divisible)
    CACHE.mkdir(parents=True, exist_ok=True)
    from rocke.fileio import write_output
    write_output(path, json.dumps(compiled.__dict__).encode())   # atomic: side-by-side tasks
    from rocke import env
    if env.write_peer_fixtures():      # tools (ROCKE_WRITE_PEER_FIXTURES=1): refresh the fixtures
        FIXTURES.mkdir(parents=True, exist_ok=True)
        fixture.write_text(json.dumps(dict(compiled.__dict__, triton=_triton_version()),
                                      indent=0))
    return compiled


def _parameters(name):
    import ast
    tree = ast.parse(KERNEL_SOURCE)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return [a.arg for a in fn.args.args]


def _triton_version():
    try:
        import triton
    except ImportError:
        return "absent"
    return triton.__version__


_MODULE = None


def _kernels():
    """The Triton functions, from KERNEL_SOURCE written to a temporary module (Triton reads a
    jit function's source from its file)."""
    global _MODULE
    if _MODULE is None:
        import importlib.util
        os.environ.setdefault("TRITON_DISABLE_LINE_INFO", "1")
        d = Path(tempfile.mkdtemp(prefix="rocke-triton-peer-"))
        f = d / "rocke_triton_peer_kernels.py"
        f.write_text(KERNEL_SOURCE)
        spec = importlib.util.spec_from_file_location("rocke_triton_peer_kernels", f)
        _MODULE = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_MODULE)
    return _MODULE


def _triton_compile(name, sig, constexprs, divisible) -> Compiled:
    try:
        import triton
        from triton.backends.compiler import GPUTarget
    except ImportError as e:
        raise RuntimeError("the Triton peer's assembly is not cached and Triton is not installed "
                           "(install it in .venv to compile the peer)") from e
    import yaml
    fn = getattr(_kernels(), name)
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in divisible}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    c = triton.compile(src, target=GPUTarget("hip", "gfx942", 64), options=dict(OPTIONS))
    asm = c.asm["amdgcn"]
    meta = asm[asm.index(".amdgpu_metadata") + len(".amdgpu_metadata"):
               asm.index(".end_amdgpu_metadata")]
    (kmeta,) = yaml.safe_load(meta.strip().removeprefix("---").removesuffix("..."))["amdhsa.kernels"]
    explicit = [a for a in kmeta[".args"] if not a[".value_kind"].startswith("hidden_")]
    runtime = tuple(n for n, t in sig.items() if t != "constexpr")
    return Compiled(asm, c.metadata.name, (64 * c.metadata.num_warps, 1, 1), c.metadata.shared,
                    runtime, len(explicit) - len(runtime))


def _launch(c: Compiled, grid, values, profile):
    from rocke.emu import launch
    ordered = [values[n] for n in c.runtime_args] + [None] * c.extra_pointers
    return launch(c.asm, c.symbol, grid, c.block, ordered, shared_mem=c.shared, check=False,
                  profile=profile)


@dataclass
class PeerRun:
    path: str               # "2d" | "3d"
    reports: list           # one emulator LaunchReport per launch (attention, then reduce)


def run_peer(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale,
             causal, window_size, block_table, softcap, q_descale=None, k_descale=None,
             v_descale=None, *, path="auto", profile=True) -> PeerRun:
    """Attention into `out` with the Triton peer, with the arguments of rocke's
    run_unified_attention_torch (causal only, no descales). path: "auto" is vLLM's rule (3D for
    pure decode), "2d" / "3d" force one."""
    if not causal:
        raise ValueError("the Triton peer (like vLLM's unified attention) is causal only")
    if window_size[1] not in (-1, 0):
        raise ValueError(f"the Triton peer supports no right window, got {window_size}")
    if path not in ("auto", "2d", "3d"):
        raise ValueError(f"path must be 'auto', '2d' or '3d', got {path!r}")
    total_q, hq, d = q.shape
    _, page, hk, _ = k.shape
    group = hq // hk
    num_seqs = seqused_k.shape[0]
    block_m = 16 if group <= 16 else 1 << (group - 1).bit_length()
    block_q = block_m // group
    split = max_seqlen_q <= 1 if path == "auto" else path == "3d"
    tile = 16 if (split and q.element_size() >= 2) else 32
    dp = 1 << (d - 1).bit_length()
    window = 1 + window_size[0] if window_size[0] >= 0 else 0
    cu = cu_seqlens_q.to(torch.int32).contiguous()
    lens = seqused_k.to(torch.int32).contiguous()
    table = block_table.to(torch.int32).contiguous()
    ns = NUM_SEGMENTS if split else 1
    part_out = torch.zeros(total_q * hq * ns * dp if split else 1, dtype=torch.float32)
    part_max = torch.zeros(total_q * hq * ns if split else 1, dtype=torch.float32)
    part_sum = torch.zeros(total_q * hq * ns if split else 1, dtype=torch.float32)
    values = dict(out_ptr=out, part_out_ptr=part_out, part_max_ptr=part_max,
                  part_sum_ptr=part_sum, q_ptr=q, k_ptr=k, v_ptr=v, table_ptr=table,
                  kv_lens_ptr=lens, cu_q_ptr=cu, num_seqs=num_seqs,
                  scale=float(softmax_scale), softcap=float(softcap or 0.0),
                  q_row=q.stride(0), q_head=q.stride(1), o_row=out.stride(0),
                  o_head=out.stride(1), table_row=table.stride(0), kv_page=k.stride(0),
                  kv_slot=k.stride(1), kv_head=k.stride(2))
    if q.stride(2) != 1 or out.stride(2) != 1 or k.stride(3) != 1 or k.stride() != v.stride():
        raise ValueError("the Triton peer needs unit-stride head dims and K/V of one layout")
    const = dict(HQ=hq, GROUP=group, PAGE=page, TILE=tile, D=d, DP=dp, BLOCK_Q=block_q,
                 BLOCK_M=block_m, WINDOW=window, SOFTCAP=bool(softcap and softcap > 0),
                 SEGMENTS=ns, SPLIT=split)
    attn = compile_kernel("peer_attention", values, const)
    grid = (total_q // block_q + num_seqs, hk, ns)
    reports = [_launch(attn, grid, values, profile)]
    if split:
        rvals = dict(out_ptr=out, part_out_ptr=part_out, part_max_ptr=part_max,
                     part_sum_ptr=part_sum, kv_lens_ptr=lens, cu_q_ptr=cu, num_seqs=num_seqs,
                     o_row=out.stride(0), o_head=out.stride(1))
        red = compile_kernel("peer_reduce", rvals,
                             dict(HQ=hq, TILE=tile, D=d, DP=dp, SEGMENTS=ns))
        reports.append(_launch(red, (total_q, hq, 1), rvals, profile))
    return PeerRun("3d" if split else "2d", reports)


def main(argv=None) -> int:
    """Run the peer once on a small decode + prefill batch and check it against ref_paged_attn
    (compiling, or reading the cached, gfx942 assembly)."""
    import argparse
    import sys
    ap = argparse.ArgumentParser(description="the Triton peer of rocke's unified attention: a "
                                 "smoke run against ref_paged_attn (benchmarks/profile.py "
                                 "--backends peer runs it on the benchmark's shapes)")
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    ap.add_argument("--head-size", type=int, choices=[64, 128, 256], default=64)
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from rocke.kernels.common.attention_reference import ref_paged_attn
    from tests.kernels.unified_inputs import make_inputs
    worst = 0.0
    for seqs in ([(1, 200), (1, 45)], [(24, 80), (1, 33)]):
        args = make_inputs(seqs, hq=8, hk=2, d=a.head_size, bs=16, dtype=a.dtype)
        peer = run_peer(**args)
        ref = ref_paged_attn(args["q"], args["k"], args["v"], args["cu_seqlens_q"],
                             args["seqused_k"], args["block_table"], args["softmax_scale"])
        err = float((args["out"].float() - ref).abs().max())
        print(f"{seqs}: {peer.path}, max |out - ref| {err:.1e}")
        worst = max(worst, err)
    return 0 if worst <= (2e-3 if a.dtype == "f16" else 1.6e-2) else 1


if __name__ == "__main__":
    raise SystemExit(main())
