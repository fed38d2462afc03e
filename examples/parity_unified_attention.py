"""gfx942 unified attention parity + latency harness.

For every selected shape it runs three tables — ``auto`` (the production dispatcher,
``run_unified_attention_torch(backend="auto")``), ``2d`` (the 2D spec built here explicitly:
the transposed-x8 flash regime for d128 fp16 in the geometry ``HIPDNN_GFX942_FLASH_WIDE`` picks —
wide4 by default, L4 for ``0``, wide2 for ``2`` — and the narrow 16x16x16 path otherwise) and
``3d`` (the split-KV path, forced) — and gates each output against the fp32 paged reference
(``ref_paged_attn``, tolerance ``attention_atol``). Exit status 1 on any FAIL or ERROR.

On the emulator (the default device here) correctness is real and the time column is emulator
wall time (on this CPU, or on a CUDA GPU with the torch backend), never gfx942 GPU time.
``--quick`` / ``--max-kv N`` scale every shape's KV length down (same names, same heads, dtypes,
batches and kinds) so a CPU can run the set.

``--jobs N`` runs the shapes side by side in N forked processes, ``--ray [ADDRESS]`` on a Ray
cluster (``--ray`` alone: RAY_ADDRESS's, else a local one; ``pip install 'rocke[cluster]'``):
one task per shape through rocke.tasks, each emulating on one CPU; serial is the default. The
tables, the summary line and the ``--report`` JSON are the serial run's (rows in the grid's
order); the progress lines come as shapes finish, and emulator times are measured beside the
other tasks. A bad ``--jobs`` / ``--ray`` is one line and exit 2 before any work (so is either
with ``--compile-only`` or on a GPU, which the shapes would share).

Test-only lever: the hidden ``--inject-error`` flag corrupts one output element after each
kernel launch, so the tests can show a wrong result fails the gate and the exit status.

    python examples/parity_unified_attention.py --quick --scenario default    # CPU-sized
    python examples/parity_unified_attention.py --quick --scenario default --jobs 2   # 2 processes
    python examples/parity_unified_attention.py --quick --ray HEAD:6379  # on a Ray cluster
    python examples/parity_unified_attention.py --quick --scenario default --target gfx950  # gfx950 kernels, emulator
    python examples/parity_unified_attention.py --scenario fmha --scenario decode_d128_q1k1024
    python examples/parity_unified_attention.py --scenario features      # softcap, ALiBi, ...
    HIPDNN_GFX942_FLASH_WIDE=0 python examples/parity_unified_attention.py \\
        --scenario fp16_h32kv8_b1_s2048x2048_d128
"""
from __future__ import annotations

import argparse
import statistics
import sys

import attention_harness as H
from parity_shapes import FEATURE_ARGS, GROUPS

TABLES = ("auto", "2d", "3d")
HIP_ATTEMPTS, HIP_WARMUP = 30, 10
# Each emulated launch is a full CPU emulation, and its report already carries its emulator
# wall time: by default the gated launch's own time is the figure (no extra launches).
EMU_ATTEMPTS, EMU_WARMUP = 0, 0


class Skip(Exception):
    """The shape is outside what this path supports; the message says why."""


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="gfx942 unified attention parity + latency harness (fp32-reference gated)",
        epilog="groups: " + ", ".join(f"{g} ({len(s)} shapes)" for g, s in GROUPS.items())
        + "; 'all' = every group")
    p.add_argument("--scenario", action="append", metavar="S",
                   help="a group (default/fmha/creative/features/all) or an exact shape name; repeatable, "
                        "the selections union (default: all)")
    p.add_argument("--attempts", type=int, default=None,
                   help=f"timed launches (default {HIP_ATTEMPTS} on hip; {EMU_ATTEMPTS} on emu, "
                        "where the gated launch's own emulator time is reported)")
    p.add_argument("--warmup", type=int, default=None,
                   help=f"warm-up launches (default {HIP_WARMUP} on hip, {EMU_WARMUP} on emu)")
    p.add_argument("--tol", type=float, default=None,
                   help="absolute-tolerance override (default 2e-2 fp16 / 4e-2 bf16)")
    p.add_argument("--report", metavar="PATH", help="write a JSON results report")
    p.add_argument("--debug-mismatch", type=int, default=0, metavar="N",
                   help="on failure, print the N worst mismatch samples")
    p.add_argument("--device", choices=("emu", "hip"), default=None,
                   help="launch device (default: ROCKE_DEVICE, else hip if present, else emu)")
    H.add_target_flag(p)
    p.add_argument("--max-kv", type=int, default=None, metavar="N",
                   help="scale every shape so its longest KV length is at most N")
    p.add_argument("--quick", action="store_true",
                   help=f"CPU-sized run: --max-kv {H.QUICK_MAX_KV} unless --max-kv is given")
    p.add_argument("--dry-run", action="store_true",
                   help="print the selected shapes and the emulator-time estimate, run nothing")
    H.add_compile_only_flag(p)
    H.add_engine_flags(p)
    p.add_argument("--inject-error", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    H.check_report_path(p, args.report)
    for flag in ("attempts", "warmup"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            p.error(f"--{flag} must be >= 0, got {value}")
    if args.tol is not None and not args.tol > 0:
        p.error(f"--tol must be > 0, got {args.tol}")
    if args.debug_mismatch < 0:
        p.error(f"--debug-mismatch must be >= 0, got {args.debug_mismatch}")
    if args.max_kv is not None and args.max_kv < 1:
        p.error(f"--max-kv must be >= 1, got {args.max_kv}")
    if args.quick and args.max_kv is None:
        args.max_kv = H.QUICK_MAX_KV
    return args


# ---------------------------------------------------------------------------------------------
# the three launch paths

def feature_inputs(shape: H.Shape, device: str) -> dict:
    """vLLM's feature arguments of a ``features`` shape (parity_shapes.FEATURE_ARGS), as
    ``run_unified_attention_torch`` / ``ref_paged_attn`` take them; {} for other shapes."""
    import torch
    spec = FEATURE_ARGS.get(shape.name, {})
    gen = torch.Generator().manual_seed(len(shape.name))
    hq, max_q = shape.num_heads, shape.max_q
    out = {}
    if "softcap" in spec:
        out["softcap"] = spec["softcap"]
    if "window" in spec:
        out["window_size"] = spec["window"]
    if spec.get("alibi"):       # the ALiBi paper's geometric slopes, 2^(-8 (h+1) / Hq)
        out["alibi_slopes"] = torch.tensor([2.0 ** (-8 * (h + 1) / hq) for h in range(hq)])
    if spec.get("qq_bias"):
        out["qq_bias"] = torch.randn(max_q, max_q, generator=gen)
    if spec.get("sinks"):
        out["sinks"] = torch.randn(hq, generator=gen) + 3.0
    if spec.get("alibi_sqrt"):
        out["use_alibi_sqrt"] = True
    if "output_scale" in spec:
        out["output_scale"] = torch.tensor([spec["output_scale"]])
    if "kv_quant_mode" in spec:
        out["kv_quant_mode"] = spec["kv_quant_mode"]
    if "mm_prefix" in spec:
        out["mm_prefix_range"] = torch.tensor(spec["mm_prefix"], dtype=torch.int32)
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in out.items()}


TOKEN_QUANT = {"int8_per_token_head": ("int8", 127.0), "fp8_per_token_head": ("float8_e4m3fnuz", 240.0)}


def target_fp8() -> tuple[str, str, float]:
    """(torch dtype name, rocke dtype name, largest finite) of the run's fp8: gfx942's
    e4m3fnuz, gfx950's OCP e4m3fn (its conversions read OCP codes)."""
    if H.current_target() == "gfx950":
        return "float8_e4m3fn", "fp8_e4m3fn", 448.0
    return "float8_e4m3fnuz", "fp8_e4m3fnuz", 240.0


def quantize_caches(inputs) -> None:
    """Per-token-head quantization of the shape's caches, as a writer would store them: each
    (token, KV head) row as codes with the scale amax / code_max in k/v_scale_cache."""
    import torch
    name, top = TOKEN_QUANT[inputs["features"]["kv_quant_mode"]]
    if name != "int8":
        name, _, top = target_fp8()
    for c in ("k", "v"):
        rows = inputs[c].float()
        scale = rows.abs().amax(-1).clamp(min=1e-6) / top
        codes = rows / scale[..., None]
        inputs[c] = (codes.round().to(torch.int8) if name == "int8"
                     else codes.to(getattr(torch, name)))
        inputs["features"][f"{c}_scale_cache"] = scale.contiguous()


def fp8_output(shape, inputs, ref):
    """fp8-output shapes: ``out`` becomes the fp8 tensor, and (dequantize, reference, tolerance)
    compare it in the output's units: ``out * output_scale`` against the reference's quantized
    values times the scale, within ``tolerances.fp8_output_bound`` (its largest element)."""
    import torch
    from rocke.kernels.common.tolerances import fp8_output_bound
    scale = float(inputs["features"]["output_scale"].reshape(-1)[0])
    torch_name, name, _ = target_fp8()
    inputs["out"] = torch.empty(inputs["out"].shape, dtype=getattr(torch, torch_name),
                                device=inputs["out"].device)
    tol = float(fp8_output_bound(shape.dtype, ref, scale, out_dtype=name).max()) * scale
    inputs["out_units"] = 1.0 / scale
    return (lambda out: out.float() * scale), ref * scale, tol


def feature_reference(shape: H.Shape, inputs) -> "torch.Tensor":
    """The fp32 reference with the shape's features (features shapes are small: one call)."""
    from rocke.kernels.common.attention_reference import ref_paged_attn
    t = {k: (v.cpu() if hasattr(v, "cpu") else v) for k, v in inputs.items()}
    feats = {k: (v.cpu() if hasattr(v, "cpu") else v) for k, v in inputs["features"].items()}
    feats.pop("kv_quant_mode", None)
    if feats.pop("use_alibi_sqrt", False):
        feats["alibi_sqrt"] = True
    import torch
    return ref_paged_attn(t["q"], t["k"], t["v"], t["cu_seqlens_q"], t["seqused_k"],
                          t["block_table"], t["softmax_scale"], causal=True,
                          out_dtype=getattr(torch, target_fp8()[0]), **feats)


def dispatcher_launcher(inputs, backend, compile_only=False):
    """The production entry point; returns its RunRecord (plan + launch reports; with
    ``compile_only`` the kernels built and nothing launched)."""
    from rocke.kernels.common.attention_unified import run_unified_attention_torch
    t = inputs
    f = inputs.get("features", {})

    def launch():
        return run_unified_attention_torch(
            t["q"], t["k"], t["v"], t["out"], t["cu_seqlens_q"], t["max_seqlen_q"],
            t["seqused_k"], t["max_seqlen_k"], t["softmax_scale"], True,
            f.get("window_size", (-1, -1)), t["block_table"], f.get("softcap", 0.0), None, None,
            None, f.get("alibi_slopes"), f.get("qq_bias"), f.get("sinks"), backend=backend,
            **{k: f[k] for k in QUANT_ARGS if k in f}, mm_prefix_range=f.get("mm_prefix_range"),
            compile_only=compile_only)
    return launch


QUANT_ARGS = ("output_scale", "use_alibi_sqrt", "kv_quant_mode", "k_scale_cache", "v_scale_cache")


def build_2d_spec(shape: H.Shape, inputs, knobs):
    """The 2D spec, built here by hand as ALGORITHM.md §10.2 describes (the dispatcher is not
    asked): d128 fp16 takes the transposed-x8 flash regime in the geometry FLASH_WIDE picks
    (wide4 = 4 warps, the provider's default, set explicitly since a bare spec is not wide4;
    L4 = 1; wide2 = 2; NUM_WARPS overrides), K single-buffered when num_warps * 32 <= T;
    everything else the narrow 16x16x16 path — d64 with 4 warps x 32 rows, d128 bf16 with 2
    warps (the rules' regime; the dispatcher's model table may run a bf16 class transposed-x8,
    which this hand-built spec does not follow). The other levers apply as the knobs module maps
    them. The narrow path must pass the ``supports_tiled_2d`` LDS gate (else SKIP); the flash
    configs bypass it and the spec's own rules arbitrate (the gate charges an LDS stage for P,
    which the flash path keeps in registers)."""
    from rocke.kernels.common import knobs as knobs_module
    from rocke.kernels.common.checks import fits_one_buffer
    from rocke.kernels.gfx942 import attention_tiled_2d as k2d
    from rocke.kernels.gfx942.attention_dispatch import split_group
    features = inputs.get("features", {})
    # QQ-bias runs narrow (the dispatcher's rule: the flash layout's per-score gather spills)
    flash = shape.dtype == "f16" and shape.head_size == 128 and "qq_bias" not in features
    if flash:
        warps = knobs.flash_num_warps
        geometry = dict(num_warps=warps, block_m_per_warp=32, tile_size=H.BLOCK_SIZE,
                        regime="transposed_x8",
                        use_k_single_buffer=warps * 32 <= H.BLOCK_SIZE)
    elif shape.head_size == 64:
        geometry = dict(num_warps=4, block_m_per_warp=32)
    else:
        geometry = dict(num_warps=2)
    cache_bytes = inputs["k"].numel() * inputs["k"].element_size()
    # a group above 16 runs as q-head blocks of at most 16 heads (ALGORITHM.md §7.1)
    group, split = split_group(shape.group)
    mm = features.get("mm_prefix_range")
    extra = dict(group_split=split) if split != 1 else {}
    if mm is not None:       # the kernel's range capacity: the power of two at or above the count
        extra["mm_prefix_ranges"] = 1 << (mm.shape[1] - 1).bit_length()
    fields = dict(dtype=shape.dtype, head_size=shape.head_size, block_size=H.BLOCK_SIZE,
                  num_queries_per_kv=group, **extra,
                  kv_addr_64=not fits_one_buffer(cache_bytes), **geometry,
                  softcap="softcap" in features, alibi="alibi_slopes" in features,
                  qq_bias="qq_bias" in features, sliding_window="window_size" in features,
                  sinks="sinks" in features, alibi_sqrt=features.get("use_alibi_sqrt", False),
                  out_dtype=target_fp8()[1] if "output_scale" in features else None)
    if "kv_quant_mode" in features:
        fields.update(kv_token_scales=True, kv_dtype="i8" if "int8" in features["kv_quant_mode"]
                      else target_fp8()[1])
    target = H.current_target()
    spec_class = spec_class_2d(target)
    fields.update(knobs_module.spec_overrides(knobs, spec_class))
    # the gate is gfx942's LDS budget; another target's spec rules arbitrate on their own
    if target == "gfx942" and not flash and not k2d.supports_tiled_2d(**fields):
        problems = "; ".join(k2d.field_problems(**fields))
        raise Skip(f"unsupported on gfx942: narrow-path gate supports_tiled_2d ({problems})")
    try:
        spec = spec_class(**fields)
    except ValueError as exc:
        raise Skip(f"unsupported on {target}: the {'flash' if flash else 'narrow'} spec rejects "
                   f"it ({exc})") from None
    geometry_name = ({4: "wide4", 2: "wide2", 1: "L4"}.get(spec.num_warps, f"w{spec.num_warps}")
                     if flash else "narrow")
    return spec, geometry_name


def spec_class_2d(target: str):
    """The 2D spec class whose kernels are built for ``target``."""
    if target == "gfx950":
        from rocke.kernels.gfx950.attention import UnifiedAttention2DSpec
        return UnifiedAttention2DSpec
    from rocke.kernels.gfx942.attention_tiled_2d import UnifiedAttention2DSpec
    return UnifiedAttention2DSpec


def explicit_2d_launcher(shape, inputs, knobs, device):
    """The hand-built 2D spec, launched through its own kernel_args/launch_geometry."""
    from rocke import runtime
    from rocke.kernels.common.attention_kernels import compiled
    from rocke.kernels.gfx942 import attention_tiled_2d as k2d
    spec, geometry_name = build_2d_spec(shape, inputs, knobs)
    kernel = compiled(spec)
    t = inputs
    f = inputs.get("features", {})
    args = k2d.kernel_args(spec, t["q"], t["k"], t["v"], t["out"], t["block_table"],
                           t["cu_seqlens_q"], t["seqused_k"], t["softmax_scale"],
                           softcap=f.get("softcap", 0.0), alibi_slopes=f.get("alibi_slopes"),
                           qq_bias=f.get("qq_bias"), window_left=f.get("window_size", (-1,))[0],
                           sinks=f.get("sinks"), output_scale=f.get("output_scale"),
                           k_scale_cache=f.get("k_scale_cache"), v_scale_cache=f.get("v_scale_cache"),
                           mm_prefix_range=f.get("mm_prefix_range"))
    grid, block = k2d.launch_geometry(spec, shape.batch, shape.total_q,
                                      shape.num_kv_heads * spec.group_split)

    def launch():
        return [runtime.launch(kernel, grid, block, args, device=device)]
    return launch, f"2d {geometry_name} ({spec.kernel_name})"


def describe_record(record) -> str:
    """What the dispatcher launched: path, geometry, segments."""
    plan = getattr(record, "plan", None)
    if plan is None:
        return "run_unified_attention_torch"
    geo = plan.geometry
    text = f"{plan.path} {geo.name}"
    if plan.path == "3d":
        text += f" x{geo.num_segments} segments"
    return text + f" ({plan.specs[0].kernel_name})"


def prepare(shape: H.Shape, device: str, with_reference: bool = True):
    """(inputs, fp32 reference or None): the shape's inputs with its features (quantized
    caches, an fp8 ``out`` with the compared view and tolerance)."""
    inputs = H.make_inputs(shape, H.torch_device(device))
    ref = None
    if shape.name in FEATURE_ARGS:
        inputs["features"] = feature_inputs(shape, H.torch_device(device))
        if "kv_quant_mode" in inputs["features"]:
            quantize_caches(inputs)
        ref = feature_reference(shape, inputs) if shape.supported else None
        if "output_scale" in inputs["features"] and ref is not None:
            inputs["out_view"], ref, inputs["out_tol"] = fp8_output(shape, inputs, ref)
    elif with_reference and shape.supported:
        ref = H.reference(shape, inputs)
    return inputs, ref


def compile_tables(shape, knobs) -> str:
    """--compile-only: each table's kernels for ``shape`` (its plan for auto and 3d, the
    hand-built spec for 2d), built and not launched."""
    from rocke.kernels.common.attention_kernels import compiled
    inputs, _ = prepare(shape, "emu", with_reference=False)
    built = []
    for table in TABLES:
        if table == "2d":
            try:
                spec, _ = build_2d_spec(shape, inputs, knobs)
            except Skip as exc:
                built.append(f"2d SKIP ({exc})")
                continue
            built.append(f"2d -> {compiled(spec).name}")
            continue
        record = dispatcher_launcher(inputs, "auto" if table == "auto" else "3d",
                                     compile_only=True)()
        built.append(f"{table} -> {', '.join(record.kernels)}")
    return "; ".join(built)


def launcher_for(table, shape, inputs, knobs, device):
    """``(launch, label)``: a no-argument callable writing ``inputs["out"]`` (returning what
    it launched), and a label of the path; the dispatcher's label comes after its first call."""
    if table == "2d":
        return explicit_2d_launcher(shape, inputs, knobs, device)
    return dispatcher_launcher(inputs, "auto" if table == "auto" else "3d"), None


def emulated_seconds(result) -> float:
    """Emulator wall time summed over the launch reports a call returned (0 if none)."""
    reports = getattr(result, "reports", result) or []
    return sum(getattr(r, "emulator_wall_time_s", 0.0) for r in reports)


# ---------------------------------------------------------------------------------------------

def run_table(table, shape, inputs, ref, args, knobs, device, rate, bar):
    row = dict(H.shape_record(shape, H.groups_of(GROUPS, shape.name)), table=table,
               status=None, reason=None, max_abs_err=None, tol=H.tolerance(shape, args.tol),
               time_s=None, time_kind=H.time_label(device), runs=0, launched=None)
    steps = 1 + args.warmup + args.attempts
    if not shape.supported:
        row.update(status="SKIP", reason=H.UNSUPPORTED_HEAD_SIZE_REASON)
        bar.update(steps)
        return row
    out = inputs["out"]
    view = inputs.get("out_view", lambda t: t)      # fp8 output: compared dequantized
    try:
        launch, row["launched"] = launcher_for(table, shape, inputs, knobs, device)
        out.fill_(float("nan"))
        result = launch()
        if row["launched"] is None:
            row["launched"] = describe_record(result)
        rate.record(H.kernel_flops(shape), emulated_seconds(result))
    except Skip as exc:
        row.update(status="SKIP", reason=str(exc))
        bar.update(steps)
        return row
    except Exception as exc:        # a launch that raises is a failure of this table, not the run
        row.update(status="ERROR", reason=f"{type(exc).__name__}: {exc}")
        bar.update(steps)
        return row
    bar.update(1)
    if args.inject_error:
        H.inject_error(out, inputs.get("out_units", 1.0))    # 1.0 in the compared units
    if "out_tol" in inputs and args.tol is None:
        row["tol"] = inputs["out_tol"]
    err = H.max_abs_error(view(out), ref)
    row["max_abs_err"] = err if err != float("inf") else None   # JSON has no inf
    if err > row["tol"]:
        row.update(status="FAIL", reason="output beyond tolerance of the fp32 reference"
                   if row["max_abs_err"] is not None else "output has NaN/inf (unwritten rows?)")
        if args.debug_mismatch:
            print(f"\n  [{table}] {shape.name}: max |err| {err:.3g} > tol {row['tol']:.3g}")
            H.print_worst_mismatches(shape, view(out), ref, args.debug_mismatch, inputs["cu_seqlens_q"])
        bar.update(steps - 1)
        return row                  # no latency for a kernel that fails the gate
    row["status"] = "PASS"
    for _ in range(args.warmup):
        launch()
        bar.update(1)
    samples = []
    for _ in range(args.attempts):
        if device == "emu":
            samples.append(emulated_seconds(launch()))
        else:
            samples.append(H.timed(launch, device))
        bar.update(1)
    if device == "emu" and not samples:
        samples = [emulated_seconds(result)]   # the gated launch's own emulator time
    if samples:
        row["time_s"] = statistics.median(samples)
        row["runs"] = len(samples)
    return row


#: the flags a shape's task reads
TASK_FLAGS = ("attempts", "warmup", "tol", "inject_error", "debug_mismatch")


def shape_task(item) -> dict:
    """One shape's three tables: a task of rocke.tasks (``H.run_shapes``), self-contained --
    ``item`` is ``(shape, settings)``, plain data: the device, TASK_FLAGS' values, the run's
    levers; the inputs are built here from their seeds -- and answering plain data
    (``H.in_task``: the rows, the status text, the launches' FLOPs and emulated seconds)."""
    shape, settings = item

    def body():
        from rocke.kernels.common.knobs import current_knobs
        args = argparse.Namespace(**settings["flags"])
        device, knobs = settings["device"], current_knobs()
        rate = H.EmuRate(device=device)
        steps = 1 + args.warmup + args.attempts
        rows = []
        inputs, ref = prepare(shape, device)
        with H.progress(shape, len(TABLES) * steps, device, rate, settings["serial"]) as bar:
            for table in TABLES:
                rows.append(run_table(table, shape, inputs, ref, args, knobs, device, rate, bar))
        return rows, ", ".join(f"{r['table']} {r['status']}" for r in rows), rate
    return H.in_task(settings, body)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    device = H.resolve_device(args.device, args.target)
    engine = H.choose_engine(args, device)
    H.relax_gc_when_emulating(device)
    target = H.current_target()
    if args.attempts is None:
        args.attempts = HIP_ATTEMPTS if device == "hip" else EMU_ATTEMPTS
    if args.warmup is None:
        args.warmup = HIP_WARMUP if device == "hip" else EMU_WARMUP
    shapes = H.select(GROUPS, args.scenario or ["all"], "all")
    shapes = [H.scale_shape(s, args.max_kv) for s in shapes]

    print(f"rocke {target} unified attention parity harness — device {device}; times are "
          f"{H.time_label(device)}" + H.emulator_site(device))
    knobs, lever_values = H.echo_levers()
    if device == "emu":
        print(f"timing: emulator wall time of the kernel launches themselves (the emulator's "
              f"own clock, no host work, no compile): median of {args.attempts} extra launches "
              f"after {args.warmup} warm-up" if args.attempts else
              "timing: emulator wall time of the gated launch itself (the emulator's own clock: "
              "no host work, no compile); --attempts N adds N timed launches")
    else:
        print(f"timing: {args.warmup} warm-up + {args.attempts} timed launches per table "
              "(median wall time, device synchronized)")
    if args.max_kv is not None:
        print(f"scaled: every KV length capped at {args.max_kv} "
              f"({'--quick' if args.quick else '--max-kv'}); shape names are the full set's, "
              f"lengths are scaled (see the 'scaled' column)")
    rate = H.EmuRate(device=device)
    steps = 1 + args.warmup + args.attempts
    first = H.first_of_each_problem(shapes)
    plan = [(s, len(TABLES) * steps) for s in shapes if s.supported and first[s.name] == s.name]
    estimate = H.print_estimate(plan, device, rate)
    if args.dry_run:
        H.print_plan(shapes, first, rate, device, plan)
        return 0
    if args.compile_only:
        return H.compile_shapes(shapes, first, lambda shape: compile_tables(shape, knobs))

    def report(rows):
        counts = H.summary(rows)
        return dict(
            harness="parity_unified_attention", schema_version=H.REPORT_SCHEMA_VERSION,
            device=device, target=target, time_kind=H.time_label(device), levers=lever_values,
            scenarios=args.scenario or ["all"], max_kv=args.max_kv, quick=args.quick,
            attempts=args.attempts, warmup=args.warmup, tol_override=args.tol,
            injected_error=args.inject_error, tables=list(TABLES), results=rows, summary=counts,
            exit_code=H.run_exit_code(counts))
    settings = dict(device=device, flags={flag: getattr(args, flag) for flag in TASK_FLAGS})
    rows = H.run_shapes(shapes, GROUPS, shape_task, settings, args.report, report, engine, rate)

    for table in TABLES:
        body = []
        for r in (r for r in rows if r["table"] == table):
            err = "-" if r["max_abs_err"] is None else f"{r['max_abs_err']:.2e}"
            note = r["reason"] or (r["launched"] or "")
            if r["reused_from"]:
                note = f"= {r['reused_from']} after scaling; " + note
            scaled = "scaled" if r["scaled_from"] else ""
            body.append([r["shape"], r["status"], err, f"{r['tol']:.0e}", H.fmt_ms(r["time_s"]),
                         scaled, note])
        H.print_table(f"table {table}" + {"auto": " (production dispatcher)",
                                           "2d": " (explicit 2D spec)",
                                           "3d": " (split-KV, forced)"}[table],
                      ["shape", "status", "max|err|", "tol", f"ms ({H.time_label(device)})",
                       "", "path / reason"], body)
    counts = H.summary(rows)
    print("\nsummary: " + ", ".join(f"{k} {v}" for k, v in counts.items())
          + (f"; emulated at {rate.rate / 1e9:.2f} GFLOP/s (estimate was "
             f"{H.format_seconds(estimate)})" if device == "emu" else ""))
    exit_code = H.run_exit_code(counts)
    written = H.write_report(args.report, report(rows))
    return H.final_exit_code(exit_code, written)


if __name__ == "__main__":
    sys.exit(main())
