"""Unified paged attention, target-free: the problem, its validation and the torch entry point.

``run_unified_attention_torch`` takes vLLM's ``unified_attention`` arguments (same names, same
order) and runs them on a target's kernels. The steps, in order:

1. the ``HIPDNN_GFX942_*`` levers are read and validated (``knobs.read_knobs``);
2. every input is validated once on the host (``describe_problem``) into a
   ``UnifiedAttentionProblem`` that everything downstream trusts; nothing is launched and ``out``
   is untouched when anything is wrong;
3. the target's dispatcher (``rocke/kernels/<target>/attention_dispatch.py``, found by name, so
   this module imports no target) plans the call: path, geometry and kernel specs, each from a
   small table of rules with the reason beside each (ALGORITHM.md §10), and packs the launches;
4. the kernel specs are compiled once per process (``rocke.runtime.kernel_cache``) and launched,
   eagerly or as the replay of a captured graph.
"""
from __future__ import annotations

import dataclasses
import functools

from rocke.kernels.common import hadamard
from rocke.kernels.common import knobs as knobs_mod
from rocke.kernels.common.attention_calls import (GRAPHS, WORKSPACES, RunRecord, cacheable,
                                                 call_key, check_after, check_device_now,
                                                 guard_launches, keyed_descales, lookup, remember,
                                                 run_eagerly)
from rocke.kernels.common.attention_device import (compute_units, emulated_on_cuda,
                                                  launch_device, launch_device_kind,
                                                  launch_target)
from rocke.kernels.common.attention_kernels import (compiled, compiled_cache_stats,
                                                   kernel_spills, spill_checked)
from rocke.kernels.common.attention_problem import (BACKENDS, DTYPES, INT4_KV, AttentionCapabilities,
                                                   UnifiedAttentionProblem, attention_target,
                                                   cdiv, num_sms, plan)
from rocke.kernels.common.attention_validation import (ARG_INDEX, ARG_NAMES, FAST_CHECK_MAX_SEQS,
                                                      check_contents, check_mm_prefix_range,
                                                      check_rswa,
                                                      contents_plainly_valid, descale_tensor,
                                                      describe_problem, resolve_batch_invariant)
from rocke.kernels.common.knobs import AttentionKnobs

__all__ = ["ARG_INDEX", "ARG_NAMES", "AttentionCapabilities", "AttentionKnobs", "BACKENDS",
           "DTYPES", "FAST_CHECK_MAX_SEQS", "GRAPHS", "RunRecord", "UnifiedAttentionProblem",
           "attention_target", "cdiv", "check_contents", "check_mm_prefix_range", "compiled",
           "compiled_cache_stats", "contents_plainly_valid", "describe_problem",
           "emulated_on_cuda", "kernel_spills", "launch_device_kind", "launch_target", "num_sms",
           "plan", "resolve_batch_invariant", "run_unified_attention_torch", "spill_checked"]


def run_unified_attention_torch(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k,
                                softmax_scale, causal, window_size, block_table, softcap,
                                q_descale, k_descale, v_descale, alibi_slopes=None, qq_bias=None,
                                sinks=None, *, backend: str = "auto", segm_workspaces=None,
                                num_segments: int | None = None, output_scale=None,
                                use_alibi_sqrt: bool = False, kv_quant_mode=None,
                                k_scale_cache=None, v_scale_cache=None, mm_prefix_range=None,
                                mm_prefix_clamp_sliding_window: bool = False,
                                chunk_lookback: int = -1, rswa_prefix_lens=None,
                                rswa_window: int | None = None,
                                batch_invariant: bool | None = None,
                                compile_only: bool = False,
                                cache_key: tuple | None = None) -> RunRecord | None:
    """vLLM's ``unified_attention`` on rocke's kernels; ``out`` is written in place.

    The device follows the tensors (``launch_device_kind``): CPU tensors run on the emulator,
    a ROCm torch GPU's through HIP on torch's current stream. On a GPU nothing is read back to
    the host: only metadata (dtypes, shapes, strides, devices) is checked, so the call can be
    captured in a graph.

    ``backend``: "auto" (the dispatcher), "2d" or "3d" (forced, for A/B tables).
    ``segm_workspaces=(output, max, expsum)`` and ``num_segments``: the caller's 3D workspaces
    and segment count (vLLM's ``softmax_segm_*`` and ``num_par_softmax_segments``), used as
    given, so a captured decode step allocates nothing. ``output_scale`` (fp8 ``out``),
    ``use_alibi_sqrt`` and ``kv_quant_mode`` ("none", "fp8_per_tensor", "int8_per_token_head",
    "fp8_per_token_head", "int4_per_token_head") with ``k_scale_cache`` / ``v_scale_cache``:
    vLLM's, ALGORITHM.md §13 (int4: q is rotated before the kernels and ``out`` back after them,
    §13.4). ``causal``: a bool, or vLLM 0.33's per-sequence flags (§12.12).
    ``mm_prefix_range``: vLLM's bidirectional multimodal ranges, int32
    ``[num_seqs, max_ranges, 2]`` (ALGORITHM.md §12.8), clamped by the sliding window with
    ``mm_prefix_clamp_sliding_window`` (vLLM's, for Gemma 4; inert without ranges or a window).
    ``chunk_lookback``: vLLM's chunked attention (ALGORITHM.md §12.9; -1 off, inert without a
    sliding window). ``rswa_prefix_lens`` (int32 ``[num_seqs]``) with ``rswa_window``: vLLM's
    R-SWA (§12.10), both or neither. ``batch_invariant``: a sequence's output
    bits independent of the batch (ALGORITHM.md §10.4); None reads ``ROCKE_BATCH_INVARIANT``.
    ``compile_only``: every check, the plan and every kernel build of the call (into the compile
    cache, ``ROCKE_CACHE_DIR``), no launch and no write to ``out``: a machine with LLVM's tools
    prepares the kernels for one without (the emulator on a CUDA GPU); the record's ``kernels``
    name them. ``cache_key``: (key, the tensors it holds), ``attention_calls.call_key``'s,
    with which a caller that decides before this entry point (rocke.vllm's adapter) keys this
    call by its own arguments: the call is cached under it, for that caller's look-up
    (``attention_calls.lookup``), and is never looked up here. The caller's key must hold every
    tensor and number of the call.
    Returns what was launched (vLLM ignores the return value), or None for an empty batch."""
    # A call seen before (same key: call_key) runs its cached entry: no validation, planning
    # or packing; on the emulator, its content checks run unless its metadata bytes are those
    # they last passed. Feature tensors' values are checked on every call (no key). vLLM's
    # adapter passes kv_quant_mode "none", which the validation reads exactly as None.
    key = keyed = None
    plain = compile_only is False and causal.__class__ is bool and alibi_slopes is None and qq_bias is None and \
        sinks is None and mm_prefix_range is None and \
        mm_prefix_clamp_sliding_window is False and chunk_lookback.__class__ is int and \
        rswa_prefix_lens is None and rswa_window is None and \
        output_scale is None and \
        use_alibi_sqrt is False and k_scale_cache is None and v_scale_cache is None and \
        (kv_quant_mode is None or kv_quant_mode.__class__ is str and kv_quant_mode == "none")
    if plain and cache_key is not None:
        key, keyed = cache_key
    elif plain:
        descales = keyed_descales(q_descale, k_descale, v_descale)
        found = None if descales is None else call_key(
            (q, k, v, out, cu_seqlens_q, seqused_k, block_table, *descales),
            (max_seqlen_q, max_seqlen_k, softmax_scale, causal, softcap, backend, num_segments,
             batch_invariant, chunk_lookback, q_descale is None, k_descale is None,
             v_descale is None), window_size, segm_workspaces)
        if found is not None:   # by the first look-up (a hash of a few ints), then the rest
            key, keyed = found
            entry = lookup(key)
            if entry is not None:
                return entry.hit(cu_seqlens_q, seqused_k, block_table,
                                 (q, k, v, out, cu_seqlens_q, seqused_k, block_table,
                                  softmax_scale, k_descale, v_descale, segm_workspaces,
                                  q_descale))
    if backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if segm_workspaces is not None and num_segments is None:
        raise ValueError("num_segments: the caller's segm_workspaces need their segment count")
    knobs = knobs_mod.current_knobs()
    args = (q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale,
            causal, window_size, block_table, softcap, q_descale, k_descale, v_descale,
            alibi_slopes, qq_bias, sinks)
    if key is not None and not cacheable(
            keyed, (max_seqlen_q, max_seqlen_k, softmax_scale, causal, softcap), window_size):
        key = None
    invariant = resolve_batch_invariant(batch_invariant)
    quant = dict(output_scale=output_scale, use_alibi_sqrt=use_alibi_sqrt,
                 kv_quant_mode=kv_quant_mode, k_scale_cache=k_scale_cache,
                 v_scale_cache=v_scale_cache)
    target_name = launch_target(q)
    problem = describe_problem(*args, target=target_name, **quant)
    mm_ranges = check_mm_prefix_range(mm_prefix_range, q, problem.num_seqs, problem.causal)
    if not isinstance(mm_prefix_clamp_sliding_window, bool):
        raise ValueError(f"mm_prefix_clamp_sliding_window: must be a bool, got "
                         f"{mm_prefix_clamp_sliding_window!r}")
    clamp = mm_prefix_clamp_sliding_window and bool(mm_ranges) and problem.window_left >= 0
    if isinstance(chunk_lookback, bool) or not isinstance(chunk_lookback, int) or \
            chunk_lookback < -1:
        raise ValueError(f"chunk_lookback: must be -1 (off) or an int >= 0, got "
                         f"{chunk_lookback!r}")
    chunk = chunk_lookback if problem.window_left >= 0 else -1    # inert without a window
    rswa_left = check_rswa(rswa_prefix_lens, rswa_window, q, problem.num_seqs, chunk, clamp)
    if mm_ranges or invariant or chunk >= 0 or rswa_left is not None:
        problem = dataclasses.replace(
            problem, mm_ranges=mm_ranges, batch_invariant=invariant, mm_clamp_window=clamp,
            chunk_lookback=chunk, rswa=rswa_left is not None,
            window_left=problem.window_left if rswa_left is None else rswa_left)
    if problem.total_q == 0:
        return None
    device = launch_device(q, launch_device_kind(q))     # the tensors' GPU, not the current one
    target = attention_target(target_name)
    the_plan, kernels = spill_checked(target, target.plan(
        problem, backend, knobs, num_segments=num_segments,
        sms=compute_units(device, target_name)))
    if compile_only:
        return RunRecord(the_plan, [], kernels=tuple(k.name for k in kernels))
    features = dict(softcap=problem.softcap, alibi_slopes=alibi_slopes, qq_bias=qq_bias,
                    window_left=problem.window_left, sinks=sinks)
    if problem.kv_token_scales:
        features.update(k_scale_cache=k_scale_cache, v_scale_cache=v_scale_cache)
    if problem.out_dtype is not None:
        features["output_scale"] = output_scale
    if mm_prefix_range is not None:
        features["mm_prefix_range"] = mm_prefix_range
    if problem.chunk_lookback >= 0:
        features["chunk"] = (problem.chunk_size, problem.chunk_lookback)
    if problem.rswa:
        features["rswa_prefix_lens"] = rswa_prefix_lens
    if problem.spec_features().get("per_seq_causal"):
        features["causal_flags"] = causal
    rotated = problem.kv_dtype == INT4_KV
    if rotated:     # vLLM's INT4 caches hold rotated rows: rotate q, and out back after (§13.4)
        q = hadamard.rotate(q).to(q.dtype)
        softmax_scale = softmax_scale / hadamard.rht_block(problem.head_size)
    pack = functools.partial(_pack, device, target, the_plan, kernels, problem, features,
                             max_seqlen_q, max_seqlen_k)
    call = (q, k, v, out, cu_seqlens_q, seqused_k, block_table, softmax_scale, k_descale,
            v_descale, segm_workspaces, q_descale)
    if key is None:
        record = run_eagerly(device, the_plan, pack(call))
    else:       # cached: this call runs as the entry's first (a GPU entry captures on a repeat)
        host = (cu_seqlens_q, seqused_k, block_table) if q.device.type == "cpu" else None
        record = remember(key, keyed, device, the_plan, call, pack, problem, target, knobs,
                          max_seqlen_q, max_seqlen_k, host).run(call)
    if rotated:
        out.copy_(hadamard.rotate_back(out).to(out.dtype))
    if check_after(device):
        check_device_now(device)
    return record


def _pack(device, target, the_plan, kernels, problem, features: dict, max_seqlen_q: int,
          max_seqlen_k: int, call: tuple) -> list:
    """The (compiled, grid, block, args) launches of a planned call for ``call``'s tensors
    (q, k, v, out, cu_seqlens_q, seqused_k, block_table, softmax_scale, k_descale, v_descale,
    segm_workspaces, q_descale): the metadata guard where it is on, then the target's kernels, the 3D path
    on the caller's workspaces or the pool's. A cached emulator call re-packs per call with it,
    so its cache entry holds no tensor of the caller's (``features`` of a cached call hold no
    tensor either: a call with feature tensors is never cached)."""
    (q, k, v, out, cu_seqlens_q, seqused_k, block_table, scale, k_descale, v_descale, ws,
     q_descale) = call
    descales = ((descale_tensor("k_descale", k_descale), descale_tensor("v_descale", v_descale))
                if problem.kv_dtype is not None and not problem.kv_token_scales else ())
    if problem.q_fp8:
        features = dict(features, q_descale=descale_tensor("q_descale", q_descale))
    if ws is None and the_plan.path == "3d":
        ws = WORKSPACES.views(q.device, device.is_capturing(), problem.total_q,
                              problem.num_q_heads, the_plan.geometry.num_segments,
                              problem.head_size)
    launches, _ = target.launches(the_plan, kernels, q, k, v, out, cu_seqlens_q, seqused_k,
                                  block_table, float(scale), descales, features, workspaces=ws)
    return guard_launches(device, problem, cu_seqlens_q, seqused_k, block_table, max_seqlen_q,
                          max_seqlen_k) + list(launches)
