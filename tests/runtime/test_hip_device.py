"""The HIP device through hip-python, beneath which the stand-in libamdhip64.so runs launches on
the emulator: the real hip-python call path, argument marshalling, kernarg buffer and error
handling."""
from __future__ import annotations

import pytest
import torch

from rocke import runtime
from rocke.kernels.samples import flash_attention as fa
from rocke.kernels.samples import vector_add as va
from rocke.runtime import hip_device
from rocke.runtime.hip_device import HipError, arch_compatible


def _to_device(dev, tensor):
    return dev.alloc(tensor.numel() * tensor.element_size()).copy_from(tensor)


def _from_device(buffer, like):
    return buffer.copy_to(torch.empty_like(like))


def test_hip_launch_gives_the_emulators_bytes(standin, vector_add):
    variant, ck = vector_add
    standin.register(ck)
    n = 1003                                    # ragged: the tail thread's path runs too
    a, b = torch.randn(n), torch.randn(n)
    grid, block = va.launch_geometry(variant.spec, n=n)
    c_emu = torch.zeros(n)
    runtime.launch(ck, grid, block, [a, b, c_emu, n], device="emu")
    dev = runtime.get_device("hip")
    da, db, dc = _to_device(dev, a), _to_device(dev, b), dev.alloc(4 * n)
    assert runtime.launch(ck, grid, block, [da, db, dc, n], device="hip") is None
    c_hip = _from_device(dc, c_emu)
    assert standin.errors == []
    assert torch.equal(c_hip, a + b)                     # the kernel did the work ...
    assert c_hip.numpy().tobytes() == c_emu.numpy().tobytes()   # ... bit for bit as on emu


def test_float_and_int_arguments_reach_the_kernel_unchanged(standin, flash_attention):
    variant, ck = flash_attention
    spec = variant.spec
    standin.register(ck)
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 1, 16, spec.head_dim, dtype=torch.float16) for _ in range(3))
    grid, block = fa.launch_geometry(spec, 1, 1, 16)
    o_emu = torch.zeros_like(q)
    runtime.launch(ck, grid, block, fa.kernel_args(spec, q, k, v, o_emu, 0.3), device="emu")
    dev = runtime.get_device("hip")
    dq, dk, dv, do = (_to_device(dev, t) for t in (q, k, v, torch.zeros_like(q)))
    args = [dq, dk, dv, do, 16, 0.3]
    runtime.launch(ck, grid, block, args, device="hip")
    assert standin.errors == []
    assert _from_device(do, q).numpy().tobytes() == o_emu.numpy().tobytes()
    # the kernarg buffer that crossed hip-python is exactly what rocke.arch.abi packed
    assert standin.executed[-1].kernarg == runtime.prepare_launch(ck, grid, block, args, device_kind="hip").kernarg


def test_module_loaded_once_per_code_object(standin, vector_add):
    variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    a = dev.alloc(4 * 256)
    for _ in range(3):
        runtime.launch(ck, 1, 256, [a, a, a, 256], device="hip")
    assert standin.calls["module_load"] == 1 and dev.loads == 1
    assert standin.calls["get_function"] == 1
    assert len(standin.executed) == 3


def test_failing_module_load_names_the_call_and_the_error_string(standin, vector_add):
    _variant, ck = vector_add          # not registered: the stand-in cannot load it
    dev = runtime.get_device("hip")
    buf = dev.alloc(1024)
    with pytest.raises(HipError, match=r"hipModuleLoadData failed: hipErrorInvalidImage \(200\): "
                                       r"device kernel image is invalid") as info:
        runtime.launch(ck, 1, 256, [buf, buf, buf, 256], device="hip")
    assert (info.value.call, info.value.code) == ("hipModuleLoadData", 200)
    assert "launch" not in standin.calls


def test_failing_launch_raises_and_nothing_is_cached_wrongly(standin, vector_add):
    _variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    buf = dev.alloc(1024)
    standin.fail["launch"] = 719
    with pytest.raises(HipError, match=r"hipModuleLaunchKernel failed: hipErrorLaunchFailure "
                                       r"\(719\): unspecified launch failure"):
        runtime.launch(ck, 1, 256, [buf, buf, buf, 256], device="hip")
    runtime.launch(ck, 1, 256, [buf, buf, buf, 256], device="hip")   # the next one works
    assert len(standin.executed) == 1


def test_a_kernel_fault_under_the_standin_is_a_launch_failure(standin, vector_add):
    _variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    small = dev.alloc(64)                    # 16 floats; the launch reads and writes 256
    with pytest.raises(HipError, match="hipErrorLaunchFailure"):
        runtime.launch(ck, 1, 256, [small, small, small, 256], device="hip")
    assert any("emulator stopped" in e for e in standin.errors)


def test_bad_arguments_are_refused_before_hip_is_called(standin, vector_add):
    _variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    buf = dev.alloc(1024)
    with pytest.raises(ValueError, match="takes 4 arguments"):
        runtime.launch(ck, 1, 256, [buf, buf, buf], device="hip")
    with pytest.raises(ValueError, match="CPU tensor"):
        runtime.launch(ck, 1, 256, [torch.zeros(256), buf, buf, 256], device="hip")
    with pytest.raises(ValueError, match=r"block dimension 2048 is outside \[1, 1025\)"):
        runtime.launch(ck, 1, 2048, [buf, buf, buf, 256], device="hip")
    assert "launch" not in standin.calls and "module_load" not in standin.calls


def test_gfx942_code_is_never_loaded_on_another_arch(standin, vector_add):
    _variant, ck = vector_add
    standin.register(ck)
    standin.arch = "gfx90a:sramecc+:xnack-"
    dev = runtime.get_device("hip")
    buf = dev.alloc(1024)
    with pytest.raises(ValueError, match=r"built for gfx942:sramecc\+:xnack- and cannot load on "
                                         r"HIP device 0, a gfx90a:sramecc\+:xnack-"):
        runtime.launch(ck, 1, 256, [buf, buf, buf, 256], device="hip")
    assert "module_load" not in standin.calls


@pytest.mark.parametrize("code, device, ok", [
    ("gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-", True),
    ("gfx942", "gfx942:sramecc+:xnack+", True),              # code without a setting runs on either
    ("gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack+", False),
    ("gfx942:sramecc+:xnack-", "gfx950:sramecc+:xnack-", False),
])
def test_arch_compatibility_rule(code, device, ok):
    assert arch_compatible(code, device) is ok


def test_default_device_selection(standin, monkeypatch):
    assert runtime.default_device_kind() == "hip"            # a gfx942 is visible
    assert runtime.get_device().kind == "hip"
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    assert runtime.get_device().kind == "emu"
    monkeypatch.setenv("ROCKE_DEVICE", "cuda")
    with pytest.raises(ValueError, match="ROCKE_DEVICE must be 'emu' or 'hip'"):
        runtime.get_device()
    monkeypatch.delenv("ROCKE_DEVICE")
    standin.arch = "gfx90a:sramecc+:xnack-"                  # a GPU, but not a gfx942
    runtime.reset_devices()
    assert runtime.default_device_kind() == "emu"
    standin.active = False                                   # no GPU at all
    runtime.reset_devices()
    assert runtime.default_device_kind() == "emu"
    with pytest.raises(HipError, match=r"hipGetDeviceCount failed: hipErrorNoDevice \(100\): "
                                       "no ROCm-capable device is detected"):
        runtime.get_device("hip")


def test_with_a_rocm_torch_launches_follow_torchs_current_stream(standin, vector_add, monkeypatch):
    """torch here is a CPU build, so its ROCm surface is faked: current_stream() hands out a
    stand-in stream and is_current_stream_capturing() a flag. What is checked is that rocke
    launches on torch's current stream and asks torch whether it is capturing."""
    import types
    from rocke.runtime import hip_device
    _variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    stream = hip_device._call("hipStreamCreate")
    capturing = [False]
    monkeypatch.setattr(hip_device, "torch_rocm", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: types.SimpleNamespace(cuda_stream=int(stream)))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    buf = dev.alloc(4 * 256)
    runtime.launch(ck, 1, 256, [buf, buf, buf, 256], device="hip")
    assert standin.executed[-1].stream == int(stream)
    assert not runtime.is_capturing("hip")
    capturing[0] = True
    assert runtime.is_capturing("hip")


def test_timing_names_its_clock(standin, vector_add):
    _variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    buf = dev.alloc(4 * 256)
    hip_time = runtime.timed(lambda: runtime.launch(ck, 1, 256, [buf, buf, buf, 256],
                                                    device="hip"), device="hip")
    assert hip_time.clock == runtime.GPU_CLOCK and hip_time.seconds > 0   # via HIP events
    assert standin.calls["event_record"] == 2 and standin.events == {}    # both destroyed
    x = torch.zeros(256)
    emu_time = runtime.timed(lambda: runtime.launch(ck, 1, 256, [x, x, x, 256], device="emu",
                                                    allow_alias=True),
                             device="emu")
    assert emu_time.clock == "emulator wall time" and "emulator wall time" in str(emu_time)


def test_standin_answers_stream_capture_state_like_a_runtime(standin):
    """The stand-in's hipStreamIsCapturing answers from its C half's table (no Python call):
    each stream's state follows hipStreamBeginCapture / EndCapture / Destroy exactly as its
    Python half's, which answers a stream the table does not hold."""
    import ctypes
    hip = hip_device.hip_module()
    is_capturing = standin.library.hipStreamIsCapturing
    is_capturing.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]

    def state(stream):
        status = ctypes.c_int(-7)
        return is_capturing(None if stream is None else int(stream), ctypes.byref(status)), \
            status.value
    stream = hip_device._call("hipStreamCreate")
    calls = standin.calls.get("is_capturing", 0)
    assert state(stream) == (0, 0) and state(None) == (0, 0)
    hip_device._call("hipStreamBeginCapture", stream,
                     hip.hipStreamCaptureMode.hipStreamCaptureModeThreadLocal)
    assert state(stream) == (0, 1) and state(None) == (0, 0)
    assert hip_device.HipDevice.is_capturing(runtime.get_device("hip"), stream)   # hip-python
    hip_device._call("hipGraphDestroy", hip_device._call("hipStreamEndCapture", stream))
    assert state(stream) == (0, 0)
    assert standin.calls.get("is_capturing", 0) == calls          # all answered in C
    hip_device._call("hipStreamDestroy", stream)
    assert state(stream) == (400, -7)                             # hipErrorInvalidHandle
    assert standin.calls["is_capturing"] == calls + 1             # by the Python half
    other = hip_device._call("hipStreamCreate")
    standin.reset(active=True)                                    # forgets every stream
    assert state(other) == (400, -7)
