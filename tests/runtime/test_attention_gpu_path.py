"""The attention entry point on a ROCm torch GPU, beneath the stand-in libamdhip64: the device
follows the tensors, the GPU path reads nothing back to the host, and vLLM's 3D contract runs
with the caller's workspaces.

torch here is a CPU build, so a ROCm GPU tensor is faked: ``RocmTensor`` is a view of stand-in
device memory (hipMalloc'd) whose ``device`` reads ``cuda:0``, with ``torch.version.hip`` set and
torch.cuda's stream surface pointing at a stand-in stream. ``NoHostRead`` tensors additionally
raise on any host read of their contents."""
from __future__ import annotations

import math

import pytest
import torch

from rocke import runtime
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common import attention_kernels
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from rocke.runtime import hip_device
from tests.hip_stub.rocm_torch import CUDA, RocmTensor, install, to_device
from tests.kernels.test_attention_2d import make_problem

D, BLOCK, GROUP, HK = 64, 16, 2, 1


class HostRead(AssertionError):
    pass


def _refuse(what):
    def read(self, *args, **kwargs):
        raise HostRead(f"host read of a GPU metadata tensor: {what}")
    return read


class NoHostRead(RocmTensor):
    """Any read of the contents on the host raises (what a GPU tensor's synchronising read is)."""
    cpu = _refuse(".cpu()")
    item = _refuse(".item()")
    tolist = _refuse(".tolist()")
    numpy = _refuse(".numpy()")
    __bool__ = _refuse("bool()")
    __int__ = _refuse("int()")
    __float__ = _refuse("float()")
    __index__ = _refuse("index")
    __iter__ = _refuse("iteration")
    __array__ = _refuse("numpy conversion")
    __repr__ = _refuse("repr (prints values)")

    def to(self, *args, **kwargs):
        raise HostRead("host read of a GPU metadata tensor: .to()")

    @classmethod
    def __torch_function__(cls, func, types_, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        if name in ("cpu", "item", "tolist", "numpy", "__bool__", "__int__", "__float__",
                    "__index__", "__iter__", "__array__", "__repr__", "__format__", "to",
                    "equal", "allclose"):
            raise HostRead(f"host read of a GPU metadata tensor: {name}")
        # the default dispatch (results stay NoHostRead), not RocmTensor's disabled one
        return torch.Tensor.__torch_function__.__func__(cls, func, types_, args, kwargs or {})


def host(t):
    return torch.Tensor.as_subclass(t, torch.Tensor).clone()


@pytest.fixture
def rocm_torch(standin, monkeypatch):
    """A ROCm torch surface over the stand-in: torch.version.hip, a current stream, no capture."""
    standin.stream = install(standin, monkeypatch.setattr)
    monkeypatch.setenv("HIPDNN_GFX942_2D_GRAPH", "0")     # eager: torch's CUDA graph is not here
    monkeypatch.setenv("HIPDNN_GFX942_3D_GRAPH", "0")
    au.GRAPHS.clear()
    return standin


def _problem(q_lens, kv_lens, seed=0):
    q, k, v, table, cu, seqused = make_problem("f16", D, BLOCK, GROUP, list(q_lens), list(kv_lens),
                                               num_kv_heads=HK, seed=seed)
    return dict(q=q, k=k, v=v, out=torch.zeros_like(q), cu_seqlens_q=cu,
                max_seqlen_q=max(q_lens), seqused_k=seqused, max_seqlen_k=max(kv_lens),
                softmax_scale=1 / math.sqrt(D), causal=True, window_size=(-1, -1),
                block_table=table, softcap=0.0, q_descale=None, k_descale=None, v_descale=None)


def _on_gpu(standin, a, metadata_cls=NoHostRead):
    g = dict(a)
    for name in ("q", "k", "v", "out"):
        g[name] = to_device(standin, a[name])
    for name in ("cu_seqlens_q", "seqused_k", "block_table"):
        g[name] = to_device(standin, a[name], metadata_cls)
    return g


def _register(standin, a, backend, **kw):
    """Tell the stand-in's device to accept the code objects this call will load."""
    from rocke.kernels.common import metadata_guard
    problem = au.describe_problem(**a)
    for spec in (metadata_guard.SPEC, *au.plan(problem, backend).specs):
        standin.register(au.compiled(spec))


def _expected(a):
    return ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                          a["block_table"], a["softmax_scale"], causal=True)


def test_the_guard_tensors_do_raise_on_host_reads(rocm_torch):
    """The premise of the no-host-read test: each kind of host read is caught."""
    t = to_device(rocm_torch, torch.arange(4, dtype=torch.int32), NoHostRead)
    for read in (lambda: t.cpu(), lambda: t.item(), lambda: t.tolist(), lambda: bool(t[0]),
                 lambda: int(t[0]), lambda: list(iter(t)), lambda: t.numpy(),
                 lambda: t.to("cpu"), lambda: bool((t < 0).any())):
        with pytest.raises(HostRead):
            read()
    assert t.shape == (4,) and t.stride() == (1,) and t.device == CUDA   # metadata stays free


@pytest.mark.parametrize("backend", ["2d", "3d"])
def test_gpu_tensors_run_through_hip_with_no_host_read(rocm_torch, backend):
    a = _problem([1, 3], [40, 23])
    _register(rocm_torch, a, backend)
    g = _on_gpu(rocm_torch, a)
    before = len(rocm_torch.executed)
    record = au.run_unified_attention_torch(**g, backend=backend)
    ran = rocm_torch.executed[before:]
    # the plan's kernels alone (the metadata guard is opt-in), on torch's stream
    assert len(ran) == len(record.plan.specs) and all(r.stream == rocm_torch.stream for r in ran)
    assert "attention_metadata_guard_t64" not in {rocm_torch.functions[r.function].name
                                                  for r in ran}
    assert record.reports == [None] * len(ran)            # asynchronous HIP launches
    runtime.check_errors()                                # honest metadata: nothing recorded
    got = host(g["out"]).float()
    torch.testing.assert_close(got, _expected(a), atol=attention_atol("f16"), rtol=0)


def test_vllm_3d_contract_on_the_gpu_uses_the_callers_workspaces(rocm_torch):
    from rocke.vllm import unified_attention
    a = _problem([1, 1], [200, 77])
    segments, hq = 4, GROUP * HK
    _register(rocm_torch, a, "3d")
    g = _on_gpu(rocm_torch, a)
    ws = [to_device(rocm_torch, torch.full(shape, math.nan))
          for shape in ((8, hq, segments, D), (8, hq, segments), (8, hq, segments))]
    allocations = len(rocm_torch.allocations)
    unified_attention(**g, seq_threshold_3D=8, num_par_softmax_segments=segments,
                      softmax_segm_output=ws[0], softmax_segm_max=ws[1], softmax_segm_expsum=ws[2])
    assert len(rocm_torch.allocations) == allocations          # nothing allocated per call
    assert not torch.isnan(host(ws[1])[:2]).any()              # the caller's workspace was used
    torch.testing.assert_close(host(g["out"]).float(), _expected(a),
                               atol=attention_atol("f16"), rtol=0)


def test_a_cuda_torch_tensor_is_refused_naming_what_is_supported(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    a = _problem([1], [20])
    q = a["q"].as_subclass(RocmTensor)
    with pytest.raises(ValueError, match=r"q: on cuda:0: this torch is an NVIDIA CUDA build.*"
                                         r"Supported: CPU tensors \(rocke's emulator\) or GPU "
                                         r"tensors of a ROCm torch \(HIP\)"):
        au.launch_device_kind(q)
    meta = torch.empty(1, 2, D, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match="q: on meta: rocke cannot run on meta tensors"):
        au.launch_device_kind(meta)


def test_device_follows_the_tensors_and_rocke_device_overrides(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "6.2.0", raising=False)
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    cpu = torch.zeros(1, 2, D, dtype=torch.float16)
    gpu = cpu.as_subclass(RocmTensor)
    assert au.launch_device_kind(cpu) == "emu" and au.launch_device_kind(gpu) == "hip"
    monkeypatch.setenv("ROCKE_DEVICE", "hip")
    assert au.launch_device_kind(cpu) == "hip"
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    with pytest.raises(ValueError, match="ROCKE_DEVICE=emu, but q is on cuda:0"):
        au.launch_device_kind(gpu)


def test_mixed_devices_are_refused_before_launch(rocm_torch):
    a = _problem([1], [20])
    g = dict(a, q=to_device(rocm_torch, a["q"]))
    before = len(rocm_torch.executed)
    with pytest.raises(ValueError, match="k: on cpu, but q is on cuda:0"):
        au.run_unified_attention_torch(**g)
    assert len(rocm_torch.executed) == before


def _vllm_decode_args(standin, segments=4, kv_lens=(200, 77)):
    a = _problem([1] * len(kv_lens), list(kv_lens))
    hq = GROUP * HK
    _register(standin, a, "3d")
    g = _on_gpu(standin, a)
    ws = [to_device(standin, torch.full(shape, math.nan))
          for shape in ((8, hq, segments, D), (8, hq, segments), (8, hq, segments))]
    extra = dict(seq_threshold_3D=8, num_par_softmax_segments=segments, softmax_segm_output=ws[0],
                 softmax_segm_max=ws[1], softmax_segm_expsum=ws[2])
    return a, g, extra


def test_a_decode_step_captured_in_a_rocke_graph_allocates_and_reads_nothing(rocm_torch,
                                                                            monkeypatch):
    """Inside a rocke.runtime.Graph capture on the HIP device, the vLLM entry point only
    enqueues its launches (captured, not run), allocates nothing and reads nothing back; the
    replay runs them, and reads the metadata anew on each replay."""
    from rocke.vllm import unified_attention
    monkeypatch.setattr(hip_device, "torch_rocm", lambda: False)   # HIP stream capture
    monkeypatch.delenv("HIPDNN_GFX942_3D_GRAPH")
    a, g, extra = _vllm_decode_args(rocm_torch)
    graph = runtime.Graph(device="hip")
    ran, allocations = len(rocm_torch.executed), len(rocm_torch.allocations)
    with graph.capture():
        unified_attention(**g, **extra)
    assert len(rocm_torch.executed) == ran and graph.num_launches == 2     # the 2 kernels
    assert len(rocm_torch.allocations) == allocations
    assert len(au.GRAPHS) == 0          # the caller's graph, not one of the entry point's own
    graph.replay()
    assert len(rocm_torch.executed) == ran + 2
    torch.testing.assert_close(host(g["out"]).float(), _expected(a),
                               atol=attention_atol("f16"), rtol=0)
    shorter = dict(a, seqused_k=torch.tensor([150, 30], dtype=torch.int32))
    torch.Tensor.as_subclass(g["seqused_k"], torch.Tensor).copy_(shorter["seqused_k"])
    graph.replay()
    torch.testing.assert_close(host(g["out"]).float(), _expected(shorter),
                               atol=attention_atol("f16"), rtol=0)
    graph.close()


def test_inside_a_torch_graph_capture_the_entry_point_launches_on_the_capturing_stream(
        rocm_torch, monkeypatch):
    """Under torch's own capture the entry point neither replays a graph of its own nor
    allocates: its launches go, in order, to torch's current (capturing) stream."""
    from rocke.vllm import unified_attention
    monkeypatch.delenv("HIPDNN_GFX942_3D_GRAPH")
    a, g, extra = _vllm_decode_args(rocm_torch)     # the device (and its error record) exist
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    ran, allocations = len(rocm_torch.executed), len(rocm_torch.allocations)
    unified_attention(**g, **extra)
    assert len(au.GRAPHS) == 0 and len(rocm_torch.allocations) == allocations
    assert [r.stream for r in rocm_torch.executed[ran:]] == [rocm_torch.stream] * 2


# ---- the per-call cache: validated, planned and packed once per call metadata ----------------

def test_a_repeated_call_is_planned_once_but_its_contents_checked_every_time(monkeypatch):
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    a = _problem([1, 3], [40, 23])
    au.run_unified_attention_torch(**a, backend="2d")
    torch.testing.assert_close(a["out"].float(), _expected(a), atol=attention_atol("f16"), rtol=0)
    planned = []
    monkeypatch.setattr(au, "describe_problem", lambda *x, **kw: planned.append(1))
    a["out"].zero_()
    au.run_unified_attention_torch(**a, backend="2d")        # a hit: no describe_problem
    assert not planned
    torch.testing.assert_close(a["out"].float(), _expected(a), atol=attention_atol("f16"), rtol=0)
    a["block_table"][0, 0] = 10 ** 6                          # same metadata, lying contents
    with pytest.raises(ValueError, match=r"block_table: sequence 0 uses block index 1000000"):
        au.run_unified_attention_torch(**a, backend="2d")
    monkeypatch.setenv("HIPDNN_GFX942_NUM_WARPS", "2")         # a lever: a new key, planned anew
    a["block_table"][0, 0] = 0
    with pytest.raises(AttributeError):                       # the stub's None was used
        au.run_unified_attention_torch(**a, backend="2d")
    assert planned


def test_the_gpu_call_cache_holds_no_caller_tensor(rocm_torch):
    """A cached GPU call keeps its kernarg bytes, not the caller's tensors, so torch's allocator
    may hand the next step the same addresses (the cache's hit)."""
    import gc
    import weakref
    a = _problem([1, 3], [40, 23])
    _register(rocm_torch, a, "2d")
    g = _on_gpu(rocm_torch, a)
    au.run_unified_attention_torch(**g, backend="2d")
    au.run_unified_attention_torch(**g, backend="2d")        # the hit, through the stand-in
    assert len(rocm_torch.executed) >= 2
    refs = [weakref.ref(g[name]) for name in ("q", "out", "block_table")]
    del g
    gc.collect()
    assert all(r() is None for r in refs)


def test_the_parity_harness_runs_end_to_end_with_device_hip(rocm_torch, monkeypatch, tmp_path):
    """`parity_unified_attention.py --device hip` beneath the stand-in: the harness's tensors go
    to the (faked) ROCm GPU with .to("cuda"), the entry point launches through HIP, and every
    table's output passes against the CPU reference."""
    import json
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import parity_unified_attention
    real_to, real_compiled = torch.Tensor.to, au.compiled

    def to(self, *args, **kwargs):
        if args and isinstance(args[0], (str, torch.device)) and torch.device(args[0]).type == "cuda":
            return to_device(rocm_torch, self)
        return real_to(self, *args, **kwargs)

    def compiled(spec):               # the stand-in's device accepts what rocke compiled
        ck = real_compiled(spec)
        rocm_torch.register(ck)
        return ck
    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(attention_kernels, "compiled", compiled)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)   # the stand-in is synchronous
    monkeypatch.setenv("ROCKE_DEVICE", "hip")     # the harness sets it; undone after the test
    report = tmp_path / "parity.json"
    ran = len(rocm_torch.executed)
    code = parity_unified_attention.main(["--device", "hip", "--scenario",
                                          "fp16_h8kv2_b4_s3x3_d128", "--max-kv", "64",
                                          "--attempts", "1", "--warmup", "0",
                                          "--report", str(report)])
    data = json.loads(report.read_text())
    assert code == 0, data
    assert data["device"] == "hip" and data["time_kind"] == "GPU wall time (hip)"
    assert [r["status"] for r in data["results"]] == ["PASS"] * 3
    assert len(rocm_torch.executed) > ran           # the launches went through the stand-in


# ---- the capture policy: only what repeats, no synchronisation, nothing held -------------------

@pytest.fixture
def traced(rocm_torch, monkeypatch):
    """Every HIP call rocke makes by name, and torch's synchronising calls, counted."""
    from collections import Counter
    seen = Counter()
    real = hip_device._call

    seen.log = []

    def call(name, *args):
        seen[name] += 1
        seen.log.append(name)
        return real(name, *args)
    monkeypatch.setattr(hip_device, "_call", call)
    for name in ("synchronize", "empty_cache"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name: seen.update([f"torch.{_n}"]))
    monkeypatch.setattr(hip_device, "torch_rocm", lambda: True)
    monkeypatch.delenv("HIPDNN_GFX942_2D_GRAPH")         # the default levers: replay allowed
    monkeypatch.delenv("HIPDNN_GFX942_3D_GRAPH")
    return seen


SYNCS = ("hipDeviceSynchronize", "hipStreamSynchronize", "torch.synchronize", "torch.empty_cache")


def test_fresh_tensor_eager_calls_never_capture_synchronise_or_allocate(rocm_torch, traced):
    """vLLM's eager prefill: fresh q and out each step. No step captures, synchronises or
    empties torch's allocator, and after the first step the entry point allocates nothing
    (the 3D workspaces come from the pool)."""
    from rocke.vllm import unified_attention
    a = _problem([3, 1], [40, 23])
    for backend in ("2d", "3d"):
        _register(rocm_torch, a, backend)
    g = _on_gpu(rocm_torch, a)
    allocations = []
    for step in range(4):
        for backend in ("2d", "3d"):     # a 3D call without caller workspaces: the pool's
            fresh = dict(g, q=to_device(rocm_torch, a["q"]), out=to_device(rocm_torch, a["out"]))
            before = rocm_torch.calls.get("malloc_", 0)
            au.run_unified_attention_torch(**fresh, backend=backend)
            allocations.append(rocm_torch.calls.get("malloc_", 0) - before)
            torch.testing.assert_close(host(fresh["out"]).float(), _expected(a),
                                       atol=attention_atol("f16"), rtol=0)
    assert rocm_torch.calls.get("begin_capture", 0) == 0 and len(au.GRAPHS) == 0
    assert not any(traced[name] for name in SYNCS), dict(traced)
    assert allocations[2:] == [0] * (len(allocations) - 2), allocations  # warm after one step
    del unified_attention


def test_a_repeated_call_is_captured_once_on_its_third_call_with_every_module_loaded_before(
        rocm_torch, traced):
    """Identical calls (vLLM's decode with persistent buffers): eager twice, captured on the
    third (rocke's own capture stream, no synchronisation), replayed from then on; no module
    load or allocation happens between begin and end of the capture."""
    from rocke.kernels.common.attention_calls import CAPTURE_AFTER
    from rocke.vllm import unified_attention
    a, g, extra = _vllm_decode_args(rocm_torch)
    start = len(traced.log)
    for _ in range(CAPTURE_AFTER + 2):
        unified_attention(**g, **extra)
    log = traced.log[start:]
    assert log.count("hipStreamBeginCapture") == 1 and len(au.GRAPHS) == 1
    assert rocm_torch.calls.get("graph_launch", 0) == 3        # the third call and two more
    during = log[log.index("hipStreamBeginCapture"):log.index("hipStreamEndCapture")]
    assert not {"hipModuleLoadData", "hipModuleGetFunction", "hipMalloc",
                "hipStreamCreate"} & set(during), during
    assert not any(traced[name] for name in SYNCS), dict(traced)
    torch.testing.assert_close(host(g["out"]).float(), _expected(a),
                               atol=attention_atol("f16"), rtol=0)


def test_vllms_own_call_with_its_descales_replays_and_a_new_descale_misses(rocm_torch,
                                                                            monkeypatch):
    """vLLM passes k and v descales on every call (its layer's scale expanded to
    [num_seqs, num_kv_heads], a new view each call, fp8 cache or not): such a call is keyed by
    rocke.vllm like any other -- repeated, it is captured once and replayed, none of the
    adapter's or the entry point's checks running again -- and a descale at another address
    misses (and is decided again)."""
    from rocke.kernels.common.attention_calls import CAPTURE_AFTER
    from rocke.kernels.common import attention_validation
    monkeypatch.delenv("HIPDNN_GFX942_2D_GRAPH")         # the default levers: replay allowed
    monkeypatch.delenv("HIPDNN_GFX942_3D_GRAPH")
    a, g, extra = _vllm_decode_args(rocm_torch)
    scales = [to_device(rocm_torch, torch.ones(())) for _ in range(2)]
    from rocke import vllm
    described = []
    real, rule = attention_validation.describe_problem, vllm.uses_3d
    monkeypatch.setattr(au, "describe_problem",
                        lambda *x, **k: described.append(1) or real(*x, **k))
    monkeypatch.setattr(vllm, "uses_3d", lambda *x, **k: described.append(3) or rule(*x, **k))

    def call(scale):
        vllm.unified_attention(**dict(g, k_descale=scale.expand(2, HK), v_descale=scale.expand(2, HK)),
                          **extra)
    for _ in range(CAPTURE_AFTER + 2):
        call(scales[0])
    assert described == [3, 1] and rocm_torch.calls.get("graph_launch", 0) == 3
    call(scales[1])
    assert described == [3, 1, 3, 1]
    torch.testing.assert_close(host(g["out"]).float(), _expected(a),
                               atol=attention_atol("f16"), rtol=0)


def test_a_replay_hit_reads_torchs_raw_stream_and_capture_flag_where_the_build_has_them(
        rocm_torch, monkeypatch):
    """A ROCm (or CUDA) build of torch has torch._C's raw current-stream and capture-flag
    functions (what Triton's launcher reads); a cached call's replay reads them, not
    torch.cuda.current_stream (a Stream object per call), and launches and replays on the
    stream they name."""
    from rocke.kernels.common.attention_calls import CAPTURE_AFTER
    from rocke.vllm import unified_attention
    monkeypatch.delenv("HIPDNN_GFX942_2D_GRAPH")         # the default levers: replay allowed
    monkeypatch.delenv("HIPDNN_GFX942_3D_GRAPH")
    read = []
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream",
                        lambda index: read.append(("stream", index)) or rocm_torch.stream,
                        raising=False)
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing",
                        lambda: read.append("capturing") or False, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda *a: pytest.fail("torch.cuda.current_stream read on a replay hit"))
    a, g, extra = _vllm_decode_args(rocm_torch)
    for _ in range(CAPTURE_AFTER + 1):
        unified_attention(**g, **extra)
    assert rocm_torch.calls.get("graph_launch", 0) == 2
    # every launch and replay (eager ones too) read the stream there, never a Stream object
    assert read.count(("stream", 0)) >= 2 and read.count("capturing") >= 2
    torch.testing.assert_close(host(g["out"]).float(), _expected(a),
                               atol=attention_atol("f16"), rtol=0)


def test_the_gpu_is_the_tensors_not_the_current_device(monkeypatch):
    """Tensors on GPU 1 under a current device 0 run on GPU 1: the device is looked up by the
    tensors' index (and the call key holds the device, so GPU 0's entry is never GPU 1's)."""
    import types
    from rocke.kernels.common import attention_device
    asked = []
    monkeypatch.setattr(runtime, "get_device", lambda key=None: asked.append(key) or key)
    on = types.SimpleNamespace(device=torch.device("cuda", 1))
    assert attention_device.launch_device(on, "hip") == "hip:1"
    on0 = types.SimpleNamespace(device=torch.device("cuda", 0))
    assert attention_device.launch_device(on0, "hip") == "hip:0"
    cpu = types.SimpleNamespace(device=torch.device("cpu"))
    assert attention_device.launch_device(cpu, "emu") == "emu"
    assert asked == ["hip:1", "hip:0", "emu"]


def test_a_gpu_is_found_by_index_and_a_bad_key_is_refused(standin):
    assert runtime.get_device("hip:0") is runtime.get_device("hip")      # device 0 is current
    with pytest.raises(runtime.hip_device.HipError, match="device 3 requested, 1 present"):
        runtime.get_device("hip:3")
    with pytest.raises(ValueError, match="unknown device 'hip:x'"):
        runtime.get_device("hip:x")
