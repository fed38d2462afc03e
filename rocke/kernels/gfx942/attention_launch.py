"""Packing a gfx942 attention plan into launches: per kernel its compiled code, grid, block and
arguments, the 3D path on the caller's workspaces or the entry point's pooled ones. No rule
lives here: the plan (``attention_dispatch``) decided everything packed."""
from __future__ import annotations

from rocke.kernels.common.attention_problem import UnifiedAttentionProblem
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.kernels.gfx942 import attention_tiled_3d as a3
from rocke.kernels.gfx942 import reduce_segments


def caller_workspaces(workspaces, problem: UnifiedAttentionProblem, num_segments: int, device):
    """The caller's 3D workspaces (output, max, expsum), their first ``total_q`` rows (vLLM
    sizes them for its largest batch); checked on metadata only."""
    import torch
    if not isinstance(workspaces, (tuple, list)) or len(workspaces) != 3:
        raise ValueError("segm_workspaces: must be (softmax_segm_output, softmax_segm_max, "
                         f"softmax_segm_expsum), got {type(workspaces).__name__}")
    tq, hq, d = problem.total_q, problem.num_q_heads, problem.head_size
    out = []
    for name, t, shape in (("softmax_segm_output", workspaces[0], (tq, hq, num_segments, d)),
                           ("softmax_segm_max", workspaces[1], (tq, hq, num_segments)),
                           ("softmax_segm_expsum", workspaces[2], (tq, hq, num_segments))):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            raise ValueError(f"{name}: must be a torch.float32 tensor, got "
                             f"{getattr(t, 'dtype', type(t).__name__)}")
        if t.device != device:
            raise ValueError(f"{name}: on {t.device}, but q is on {device}")
        if t.dim() != len(shape) or t.shape[0] < shape[0] or tuple(t.shape[1:]) != shape[1:]:
            raise ValueError(f"{name}: shape must be (>= {shape[0]}, "
                             f"{', '.join(map(str, shape[1:]))}) for this call "
                             f"(num_tokens, num_q_heads, num_segments[, head_size]), "
                             f"got {tuple(t.shape)}")
        out.append(t if t.shape[0] == tq else t[:tq])
    return tuple(out)


def head_blocks(problem: UnifiedAttentionProblem, spec) -> int:
    """The attention grid's head axis: a q-head block per KV head, ``group_split`` of them for a
    GQA group above MAX_GROUP (``attention_dispatch.split_group``, ALGORITHM.md §7.1)."""
    return problem.num_kv_heads * getattr(spec, "group_split", 1)


def launch_geometries(problem: UnifiedAttentionProblem, specs: tuple,
                      num_segments: int | None = None) -> list:
    """[(grid, block)] of a plan's kernels, in launch order: the 2D kernel's (``specs`` = (2D,)),
    or the 3D kernel's over ``num_segments`` and the reduction's (``specs`` = (3D, reduce)). The
    one place the grids are derived: ``launches`` and benchmarks/dispatch_sweep.py's sampled
    launches (one KV head) both take them from here."""
    if len(specs) == 1:
        (spec,) = specs
        return [a2.launch_geometry(spec, problem.num_seqs, problem.total_q,
                                   head_blocks(problem, spec))]
    spec3, spec_r = specs
    if num_segments is None:
        raise ValueError("launch_geometries: the 3D path needs num_segments")
    return [a3.launch_geometry(spec3, problem.num_seqs, problem.total_q,
                               head_blocks(problem, spec3), num_segments),
            reduce_segments.launch_geometry(spec_r, problem.total_q, problem.num_q_heads)]


def launches(the_plan, kernels, q, k, v, out, cu_seqlens_q, seqused_k, block_table,
             softmax_scale: float, descales: tuple, features: dict, workspaces=None):
    """(launches, workspace) of a plan: per kernel (compiled, grid, block, args), in order, and
    ``()`` (no workspace of its own: the 3D path runs on ``workspaces``, the caller's or the
    entry point's pooled ones, ``attention_calls.WORKSPACES``, which it takes when None)."""
    problem = the_plan.problem
    if the_plan.path == "2d":
        (spec,) = the_plan.specs
        args = a2.kernel_args(spec, q, k, v, out, block_table, cu_seqlens_q, seqused_k,
                              softmax_scale, *descales, **features)
        ((grid, block),) = launch_geometries(problem, the_plan.specs)
        return [(kernels[0], grid, block, args)], ()
    spec3, spec_r = the_plan.specs
    ns = the_plan.geometry.num_segments
    hq, d = problem.num_q_heads, problem.head_size
    if workspaces is None:
        from rocke.kernels.common.attention_calls import WORKSPACES
        from rocke.kernels.common.attention_device import caller_is_capturing
        workspaces = WORKSPACES.views(q.device, caller_is_capturing(), problem.total_q, hq, ns, d)
    segm_output, segm_max, segm_expsum = caller_workspaces(workspaces, problem, ns, q.device)
    owned = ()
    features = dict(features)
    output_scale = features.pop("output_scale", None)       # reduce_segments quantizes
    args3 = a3.kernel_args(spec3, q, k, v, segm_output, segm_max, segm_expsum, block_table,
                           cu_seqlens_q, seqused_k, softmax_scale, ns, *descales, **features)
    args_r = reduce_segments.kernel_args(spec_r, segm_output, segm_max, segm_expsum, out, ns,
                                         output_scale=output_scale)
    (grid3, block3), (grid_r, block_r) = launch_geometries(problem, the_plan.specs, ns)
    return ([(kernels[0], grid3, block3, args3), (kernels[1], grid_r, block_r, args_r)], owned)
