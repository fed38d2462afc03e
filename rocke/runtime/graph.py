"""Graph replay: capture a sequence of launches once, replay it many times.

    g = Graph()                      # on the default device, or Graph(device="hip")
    with g.capture():
        launch(k1, grid, block, args1)
        launch(k2, grid, block, args2)
    g.replay()                       # runs both again, with the kernarg buffers captured

Inside `capture()` launches are recorded, not run (as in HIP stream capture). On the emulator a
graph is the list of prepared launches with their packed kernarg segments; replay runs them in
order with the very kernarg bytes captured, and refuses if an argument's storage moved since the
capture (the recorded pointers would be stale). An emulator replay holds the device's `serial`
lock: replays and launches from other threads run before or after it, never inside it (a HIP
replay is one hipGraphLaunch, which HIP applies in full). On HIP the launches go to a capturing
stream (`hipStreamBeginCapture` .. `hipStreamEndCapture`, `hipGraphInstantiate`,
`hipGraphLaunch`): the device's own capture stream unless one is given, the graph then replaying
on the caller's current stream (torch's on a ROCm
torch) -- so graph mode is exercised on every device.
"""
from __future__ import annotations

import contextlib
import operator
import threading
from typing import Any

from .device import Device, PreparedLaunch, get_device

_local = threading.local()


def active_capture(device: Device) -> "Graph | None":
    """The graph capturing launches on `device` in this thread, if any."""
    graph = getattr(_local, "graph", None)
    return graph if graph is not None and graph.device is device else None


def is_capturing(device: Device | str | None = None, stream=None) -> bool:
    """Whether the caller is already capturing on `device`: an emulator `Graph` capture, HIP
    stream capture on `stream` (default: the current stream), or torch's
    `torch.cuda.is_current_stream_capturing()` on a ROCm torch."""
    return get_device(device).is_capturing(stream)


_DATA_PTR = operator.methodcaller("data_ptr")


def _pointer_positions(args) -> tuple:
    return tuple(i for i, a in enumerate(args) if hasattr(a, "data_ptr"))


def _addresses(args, positions) -> tuple:
    return tuple(args[i].data_ptr() for i in positions)


class GraphError(RuntimeError):
    """A graph was used in a way it cannot honour (replay before capture, nested capture, ...)."""


class Graph:
    def __init__(self, device: Device | str | None = None):
        self.device = get_device(device)
        # emulator graphs: (launch, check, positions of its pointer arguments, their addresses
        # at capture)
        self._recorded: list[tuple[PreparedLaunch, bool, tuple, tuple]] = []
        # every pointer argument of the recorded launches once, and its address at capture: a
        # replay compares them all in one pass
        self._watched: tuple = ()
        self._watched_addresses: tuple = ()
        self._data_ptr = _DATA_PTR
        self._native: Any = None     # the device's graph object (HIP), set by capture()
        self._captured = False

    @property
    def num_launches(self) -> int:
        if self.device.kind == "emu":
            return len(self._recorded)
        return self._native.num_launches if self._native is not None else 0

    # --- emulator recording (called by EmuDevice.execute while capturing) ---
    def record(self, launch: PreparedLaunch, check: bool) -> None:
        positions = _pointer_positions(launch.args)
        self._recorded.append((launch, check, positions, _addresses(launch.args, positions)))
        for i, address in zip(positions, self._recorded[-1][3]):
            arg = launch.args[i]
            if not any(arg is seen and address == at
                       for seen, at in zip(self._watched, self._watched_addresses)):
                self._watched += (arg,)
                self._watched_addresses += (address,)
        # one class's own data_ptr for all (unbound: no attribute look-up per object) where the
        # watched objects' classes share it, else each object's
        readers = {getattr(type(a), "data_ptr", None) for a in self._watched}
        self._data_ptr = readers.pop() if len(readers) == 1 and None not in readers else _DATA_PTR

    @contextlib.contextmanager
    def capture(self, stream=None):
        if getattr(_local, "graph", None) is not None:
            raise GraphError("a Graph capture is already active in this thread; nested captures "
                             "are not supported")
        if self._captured:
            raise GraphError("this Graph already holds a capture; make a new Graph")
        _local.graph = self
        try:
            if self.device.kind == "emu":
                yield self
            else:
                with self.device.capture_graph(stream) as native:
                    self._native = native
                    yield self
        except BaseException:
            self._recorded.clear()
            self._watched = self._watched_addresses = ()
            self._native = None
            raise
        finally:
            _local.graph = None
        self._captured = True

    def replay(self, stream=None, *, synchronize: bool = False) -> list:
        """Run the captured launches again. Returns the emulator's reports (emu) or []."""
        if not self._captured:
            raise GraphError("replay() before capture(): capture the launches first")
        if getattr(_local, "graph", None) is not None:
            raise GraphError("replay() inside a capture is not supported")
        native = self._native
        if native is not None and not synchronize:
            native.replay(stream)           # one call (hipGraphLaunch): applied in full
            return []
        with self.device.serial:
            if self.device.kind == "emu":
                moved = tuple(map(self._data_ptr, self._watched)) != self._watched_addresses
                for launch, _check, positions, addresses in self._recorded if moved else ():
                    if _addresses(launch.args, positions) != addresses:
                        raise GraphError(f"{launch.compiled.variant}: an argument's storage moved "
                                         "since the capture (its recorded pointer is stale); "
                                         "capture the graph again")
                return [self.device.run(launch, check) for launch, check, _, _ in self._recorded]
            self._native.replay(stream)
        if synchronize:
            self.device.synchronize()
        return []

    def close(self) -> None:
        """Release the device's graph objects (HIP); the emulator's need nothing."""
        if self._native is not None:
            self._native.close()
            self._native = None
        self._recorded.clear()
        self._watched = self._watched_addresses = ()
        self._captured = False
