"""Every kernel spec gfx942's unified-attention dispatcher can reach (``rocke report
--reachable``), so that spill-freedom is checked beyond the shipped variants: the dispatcher
builds specs on demand for feature combinations the variant tables do not list.

The enumeration asks the dispatcher itself (``attention_dispatch.plan``) for the specs of one
problem per class: dtype x head size x block size x KV-cache encoding (the Q dtype, fp8 with
descales, int8 / fp8 with per-token-head scales: KV_ENCODINGS) x every subset of the score
features (softcap, ALiBi, QQ-bias, sliding window, sinks, mm_prefix_range) x the output-side
extras (square-root ALiBi, fp8 output: EXTRAS, all off or all on) x path (2D, 3D: both are
reachable for every class, 3D by ``backend="3d"`` or vLLM's 3D rule) x, on 2D, the
transposed-x8 geometry lever (HIPDNN_GFX942_FLASH_WIDE; ``path_knobs``) x, on 2D at d64 / d128,
both regimes (the model's dispatch table may name either for a class: ``planned_specs``), plus
``reduce_segments`` per dtype x head size x output dtype. mm_prefix_range's capacity (1..16 ranges, unrolled) is enumerated at its least and
most code (MM_CAPACITIES), and so are the extras. Each class is asked at 1 and 1024 KV
heads (KV_HEADS): a 2D grid of one round gets the grown KV tile
(attention_dispatch.one_round_tile), a larger one the table's. The GQA group is a compile-time constant that does not change the register plan
(a multiply-by-reciprocal constant), so one group stands for all (REPRESENTATIVE_GROUP), and
one split group (SPLIT_GROUP, a GQA group above 16) per (path, dtype, head size) with every feature.
The other levers (NUM_WARPS, WAVES_PER_EU, IGLP, Q_DIRECT, ...) and 64-bit page bases are out
of this enumeration: they are tuning switches, off by default.

Another target's enumeration (``target="gfx950"``: ``rocke report --reachable --target gfx950``)
asks that target's dispatcher (``attention_unified.attention_target``) for the same classes, its
fp8 names in the caches and the output (``attention_quant.on_target``); the spill fallback of its
report is the target's chain (``attention_spill.chain_for``).
"""
from __future__ import annotations

import functools
import importlib
import itertools
import warnings

from rocke.arch import get_target
from rocke.compiler import CompileError, assemble_ir
from rocke.kernels.common.attention_problem import UnifiedAttentionProblem, attention_target
from rocke.kernels.common.knobs import FLASH_GEOMETRIES, AttentionKnobs
from rocke.kernels.gfx942 import attention_dispatch as dispatch
from rocke.kernels.gfx942 import attention_quant as quant
from rocke.kernels.gfx942 import attention_spill
from rocke.kernels.gfx942 import attention_tiled_2d as a2

FEATURES = ("softcap", "alibi", "qq_bias", "sliding_window", "sinks", "mm_prefix")
MM_CAPACITIES = (1, 16)         # the least and the most mm_prefix_range code (16 unrolled ranges)
REPRESENTATIVE_GROUP = 4
SPLIT_GROUP = 32
KV_DTYPES = (None,) + a2.KV_DTYPES
# (kv_dtype, per-token-head scales): the caches in the Q dtype, fp8 with descales, and the
# per-token-head quantized caches (int8, fp8) with their scale caches
# the enumerated classes' dimensions: not (yet) int4 caches, d512, padded heads (head_cols) or the
# masks beyond mm ranges (non-causal, per-sequence flags, chunks, R-SWA), added after the
# enumeration of 2026-12-02 (docs/evidence/reachable_gfx942/); they are built on demand and
# spill-checked at plan time like any spec (attention_spill.spill_free_plan)
ENUMERATED_HEAD_SIZES = a2.SHIPPED_HEAD_SIZES
KV_ENCODINGS = tuple((kv, False) for kv in KV_DTYPES) + tuple(
    (kv, True) for kv in quant.TOKEN_SCALE_KV_DTYPES if kv != quant.PACKED_INT4)
EXTRAS = ("alibi_sqrt", "fp8_out")    # enumerated all off and all on (sqrt only with ALiBi)
FP8_OUT = "fp8_e4m3fnuz"
PATHS = ("2d", "3d")


def path_knobs(path: str):
    """The lever settings a class is planned under on ``path``: each FLASH_WIDE geometry on 2D;
    the defaults on 3D, whose plans never read FLASH_WIDE (it picks the 2D transposed-x8
    geometry; on 2026-12-08 none of the 27,660 3D classes of either target planned another spec
    under another FLASH_WIDE, and tests/kernels/test_attention_reachable.py checks a sample)."""
    if path == "2d":
        return [AttentionKnobs(flash_wide=wide) for wide in FLASH_GEOMETRIES]
    return [AttentionKnobs()]


def kv_encodings(target: str = "gfx942") -> tuple:
    """KV_ENCODINGS with ``target``'s fp8 (OCP e4m3fn on gfx950)."""
    return tuple((kv if kv is None else quant.on_target((kv,), target)[0], tok)
                 for kv, tok in KV_ENCODINGS)


def fp8_out(target: str = "gfx942") -> str:
    """The enumerated fp8 output dtype on ``target``."""
    return quant.on_target((FP8_OUT,), target)[0]


def dispatcher(target: str = "gfx942"):
    """``target``'s attention dispatcher (gfx942's is this module's ``dispatch``)."""
    return dispatch if target == "gfx942" else attention_target(target)


# KV heads of the enumerated problem: 1 puts every 2D grid in one round (the dispatcher grows
# the KV tile, attention_dispatch.one_round_tile), 1024 fills more than a round (the table's tile)
KV_HEADS = (1, 1024)


def problem_of(dtype: str, head_size: int, block_size: int, kv_dtype, features, *,
               group: int = REPRESENTATIVE_GROUP, mm_ranges: int = MM_CAPACITIES[-1],
               token_scales: bool = False, extras=(),
               kv_heads: int = 1, target: str = "gfx942") -> UnifiedAttentionProblem:
    """One problem of the class: a short prefill (the path is forced by the caller);
    ``kv_dtype`` as ``target`` names it, the fp8 output in ``target``'s format."""
    on = set(features)
    return UnifiedAttentionProblem(
        dtype=dtype, head_size=head_size, num_q_heads=group * kv_heads, num_kv_heads=kv_heads,
        block_size=block_size, num_seqs=1, total_q=4, max_seqlen_q=4, max_seqlen_k=64,
        softcap=1.0 if "softcap" in on else 0.0, alibi="alibi" in on, qq_bias="qq_bias" in on,
        window_left=8 if "sliding_window" in on else -1, sinks="sinks" in on,
        kv_dtype=kv_dtype, mm_ranges=mm_ranges if "mm_prefix" in on else 0,
        kv_token_scales=token_scales, alibi_sqrt="alibi_sqrt" in extras and "alibi" in on,
        out_dtype=fp8_out(target) if "fp8_out" in extras else None)


def problems(target: str = "gfx942"):
    """(problem, path, knobs) of every class the enumeration covers on ``target``."""
    for dtype, d, bs, (kv, tok) in itertools.product(a2.DTYPES, ENUMERATED_HEAD_SIZES, a2.BLOCK_SIZES,
                                                     kv_encodings(target)):
        for n in range(len(FEATURES) + 1):
            for feats in itertools.combinations(FEATURES, n):
                for mm, heads in itertools.product(
                        MM_CAPACITIES if "mm_prefix" in feats else MM_CAPACITIES[:1], KV_HEADS):
                    for extras in ((), EXTRAS):
                        p = problem_of(dtype, d, bs, kv, feats, mm_ranges=mm, token_scales=tok,
                                       extras=extras, kv_heads=heads, target=target)
                        for path in PATHS:
                            for knobs in path_knobs(path):
                                yield p, path, knobs
    for dtype, d, path, heads in itertools.product(a2.DTYPES, ENUMERATED_HEAD_SIZES, PATHS, KV_HEADS):
        p = problem_of(dtype, d, 16, None, FEATURES, group=SPLIT_GROUP, kv_heads=heads,
                       target=target)
        yield p, path, AttentionKnobs()


def planned_specs(p, path: str, knobs, target: str = "gfx942"):
    """The specs ``target``'s dispatcher plans for ``p`` on ``path``: the rules' plan and, on
    gfx942's 2D path, the plan in each regime the model's dispatch table may name for the class
    (attention_dispatch.regime_geometry: transposed-x8 or narrow at d64 / d128)."""
    plan = dispatcher(target).plan
    yield from plan(p, path, knobs, num_segments=None).specs
    if target == "gfx942" and path == "2d":
        for regime in dispatch.REGIME_GEOMETRIES:
            if dispatch.regime_geometry(p, regime, knobs) is not None:
                yield from plan(p, path, knobs, regime=regime).specs


def reachable_specs(target: str = "gfx942") -> dict:
    """kernel name -> spec, every spec ``target``'s dispatcher plans for the classes of
    ``problems`` (duplicates collapse: a lever that does not apply plans the same spec)."""
    out = {}
    for p, path, knobs in problems(target):
        for spec in planned_specs(p, path, knobs, target):
            out.setdefault(spec.kernel_name, spec)
    return out


def corner_specs(target: str = "gfx942") -> dict:
    """The heaviest specs of each (path, geometry, dtype, head size, block size, cache
    encoding): every feature and extra on, with and without QQ-bias (it pins 2D to narrow)
    and with and without mm ranges (their one-compare mask replaces the causal + window
    compares, so the kernel without them can be the heavier)."""
    out = {}
    for dtype, d, bs, (kv, tok) in itertools.product(a2.DTYPES, ENUMERATED_HEAD_SIZES, a2.BLOCK_SIZES,
                                                     kv_encodings(target)):
        for drop, heads in itertools.product(
                ((), ("qq_bias",), ("mm_prefix",), ("qq_bias", "mm_prefix")), KV_HEADS):
            feats = tuple(f for f in FEATURES if f not in drop)
            p = problem_of(dtype, d, bs, kv, feats, token_scales=tok, extras=EXTRAS,
                           kv_heads=heads, target=target)
            for path in PATHS:
                for knobs in path_knobs(path):
                    for spec in planned_specs(p, path, knobs, target):
                        out.setdefault(spec.kernel_name, spec)
    return out


# what the result store keeps of a spec's assembly (rocke.compiler.results): its spills and
# resources; ``spill_counts`` reads them back instead of compiling when the IR is one seen before
RESOURCE_FIELDS = ("vgprs", "agprs", "sgprs", "lds_bytes", "scratch_bytes", "vgpr_spills",
                   "sgpr_spills", "max_workgroup_size")
_STORE: list = [None, None]       # (results directory, ResultStore) of this process
_READ_STORE = [True]              # False: recompute every spec, still storing (report_task)


def result_store():
    """This process's result store (ROCKE_RESULTS_DIR), None when it is off."""
    from rocke import env
    from rocke.compiler.results import ResultStore
    root = env.results_dir()
    if root is None:
        return None
    if _STORE[0] != root:
        _STORE[:] = [root, ResultStore(root)]
    return _STORE[1]


def spill_counts(spec) -> tuple[str, str, int, int, str | None]:
    """(kernel name, spec class, VGPR spills, SGPR spills, error) of ``spec``, read from the
    assembly LLVM emits (its metadata's ``.vgpr_spill_count`` / ``.sgpr_spill_count``), with no
    object and no link: runs on a machine without ld.lld. ``error``: LLVM's one-line complaint
    when the spec does not compile (spills then 0), so one bad spec does not end a long run.
    The spec's IR is always built; its assembly only when the result store holds nothing for
    that IR (and this toolchain), and what it finds is stored for the next run."""
    from rocke.compiler.results import result_key
    kind = type(spec).__name__
    kern = importlib.import_module(type(spec).__module__).build(spec)
    ir, target = kern.ir(), get_target(kern.target).target_id
    store = result_store()
    key = result_key("asm-resources", ir, target, {"name": kern.name, "opt": 3,
                                                    "workgroup_size": kern.workgroup_size})
    found = store.get(key) if store is not None and _READ_STORE[0] else None
    if not (isinstance(found, dict) and ("error" in found or
                                         all(type(found.get(f)) is int for f in RESOURCE_FIELDS))):
        try:
            _, info = assemble_ir(ir, name=kern.name, workgroup_size=kern.workgroup_size,
                                  target=target, cache=store is None)
            found = {f: getattr(info, f) for f in RESOURCE_FIELDS}
        except CompileError as e:
            found = {"error": " | ".join(str(e).split("\n"))}
        if store is not None:
            store.put(key, found)
    if "error" in found:
        return spec.kernel_name, kind, 0, 0, str(found["error"])
    return spec.kernel_name, kind, found["vgpr_spills"], found["sgpr_spills"], None


def asm_spills(spec) -> tuple[int, int]:
    """(VGPR, SGPR) spills of ``spec``'s assembly (``spill_counts``); LLVM's complaint raised
    as a CompileError (the spill fallback skips such a candidate)."""
    _, _, vgpr_spills, sgpr_spills, error = spill_counts(spec)
    if error:
        raise CompileError(error)
    return vgpr_spills, sgpr_spills


def launch_counts(spec):
    """``spill_counts`` of the planned ``spec`` plus what a call would launch instead when it
    spills: the spill fallback's record (attention_spill.SpillFallback, computed on the
    assembly like the counts), else None."""
    name, kind, vgpr_spills, sgpr_spills, error = spill_counts(spec)
    fallback = None
    if not error and (vgpr_spills or sgpr_spills):
        with warnings.catch_warnings():      # the record says it; no warning per spec
            warnings.simplefilter("ignore")
            _, fallback = attention_spill.choose(spec, asm_spills,
                                                 planned_spills=(vgpr_spills, sgpr_spills))
    return name, kind, vgpr_spills, sgpr_spills, error, fallback


def report_task(spec, read: bool = True) -> dict:
    """One task of ``rocke report --reachable`` (run here, in a forked process or on a Ray
    worker): ``launch_counts`` of ``spec``, whether the result store answered every compile it
    needed (``stored``: nothing was compiled), and the fingerprint of the code that ran it.
    ``read`` False: compute even what the store holds (and store it again). The store answers
    first by the spec under this exact code (``report_key``: no IR is built, so an unchanged
    tree's re-run costs a lookup a spec), then by each compile's IR (a kernel whose IR did not
    move after an edit elsewhere)."""
    store = result_store()
    key = report_key(spec) if store is not None else None
    if key is not None and read:
        found = store.get(key)
        if found is not None:
            try:
                return {"counts": _counts_from_json(found), "stored": True, "code": _worker_code()}
            except (TypeError, ValueError, KeyError):
                store.corrupt += 1              # a value of the wrong shape: recompute it
    before = (store.misses, store.corrupt) if store is not None else None
    was, _READ_STORE[0] = _READ_STORE[0], read
    try:
        counts = launch_counts(spec)
    finally:
        _READ_STORE[0] = was
    stored = store is not None and read and (store.misses, store.corrupt) == before
    if key is not None:
        store.put(key, _counts_to_json(counts))
    return {"counts": counts, "stored": stored, "code": _worker_code()}


def report_key(spec) -> str:
    """The store key of ``spec``'s report under this code (``code_fingerprint``: rocke's
    sources and the LLVM toolchain) -- any edit moves every such key."""
    import hashlib
    h = hashlib.sha256()
    for part in ("reachable-report-v1", _worker_code(), repr(spec)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _counts_to_json(counts) -> list:
    name, kind, vs, ss, error, fallback = counts
    return [name, kind, vs, ss, error, None if fallback is None else {
        "planned": fallback.planned, "planned_spills": list(fallback.planned_spills),
        "chosen": fallback.chosen, "chosen_spills": list(fallback.chosen_spills),
        "tried": fallback.tried}]


def _counts_from_json(value) -> tuple:
    name, kind, vs, ss, error, fallback = value
    if not (isinstance(name, str) and isinstance(kind, str) and isinstance(vs, int)
            and isinstance(ss, int) and (error is None or isinstance(error, str))):
        raise ValueError("a stored report of the wrong shape")
    if fallback is not None:
        fallback = attention_spill.SpillFallback(
            fallback["planned"], tuple(fallback["planned_spills"]), fallback["chosen"],
            tuple(fallback["chosen_spills"]), fallback["tried"])
    return name, kind, vs, ss, error, fallback


@functools.lru_cache(maxsize=1)
def _worker_code() -> str:
    """``code_fingerprint`` as this process first read it (once per worker, not per task)."""
    return code_fingerprint()


def enumeration_fingerprint(names) -> str:
    """sha256 of the sorted spec names: shards of one enumeration share it, so shard reports of
    different enumerations are never merged (``rocke report --reachable --merge``)."""
    import hashlib
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


# rocke's subpackages that neither plan nor build nor compile a spec: the emulator runs code
# objects and is never imported on that path (tests/kernels/test_attention_reachable.py
# checks it), so changing it cannot change a spill count.
NOT_ON_COMPILE_PATH = ("emu",)


def code_fingerprint() -> str:
    """sha256 of rocke's Python sources (less NOT_ON_COMPILE_PATH) and the LLVM toolchain that
    compiled them: the spill counts of a shard report hold for exactly this code, so shards of
    different code are never merged (read afresh each call: ``toolchain.source_fingerprint``
    caches it per process)."""
    from rocke.compiler.toolchain import source_fingerprint
    return source_fingerprint.__wrapped__(NOT_ON_COMPILE_PATH)
