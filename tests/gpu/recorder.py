"""The attention entry point on an NVIDIA GPU under CUDA's real capture rules, with its launches
replaced by a recorder: a test double of a GPU device, not a product.

There is no AMD GPU; CUDA's stream-capture rules are HIP's (a synchronisation, a host read of
device memory or an allocation on a capturing stream fails the capture). ``RecorderDevice``
stands where ``HipDevice`` would: every launch enqueues one trivial kernel (an in-place add on
a buffer allocated up front) on torch's current stream, so a caller's capture records it and a
replay runs it; its own captures record on a stream of its own by CUDA stream capture (through
CuPy) and replay on the current stream -- the mechanism HipDevice uses with HIP stream capture.
``install`` points the entry point's device choice at it."""
from __future__ import annotations

import contextlib
import types

import torch

from rocke.runtime.device import Device


class RecorderDevice(Device):
    kind = "hip"                          # a GPU device to the entry point
    arch = "gfx942:sramecc+:xnack-"
    compute_units = 304

    def __init__(self, index: int):
        super().__init__()
        self.index = index
        self.scratch = torch.zeros(1, device=f"cuda:{index}")      # the trivial kernel's target
        self._capture_stream = None
        self.executed = 0
        self.captures = 0
        self.readied = 0
        self.readied_while_capturing = 0

    def execute(self, launch, *, stream=None, check: bool = True):
        self.scratch.add_(1.0)            # one kernel on the current stream
        self.executed += 1

    def ready(self, launch) -> None:
        self.readied += 1
        if self.is_capturing():
            self.readied_while_capturing += 1

    def is_capturing(self, stream=None) -> bool:
        return bool(torch.cuda.is_current_stream_capturing())

    @contextlib.contextmanager
    def capture_graph(self, stream=None):
        """CUDA stream capture on a stream of the device's own (CuPy's, as HipDevice uses HIP
        stream capture): torch's launches go to it while it records, the graph replays on the
        current stream. torch's CUDAGraph is not used: it puts torch's allocator into capture
        mode, whose own bookkeeping would be counted as the entry point's allocations."""
        import cupy
        if self._capture_stream is None:
            self._capture_stream = cupy.cuda.Stream(non_blocking=True)
        capture = self._capture_stream
        native = types.SimpleNamespace(num_launches=0, stream=None, graph=None)

        def replay(stream=None):
            native.graph.launch(cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream))
        native.replay, native.close = replay, lambda: None
        self.captures += 1
        with torch.cuda.stream(torch.cuda.ExternalStream(capture.ptr)):
            capture.begin_capture(cupy.cuda.runtime.streamCaptureModeThreadLocal)
            try:
                yield native
            finally:
                native.graph = capture.end_capture()


def install(monkeypatch, device: RecorderDevice) -> None:
    """Calls on CUDA tensors plan gfx942 kernels and launch on ``device``."""
    from rocke.kernels.common import attention_unified, attention_validation
    monkeypatch.setattr(attention_unified, "launch_device_kind", lambda q: "hip")
    monkeypatch.setattr(attention_validation, "launch_device_kind", lambda q: "hip")
    monkeypatch.setattr(attention_unified, "launch_target", lambda q: "gfx942")
    monkeypatch.setattr(attention_unified, "launch_device", lambda q, kind: device)
