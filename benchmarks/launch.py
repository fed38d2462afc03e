"""Host cost per launch: everything `rocke.runtime.launch` does before the device call, for a
compiled (cached) kernel variant. Prints figures; asserts nothing. Target: <= 20 us per launch.

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
path: validation, dispatch, plan, compiled-variant lookup, kernel_args, prepare_launch, graph
bookkeeping). Targets: <= 10 us per call on a graph-replay hit, <= 30 us otherwise.
  attn replay = the dispatcher recommends graph replay: a hit replays the captured graph;
  attn eager  = the same call with HIPDNN_GFX942_{2D,3D}_GRAPH=0 (launched one by one);
  vllm replay = the same decode step through rocke.vllm.unified_attention, what vLLM calls
                (its 3D contract: the caller's workspaces and segment count): the adapter's
                own checks plus the entry point's graph-replay hit;
  attn hip replay / eager = with --standin: the same call on ROCm GPU tensors (faked over the
                stand-in's device memory) through the HIP device, up to hipGraphLaunch /
                hipModuleLaunchKernel (the stand-in's emulation of each launch stubbed out);
                the GPU path launches the metadata guard kernel too (3 launches, not 2);
  vllm hip replay = vllm replay's step on the HIP path (its workspaces on the GPU too);
  hip replay real reads = attn hip replay with the fake ROCm tensors' getters at a real
                tensor's cost: the same product code under torch's DisableTorchFunctionSubclass,
                which skips only the per-getter __torch_function__ look-up on a Tensor subclass
                (the fakes' own is torch's disabled one, so no call behaves otherwise; a real
                ROCm tensor is an exact torch.Tensor and never looks it up);
  hip calls / hip-python / standin py / reads gpu / reads cpu = the stand-in's share of a HIP
                replay hit (standin_share_rows); the lines after the table split each replay
                hit into the stand-in's share and rocke's own (print_shares).
A row's levers are set around its timing loop, not per call. On a shared machine pass --cpu-time.

    .venv/bin/python benchmarks/launch.py [--variant flash_attention/f16_d64_causal] [--standin]
"""
from __future__ import annotations

import argparse
import contextlib
import operator
import os
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

from rocke import runtime
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
    a = ap.parse_args(argv)
    if a.batch < 1 or a.batches < 1:
        ap.error("--batch and --batches must be >= 1")
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

    print(f"machine: {machine()}")
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
    print(f"stand-in's share of a HIP replay hit: {share:.2f} us (its HIP calls {calls:.2f} + "
          f"its tensors' reads {reads:.2f}); hip-python's wrappers {best['hip-python']:.2f} us "
          "are rocke's (a real machine runs them too)")
    median, fastest = measured["attn hip replay"]
    print(f"attn hip replay: rocke's own {median - share:.2f} median, {fastest - share:.2f} best "
          f"(of {median:.2f} / {fastest:.2f})")


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
    au.run_unified_attention_torch(*call)                    # builds, captures the graph
    record = au.run_unified_attention_torch(*call)           # replays it
    assert record.replayed, "the decode case should take graph replay"
    EmuDevice.run = lambda self, launch, check=True: None

    eager = with_levers(lambda: au.run_unified_attention_torch(*call),
                        HIPDNN_GFX942_2D_GRAPH="0", HIPDNN_GFX942_3D_GRAPH="0")
    print(f"attention: decode, {record.plan.path} path, {len(record.plan.specs)} kernels, "
          f"q {tuple(call[0].shape)}, k {tuple(call[1].shape)}")
    rows = [("attn replay", lambda: au.run_unified_attention_torch(*call)),
            ("attn eager", eager), ("vllm replay", vllm_decode(call))]
    if standin:
        rows += attention_hip_rows(call)
    return rows


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
    from rocke.runtime import hip_device
    from tests.hip_stub import rocm_torch
    from rocke.kernels.common import metadata_guard
    problem = au.describe_problem(*call)
    # the GPU path launches the metadata guard before the plan's kernels; vLLM's 3D contract
    # (vllm_decode's 16 segments) may plan other kernels
    vllm_specs = au.attention_target().plan(problem, "3d", num_segments=16).specs
    kernels = [au.compiled(spec) for spec in (*au.plan(problem, "auto").specs, *vllm_specs,
                                              metadata_guard.SPEC)]
    device, _ = _standin_device(kernels[0])
    stand_in = _STAND_IN[0]
    for ck in kernels[1:]:
        stand_in.register(ck)
    stand_in._run = lambda record: 0          # hipSuccess: the host side is what is timed
    rocm_torch.install(stand_in, lambda obj, name, value, raising=True: setattr(obj, name, value))
    gpu = [rocm_torch.to_device(stand_in, a) if isinstance(a, torch.Tensor) else a for a in call]
    eager = with_levers(lambda: au.run_unified_attention_torch(*gpu),
                        HIPDNN_GFX942_2D_GRAPH="0", HIPDNN_GFX942_3D_GRAPH="0")

    rocm_torch_faked = hip_device.torch_rocm

    @contextlib.contextmanager
    def stream_capture_graphs():    # a rocke Graph by HIP stream capture (no torch CUDA graph here)
        hip_device.torch_rocm = lambda: False
        try:
            yield
        finally:
            hip_device.torch_rocm = rocm_torch_faked

    @contextlib.contextmanager
    def real_reads():
        with stream_capture_graphs(), torch._C.DisableTorchFunctionSubclass():
            yield

    def replay():
        return au.run_unified_attention_torch(*gpu)
    with stream_capture_graphs():
        assert replay().replayed and replay().replayed
        vllm_step = vllm_decode(gpu, place=lambda t: rocm_torch.to_device(stand_in, t))
    with real_reads():
        assert replay().replayed
    return [("attn hip replay", set_up(replay, stream_capture_graphs)),
            ("hip replay real reads", set_up(replay, real_reads)),
            ("vllm hip replay", set_up(vllm_step, stream_capture_graphs)),
            ("attn hip eager", eager)] + standin_share_rows(gpu)


def standin_share_rows(gpu):
    """What of a HIP replay hit is the stand-in's emulation machinery rather than rocke's (a
    real HIP's own cost is not measurable here):
      hip calls  = the two HIP calls a replay hit makes (hipStreamIsCapturing, hipGraphLaunch)
                   made directly through hip-python: hip-python's wrappers plus the stand-in
                   (hipStreamIsCapturing answered in its C, hipGraphLaunch by a C-to-Python
                   callback);
      hip-python = two calls of the same forms (one with an out-value, one without) that the
                   stand-in answers in C (hipStreamIsCapturing, hipDeviceSynchronize): hip-
                   python's own cost, which a real machine pays too; `hip calls` less this is
                   the stand-in's share of the calls;
      standin py = the stand-in's Python handler of hipGraphLaunch alone (a lower bound of its
                   share: the ctypes callback trampoline is not included);
      reads gpu / reads cpu = the per-tensor reads the call key makes (class, shape, dtype,
                   device, stride(), data_ptr() of the 7 tensors) on the fake ROCm tensors, and
                   on the same tensors as plain torch.Tensors. Their difference is the fake
                   tensors' surcharge: torch's getters cost more on a Tensor subclass (each
                   first looks up the class's __torch_function__); a real ROCm tensor is a plain
                   torch.Tensor and does not pay it."""
    import ctypes
    from hip import hip
    stand_in = _STAND_IN[0]
    exec_handle = max(stand_in.execs)       # the replayed graph: the last one instantiated
    exec_, stream = exec_handle, None

    def hip_calls():
        hip.hipStreamIsCapturing(None)
        hip.hipGraphLaunch(exec_, stream)

    def hip_python():       # two calls of the same forms, both answered in the stand-in's C
        hip.hipStreamIsCapturing(None)
        hip.hipDeviceSynchronize()
    graph_launch = stand_in._guarded("graph_launch", stand_in._graph_launch)

    def standin_py():       # hipStreamIsCapturing is answered in the stand-in's C
        graph_launch(exec_handle, None)
    assert hip.hipGraphLaunch(exec_, stream)[0] == hip.hipError_t.hipSuccess
    assert graph_launch(exec_handle, None) == 0
    fake = tuple(a for a in gpu if isinstance(a, torch.Tensor))
    plain = tuple(torch.Tensor.as_subclass(t, torch.Tensor) for t in fake)
    assert len(fake) == 7 and all(type(t) is torch.Tensor for t in plain)
    layout = operator.attrgetter("__class__", "shape", "dtype", "device")

    def reads(tensors):
        return lambda: (tuple(map(layout, tensors)), tuple(map(torch.Tensor.stride, tensors)),
                        tuple(map(torch.Tensor.data_ptr, tensors)))
    assert hip.hipDeviceSynchronize()[0] == hip.hipError_t.hipSuccess
    return [("hip calls", hip_calls), ("hip-python", hip_python), ("standin py", standin_py),
            ("reads gpu", reads(fake)), ("reads cpu", reads(plain))]


_STAND_IN = []


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
