"""The Device interface, the one pre-launch path both devices share, and device selection.

A launch is prepared once on the host -- argument check, launch geometry, kernarg packing with
`rocke.arch.abi` -- into a `PreparedLaunch`; a device only executes prepared launches. So the
emulator and HIP receive byte-identical kernarg segments, and everything but the device call is
exercised here, on a CPU.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence


from .. import env
from ..arch import abi
from . import device_checks
from .signature import check_launch_args

DEVICE_KINDS = ("emu", "hip")


@dataclass(frozen=True)
class PreparedLaunch:
    """One launch, ready for a device: the packed kernarg segment plus what produced it."""
    compiled: Any                      # rocke.compiler.CompiledKernel
    grid: tuple[int, int, int]         # workgroups
    block: tuple[int, int, int]        # work-items per workgroup
    shared_mem: int                    # dynamic LDS bytes
    args: tuple                        # explicit arguments, as checked
    kernarg: bytes                     # the whole kernarg segment (explicit + hidden)
    allow_alias: bool = False          # outputs may overlap other arguments (in-place kernels)
    memcheck: str = "view"             # the emulator's addressable range per tensor (emu.launch)


def _pointer_of(value) -> int:
    return value.data_ptr()


def _dims(value, what: str) -> tuple[int, int, int]:
    """(x, y, z) of a grid/block that check_launch_args has already validated."""
    if type(value) is tuple and len(value) == 3:
        return value
    return abi.normalize_dims(value, what)


def prepare_launch(compiled, grid, block, args: Sequence[Any],
                   shared_mem: int = 0, *, device_kind: str = "emu",
                   allow_alias: bool = False, memcheck: str = "view") -> PreparedLaunch:
    """Check a launch of `compiled` and pack its kernarg segment; raises ValueError before any
    work when something is wrong."""
    from ..emu import MEMCHECK_SCOPES
    if memcheck not in MEMCHECK_SCOPES:
        raise ValueError(f"memcheck must be one of {', '.join(map(repr, MEMCHECK_SCOPES))}, "
                         f"got {memcheck!r}")
    info = compiled.info
    # launch arguments vs the kernel's declared signature: grid/block, dtypes, value kinds, ranges
    values = check_launch_args(compiled, grid, block, args, device=device_kind)
    grid3 = _dims(grid, "grid")
    block3 = _dims(block, "block")
    if not isinstance(shared_mem, int) or isinstance(shared_mem, bool) or shared_mem < 0:
        raise ValueError(f"shared_mem must be a non-negative int, got {shared_mem!r}")
    kernarg = abi.pack_kernarg_segment(info.args, values, grid3, block3, shared_mem, _pointer_of,
                                       info.kernarg_size)
    return PreparedLaunch(compiled, grid3, block3, shared_mem, tuple(values), kernarg, allow_alias,
                          memcheck)


class Device:
    """Where prepared launches run. `kind` is "emu" or "hip".

    A device behaves like one stream: launches and graph replays issued to it from any number of
    threads run one after another, each applied in full (`serial` is held around each)."""
    kind: str = ""
    arch: str = ""      # target id of the device, e.g. "gfx942:sramecc+:xnack-"

    def __init__(self):
        # re-entrant: a graph replay holds it around the launches it runs
        self.serial = threading.RLock()

    def execute(self, launch: PreparedLaunch, *, stream=None, check: bool = True):
        """Run (or, inside a graph capture, record) one prepared launch."""
        raise NotImplementedError

    def ready(self, launch: PreparedLaunch) -> None:
        """Load and resolve what ``launch`` needs (a GPU's module and function), so that a graph
        capture that follows records launches only."""

    def synchronize(self) -> None:
        """Wait until every launch issued to this device has finished (and report what a check
        kernel recorded meanwhile: ``check_errors``)."""
        self.check_errors()

    # --- the error record of device check kernels (device_checks.py) ---
    _error_record = None

    def error_record(self):
        """This device's error record (``device_checks.RECORD_INTS`` int32), allocated on first
        use -- outside any capture: an allocation there would not be capture-safe."""
        if self._error_record is None:
            with self.serial:
                if self._error_record is None:
                    if self.is_capturing():
                        raise ValueError("the device's error record must be allocated before a "
                                         "graph capture: make one uncaptured call first")
                    self._error_record = self._allocate_record()
        return self._error_record

    def check_errors(self) -> None:
        """Wait for the device, then raise ``device_checks.DeviceCheckError`` for the first
        violation a check kernel recorded since the last look (resetting the record)."""
        if self._error_record is None:
            self._wait()
            return
        if self.is_capturing():
            raise ValueError("check_errors() reads the device: call it outside a graph capture")
        self._wait()
        with self.serial:
            record = self._read_record()
            if record[0] != 0:
                self._write_record(bytes(device_checks.RECORD_BYTES))
        device_checks.raise_recorded(record)

    def _wait(self) -> None:
        """Wait until every launch issued to this device has finished."""

    def _allocate_record(self):
        raise NotImplementedError

    def _read_record(self) -> tuple:
        raise NotImplementedError

    def _write_record(self, data: bytes) -> None:
        raise NotImplementedError

    def is_capturing(self, stream=None) -> bool:
        """Whether launches on `stream` (default: the current one) are being captured."""
        raise NotImplementedError

    def stream_functions(self) -> tuple:
        """``(current_stream, capturing)``: functions of no arguments giving the stream a launch
        or replay goes to now (None: the device's own choice) and whether it is capturing, for
        a caller that replays many times (a cached call binds them once). A device whose stream
        belongs to torch answers with torch's cheapest reads."""
        return (lambda: None), self.is_capturing

    def timed(self, fn, stream=None):
        """Run `fn`, which launches on this device; a `timing.Timing` on the device's clock."""
        raise NotImplementedError

    def __repr__(self):
        return f"<rocke {self.kind} device {self.arch}>"


_lock = threading.Lock()
_devices: dict[str, Device] = {}
_default_kind: str | None = None


@dataclass(frozen=True)
class DeviceBackend:
    """How a device kind is found and made. rocke.runtime registers its two kinds here, so this
    base module imports no backend (the backends import it: no import cycle)."""
    current_key: Callable[[], str]          # the key of the caller's current device of the kind
    make: Callable[[str], "Device"]         # a new device for a key
    preferred: Callable[[], bool] = lambda: False   # whether it is the default without ROCKE_DEVICE


_backends: dict[str, DeviceBackend] = {}


def register_backend(kind: str, backend: DeviceBackend) -> None:
    if kind not in DEVICE_KINDS:
        raise ValueError(f"unknown device kind {kind!r}; rocke has {DEVICE_KINDS}")
    _backends[kind] = backend


def get_device(device: Device | str | None = None) -> Device:
    """`device` itself, a device by kind ("emu" | "hip": the caller's current one of the kind),
    one by key ("hip:1": GPU 1, whatever the current device is), or the default device:
    ROCKE_DEVICE if set, else hip when hip-python finds a gfx942 or gfx950 GPU, else the
    emulator."""
    if isinstance(device, Device):
        return device
    if device is None:
        device = default_device_kind()
    kind, _, rest = device.partition(":") if isinstance(device, str) else (device, "", "")
    if kind not in DEVICE_KINDS or (kind == "hip" and rest and not rest.isdigit()):
        raise ValueError(f"unknown device {device!r}; rocke has {DEVICE_KINDS} "
                         "(a GPU by index: 'hip:N')")
    backend = _backends[kind]
    key = device if kind == "hip" and rest else backend.current_key()
    found = _devices.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in _devices:
            _devices[key] = backend.make(key)
        return _devices[key]


def default_device_kind() -> str:
    global _default_kind
    chosen = env.device()
    if chosen is not None:
        return chosen
    if _default_kind is None:
        _default_kind = "hip" if _backends["hip"].preferred() else "emu"
    return _default_kind


_generation = 0


def device_generation() -> int:
    """Changes whenever the devices are forgotten (``reset_devices``): a caller that keeps a
    Device (or work prepared for one) across calls keys it by this."""
    return _generation


def known_devices() -> list[Device]:
    """The devices made so far in this process (those ``get_device`` returned)."""
    with _lock:
        return list(_devices.values())


def reset_devices() -> None:
    """Forget the devices and the default choice (tests that swap the HIP runtime use this)."""
    global _default_kind, _generation
    with _lock:
        _devices.clear()
        _default_kind = None
        _generation += 1
