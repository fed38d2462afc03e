"""Graph capture and replay on the emulator and on HIP (beneath hip-python, the stand-in)."""
from __future__ import annotations

import pytest
import torch

from rocke import runtime
from rocke.runtime import Graph, GraphError, is_capturing

N = 512


def test_emu_graph_records_then_replays(vector_add):
    _variant, ck = vector_add
    a, b = torch.randn(N), torch.randn(N)
    c, d = torch.zeros(N), torch.zeros(N)
    g = Graph(device="emu")
    assert not is_capturing("emu")
    with g.capture():
        assert is_capturing("emu")
        assert runtime.launch(ck, 2, 256, [a, b, c, N], device="emu") is None
        runtime.launch(ck, 2, 256, [c, b, d, N], device="emu")      # reads the first's output
    assert not is_capturing("emu")
    assert g.num_launches == 2
    assert not c.any() and not d.any()          # capture does not run anything
    reports = g.replay()
    assert len(reports) == 2 and all(r.workgroups == 2 for r in reports)
    torch.testing.assert_close(d, a + 2 * b, rtol=0, atol=1e-5)
    a.copy_(torch.ones(N))                      # same storage, new contents: replay sees them
    b.zero_()
    g.replay()
    assert torch.equal(d, torch.ones(N))


def test_emu_graph_refuses_a_moved_argument(vector_add):
    _variant, ck = vector_add
    a, b, c = torch.randn(N), torch.randn(N), torch.zeros(N)
    g = Graph(device="emu")
    with g.capture():
        runtime.launch(ck, 2, 256, [a, b, c, N], device="emu")
    a.set_(torch.randn(N).untyped_storage())     # a's data now lives elsewhere
    with pytest.raises(GraphError, match="storage moved since the capture"):
        g.replay()
    assert not c.any()


def test_graph_misuse_is_refused(vector_add):
    _variant, ck = vector_add
    g = Graph(device="emu")
    with pytest.raises(GraphError, match="before capture"):
        g.replay()
    with g.capture():
        with pytest.raises(GraphError, match="already active"):
            with Graph(device="emu").capture():
                pass
    with pytest.raises(GraphError, match="already holds a capture"):
        with g.capture():
            pass


def test_an_error_inside_capture_leaves_no_graph(vector_add):
    _variant, ck = vector_add
    a = torch.zeros(N)
    g = Graph(device="emu")
    with pytest.raises(ValueError, match="takes 4 arguments"):
        with g.capture():
            runtime.launch(ck, 2, 256, [a, a, a, N], device="emu")
            runtime.launch(ck, 2, 256, [a, a], device="emu")
    assert g.num_launches == 0 and not is_capturing("emu")
    with pytest.raises(GraphError, match="before capture"):
        g.replay()


def test_hip_graph_captures_through_stream_capture(standin, vector_add):
    _variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    a, b = torch.randn(N), torch.randn(N)
    da, db = (dev.alloc(4 * N).copy_from(t) for t in (a, b))
    dc, dd = dev.alloc(4 * N), dev.alloc(4 * N)
    g = Graph(device="hip")
    assert not is_capturing("hip")
    with g.capture():
        assert is_capturing("hip")
        runtime.launch(ck, 2, 256, [da, db, dc, N], device="hip")
        runtime.launch(ck, 2, 256, [dc, db, dd, N], device="hip")
    assert not is_capturing("hip")
    assert standin.executed == [] and g.num_launches == 2      # captured, not run
    for call in ("begin_capture", "end_capture", "graph_instantiate"):
        assert standin.calls[call] == 1
    g.replay(synchronize=True)
    assert standin.calls["graph_launch"] == 1 and len(standin.executed) == 2
    torch.testing.assert_close(dd.copy_to(torch.empty(N)), a + 2 * b, rtol=0, atol=1e-5)
    da.copy_from(torch.ones(N))
    db.copy_from(torch.zeros(N))
    g.replay()
    assert torch.equal(dd.copy_to(torch.empty(N)), torch.ones(N))
    g.close()
    assert standin.graphs == {} and standin.execs == {} and standin.streams == {}
    assert standin.errors == []


def test_hip_capture_error_maps_and_cleans_up(standin, vector_add):
    _variant, ck = vector_add
    standin.register(ck)
    standin.fail["graph_instantiate"] = 901
    g = Graph(device="hip")
    dev = runtime.get_device("hip")
    buf = dev.alloc(4 * N)
    with pytest.raises(runtime.hip_device.HipError, match="hipGraphInstantiate failed: "
                                                          "hipErrorStreamCaptureInvalidated"):
        with g.capture():
            runtime.launch(ck, 2, 256, [buf, buf, buf, N], device="hip")
    with pytest.raises(GraphError, match="before capture"):
        g.replay()
    assert standin.graphs == {} and standin.streams == {}      # nothing leaked


def test_a_failed_hip_replay_is_named(standin, vector_add):
    """hipGraphLaunch's error on a replay (its fast path skips check() only on success)."""
    _variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    buf = dev.alloc(4 * N)
    g = Graph(device="hip")
    with g.capture():
        runtime.launch(ck, 2, 256, [buf, buf, buf, N], device="hip")
    standin.fail["graph_launch"] = 719
    with pytest.raises(runtime.hip_device.HipError,
                       match="hipGraphLaunch failed: hipErrorLaunchFailure"):
        g.replay()
    g.replay(synchronize=True)                  # the failure was one call's
    assert standin.calls["graph_launch"] == 2
    g.close()


def test_with_a_rocm_torch_the_graph_is_torchs(standin, vector_add, monkeypatch):
    """torch here is a CPU build, so its graph API is faked the way ROCm torch behaves: inside
    `torch.cuda.graph(g)` the current stream is a capturing side stream (here: HIP stream capture
    on a stand-in stream) and `g.replay()` launches the captured graph. Checked: rocke captures
    into torch's graph (not a graph of its own) and replays through it."""
    import contextlib
    import types
    from rocke.runtime import hip_device
    _variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    side = hip_device._call("hipStreamCreate")
    current = [None]

    class FakeCUDAGraph:
        exec = None

        def replay(self):
            hip_device._call("hipGraphLaunch", self.exec, side)

        def reset(self):
            hip_device._call("hipGraphExecDestroy", self.exec)

    @contextlib.contextmanager
    def fake_graph(g):
        hip = hip_device.hip_module()
        hip_device._call("hipStreamBeginCapture", side,
                         hip.hipStreamCaptureMode.hipStreamCaptureModeThreadLocal)
        current[0] = side
        try:
            yield
        finally:
            current[0] = None
            graph = hip_device._call("hipStreamEndCapture", side)
            g.exec = hip_device.instantiate_graph(graph)

    monkeypatch.setattr(hip_device, "torch_rocm", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeCUDAGraph)
    monkeypatch.setattr(torch.cuda, "graph", fake_graph)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda: types.SimpleNamespace(cuda_stream=current[0]))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: current[0] is not None)
    a = torch.randn(N)
    da, dc = dev.alloc(4 * N).copy_from(a), dev.alloc(4 * N)
    g = Graph(device="hip")
    with g.capture():
        assert is_capturing("hip")
        runtime.launch(ck, 2, 256, [da, da, dc, N], device="hip")
    assert standin.executed == [] and g.num_launches == 1
    assert standin.calls["stream_create"] == 1       # the side stream only: rocke made none
    g.replay()
    assert standin.executed[0].stream == int(side)
    assert torch.equal(dc.copy_to(torch.empty(N)), 2 * a)
    g.close()
    assert standin.execs == {}
