"""The definitive correctness + timing check over every shape through the production dispatcher
(``run_unified_attention_torch``, backend auto), timed eager and graph against torch SDPA.

Per shape: the dispatcher's output gated against the fp32 paged reference (``ref_paged_attn``,
``attention_atol``), in eager mode and replayed from a ``rocke.runtime.Graph``; then four timing
cells — rocke eager, rocke graph, torch eager, torch graph — each ``--reps`` measurements of
``--iters`` launches after ``--warmup``, reduced by ``--reduce``; a cell whose spread (max - min
over median) exceeds 10 % is flagged ``noisy``. Torch uses the flash SDPA backend where the
shape is flash-eligible (square, head_size <= 128) and its ``default`` backend otherwise
(decode, chunked, d256); for non-square causal shapes torch's ``is_causal`` is top-left aligned,
rocke's bottom-right, so those torch times are context only. Exit status 1 on any FAIL/ERROR.

On the emulator rocke's times are emulator wall time (never gfx942 GPU time) on this CPU, or on a
CUDA GPU with ``ROCKE_EMU_BACKEND=torch ROCKE_EMU_DEVICE=cuda``; torch runs natively where the
tensors are, there is no torch graph, and rocke/torch ratios are not printed: they would compare
an emulator with native kernels. ``--quick`` / ``--max-kv N`` scale KV lengths.

``--jobs N`` runs the shapes side by side in N forked processes, ``--ray [ADDRESS]`` on a Ray
cluster (``--ray`` alone: RAY_ADDRESS's, else a local one; ``pip install 'rocke[cluster]'``):
one task per shape through rocke.tasks, each emulating on one CPU; serial is the default. The
table, the summary line and the ``--report`` JSON are the serial run's (rows in the grid's
order); the progress lines come as shapes finish, and times are measured beside the other
tasks. A bad ``--jobs`` / ``--ray`` is one line and exit 2 before any work (so is either with
``--compile-only`` or on a GPU, which the shapes would share and whose timings they would skew).

Test-only lever: the hidden ``--inject-error`` flag corrupts one output element after each
rocke launch, so the tests can show a wrong result fails the gate and the exit status.

    python examples/final_shapes_check.py --quick
    python examples/final_shapes_check.py --quick --jobs 2             # 2 processes
    python examples/final_shapes_check.py --quick --target gfx950     # gfx950 kernels, emulator
    python examples/final_shapes_check.py --groups decode prefill --reps 5 --reduce median
"""
from __future__ import annotations

import argparse
import math
import sys

import torch

import attention_harness as H
from final_shapes import DISABLED, GROUPS

NOISY_SPREAD = 0.10
HIP_DEFAULTS = dict(warmup=10, iters=50, reps=10)
EMU_DEFAULTS = dict(warmup=0, iters=1, reps=1)      # each emulated launch is a CPU emulation


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="correctness + timing of every shape through the production dispatcher, "
                    "eager and graph, against torch SDPA",
        epilog="groups: " + ", ".join(f"{g} ({len(s)} shapes"
                                      f"{', off by default' if g in DISABLED else ''})"
                                      for g, s in GROUPS.items()))
    p.add_argument("--groups", nargs="+", metavar="G",
                   help="shape groups to run, or exact shape names (default: every group"
                        + (" but " + ", ".join(DISABLED) if DISABLED else "") + ")")
    for flag, meaning in (("warmup", "warm-up launches before timing"),
                          ("iters", "timed launches per measurement"),
                          ("reps", "measurements per cell, reduced per --reduce")):
        p.add_argument(f"--{flag}", type=int, default=None,
                       help=f"{meaning} (default {HIP_DEFAULTS[flag]} on hip, "
                            f"{EMU_DEFAULTS[flag]} on emu)")
    p.add_argument("--reduce", choices=("median", "mean", "trimmed"), default="trimmed",
                   help="how to reduce the --reps measurements (default trimmed)")
    p.add_argument("--trim", type=float, default=0.2,
                   help="fraction stripped from each end for --reduce trimmed, in [0, 0.5)")
    p.add_argument("--device", choices=("emu", "hip"), default=None,
                   help="launch device (default: ROCKE_DEVICE, else hip if present, else emu)")
    H.add_target_flag(p)
    p.add_argument("--max-kv", type=int, default=None, metavar="N",
                   help="scale every shape so its longest KV length is at most N")
    p.add_argument("--quick", action="store_true",
                   help=f"CPU-sized run: --max-kv {H.QUICK_MAX_KV} unless --max-kv is given")
    p.add_argument("--report", metavar="PATH", help="write a JSON results report")
    p.add_argument("--dry-run", action="store_true",
                   help="print the selected shapes and the emulator-time estimate, run nothing")
    H.add_compile_only_flag(p)
    H.add_engine_flags(p)
    p.add_argument("--inject-error", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    H.check_report_path(p, args.report)
    if not (0.0 <= args.trim < 0.5):
        p.error(f"--trim must be in [0, 0.5), got {args.trim}")
    if args.warmup is not None and args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")
    for flag in ("iters", "reps"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            p.error(f"--{flag} must be >= 1, got {value}")
    if args.max_kv is not None and args.max_kv < 1:
        p.error(f"--max-kv must be >= 1, got {args.max_kv}")
    if args.quick and args.max_kv is None:
        args.max_kv = H.QUICK_MAX_KV
    return args


# ---------------------------------------------------------------------------------------------
# rocke: eager and graph

def dispatcher_call(inputs, compile_only=False):
    from rocke.kernels.common.attention_unified import run_unified_attention_torch
    t = inputs

    def launch():
        return run_unified_attention_torch(
            t["q"], t["k"], t["v"], t["out"], t["cu_seqlens_q"], t["max_seqlen_q"],
            t["seqused_k"], t["max_seqlen_k"], t["softmax_scale"], True, (-1, -1),
            t["block_table"], 0.0, None, None, None, backend="auto", compile_only=compile_only)
    return launch


def dense_call(shape, inputs, compile_only=False):
    """rocke.dense_attention on the dense [B, S, H, D] twin: q and out are the paged inputs'
    own tensors viewed so (a uniform square batch is already that order), K/V gathered from
    the cache once here, outside the launch (so a captured graph replays only the kernel)."""
    from rocke.dense_attention import compiled_kernel, dense_attention, dense_spec
    b, (s, _), hq, hk, d = shape.batch, shape.seqlens[0], shape.num_heads, shape.num_kv_heads, \
        shape.head_size
    t = inputs
    q, out = t["q"].view(b, s, hq, d), t["out"].view(b, s, hq, d)
    pages = t["block_table"].long()
    k, v = (t[n][pages].reshape(b, -1, hk, d)[:, :s].contiguous() for n in ("k", "v"))

    spec = dense_spec(q, k, v, causal=True)
    record = DenseRecord(spec.kernel_name)

    def launch():
        if compile_only:
            compiled_kernel(spec)
        else:
            dense_attention(q, k, v, causal=True, sm_scale=t["softmax_scale"], out=out)
        return record
    return launch


class DenseRecord:
    """What describe_plan / --compile-only read of a dense launch: its kernel, no plan."""
    def __init__(self, kernel: str):
        self.kernels, self.plan, self.reports = [kernel], None, []


def rocke_call(shape, inputs, compile_only=False):
    """The shape's rocke launch: the paged dispatcher, or the dense kernel (Shape.kernel)."""
    if shape.kernel == "dense":
        return dense_call(shape, inputs, compile_only)
    return dispatcher_call(inputs, compile_only)


def compile_one(shape) -> str:
    """--compile-only: the dispatcher's plan of ``shape`` and the kernels it built."""
    record = rocke_call(shape, H.make_inputs(shape, "cpu"), compile_only=True)()
    return f"{describe_plan(record) or 'dense'}: {', '.join(record.kernels)}"


def describe_plan(record) -> str | None:
    """The dispatcher's choice: path, geometry, segments, whether it recommends graph replay."""
    plan = getattr(record, "plan", None)
    if plan is None:
        return None
    text = f"{plan.path} {plan.geometry.name}"
    if plan.path == "3d":
        text += f" x{plan.geometry.num_segments}"
    return text + (" graph-rec" if plan.graph_replay else "")


def capture_graph(launch):
    """A replay callable for ``launch`` captured in a rocke.runtime.Graph."""
    from rocke.runtime import Graph
    graph = Graph()
    with graph.capture():
        launch()
    return graph.replay


# ---------------------------------------------------------------------------------------------
# torch SDPA twin

def dense_twin(shape: H.Shape, inputs):
    """``[B, H, S, D]`` q/k/v gathered from the paged inputs (uniform batches only)."""
    q_len, kv_len = shape.seqlens[0]
    b, hq, hk, d = shape.batch, shape.num_heads, shape.num_kv_heads, shape.head_size
    q = inputs["q"].reshape(b, q_len, hq, d).transpose(1, 2).contiguous()
    pages = inputs["block_table"].long()
    k = inputs["k"][pages].reshape(b, -1, hk, d)[:, :kv_len].transpose(1, 2).contiguous()
    v = inputs["v"][pages].reshape(b, -1, hk, d)[:, :kv_len].transpose(1, 2).contiguous()
    return q, k, v


def torch_backend(shape: H.Shape) -> str:
    """``flash`` for square causal shapes with head_size <= 128, ``default`` (torch's own choice)
    else."""
    q_len, kv_len = shape.seqlens[0]
    return "flash" if q_len == kv_len and shape.head_size <= 128 else "default"


def torch_call(shape: H.Shape, inputs, backend: str):
    """``(run, resolved)``: the SDPA call on the dense twin, and the backend torch actually
    uses for it (``default`` resolves through torch's own choice, e.g. its CPU flash kernel)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = dense_twin(shape, inputs)
    causal = shape.max_q > 1       # decode: one query sees every key
    scale = inputs["softmax_scale"]
    gqa = shape.group > 1

    def run():
        if backend == "flash":
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                                      enable_gqa=gqa)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                              enable_gqa=gqa)
    resolved = "flash_attention"
    if backend != "flash":
        names = {int(getattr(SDPBackend, n)): n.lower() for n in
                 ("MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
                 if hasattr(SDPBackend, n)}
        try:   # torch's own choice for these inputs (a private helper: unknown if it moves)
            resolved = names.get(int(torch._fused_sdp_choice(
                q, k, v, None, 0.0, causal, scale=scale, enable_gqa=gqa)), "unknown")
        except Exception:
            resolved = "unknown"
    return run, resolved


def torch_graph(run, device):
    if device != "hip":
        return None
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    return graph.replay


# ---------------------------------------------------------------------------------------------

def measure(fn, args, device, bar=None, min_warmup=0):
    """``(reduced seconds per launch, spread, samples)`` over ``--reps`` measurements of
    ``--iters`` launches, after ``max(--warmup, min_warmup)`` warm-up calls."""
    for _ in range(max(args.warmup, min_warmup)):
        fn()
        if bar is not None:
            bar.update(1)
    samples = []
    for _ in range(args.reps):
        def batch():
            for _ in range(args.iters):
                fn()
        samples.append(H.timed(batch, device) / args.iters)
        if bar is not None:
            bar.update(args.iters)
    return H.reduce_times(samples, args.reduce, args.trim), H.spread(samples), samples


def gate(out, ref, tol, args):
    if args.inject_error:
        H.inject_error(out)
    err = H.max_abs_error(out, ref)
    return err, err <= tol


def check_shape(shape, args, device, rate, bars=True):
    row = dict(H.shape_record(shape, H.groups_of(GROUPS, shape.name)), status=None,
               reason=None, tol=H.tolerance(shape, None), max_abs_err_eager=None,
               max_abs_err_graph=None, time_kind=H.time_label(device), cells={},
               torch_backend=None, torch_device=H.torch_device(device), torch_context_only=False,
               path=None, torch_backend_resolved=None)
    cells = row["cells"]
    per_mode = args.warmup + args.reps * args.iters
    launches = 2 + 2 * per_mode
    if not shape.supported:
        row.update(status="SKIP", reason=H.UNSUPPORTED_HEAD_SIZE_REASON)
        return row
    inputs = H.make_inputs(shape, H.torch_device(device))
    ref = H.reference(shape, inputs)
    out = inputs["out"]
    with H.progress(shape, launches, device, rate, bars) as bar:
        launch = rocke_call(shape, inputs)
        try:
            out.fill_(float("nan"))
            record = launch()
            bar.update(1)
            row["path"] = describe_plan(record) or f"dense {record.kernels[0]}"
            rate.record(H.kernel_flops(shape), sum(
                getattr(r, "emulator_wall_time_s", 0.0) for r in getattr(record, "reports", [])))
            err, ok = gate(out, ref, row["tol"], args)
            row["max_abs_err_eager"] = err if math.isfinite(err) else None
            replay = capture_graph(launch)
            out.fill_(float("nan"))
            replay()
            bar.update(1)
            gerr, gok = gate(out, ref, row["tol"], args)
            row["max_abs_err_graph"] = gerr if math.isfinite(gerr) else None
            ok = ok and gok
        except Exception as exc:
            row.update(status="ERROR", reason=f"{type(exc).__name__}: {exc}")
            return row
        row["status"] = "PASS" if ok else "FAIL"
        if not ok:
            row["reason"] = "output differs from the fp32 reference beyond tolerance"
            return row          # no timing for a result that fails the gate
        t, s, samples = measure(launch, args, device, bar)
        cells["rocke_eager"] = dict(seconds=t, spread=s, samples=samples)
        t, s, samples = measure(replay, args, device, bar)
        cells["rocke_graph"] = dict(seconds=t, spread=s, samples=samples)
        backend = torch_backend(shape)
        row["torch_backend"] = backend
        row["torch_context_only"] = shape.max_q > 1 and shape.seqlens[0][0] != shape.seqlens[0][1]
        try:
            run, row["torch_backend_resolved"] = torch_call(shape, inputs, backend)
            # torch is warmed at least once even when --warmup is 0 (the emulator default):
            # its first call pays one-off initialisation that is not attention
            t, s, samples = measure(run, args, device, min_warmup=1)
            cells["torch_eager"] = dict(seconds=t, spread=s, samples=samples)
            tgraph = torch_graph(run, device)
            if tgraph is not None:
                t, s, samples = measure(tgraph, args, device, min_warmup=1)
                cells["torch_graph"] = dict(seconds=t, spread=s, samples=samples)
        except Exception as exc:    # the comparison column only: rocke's result stands
            row["reason"] = f"torch SDPA failed: {type(exc).__name__}: {exc}"
    return row


def cell_text(cells, key, missing):
    cell = cells.get(key)
    if cell is None:
        return missing
    noisy = cell["spread"] is not None and cell["spread"] > NOISY_SPREAD
    return H.fmt_ms(cell["seconds"]) + (" noisy" if noisy else "")


#: the flags a shape's task reads
TASK_FLAGS = ("warmup", "iters", "reps", "reduce", "trim", "inject_error")


def shape_task(item) -> dict:
    """One shape's check: a task of rocke.tasks (``H.run_shapes``), self-contained -- ``item``
    is ``(shape, settings)``, plain data: the device, TASK_FLAGS' values, the run's levers; the
    inputs are built here from their seed -- and answering plain data (``H.in_task``: the row,
    its status, the launches' FLOPs and emulated seconds)."""
    shape, settings = item

    def body():
        rate = H.EmuRate(device=settings["device"])
        row = check_shape(shape, argparse.Namespace(**settings["flags"]), settings["device"],
                          rate, settings["serial"])
        return [row], row["status"], rate
    return H.in_task(settings, body)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    device = H.resolve_device(args.device, args.target)
    engine = H.choose_engine(args, device)
    H.relax_gc_when_emulating(device)
    target = H.current_target()
    defaults = HIP_DEFAULTS if device == "hip" else EMU_DEFAULTS
    for flag, value in defaults.items():
        if getattr(args, flag) is None:
            setattr(args, flag, value)
    selectors = args.groups or [g for g in GROUPS if g not in DISABLED]
    shapes = [H.scale_shape(s, args.max_kv) for s in H.select(GROUPS, selectors, None)]

    emu = device == "emu"
    print(f"rocke {target} final shapes check — production dispatcher (backend auto), device "
          f"{device}; rocke times are {H.time_label(device)}"
          + (H.emulator_site(device) + f"; torch runs natively on {H.torch_device(device)}"
             if emu else ""))
    _, lever_values = H.echo_levers()
    print("graph mode: rocke.runtime.Graph")
    print(f"timing: {args.warmup} warm-up (torch: at least 1), {args.reps} reps x {args.iters} "
          f"iters, reduce {args.reduce}" + (f" (trim {args.trim})" if args.reduce == "trimmed"
                                           else ""))
    if args.max_kv is not None:
        print(f"scaled: every KV length capped at {args.max_kv} "
              f"({'--quick' if args.quick else '--max-kv'}); shape names are the full set's")
    rate = H.EmuRate(device=device)
    per_mode = args.warmup + args.reps * args.iters
    first = H.first_of_each_problem(shapes)
    plan = [(s, 2 + 2 * per_mode) for s in shapes if s.supported and first[s.name] == s.name]
    estimate = H.print_estimate(plan, device, rate)
    if args.dry_run:
        H.print_plan(shapes, first, rate, device, plan)
        return 0
    if args.compile_only:
        return H.compile_shapes(shapes, first, compile_one)

    def report(rows):
        counts = H.summary(rows)
        return dict(
            harness="final_shapes_check", schema_version=H.REPORT_SCHEMA_VERSION, device=device,
            target=target, time_kind=H.time_label(device), levers=lever_values,
            groups=selectors, max_kv=args.max_kv, quick=args.quick, warmup=args.warmup,
            iters=args.iters, reps=args.reps, reduce=args.reduce, trim=args.trim,
            noisy_spread=NOISY_SPREAD, injected_error=args.inject_error, results=rows,
            summary=counts, exit_code=H.run_exit_code(counts))
    settings = dict(device=device, flags={flag: getattr(args, flag) for flag in TASK_FLAGS})
    rows = H.run_shapes(shapes, GROUPS, shape_task, settings, args.report, report, engine, rate)

    tdev = H.torch_device(device)
    body = []
    for r in rows:
        c = r["cells"]
        errs = [e for e in (r["max_abs_err_eager"], r["max_abs_err_graph"]) if e is not None]
        ratios = []
        for mode in ("eager", "graph"):
            ours, theirs = c.get(f"rocke_{mode}"), c.get(f"torch_{mode}")
            ratios.append(f"{ours['seconds'] / theirs['seconds']:.2f}"
                          if not emu and ours and theirs else "n/a")
        backend = "-"
        if r["torch_backend"] == "flash":
            backend = f"flash[{tdev}]"
        elif r["torch_backend"] is not None:
            resolved = (r["torch_backend_resolved"] or "unknown").replace("_attention", "")
            backend = f"default->{resolved}[{tdev}]"
        if r["torch_context_only"]:
            backend += " ctx"
        graph_missing = "n/a" if r["status"] == "PASS" else "-"
        body.append([r["shape"], r["status"], f"{max(errs):.2e}" if errs else "-",
                     r["path"] or "-", cell_text(c, "rocke_eager", "-"),
                     cell_text(c, "rocke_graph", graph_missing),
                     cell_text(c, "torch_eager", "-"), cell_text(c, "torch_graph", graph_missing),
                     ratios[0], ratios[1], backend,
                     ("scaled " if r["scaled_from"] else "")
                     + (f"= {r['reused_from']} " if r["reused_from"] else "")
                     + (r["reason"] or "")])
    unit = "emu wall ms" if emu else "ms"
    H.print_table("final shapes (rocke = production dispatcher, backend auto)",
                  ["shape", "status", "max|err|", "rocke path", f"rocke eager ({unit})",
                   f"rocke graph ({unit})", f"torch eager (ms, {tdev})", "torch graph (ms)",
                   "eager x", "graph x", "sdpa", "note"], body)
    print("  x = rocke time / torch time (< 1: rocke faster); noisy = spread (max-min)/median > "
          f"{NOISY_SPREAD:.0%} over the reps; 'graph-rec' = the dispatcher recommends graph replay")
    if emu:
        print("  rocke eager = host work (validation, dispatch, kernarg packing) + emulation; "
              "rocke graph = replay of the captured launches (emulation only)")
        print("  torch graph: n/a (not taken on the emulator); ratios n/a: rocke ran on the "
              f"emulator, torch natively on {tdev}, the times are not comparable")
    print("  sdpa: torch backend: flash where the shape is flash-eligible (square, d <= 128), "
          "else torch's default (-> what torch resolved it to)")
    print("  ctx: torch's is_causal is top-left aligned, rocke's bottom-right: context only")
    if not emu:
        flash_rows = [r for r in rows if r["torch_backend"] == "flash"
                      and "rocke_graph" in r["cells"] and "torch_graph" in r["cells"]]
        wins = sum(r["cells"]["rocke_graph"]["seconds"] < r["cells"]["torch_graph"]["seconds"]
                   for r in flash_rows)
        print(f"  graph-mode win rate vs torch flash: {wins}/{len(flash_rows)} "
              "(default-backend rows excluded)")
    counts = H.summary(rows)
    exit_code = H.run_exit_code(counts)
    print("\nsummary: " + ", ".join(f"{k} {v}" for k, v in counts.items())
          + (f"; emulated at {rate.rate / 1e9:.2f} GFLOP/s (estimate was "
             f"{H.format_seconds(estimate)})" if emu else ""))
    written = H.write_report(args.report, report(rows))
    return H.final_exit_code(exit_code, written)


if __name__ == "__main__":
    sys.exit(main())
