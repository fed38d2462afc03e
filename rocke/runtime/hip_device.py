"""The HIP device: prepared launches run on a gfx942 or gfx950 GPU through hip-python.

Follows hip-python's documented API (`from hip import hip`; every call returns a tuple whose
first item is a `hipError_t`): `hipModuleLoadData` of the linked code object,
`hipModuleGetFunction`, and `hipModuleLaunchKernel` with the kernarg segment that
`rocke.arch.abi` packed passed through `extra` = HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END
(the emulator receives the same bytes). Every failing call raises `HipError` naming the call and
`hipGetErrorString`'s text. Modules are loaded once per (device, code-object hash).

torch interop on a ROCm torch: tensor pointers are `tensor.data_ptr()` and launches go to
`torch.cuda.current_stream()`. Without a ROCm torch, `DeviceBuffer` (hipMalloc'd memory) serves
as a pointer argument and the null stream is used.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import re
import threading

from .device import Device, PreparedLaunch
from . import graph as _graph

HIP_LAUNCH_PARAM_BUFFER_POINTER = 1
HIP_LAUNCH_PARAM_BUFFER_SIZE = 2
HIP_LAUNCH_PARAM_END = 3


class HipError(RuntimeError):
    """A HIP call returned an error; `call`, `code`, `name` and `text` say which and why."""

    def __init__(self, call: str, code: int, name: str, text: str):
        self.call, self.code, self.name, self.text = call, code, name, text
        super().__init__(f"{call} failed: {name} ({code}): {text}")


class HipUnavailable(RuntimeError):
    """hip-python or the HIP runtime (libamdhip64.so) cannot be used here."""


_hip_bindings: list = []       # hip-python's `hip` module once imported (every HIP call needs it)
_success: list = [None]        # its hipError_t.hipSuccess: a result's error is checked by identity
_capture_active: list = [None]    # its hipStreamCaptureStatusActive, looked up once


def hip_module():
    """hip-python's `hip` module (the binding of the HIP runtime API)."""
    if _hip_bindings:
        return _hip_bindings[0]
    try:
        from hip import hip
    except ImportError as e:
        raise HipUnavailable(f"the HIP device needs hip-python (`pip install rocke[hip]`): {e}") \
            from None
    _success[0] = getattr(getattr(hip, "hipError_t", None), "hipSuccess", None)
    _hip_bindings.append(hip)
    return hip


def _error_text(hip, err) -> str:
    try:
        text = hip.hipGetErrorString(err)[1]
        return text.decode() if text is not None else "(no error string)"
    except Exception as e:   # the error path must not hide the original error
        return f"(hipGetErrorString failed: {e})"


def check(call: str, result):
    """The payload of hip-python result tuple `result`, or HipError if its hipError_t says so."""
    err = result[0]
    if err is not _success[0] and err.value != 0:
        hip = hip_module()
        raise HipError(call, int(err.value), err.name, _error_text(hip, err))
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


def _call(call: str, *args):
    hip = _hip_bindings[0] if _hip_bindings else hip_module()
    try:
        fn = getattr(hip, call)
        result = fn(*args)
    except RuntimeError as e:    # hip-python raises this when libamdhip64.so cannot be opened
        raise HipUnavailable(f"{call}: the HIP runtime could not be loaded "
                             f"({_without_bytes_reprs(str(e))})") from None
    if result[0] is _success[0] and len(result) <= 2:   # success: check()'s payload, one frame less
        return result[1] if len(result) == 2 else None
    return check(call, result)


def _without_bytes_reprs(text: str) -> str:
    """hip-python formats the library name and dlerror() as bytes (``'b'libamdhip64.so''``);
    a message shows their text."""
    return re.sub(r"""\bb(['"])(.*?)\1""", r"\2", text)


def processor_of(target_id: str) -> str:
    return target_id.split(":", 1)[0]


def _features(target_id: str) -> dict[str, str]:
    return {f[:-1]: f[-1] for f in target_id.split(":")[1:] if f and f[-1] in "+-"}


def arch_compatible(code_target: str, device_arch: str) -> bool:
    """Whether a code object built for `code_target` may load on a `device_arch` GPU: the same
    processor, and no target feature (sramecc, xnack) set one way in one and the other way in
    the other."""
    if processor_of(code_target) != processor_of(device_arch):
        return False
    code, dev = _features(code_target), _features(device_arch)
    return all(dev.get(k, v) == v for k, v in code.items())


@functools.cache
def bindings_generation() -> int:
    """Major version of the installed hip-python: 7.x and earlier take caller-made out-structs
    (`hipGetDeviceProperties(props, device)`), >= 10 return them
    (`hipGetDeviceProperties(device)`, `hipGraphInstantiate(graph, bufferSize)`)."""
    from importlib.metadata import PackageNotFoundError, version
    for dist in ("hip-python", "rocm-bindings-hip"):
        try:
            return int(version(dist).split(".", 1)[0])
        except (PackageNotFoundError, ValueError):
            continue
    return 0


def _properties(index: int):
    hip = hip_module()
    if bindings_generation() >= 10:
        return _call("hipGetDeviceProperties", index)
    props = hip.hipDeviceProp_t()
    _call("hipGetDeviceProperties", props, index)
    return props


def device_arch(index: int) -> str:
    """gcnArchName of HIP device `index`, e.g. 'gfx942:sramecc+:xnack-'."""
    name = _properties(index).gcnArchName
    return (name.decode() if isinstance(name, bytes) else str(name)).split("\x00", 1)[0]


def device_compute_units(index: int) -> int:
    """multiProcessorCount of HIP device `index` (CUs: 304 on an MI300X)."""
    return int(_properties(index).multiProcessorCount)


def find_supported_device() -> int | None:
    """Index of the first GPU hip-python can see whose processor rocke builds for (gfx942,
    gfx950), or None (no hip-python, no runtime, no device, or only other architectures)."""
    from ..arch import TARGETS
    try:
        count = _call("hipGetDeviceCount")
        for index in range(count):
            if processor_of(device_arch(index)) in TARGETS:
                return index
    except (HipUnavailable, HipError):
        return None
    return None


@functools.cache
def torch_rocm() -> bool:
    """True when torch is a ROCm build with a visible GPU (then torch owns streams and graphs)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(getattr(torch.version, "hip", None)) and torch.cuda.is_available()


def _torch_stream_reads() -> tuple:
    """(stream of GPU index: raw handle, current stream capturing: bool) from torch: its C
    functions where the build has them (what Triton's launcher reads; a CPU build names them as
    placeholders only), else torch.cuda's public ones (a Stream object per read)."""
    import torch
    built = torch.backends.cuda.is_built()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) if built else None
    capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) if built else None
    return (raw if raw is not None else
            (lambda index: torch.cuda.current_stream(index).cuda_stream)), (
        capturing if capturing is not None else torch.cuda.is_current_stream_capturing)


def current_device_index() -> int:
    """The GPU launches go to: torch's current device on a ROCm torch, else hipGetDevice()."""
    if torch_rocm():
        import torch
        return torch.cuda.current_device()
    return _call("hipGetDevice")


class DeviceBuffer:
    """`nbytes` of HIP device memory (hipMalloc); passes as a pointer argument like a tensor."""

    def __init__(self, device: "HipDevice", nbytes: int):
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"nbytes must be a positive int, got {nbytes!r}")
        self.device = device
        self._nbytes = nbytes
        self._pointer = _call("hipMalloc", nbytes)
        self._address = int(self._pointer)

    def data_ptr(self) -> int:
        return self._address

    def untyped_storage(self) -> "DeviceBuffer":
        return self

    def nbytes(self) -> int:
        return self._nbytes

    def _host_view(self, host) -> tuple[int, int]:
        """(address, nbytes) of a contiguous CPU tensor, numpy array or bytes-like."""
        if hasattr(host, "data_ptr"):
            if not host.is_contiguous() or host.device.type != "cpu":
                raise ValueError("host tensor must be a contiguous CPU tensor")
            return host.data_ptr(), host.numel() * host.element_size()
        view = memoryview(host)
        if not view.c_contiguous:
            raise ValueError("host buffer must be contiguous")
        if view.readonly:
            buf = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        else:
            buf = (ctypes.c_char * view.nbytes).from_buffer(view)
        self._keep = buf
        return ctypes.addressof(buf), view.nbytes

    def copy_from(self, host) -> "DeviceBuffer":
        address, nbytes = self._host_view(host)
        if nbytes > self._nbytes:
            raise ValueError(f"host data has {nbytes} bytes, the buffer {self._nbytes}")
        hip = hip_module()
        _call("hipMemcpy", self._address, address, nbytes, hip.hipMemcpyKind.hipMemcpyHostToDevice)
        return self

    def copy_to(self, host):
        address, nbytes = self._host_view(host)
        if nbytes > self._nbytes:
            raise ValueError(f"host destination has {nbytes} bytes, the buffer {self._nbytes}")
        hip = hip_module()
        _call("hipMemcpy", address, self._address, nbytes, hip.hipMemcpyKind.hipMemcpyDeviceToHost)
        return host

    def free(self) -> None:
        if self._pointer is not None:
            _call("hipFree", self._pointer)
            self._pointer = None

    def __repr__(self):
        return f"<DeviceBuffer {self._nbytes} B at {self._address:#x}>"


def instantiate_graph(graph):
    """hipGraphInstantiate(graph) -> the executable graph, in the installed bindings' shape."""
    if bindings_generation() >= 10:
        return _call("hipGraphInstantiate", graph, 0)[0]
    return _call("hipGraphInstantiate", graph, None, 0)[0]


class _StreamGraph:
    """A HIP graph made by stream capture: hipStreamBeginCapture .. hipGraphInstantiate."""

    def __init__(self, device: "HipDevice", stream):
        self.device = device
        # None: record on the device's capture stream, replay on the caller's current stream
        self.on_current = stream is None
        self.stream = device.capture_stream() if stream is None else stream
        self.graph = self.exec = None
        self.num_launches = 0

    def begin(self):
        hip = hip_module()
        _call("hipStreamBeginCapture", self.stream,
              hip.hipStreamCaptureMode.hipStreamCaptureModeThreadLocal)

    def end(self):
        self.graph = _call("hipStreamEndCapture", self.stream)
        self.exec = instantiate_graph(self.graph)

    def replay(self, stream=None):
        # on the caller's stream (torch's current one): a graph captured on rocke's own stream
        # runs in order with the caller's work. A replay hit's one HIP call: hip-python's
        # function directly (the library is loaded: this graph was made through it), check()'s
        # error path only on an error
        if stream is None:
            stream = self.device.current_stream() if self.on_current else self.stream
        result = _hip_bindings[0].hipGraphLaunch(self.exec, stream)
        if result[0] is not _success[0]:
            check("hipGraphLaunch", result)

    def close(self):
        if self.exec is not None:
            _call("hipGraphExecDestroy", self.exec)
        if self.graph is not None:
            _call("hipGraphDestroy", self.graph)
        self.exec = self.graph = self.stream = None     # the capture stream is the device's


class HipDevice(Device):
    kind = "hip"

    def __init__(self, index: int = 0):
        super().__init__()
        self.index = index
        count = _call("hipGetDeviceCount")
        if not 0 <= index < count:
            raise HipError("hipGetDeviceCount", 101, "hipErrorInvalidDevice",
                           f"device {index} requested, {count} present")
        self.arch = device_arch(index)
        self.compute_units = device_compute_units(index)
        self._modules: dict[str, tuple[object, dict[str, object]]] = {}
        self._lock = threading.Lock()
        self.loads = 0      # hipModuleLoadData calls made (the module cache's misses)
        self._capture_stream = None
        self._module_generation = 0     # bumped by unload_all: memoized functions are stale
        if not self.is_capturing():
            self.error_record()     # now, outside any capture: check kernels only launch later

    # --- modules ---
    def function(self, compiled):
        """The loaded kernel function of `compiled`, loading its module on first use."""
        digest = getattr(compiled, "_code_object_sha256", None)
        if digest is None:
            digest = hashlib.sha256(compiled.code_object).hexdigest()
            try:        # remembered on the (frozen) CompiledKernel: hashing is per object, once
                object.__setattr__(compiled, "_code_object_sha256", digest)
            except AttributeError:
                pass
        entry = self._modules.get(digest)
        if entry is not None:
            fn = entry[1].get(compiled.name)
            if fn is not None:
                return fn
        with self._lock:
            if digest not in self._modules:
                self.check_loadable(compiled)
                with self._current():       # a module loads into the current device's context
                    module = _call("hipModuleLoadData", compiled.code_object)
                self.loads += 1
                self._modules[digest] = (module, {})
            module, functions = self._modules[digest]
            if compiled.name not in functions:
                functions[compiled.name] = _call("hipModuleGetFunction", module,
                                                 compiled.name.encode())
            return functions[compiled.name]

    def capture_stream(self):
        """The stream rocke records its own graphs on: made once, at the first capture (HIP
        capture mode thread-local, so other threads' work is unaffected)."""
        if self._capture_stream is None:
            with self._lock:
                if self._capture_stream is None:
                    with self._current():
                        self._capture_stream = _call("hipStreamCreate")
        return self._capture_stream

    @contextlib.contextmanager
    def _current(self):
        """This GPU as HIP's current device for the block (module loads), restored after."""
        before = _call("hipGetDevice")
        if before != self.index:
            _call("hipSetDevice", self.index)
        try:
            yield
        finally:
            if before != self.index:
                _call("hipSetDevice", before)

    def check_loadable(self, compiled) -> None:
        """Refuse (ValueError, before any HIP call) a code object whose ELF header names a target
        this GPU cannot run, or one that is not the target it was compiled for."""
        from ..arch.elf import code_object_target
        try:
            built_for = code_object_target(compiled.code_object)
        except ValueError as e:
            raise ValueError(f"{compiled.variant}: its code object cannot load on HIP device "
                             f"{self.index}: {e}") from None
        if processor_of(built_for) != processor_of(str(compiled.target)):
            raise ValueError(f"{compiled.variant}: its code object's ELF header names "
                             f"{built_for}, but it was compiled for {compiled.target}")
        if not arch_compatible(built_for, self.arch):
            raise ValueError(f"{compiled.variant}: its code object is built for {built_for} and "
                             f"cannot load on HIP device {self.index}, a {self.arch}")

    def unload_all(self) -> None:
        with self._lock:
            for module, _ in self._modules.values():
                _call("hipModuleUnload", module)
            self._modules.clear()
            self._module_generation += 1

    # --- launches ---
    def current_stream(self):
        capture = _graph.active_capture(self)
        native = capture._native if capture is not None else None
        if native is not None and native.stream is not None:
            return native.stream
        if torch_rocm():
            return _torch_stream_reads()[0](self.index)     # this GPU's, not device 0's
        return None

    def launch_params(self, launch: PreparedLaunch, stream=None) -> tuple:
        """The hipModuleLaunchKernel arguments for `launch` (the module is loaded on first use);
        the host side of a HIP launch, short of the call itself. The kernarg buffer and the
        `extra` array ride along as the tuple's last items' referents: keep the tuple alive until
        the call returns (HIP copies the kernarg buffer during the call).

        What depends on the launch alone (the argument check, the function, the kernarg buffer
        and `extra`, all read-only afterwards) is made once per launch and device (module
        generation): a cached call's launches then cost only the stream look-up."""
        held = launch.__dict__.get("_hip_params")
        if held is None or held[0] is not self or held[1] != self._module_generation:
            held = self._launch_constants(launch)
            object.__setattr__(launch, "_hip_params", held)     # frozen: per-object memo
        if stream is None:
            stream = self.current_stream()
        return held[2] + (stream, None, held[3], held[4])

    def ready(self, launch: PreparedLaunch) -> None:
        self.launch_params(launch, stream=0)      # the module and function, memoised

    def _launch_constants(self, launch: PreparedLaunch) -> tuple:
        for value in launch.args:
            device = getattr(value, "device", None)
            if getattr(device, "type", None) == "cpu":
                raise ValueError(f"{launch.compiled.variant}: a CPU tensor was passed to the HIP "
                                 "device; pass GPU tensors or DeviceBuffers")
        fn = self.function(launch.compiled)
        kernarg = launch.kernarg
        buffer = ctypes.create_string_buffer(kernarg, len(kernarg))
        size = ctypes.c_size_t(len(kernarg))
        extra = (ctypes.c_void_p * 5)(HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buffer),
                                      HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size),
                                      HIP_LAUNCH_PARAM_END)
        grid, block = launch.grid, launch.block
        head = (fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], launch.shared_mem)
        return (self, self._module_generation, head, ctypes.addressof(extra),
                (buffer, size, extra))

    def execute(self, launch: PreparedLaunch, *, stream=None, check: bool = True):
        params = self.launch_params(launch, stream)
        with self.serial:
            _call("hipModuleLaunchKernel", *params[:-1])
        capture = _graph.active_capture(self)
        if capture is not None and capture._native is not None:
            capture._native.num_launches += 1
        return None

    def _wait(self) -> None:
        if torch_rocm():
            import torch
            torch.cuda.synchronize()
        else:
            _call("hipDeviceSynchronize")

    def _allocate_record(self):
        from .device_checks import RECORD_BYTES
        return DeviceBuffer(self, RECORD_BYTES).copy_from(bytes(RECORD_BYTES))

    def _read_record(self) -> tuple:
        import struct
        from .device_checks import RECORD_BYTES, RECORD_INTS
        data = self._error_record.copy_to(bytearray(RECORD_BYTES))
        return struct.unpack(f"<{RECORD_INTS}i", bytes(data))

    def _write_record(self, data: bytes) -> None:
        self._error_record.copy_from(data)

    def timed(self, fn, stream=None):
        from .timing import GPU_CLOCK, Timing
        if stream is None and torch_rocm():
            import torch
            start, stop = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            return Timing(start.elapsed_time(stop) / 1e3, GPU_CLOCK)
        stream = self.current_stream() if stream is None else stream
        start, stop = _call("hipEventCreate"), _call("hipEventCreate")
        try:
            _call("hipEventRecord", start, stream)
            fn()
            _call("hipEventRecord", stop, stream)
            _call("hipEventSynchronize", stop)
            milliseconds = _call("hipEventElapsedTime", start, stop)
        finally:
            _call("hipEventDestroy", start)
            _call("hipEventDestroy", stop)
        return Timing(milliseconds / 1e3, GPU_CLOCK)

    # --- memory ---
    def alloc(self, nbytes: int) -> DeviceBuffer:
        return DeviceBuffer(self, nbytes)

    # --- graphs ---
    def stream_functions(self) -> tuple:
        """On a ROCm torch: torch's current raw stream of this GPU and its capture flag, read
        through torch's C functions where the build has them (what Triton's launcher reads):
        ``torch.cuda.current_stream`` builds a Stream object and ``is_available`` queries the
        driver, a few microseconds a call. Without torch: the device's own choice."""
        if not torch_rocm():
            return (lambda: None), self.is_capturing
        import functools
        raw_stream, capturing = _torch_stream_reads()
        return functools.partial(raw_stream, self.index), capturing

    def is_capturing(self, stream=None) -> bool:
        if stream is None:
            if torch_rocm():
                return bool(_torch_stream_reads()[1]())
            capture = _graph.active_capture(self)      # current_stream() without torch
            if capture is not None and capture._native is not None:
                stream = capture._native.stream
        result = _hip_bindings[0].hipStreamIsCapturing(stream)    # loaded: this device exists
        if result[0] is not _success[0]:
            check("hipStreamIsCapturing", result)
        status = result[1]
        active = _capture_active[0]
        if active is None:
            active = _capture_active[0] = \
                hip_module().hipStreamCaptureStatus.hipStreamCaptureStatusActive
        return status == active

    @contextlib.contextmanager
    def capture_graph(self, stream=None):
        """HIP stream capture: on ``stream``, or on a stream of rocke's own, whose graph replays
        on the caller's current stream. Never torch's ``torch.cuda.graph``, which synchronises
        the device and empties torch's caching allocator on entry: capture only records, so
        nothing is waited for, and nothing is allocated while it records."""
        native = _StreamGraph(self, stream)
        native.begin()
        try:
            yield native
        except BaseException:
            with contextlib.suppress(HipError):
                graph = _call("hipStreamEndCapture", native.stream)
                _call("hipGraphDestroy", graph)
            native.close()
            raise
        try:
            native.end()
        except BaseException:
            with contextlib.suppress(HipError):
                native.close()
            raise
