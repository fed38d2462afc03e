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
    # the device's one capture stream stays for later captures; the graph's objects are gone
    assert standin.graphs == {} and standin.execs == {} and len(standin.streams) == 1
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
    assert standin.graphs == {} and len(standin.streams) == 1      # nothing leaked but the
    # device's capture stream


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


def test_with_a_rocm_torch_a_capture_neither_synchronises_nor_empties_the_allocator(
        standin, vector_add, monkeypatch):
    """torch.cuda.graph synchronises the device and empties torch's caching allocator on entry
    (a GPU-wide stall per capture). rocke's Graph records by HIP stream capture on the device's
    own capture stream instead, and replays on torch's current stream, in order with the
    caller's work; nothing of torch's graph API is touched."""
    import types
    from rocke.runtime import hip_device
    _variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    current = hip_device._call("hipStreamCreate")       # torch's current stream

    def forbidden(name):
        def call(*a, **k):
            raise AssertionError(f"torch.cuda.{name} called")
        return call
    monkeypatch.setattr(hip_device, "torch_rocm", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for name in ("graph", "CUDAGraph", "synchronize", "empty_cache"):
        monkeypatch.setattr(torch.cuda, name, forbidden(name))
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: types.SimpleNamespace(cuda_stream=int(current)))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    a = torch.randn(N)
    da, dc = dev.alloc(4 * N).copy_from(a), dev.alloc(4 * N)
    g = Graph(device="hip")
    with g.capture():
        runtime.launch(ck, 2, 256, [da, da, dc, N], device="hip")
    assert standin.executed == [] and g.num_launches == 1
    assert standin.calls["stream_create"] == 2       # torch's, and the device's capture stream
    g.replay()
    assert standin.executed[0].stream == int(current)      # on the caller's stream
    assert torch.equal(dc.copy_to(torch.empty(N)), 2 * a)
    g2 = Graph(device="hip")
    with g2.capture():
        runtime.launch(ck, 2, 256, [da, da, dc, N], device="hip")
    assert standin.calls["stream_create"] == 2       # one capture stream for every capture
    g.close()
    g2.close()
    assert standin.execs == {}
