"""vLLM 0.33's own test grid for `unified_attention`, as facts (case values only), scaled down for
the emulator: the one place for these shapes (tests/kernels/test_vllm_033_grid.py runs them).

Sources (vllm-project/vllm; the v0.33.0 tag itself, commit 4ba787ec9, is not in the reference
store, so the stored version consistent with the 0.33 wheel's `unified_attention` was read: it
passes only the 35 parameters, has the use_td and small-M 3D tests, and none of the later
NVFP4 / raw_k / output_group_scale / compact-cache tests):
  T  tests/kernels/attention/test_triton_unified_attention.py
  P  tests/quantization/test_per_token_kv_cache.py (its unified-attention section)
  M  tests/kernels/attention/test_mixed_causal_attn.py (its Triton test)

Scaling (every kind of case is kept; sizes shrink so the whole grid runs in well under a
minute on one core): KV lengths above ~300 and long query lengths are divided by about 8 (a
length just past a 16-token page or a window edge stays just past it: 463 -> 58, 1022 -> 126);
sliding windows and windowed-context sizes by 8 (64/128/256 -> 8/16/32, 1024 -> 128); the
"533 sequences" batches keep more sequences than the 3D threshold 8 (-> 9); NUM_BLOCKS
32768/2048 (index overflow / schema check) -> 1024/64: the overflow itself is not reachable at
emulator sizes, the large-versus-small cache kind is; 32 query / 16 KV heads -> 4 / 2. vLLM's
full cross products (768 cases for T's main test alone) are reduced: T's main test and its
small-M 3D test to an all-pairs cover (every pair of values of any two axes in some case), its
fp8-cache, fp8-output and use_td tests, which vary the same axes around one new feature, to an
each-value cover (every value of every axis in some case).

Every case (`RUNNING`) must match the fp32 reference.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Case:
    source: str                         # "T:<vLLM test name>" etc.
    seqs: tuple                         # ((query_len, kv_len), ...)
    heads: tuple = (4, 4)               # (query heads, KV heads)
    head_size: int = 128
    block_size: int = 16
    sliding_window: int | None = None   # vLLM's window_size = (sliding_window - 1, 0)
    softcap: float | None = None
    num_blocks: int = 64
    dtype: str = "bf16"                 # q (and unquantised cache) dtype
    q_fp8: bool = False                 # T's q_dtype = fp8: q, k, v fp8, FP8_PER_TENSOR
    kv: str = "same"                    # same | fp8 (per tensor) | int8_pth | fp8_pth | int4_pth
    scale_layout: str = "separate"      # per-token-head scales: separate | inline (0.33's cache)
    out_fp8: bool = False               # fp8 out with output_scale
    seq_threshold_3D: int | None = 0
    workspace_rows: int | None = None   # None: seq_threshold_3D rows, as vLLM's tests size them
    segments: int = 16
    causal: tuple | None = None         # per-sequence flags (M); None: causal=True
    use_td: bool = False
    descales_as_floats: bool = False    # M passes k_descale=1.0, v_descale=1.0
    repeat: bool = False                # T's CUDA-graph test: the same call again equals the first
    note: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def id(self) -> str:
        parts = [self.source.split(":")[1], "q" + "-".join(f"{q}x{k}" for q, k in self.seqs[:3])
                 + (f"..{len(self.seqs)}" if len(self.seqs) > 3 else ""),
                 f"h{self.heads[0]}-{self.heads[1]}", f"d{self.head_size}", f"nb{self.num_blocks}",
                 f"thr{self.seq_threshold_3D}"]
        if self.sliding_window:
            parts.append(f"sw{self.sliding_window}")
        if self.softcap:
            parts.append(f"cap{self.softcap:g}")
        if self.q_fp8:
            parts.append("qfp8")
        if self.kv != "same":
            parts.append(self.kv + ("_inline" if self.scale_layout == "inline" else ""))
        if self.out_fp8:
            parts.append("outfp8")
        if self.causal is not None:
            parts.append("causal" + "".join("1" if c else "0" for c in self.causal))
        if self.use_td:
            parts.append("td")
        if self.repeat:
            parts.append("again")
        return "-".join(parts)


def all_pairs(axes: dict) -> list[dict]:
    """A small set of combinations of ``axes`` (name -> values) covering every pair of values of
    any two axes (greedy; deterministic)."""
    names = list(axes)
    uncovered = {(a, va, b, vb) for a, b in itertools.combinations(names, 2)
                 for va in axes[a] for vb in axes[b]}
    rows = []
    candidates = [dict(zip(names, values)) for values in itertools.product(*axes.values())]
    while uncovered:
        best = max(candidates, key=lambda row: sum(
            (a, row[a], b, row[b]) in uncovered for a, b in itertools.combinations(names, 2)))
        rows.append(best)
        uncovered -= {(a, best[a], b, best[b]) for a, b in itertools.combinations(names, 2)}
    return rows


def each_value(axes: dict) -> list[dict]:
    """As many combinations of ``axes`` as its longest axis has values, every value of every
    axis in at least one (row i takes value i mod n of each axis)."""
    n = max(len(values) for values in axes.values())
    return [{name: values[i % len(values)] for name, values in axes.items()} for i in range(n)]


# ---- T: test_triton_unified_attention.py ----------------------------------------------------
# vLLM: [(1, 1328), (5, 18), (129, 463)] and [(1, 523), (1, 37), (1, 2011)]
MIXED = ((1, 166), (5, 18), (17, 58))
DECODE = ((1, 65), (1, 37), (1, 251))
NUM_HEADS = ((4, 4), (8, 2), (5, 1))
HEAD_SIZES = (128, 256)
SLIDING_WINDOWS = (None, 8, 16, 32)           # vLLM: None, 64, 128, 256
SOFT_CAPS = (None, 50.0)
NUM_BLOCKS = (1024, 64)                        # vLLM: 32768, 2048
THRESHOLDS = (0, 8)                            # vLLM: 0 (2D), 8 (3D for decode)


def _main_grid():
    rows = all_pairs(dict(seqs=(MIXED, DECODE), heads=NUM_HEADS, head_size=HEAD_SIZES,
                          sliding_window=SLIDING_WINDOWS, softcap=SOFT_CAPS,
                          num_blocks=NUM_BLOCKS, q_fp8=(False, True),
                          seq_threshold_3D=THRESHOLDS))
    return [Case("T:unified_attn", **row) for row in rows]


def _fp8_kv_grid():
    rows = each_value(dict(seqs=(MIXED, DECODE), heads=NUM_HEADS, head_size=HEAD_SIZES,
                           num_blocks=NUM_BLOCKS, seq_threshold_3D=(8, 0)))
    return [Case("T:bf16_query_fp8_kv", kv="fp8", **row) for row in rows]


def _swa_single_block():
    # a 2- or 3-token query whose context plus query is 128, window 64, fp8 cache, d 256
    return [Case("T:swa_single_block", seqs=((q, 128),), heads=(4, 2), head_size=256,
                 sliding_window=64, kv="fp8", num_blocks=8, seq_threshold_3D=0,
                 workspace_rows=None, extra=dict(no_workspaces=True)) for q in (2, 3)]


# vLLM: (head_size, sliding_window, context) (256, 1024, 254), (256, 1024, 1022), (512, None, 254)
SMALL_M = ((256, 128, 30), (256, 128, 126), (512, None, 30))


def _small_m(head_size, window, context, query_len, batch):
    return Case("T:small_m_3d", seqs=((query_len, context + query_len),) * batch,
                heads=(4, 2), head_size=head_size, sliding_window=window, kv="fp8",
                num_blocks=batch * -(-(context + query_len) // 16), seq_threshold_3D=8,
                workspace_rows=8 * 3)


def _small_m_grid():
    rows = all_pairs(dict(shape=SMALL_M, query_len=(2, 3), batch=(1, 4, 8)))
    return [_small_m(*r["shape"], r["query_len"], r["batch"]) for r in rows]


def _small_m_others():
    above = replace(_small_m(256, 128, 30, 3, 9), source="T:small_m_2d_above_threshold")
    # q 1/2/3/3/2/1 over contexts at page, segment and window edges; vLLM: 14, 15, 254, 255,
    # 1022, 2046 with a 1024 window
    q_lens, contexts = (1, 2, 3, 3, 2, 1), (14, 15, 62, 63, 126, 254)
    seqs = tuple((q, c + q) for q, c in zip(q_lens, contexts))
    mixed = Case("T:small_m_3d_mixed_rows", seqs=seqs, heads=(4, 2), head_size=256,
                 sliding_window=128, kv="fp8", num_blocks=len(seqs) * 17, seq_threshold_3D=8,
                 workspace_rows=8 * 3)
    graph = Case("T:small_m_3d_cuda_graph", seqs=((3, 33),), heads=(4, 2), head_size=256,
                 sliding_window=128, kv="fp8", num_blocks=3, seq_threshold_3D=8,
                 workspace_rows=8 * 3, repeat=True)
    return [above, mixed, graph]


def _fp8_out_grid():
    # vLLM adds [(1, 1)] * 533 and [(533, 533)] * 533 to the two mixes
    rows = each_value(dict(seqs=(MIXED, DECODE, ((1, 1),) * 9, ((33, 33),) * 9),
                           heads=NUM_HEADS, head_size=HEAD_SIZES,
                           sliding_window=SLIDING_WINDOWS, softcap=SOFT_CAPS,
                           num_blocks=NUM_BLOCKS, seq_threshold_3D=THRESHOLDS))
    return [Case("T:fp16_input_fp8_output", dtype="f16", out_fp8=True, **row) for row in rows]


def _use_td_grid():
    rows = each_value(dict(seqs=(MIXED, DECODE), heads=NUM_HEADS, head_size=(128, 256, 96),
                           sliding_window=(None, 16), softcap=SOFT_CAPS,
                           num_blocks=NUM_BLOCKS, seq_threshold_3D=THRESHOLDS))
    rows = [Case("T:use_td", use_td=True, **row) for row in rows]
    # the tile clamp: prefill-heavy (vLLM: (256, 256), (128, 128)), 2D
    rows += [Case("T:use_td_tile_clamp", seqs=((48, 48), (32, 32)), heads=h, use_td=True,
                  num_blocks=64) for h in ((4, 4), (5, 1))]
    return rows


# ---- P: test_per_token_kv_cache.py, unified_attention with per-token-head scale caches ------

def _per_token_head_grid():
    cases = []
    for kv in ("int4_pth", "int8_pth", "fp8_pth"):
        for layout in ("separate", "inline"):
            for seqs in (((1, 128),), ((1, 64), (1, 32))):
                cases.append(Case("P:per_token_head_scale", seqs=seqs, heads=(4, 4),
                                  head_size=128, kv=kv, scale_layout=layout, num_blocks=64,
                                  seq_threshold_3D=0))
    return cases


# ---- M: test_mixed_causal_attn.py (Triton) --------------------------------------------------

def _mixed_causal_grid():
    return [Case("M:triton_mixed_causal", seqs=((1, 128), (5, 64), (1, 256)), heads=h,
                 head_size=128, causal=flags, seq_threshold_3D=None, descales_as_floats=True,
                 num_blocks=3 * 16 + 10)
            for flags in ((True, False, True), (False, True, False), (True, True, False))
            for h in ((4, 4), (8, 2))]


ALL = (_main_grid() + _fp8_kv_grid() + _swa_single_block() + _small_m_grid()
       + _small_m_others() + _fp8_out_grid() + _use_td_grid() + _per_token_head_grid()
       + _mixed_causal_grid())


# every case runs: rocke implements each feature the grid uses (the mixed causal flags, INT4 and
# inline-scale caches and the 96 / 512 head sizes were the last to land)
RUNNING = ALL
