"""Host cost per launch: everything `rocke.runtime.launch` does before the device call, for a
compiled (cached) kernel variant. Prints figures; asserts only what makes a row's figure what
its name says (a hit hits, a replay replays). Target: <= 20 us per launch.

Parts (median and best over --batches batches of --batch calls, mean per call):
  validate = the family's kernel_args (per-tensor dtype/shape/stride checks, argument order);
  dispatch = get_device(None): the default-device decision (ROCKE_DEVICE, else cached probe);
  prepare  = prepare_launch: geometry, the signature check once merged, kernarg packing;
  host     = the three in a row, as a caller of launch() pays them;
  hip      = HipDevice.launch_params: module-cache lookup, stream, kernarg buffer and `extra`
             array (only with --standin, which runs it under tests/hip_stub's stand-in
             libamdhip64.so, or on a machine with a gfx942 GPU).
--profile prints where the host path's time goes (cProfile, by own time).

Then the attention entry point's host cost per call (run_unified_attention_torch on a decode
batch; the emulator's execution of each kernel is stubbed out, so what is timed is the host
path: the call-cache look-up and, on a hit, what the hit does). Every row times a call-cache
hit (the same tensors each call). Targets: <= 10 us per call on a GPU graph-replay hit,
<= 30 us otherwise.
  attn emu hit = on the emulator (CPU tensors): a hit re-packs the call's launches from its own
                tensors (prepare_launch per kernel; the emulator never captures graphs, so there
                is no replay to time here);
  vllm emu hit = the same decode step through rocke.vllm.unified_attention, what vLLM calls (its
                3D contract: the caller's workspaces and segment count): the adapter's own
                checks plus the entry point's emulator hit;
  attn hip replay = with --standin: the same call on ROCm GPU tensors (faked over the stand-in's
                device memory, with torch.cuda's stream surface faked too) through the HIP
                device, up to hipGraphLaunch (the stand-in's emulation of each launch stubbed
                out). A GPU call runs eagerly until it has repeated CAPTURE_AFTER times
                (attention_calls), then is captured once and replayed: the row's step is called
                CAPTURE_AFTER times before timing and must report replayed. The metadata guard
                is off by default (ROCKE_CHECK_METADATA=off): a decode call is 2 launches
                (attention_3d, reduce_segments), replayed as one graph;
  attn hip eager = the same hit with HIPDNN_GFX942_{2D,3D}_GRAPH=0: its 2 launches one by one
                (hipModuleLaunchKernel each), never captured;
  vllm hip replay = vllm emu hit's step on the HIP path (its workspaces on the GPU too), warmed
                the same way and checked to replay;
  hip replay real reads = attn hip replay with the fake ROCm tensors' getters at a real
                tensor's cost: the same product code under torch's DisableTorchFunctionSubclass,
                which skips only the per-getter __torch_function__ look-up on a Tensor subclass
                (the fakes' own is torch's disabled one, so no call behaves otherwise; a real
                ROCm tensor is an exact torch.Tensor and never looks it up);
  hip calls / hip-python / standin py / reads gpu / reads cpu = the stand-in's share of a HIP
                replay hit (standin_share_rows); the lines after the table split each replay
                hit into the stand-in's share and rocke's own (print_shares). torch.cuda's
                current_stream and is_current_stream_capturing, which a replay hit reads, are
                the fake's cheap lambdas here: a real ROCm torch's cost more (not measurable
                on this CPU torch).
A row's levers are set around its timing loop, not per call. On a shared machine pass --cpu-time.

Then, with --standin, a realistic sequence (print_sequence) rather than one call in a tight
loop: --layers layers (each its own KV cache: distinct calls) x --steps steps, each step a
decode step (D: vLLM's 3D arguments, persistent buffers: call-cache hits, replayed once
repeated) or a prefill step (P: vLLM's 2D path, fresh q and out every call: misses, eager), on
the HIP path through rocke.vllm.unified_attention (decode also through the entry point
directly); every call carries vLLM's k and v descales (a layer's scale expanded per sequence,
as vLLM passes on every call). Per call, by kind, and what the calls did (the stand-in's HIP call counts: graph
captures, graph launches, graphs released; the call cache's misses). The call cache holds
attention_calls.CALL_CACHE_SIZE calls and GRAPH_CACHE_SIZE graphs: more distinct repeated calls
than graphs recapture every call. --graph-cache / --call-cache time the sequence with other
sizes (a what-if; the defaults are the product's).

    .venv/bin/python benchmarks/launch.py [--variant flash_attention/f16_d64_causal] [--standin]
"""
from __future__ import annotations

import argparse
import contextlib
import operator
import os
import re
import statistics
import sys

# benchmarks/profile.py (the profiling benchmark's fixed name) would shadow the standard library's
# `profile`, which cProfile imports: take both from the standard library, then restore the path.
_HERE = os.path.dirname(os.path.abspath(__file__))
_saved_path = list(sys.path)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.modules.pop("profile", None)
import cProfile  # noqa: E402
import pstats  # noqa: E402
sys.path[:] = _saved_path
import tempfile
import time
from pathlib import Path

import torch

from rocke import env, runtime
from rocke.kernels.registry import get_variant

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile import machine  # noqa: E402  (sibling benchmark: one definition of the machine line)


def per_call_us(fn, batch: int, batches: int, clock=time.perf_counter) -> tuple[float, float]:
    """(median, best) over batches of the mean time per call, in microseconds. On a shared
    machine the best batch is the closest to the uncontended cost."""
    samples = []
    for _ in range(batches):
        t0 = clock()
        for _ in range(batch):
            fn()
        samples.append((clock() - t0) / batch)
    return statistics.median(samples) * 1e6, min(samples) * 1e6


def flash_attention_case(variant, B=1, H=8, S=512):
    from rocke.kernels.samples import flash_attention as fa
    spec = variant.spec
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[spec.dtype]
    q, k, v, o = (torch.zeros(B, H, S, spec.head_dim, dtype=dtype) for _ in range(4))
    grid, block = fa.launch_geometry(spec, B, H, S)
    return (lambda: fa.kernel_args(spec, q, k, v, o)), grid, block


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", default="flash_attention/f16_d64_causal")
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--standin", action="store_true",
                    help="also time the HIP device's host side under the stand-in libamdhip64.so")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by this process's CPU time (time.process_time), not wall time: "
                         "on a loaded machine it leaves out the time other processes ran")
    ap.add_argument("--no-attention", action="store_true",
                    help="skip the attention entry point's rows")
    ap.add_argument("--layers", type=int, default=32,
                    help="the realistic sequence's layers (each its own KV cache)")
    ap.add_argument("--steps", default="DDDP" * 4,
                    help="the realistic sequence's steps: D decode, P prefill (each: --layers "
                         "calls)")
    ap.add_argument("--seq-repeats", type=int, default=20,
                    help="timed repeats of the realistic sequence (after one untimed warm-up)")
    ap.add_argument("--graph-cache", type=int, default=None,
                    help="what-if: the sequence with this many cached graphs (default: the "
                         "product's attention_calls.GRAPH_CACHE_SIZE)")
    ap.add_argument("--call-cache", type=int, default=None,
                    help="what-if: the sequence with this many cached calls (default: the "
                         "product's attention_calls.CALL_CACHE_SIZE)")
    a = ap.parse_args(argv)
    if a.batch < 1 or a.batches < 1:
        ap.error("--batch and --batches must be >= 1")
    if a.layers < 1 or a.seq_repeats < 1 or not a.steps or set(a.steps) - set("DP"):
        ap.error("--layers and --seq-repeats must be >= 1; --steps is a string of D and P")
    if any(n is not None and n < 1 for n in (a.graph_cache, a.call_cache)):
        ap.error("--graph-cache and --call-cache must be >= 1")
    variant = get_variant(a.variant)
    if variant.family != "flash_attention":
        ap.error("only flash_attention variants have a case here so far")
    compiled = variant.compile()                     # cached: the launch path is what we time
    make_args, grid, block = flash_attention_case(variant)
    args = make_args()
    runtime.get_device(None)                         # the one-time probe is not per launch

    def host():
        values = make_args()
        runtime.get_device(None)
        return runtime.prepare_launch(compiled, grid, block, values)

    from rocke.runtime import tensor_key
    print(f"machine: {machine()}; the call cache's tensor key: "
          f"{'native' if tensor_key.native() else 'torch getters (native helper not loaded)'}")
    print(f"variant: {a.variant} (kernel {compiled.name}), grid {grid}, block {block}, "
          f"{len(compiled.info.args)} kernarg entries, {compiled.info.kernarg_size} B segment; "
          f"default device {runtime.default_device_kind()}")
    rows = [("validate", lambda: make_args()),
            ("dispatch", lambda: runtime.get_device(None)),
            ("prepare", lambda: runtime.prepare_launch(compiled, grid, block, args)),
            ("host", host)]
    if a.standin:
        rows.append(("hip", hip_side(compiled, grid, block, args)))
    if not a.no_attention:
        rows += attention_rows(a.standin)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    clock = time.process_time if a.cpu_time else time.perf_counter
    print(f"{'part':22s} {'median us':>10s} {'best us':>10s}   ({a.batches} batches x {a.batch} "
          f"calls, mean per call, {'CPU' if a.cpu_time else 'wall'} time)")
    measured = {}
    for name, fn in rows:
        # a row's levers and set-up: set once around its timing loop, not per call
        with levers_set(getattr(fn, "levers", {})), getattr(fn, "around", contextlib.nullcontext)():
            median, best = per_call_us(getattr(fn, "bare", fn), a.batch, a.batches, clock)
        measured[name] = median, best
        print(f"{name:22s} {median:10.2f} {best:10.2f}")
    if "attn hip replay" in measured:
        print_shares(measured)
        print_sequence(a, clock)
    if a.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(a.batch * a.batches):
            host()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    return 0


def print_shares(measured: dict) -> None:
    """The HIP replay hit split into the stand-in's share and rocke's own. The share is taken
    from its rows' best batches (small pieces, whose medians on a loaded machine are mostly
    other processes' noise) and subtracted from the replay row's best and median."""
    best = {name: values[1] for name, values in measured.items()}
    calls = best["hip calls"] - best["hip-python"]
    reads = best["reads gpu"] - best["reads cpu"]
    share = calls + reads
    print(f"stand-in's share of a HIP replay hit: {share:.2f} us (its hipGraphLaunch {calls:.2f} + "
          f"its tensors' reads {reads:.2f}); hip-python's wrappers {best['hip-python']:.2f} us "
          "are rocke's (a real machine runs them too)")
    median, fastest = measured["attn hip replay"]
    print(f"attn hip replay: rocke's own {median - share:.2f} median, {fastest - share:.2f} best "
          f"(of {median:.2f} / {fastest:.2f})")


def print_sequence(a, clock) -> None:
    """The realistic sequence (the module docstring) on the HIP stand-in path: ``a.layers``
    layers, each with its own KV cache, ``a.steps`` steps of ``a.layers`` calls each. Decode
    (D): vLLM's 3D arguments on persistent buffers (each layer's q and out; the metadata and
    workspaces shared by the layers). Prefill (P): vLLM's 2D path with a fresh q and out every
    call (views at addresses no call used before: what a fresh tensor is to the call key,
    without allocating in the timed loop). One untimed pass warms every call (modules loaded,
    each decode call repeated CAPTURE_AFTER times), then ``a.seq_repeats`` timed passes, with the
    fake ROCm tensors' getters at a real tensor's cost (as the "hip replay real reads" row); each
    step is timed as a whole (its mean per call). Per row: the median and best over the passes
    of the mean per call, and what the calls of one pass did."""
    import math
    from rocke.kernels.common import attention_calls as ac
    from rocke.kernels.common import attention_unified as au
    from rocke.vllm import unified_attention
    from tests.hip_stub import rocm_torch
    layers, steps, segments, q_len = a.layers, a.steps, 16, 64
    q, k, v, out, cu_q, _, seqused, kv_len, scale, causal, window, table, softcap, *_ = \
        decode_batch()
    num_seqs, (hq, d) = q.shape[0], q.shape[1:]
    prefill_q = torch.zeros(num_seqs * q_len, hq, d, dtype=q.dtype)
    prefill_cu = torch.arange(0, (num_seqs + 1) * q_len, q_len, dtype=torch.int32)
    problem = au.describe_problem(q, k, v, out, cu_q, 1, seqused, kv_len, scale, causal, window,
                                  table, softcap, None, None, None)
    prefill_problem = au.describe_problem(prefill_q, k, v, torch.zeros_like(prefill_q),
                                          prefill_cu, q_len, seqused, kv_len, scale, causal,
                                          window, table, softcap, None, None, None)
    target = au.attention_target()
    device, stand_in = _standin_for_attention(
        [*target.plan(problem, "3d", num_segments=segments).specs,
         *target.plan(prefill_problem, "2d").specs])

    def on_gpu(t):
        return rocm_torch.to_device(stand_in, t)
    kv = on_gpu(torch.zeros(layers, 2, *k.shape, dtype=k.dtype))     # each layer's own cache
    q_out = on_gpu(torch.zeros(layers, 2, *q.shape, dtype=q.dtype))   # each layer's q and out
    cu_q, seqused, table, prefill_cu = map(on_gpu, (cu_q, seqused, table, prefill_cu))
    workspaces = tuple(on_gpu(torch.full(shape, math.nan)) for shape in (
        (num_seqs, hq, segments, d), (num_seqs, hq, segments), (num_seqs, hq, segments)))
    vllm_3d = dict(seq_threshold_3D=num_seqs, num_par_softmax_segments=segments,
                   softmax_segm_output=workspaces[0], softmax_segm_max=workspaces[1],
                   softmax_segm_expsum=workspaces[2])
    # vLLM passes k and v descales on every call: its layer's scale expanded per sequence
    scales = [on_gpu(torch.ones(())).expand(num_seqs, k.shape[2]) for _ in range(layers)]
    decode_args = [(q_out[i, 0], kv[i, 0], kv[i, 1], q_out[i, 1], cu_q, 1, seqused, kv_len, scale,
                    causal, window, table, softcap, None, scales[i], scales[i])
                   for i in range(layers)]
    # fresh q and out for every prefill call of every pass: views 256 bytes apart in two arenas
    prefills = (1 + a.seq_repeats) * steps.count("P") * layers
    numel, spacing = prefill_q.numel(), 256 // prefill_q.element_size()
    arenas = [on_gpu(torch.zeros(numel + prefills * spacing, dtype=q.dtype)) for _ in range(2)]
    fresh = [tuple(arena[n * spacing:n * spacing + numel].view(*prefill_q.shape)
                   for arena in arenas) for n in range(prefills)]
    prefill_args = [(fq, kv[i % layers, 0], kv[i % layers, 1], fo, prefill_cu, q_len, seqused,
                     kv_len, scale, causal, window, table, softcap, None, scales[i % layers],
                     scales[i % layers]) for i, (fq, fo) in enumerate(fresh)]

    def vllm(*args):
        unified_attention(*args, **vllm_3d)

    def entry(*args):       # what rocke.vllm passes the entry point for a 3D decode step
        au.run_unified_attention_torch(*args, None, None, None, backend="3d",
                                       segm_workspaces=workspaces, num_segments=segments,
                                       batch_invariant=False)
    names = ("graph_launch", "begin_capture", "graph_exec_destroy", "launch")

    def counts():
        return [stand_in.calls.get(name, 0) for name in names] + [cached_so_far()]

    def one_pass(decode, prefill_calls, did):
        """Time one pass; ``did`` gathers what each kind's calls did. Returns, per kind, the
        (seconds, calls) of the pass."""
        spent = {"D": [0.0, 0], "P": [0.0, 0]}
        for kind in steps:
            if kind == "D":
                fn, calls = decode, decode_args
            else:
                fn, calls = vllm, [next(prefill_calls) for _ in range(layers)]
            before = counts()
            t0 = clock()
            for args in calls:
                fn(*args)
            spent[kind][0] += clock() - t0
            spent[kind][1] += len(calls)
            did[kind] = [x + now - b for x, now, b in zip(did[kind], counts(), before)]
        return spent

    graph_cache, call_cache = ac.GRAPHS.capacity, ac.CALL_CACHE_SIZE
    what_if = a.graph_cache is not None or a.call_cache is not None
    sizes = (f"call cache {a.call_cache or call_cache}, graph cache {a.graph_cache or graph_cache}"
             + (f" (WHAT-IF: the product's are {call_cache} and {graph_cache})" if what_if
                else " (the product's)"))
    print(f"\nrealistic sequence, HIP stand-in (fake ROCm torch): {layers} layers x {len(steps)} "
          f"steps {steps} = {layers * len(steps)} calls a pass; decode q {tuple(q.shape)} "
          f"(vLLM 3D, {segments} segments, persistent buffers), prefill q "
          f"{tuple(prefill_q.shape)} (vLLM 2D, fresh q and out), kv {kv_len}; {sizes}, "
          f"CAPTURE_AFTER {ac.CAPTURE_AFTER}; machine: {machine()}, load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'part':22s} {'median us':>10s} {'best us':>10s}   ({a.seq_repeats} passes, mean per "
          f"call, {'CPU' if a.cpu_time else 'wall'} time; then what one pass's calls did)")
    try:
        ac.GRAPHS.capacity = a.graph_cache or graph_cache
        ac.CALL_CACHE_SIZE = a.call_cache or call_cache
        for via, decode in (("vllm", vllm), ("entry", entry)):
            ac.forget_calls()
            prefill_calls = iter(prefill_args)
            one_pass(decode, prefill_calls, {"D": [0] * 5, "P": [0] * 5})     # warm-up
            did = {"D": [0] * 5, "P": [0] * 5}
            with torch._C.DisableTorchFunctionSubclass():     # real tensors' reads
                passes = [one_pass(decode, prefill_calls, did) for _ in range(a.seq_repeats)]
            rows = [("decode", ["D"]), ("prefill", ["P"]), ("mixed", ["D", "P"])]
            for label, kinds in rows if via == "vllm" else (rows[0], rows[2]):
                per_call = [sum(p[k][0] for k in kinds) / sum(p[k][1] for k in kinds)
                            for p in passes if sum(p[k][1] for k in kinds)]
                if not per_call:
                    continue
                line = f"seq {label} {via}"
                print(f"{line:22s} {statistics.median(per_call) * 1e6:10.2f} "
                      f"{min(per_call) * 1e6:10.2f}   " + (
                          did_line(kinds[0], did[kinds[0]], a.seq_repeats,
                                   steps.count(kinds[0]) * layers) if len(kinds) == 1 else
                          "all calls of a pass"))
    finally:
        ac.GRAPHS.capacity, ac.CALL_CACHE_SIZE = graph_cache, call_cache
        ac.forget_calls()


def did_line(kind: str, did: list, passes: int, calls: int) -> str:
    """What one pass's ``calls`` calls of ``kind`` did, from the counts summed over ``passes``."""
    launched, captured, released, eager, cached = (round(x / passes) for x in did)
    return (f"{'decode' if kind == 'D' else 'prefill'}: {calls} calls, {launched - captured} "
            f"replays of a cached graph, {captured} captures, {released} graphs released, "
            f"{cached} misses, {eager} hipModuleLaunchKernel (eager or captured)")


@contextlib.contextmanager
def levers_set(levers: dict):
    saved = {name: os.environ.get(name) for name in levers}
    os.environ.update(levers)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def set_up(fn, around):
    """``fn`` to be timed within the context ``around()`` (entered once around the timing loop:
    a benchmark's set-up is not part of a call's host cost)."""
    def run():
        with around():
            return fn()
    run.around = around
    run.bare = fn
    return run


def with_levers(fn, **levers):
    """``fn`` to be timed with ``levers`` set (around the timing loop: setting environment
    variables is not part of a call's host cost)."""
    def run():
        with levers_set(levers):
            return fn()
    run.levers = levers
    run.bare = fn
    return run


def decode_batch(num_seqs=4, hq=8, hk=2, d=128, block=16, kv_len=1000):
    """Inputs of one decode step in vLLM's layout (contents do not matter to the host path)."""
    pages = -(-kv_len // block)
    q = torch.zeros(num_seqs, hq, d, dtype=torch.float16)
    k = torch.zeros(num_seqs * pages, block, hk, d, dtype=torch.float16)
    table = torch.arange(num_seqs * pages, dtype=torch.int32).reshape(num_seqs, pages)
    return (q, k, torch.zeros_like(k), torch.zeros_like(q),
            torch.arange(num_seqs + 1, dtype=torch.int32), 1,
            torch.full((num_seqs,), kv_len, dtype=torch.int32), kv_len, d ** -0.5, True,
            (-1, -1), table, 0.0, None, None, None)


def attention_rows(standin: bool):
    from rocke.kernels.common import attention_unified as au
    from rocke.runtime.emu_device import EmuDevice
    EmuDevice.run = lambda self, launch, check=True, profile=False: None   # host path only
    call = decode_batch()
    au.run_unified_attention_torch(*call)                    # a miss: validated, planned, cached
    before = cached_so_far()
    record = au.run_unified_attention_torch(*call)           # a hit: re-packs its launches
    assert cached_so_far() == before and not record.replayed, \
        "the decode case should hit the call cache (the emulator re-packs, never replays)"
    vllm_step = vllm_decode(call)
    before = cached_so_far()
    vllm_step()
    assert cached_so_far() == before, "vLLM's decode step should hit the call cache"
    print(f"attention: decode, {record.plan.path} path, {len(record.plan.specs)} kernels, "
          f"q {tuple(call[0].shape)}, k {tuple(call[1].shape)}; ROCKE_CHECK_METADATA="
          f"{env.check_metadata()}")
    rows = [("attn emu hit", lambda: au.run_unified_attention_torch(*call)),
            ("vllm emu hit", vllm_step)]
    if standin:
        rows += attention_hip_rows(call)
    return rows


def cached_so_far() -> int:
    """How many calls the entry point has cached (each miss caches one; a hit none): the call
    cache's serial counter, read without advancing it."""
    from rocke.kernels.common import attention_calls
    return int(re.fullmatch(r"count\((\d+)\)", repr(attention_calls.CALL_SERIAL)).group(1))


def vllm_decode(call, segments=16, place=lambda t: t):
    """The decode step of ``call`` through vLLM's entry point, with vLLM's 3D arguments (the
    workspaces made by ``place`` from CPU tensors)."""
    import math
    from rocke.vllm import unified_attention
    q = call[0]
    workspaces = tuple(place(t) for t in (
        torch.full((q.shape[0], q.shape[1], segments, q.shape[2]), math.nan),
        torch.full((q.shape[0], q.shape[1], segments), math.nan),
        torch.full((q.shape[0], q.shape[1], segments), math.nan)))

    def step():
        unified_attention(*call, seq_threshold_3D=q.shape[0], num_par_softmax_segments=segments,
                          softmax_segm_output=workspaces[0], softmax_segm_max=workspaces[1],
                          softmax_segm_expsum=workspaces[2])
    step()
    return step


def attention_hip_rows(call):
    """The entry point on ROCm GPU tensors (faked over the stand-in's device memory: see
    tests/hip_stub/rocm_torch.py), through the HIP device: its whole host path up to
    hipModuleLaunchKernel / hipGraphLaunch, the stand-in's emulation of each launch stubbed."""
    from rocke.kernels.common import attention_unified as au
    from rocke.kernels.common.attention_calls import CAPTURE_AFTER
    from tests.hip_stub import rocm_torch
    problem = au.describe_problem(*call)
    # vLLM's 3D contract (vllm_decode's 16 segments) may plan other kernels than "auto"
    device, stand_in = _standin_for_attention(
        [*au.plan(problem, "auto").specs,
         *au.attention_target().plan(problem, "3d", num_segments=16).specs])
    gpu = [rocm_torch.to_device(stand_in, a) if isinstance(a, torch.Tensor) else a for a in call]

    def replay():
        return au.run_unified_attention_torch(*gpu)
    # a GPU call is captured once it has repeated CAPTURE_AFTER times; replayed from then on
    records = [replay() for _ in range(CAPTURE_AFTER)]
    assert [r.replayed for r in records] == [False] * (CAPTURE_AFTER - 1) + [True], \
        "the decode case should run eagerly, then be captured on its CAPTURE_AFTER-th call"
    assert replays(stand_in, replay) and replay().replayed
    replayed_exec = max(stand_in.execs)      # its graph: the last one instantiated
    vllm_step = vllm_decode(gpu, place=lambda t: rocm_torch.to_device(stand_in, t))
    for _ in range(CAPTURE_AFTER - 1):      # vllm_decode made its first call
        vllm_step()
    assert replays(stand_in, vllm_step), "vLLM's decode step should replay its graph"
    with torch._C.DisableTorchFunctionSubclass():
        assert replays(stand_in, replay)
    eager = with_levers(replay, HIPDNN_GFX942_2D_GRAPH="0", HIPDNN_GFX942_3D_GRAPH="0")
    for _ in range(CAPTURE_AFTER + 1):      # never captured: graph replay is off by lever
        record = eager()
    assert not record.replayed and len(record.reports) == len(record.plan.specs)
    return [("attn hip replay", replay),
            ("hip replay real reads", set_up(replay, torch._C.DisableTorchFunctionSubclass)),
            ("vllm hip replay", vllm_step),
            ("attn hip eager", eager)] + standin_share_rows(gpu, replayed_exec)


def replays(stand_in, step) -> bool:
    """Whether one call of ``step`` launched one cached graph (hipGraphLaunch once, no capture,
    no kernel launched one by one), by the stand-in's HIP call counts."""
    names = ("graph_launch", "begin_capture", "launch")
    before = [stand_in.calls.get(name, 0) for name in names]
    step()
    return [stand_in.calls.get(name, 0) - b for name, b in zip(names, before)] == [1, 0, 0]


def _standin_for_attention(specs):
    """The HIP device under the stand-in, told to accept ``specs``' kernels (and the metadata
    guard's, where ROCKE_CHECK_METADATA turns it on), launches stubbed (the host side is what
    is timed), and a ROCm torch faked over it (tests/hip_stub/rocm_torch.py): the ROCm GPU
    tensors' device, torch.cuda's current stream and capture flag."""
    from rocke.kernels.common import attention_unified as au
    from tests.hip_stub import rocm_torch
    kernels = [au.compiled(spec) for spec in specs]
    device, _ = _standin_device(kernels[0])
    stand_in = _STAND_IN[0]
    if env.check_metadata() != "off":
        from rocke.kernels.common import metadata_guard
        kernels.append(au.compiled(metadata_guard.spec_for(device.arch)))
    for ck in kernels:
        stand_in.register(ck)
    if not _STAND_IN_ROCM:
        # hipSuccess: the host side is what is timed (a graph's nodes are not even unpacked)
        stand_in._run = lambda record: 0
        stand_in._run_graph = lambda nodes, stream: 0
        rocm_torch.install(stand_in,
                           lambda obj, name, value, raising=True: setattr(obj, name, value))
        _STAND_IN_ROCM.append(True)
    return device, stand_in


def standin_share_rows(gpu, exec_handle):
    """What of a HIP replay hit is the stand-in's emulation machinery rather than rocke's (a
    real HIP's own cost is not measurable here). With a ROCm torch, a replay hit makes one HIP
    call, hipGraphLaunch of ``exec_handle`` on torch's current stream (the capture flag and the
    stream are torch.cuda's):
      hip calls  = that hipGraphLaunch made directly through hip-python: hip-python's wrapper
                   plus the stand-in (a C-to-Python callback);
      hip-python = a call of a like form that the stand-in answers in C (hipStreamIsCapturing
                   of the same stream: a handle in, an out-value back): hip-python's own cost,
                   which a real machine pays too; `hip calls` less this is the stand-in's share
                   of the call;
      standin py = the stand-in's Python handler of hipGraphLaunch alone (a lower bound of its
                   share: the ctypes callback trampoline is not included);
      reads gpu / reads cpu = the tensor reads the call key makes of the 7 tensors (the
                   native helper's one pass, rocke/runtime/tensor_key.py, where it is built;
                   else class, shape, dtype, device, stride(), data_ptr() per tensor) on the fake
                   ROCm tensors, and on the same tensors as plain torch.Tensors. Their
                   difference is the fake tensors' surcharge: torch's getters cost more on a
                   Tensor subclass (each first looks up the class's __torch_function__); a real
                   ROCm tensor is a plain torch.Tensor and does not pay it (nor does the native
                   pass, which reads no getter)."""
    from hip import hip
    stand_in = _STAND_IN[0]
    stream = torch.cuda.current_stream(0).cuda_stream       # the fake torch's: replays go there

    def hip_calls():
        hip.hipGraphLaunch(exec_handle, stream)

    def hip_python():       # answered in the stand-in's C (its stream-state table)
        hip.hipStreamIsCapturing(stream)
    graph_launch = stand_in._guarded("graph_launch", stand_in._graph_launch)

    def standin_py():
        graph_launch(exec_handle, stream)
    assert hip.hipGraphLaunch(exec_handle, stream)[0] == hip.hipError_t.hipSuccess
    assert graph_launch(exec_handle, stream) == 0
    assert hip.hipStreamIsCapturing(stream)[0] == hip.hipError_t.hipSuccess
    fake = tuple(a for a in gpu if isinstance(a, torch.Tensor))
    plain = tuple(torch.Tensor.as_subclass(t, torch.Tensor) for t in fake)
    assert len(fake) == 7 and all(type(t) is torch.Tensor for t in plain)
    layout = operator.attrgetter("__class__", "shape", "dtype", "device")
    from rocke.runtime import tensor_key
    native = tensor_key.native()

    def reads(tensors):
        if native is not None:          # what the key reads: the TensorImpls, no getter
            return lambda: native(tensors)
        return lambda: (tuple(map(layout, tensors)), tuple(map(torch.Tensor.stride, tensors)),
                        tuple(map(torch.Tensor.data_ptr, tensors)))
    assert hip.hipDeviceSynchronize()[0] == hip.hipError_t.hipSuccess
    return [("hip calls", hip_calls), ("hip-python", hip_python), ("standin py", standin_py),
            ("reads gpu", reads(fake)), ("reads cpu", reads(plain))]


_STAND_IN = []
_STAND_IN_ROCM = []      # a ROCm torch faked over it (once per process)


def _standin_device(compiled):
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    from tests.hip_stub import standin as standin_module
    if not _STAND_IN:
        _STAND_IN.append(standin_module.load(Path(tempfile.mkdtemp(prefix="rocke-standin-"))))
    stand_in = _STAND_IN[0]
    stand_in.active = True
    stand_in.register(compiled)
    os.environ.pop("ROCKE_DEVICE", None)
    device = runtime.get_device("hip")
    return device, device.alloc


def hip_side(compiled, grid, block, args):
    """HipDevice.launch_params under the stand-in (device memory from hipMalloc)."""
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo))
    device, _ = _standin_device(compiled)
    buffers = [device.alloc(t.numel() * t.element_size()) if hasattr(t, "data_ptr") else t
               for t in args]
    prepared = runtime.prepare_launch(compiled, grid, block, buffers, device_kind="hip")
    device.launch_params(prepared)                   # loads the module once
    return lambda: device.launch_params(prepared)


if __name__ == "__main__":
    sys.exit(main())
