"""The Python half of the stand-in libamdhip64.so (hip_stub.c): HIP calls land here through a
ctypes callback table and launches run on rocke's emulator. A test double, not a product.

Device memory is host memory (hipMalloc hands out numpy-backed ranges). A launch reads the kernarg
buffer that arrived through `extra`, turns each explicit argument back into a value (pointers
into hipMalloc'd ranges become tensor views of them), checks that `rocke.arch.abi` packs those
values into the very same bytes, and runs the code object itself on the emulator with exactly
those bytes. A test tells it which code objects its device accepts (`register(compiled)`); any
other image is refused as hipErrorInvalidImage, like an image a real runtime cannot load, and an
image built for another processor than the device's (`arch`) as hipErrorNoBinaryForGpu.

`arch = "gfx950:..."` makes it a gfx950 device: launches run on the emulator as gfx950. No
disassembler here knows gfx950, so a gfx950 code object runs from its compiler listing, which
`register` proves is that code object's kernel by a rebuild (rocke.runtime.emu_device's proof).
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import itertools
import os
import shutil
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rocke import emu
from rocke.arch import abi
from rocke.arch.elf import code_object_target
from rocke.arch.targets import TARGETS
from rocke.emu.codeobject import code_object_metadata

SOURCE = Path(__file__).with_name("hip_stub.c")

SUCCESS, INVALID_VALUE, NO_DEVICE, INVALID_DEVICE, NO_BINARY_FOR_GPU = 0, 1, 100, 101, 209
INVALID_IMAGE, INVALID_HANDLE, NOT_FOUND, ILLEGAL_STATE = 200, 400, 500, 401
LAUNCH_FAILURE, CAPTURE_UNSUPPORTED, CAPTURE_UNMATCHED, UNKNOWN = 719, 900, 903, 999
HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE, MEMCPY_DEFAULT = 1, 2, 3, 4
CAPTURE_NONE, CAPTURE_ACTIVE = 0, 1
ELF_MAGIC, EM_AMDGPU = b"\x7fELF", 224


def build(directory: Path) -> Path:
    """Compile hip_stub.c into `directory`/lib/libamdhip64.so with the system C compiler."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc/clang) to build the stand-in libamdhip64.so")
    lib = directory / "lib" / "libamdhip64.so"
    lib.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall",
                    "-Wl,-soname,libamdhip64.so", "-o", str(lib), str(SOURCE)],
                   check=True, capture_output=True, text=True)
    return lib


@dataclass
class _Function:
    code_object: bytes
    name: str
    args: list
    kernarg_size: int
    runnable: bytes | str = b""     # what the emulator runs: the code object, or its proven listing


@dataclass
class _Launch:
    function: int
    grid: tuple
    block: tuple
    shared_mem: int
    kernarg: bytes
    stream: int | None = None
    ran: bytes = b""          # the kernarg segment the emulator ran this launch with


@dataclass
class _Stream:
    capture: list | None = None      # launches recorded while capturing


@dataclass
class StandIn:
    """State of the stand-in runtime; `active=False` reports no device at all."""
    library: ctypes.CDLL
    active: bool = False
    arch: str = "gfx942:sramecc+:xnack-"
    code_objects: dict = field(default_factory=dict)      # sha256 -> code object
    listings: dict = field(default_factory=dict)          # sha256 -> proven listing (gfx950)
    allocations: dict = field(default_factory=dict)       # address -> (array, size)
    modules: dict = field(default_factory=dict)           # handle -> code object
    functions: dict = field(default_factory=dict)         # handle -> _Function
    streams: dict = field(default_factory=dict)           # handle -> _Stream
    graphs: dict = field(default_factory=dict)            # handle -> [ _Launch ]
    execs: dict = field(default_factory=dict)             # handle -> [ _Launch ]
    events: dict = field(default_factory=dict)            # handle -> time or None
    fail: dict = field(default_factory=dict)              # slot -> error code to return once
    calls: dict = field(default_factory=dict)             # slot -> count
    executed: list = field(default_factory=list)          # _Launch per emulated launch
    errors: list = field(default_factory=list)            # why a call failed (for test messages)

    def __post_init__(self):
        self._handles = itertools.count(0x1000, 0x10)
        self._serial = threading.RLock()
        self._callbacks = []
        self._install()

    # ---- test controls ----
    def register(self, compiled) -> None:
        digest = hashlib.sha256(compiled.code_object).hexdigest()
        self.code_objects[digest] = compiled.code_object
        if code_object_target(compiled.code_object).startswith("gfx950") and \
                digest not in self.listings:
            from rocke.runtime.emu_device import listing_proven_by_rebuild
            if not listing_proven_by_rebuild(compiled):
                raise ValueError(f"{compiled.name}: its listing is not proven to be its gfx950 "
                                 "code object's kernel; the stand-in cannot run it")
            self.listings[digest] = compiled.asm

    def reset(self, active: bool = False) -> None:
        for name in ("code_objects", "listings", "allocations", "modules", "functions", "streams", "graphs",
                     "execs", "events", "fail", "calls"):
            getattr(self, name).clear()
        self._stream_state(None, -1)
        self.executed.clear()
        self.errors.clear()
        self.arch = "gfx942:sramecc+:xnack-"
        self.active = active

    # ---- plumbing ----
    def _install(self):
        types = {
            "device_count": [ctypes.c_void_p],
            "device_props": [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p],
            "malloc_": [ctypes.c_void_p, ctypes.c_size_t],
            "free_": [ctypes.c_void_p],
            "memcpy_": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int],
            "module_load": [ctypes.c_void_p, ctypes.c_void_p],
            "module_unload": [ctypes.c_void_p],
            "get_function": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p],
            "launch": [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.c_void_p,
                                                                 ctypes.c_size_t],
            "stream_create": [ctypes.c_void_p],
            "stream_destroy": [ctypes.c_void_p],
            "stream_sync": [ctypes.c_void_p],
            "begin_capture": [ctypes.c_void_p, ctypes.c_int],
            "end_capture": [ctypes.c_void_p, ctypes.c_void_p],
            "is_capturing": [ctypes.c_void_p, ctypes.c_void_p],
            "graph_instantiate": [ctypes.c_void_p, ctypes.c_void_p],
            "graph_launch": [ctypes.c_void_p, ctypes.c_void_p],
            "graph_destroy": [ctypes.c_void_p],
            "graph_exec_destroy": [ctypes.c_void_p],
            "event_create": [ctypes.c_void_p],
            "event_destroy": [ctypes.c_void_p],
            "event_record": [ctypes.c_void_p, ctypes.c_void_p],
            "event_sync": [ctypes.c_void_p],
            "event_elapsed": [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p],
        }
        self.library.hip_stub_set.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        # the C half's copy of each stream's capture state (hipStreamIsCapturing answers from it)
        self.library.hip_stub_stream_state.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self._stream_state = self.library.hip_stub_stream_state
        self._stream_state(None, -1)
        for slot, argtypes in types.items():
            handler = getattr(self, "_" + slot.rstrip("_"))
            callback = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(self._guarded(slot, handler))
            self._callbacks.append(callback)
            if self.library.hip_stub_set(slot.encode(), ctypes.cast(callback, ctypes.c_void_p)):
                raise RuntimeError(f"hip_stub.c has no callback slot {slot!r}")

    def _guarded(self, slot, handler):
        def call(*args):
            self.calls[slot] = self.calls.get(slot, 0) + 1
            if slot in self.fail:
                return self.fail.pop(slot)
            try:
                return handler(*args)
            except Exception as e:    # never let an exception cross into C as "success"
                self.errors.append(f"{slot}: {type(e).__name__}: {e}")
                return LAUNCH_FAILURE if slot in ("launch", "graph_launch") else UNKNOWN
        return call

    def _handle(self) -> int:
        return next(self._handles)

    def _fail(self, code: int, why: str) -> int:
        self.errors.append(why)
        return code

    @staticmethod
    def _out(address, value, ctype=ctypes.c_void_p):
        ctypes.cast(address, ctypes.POINTER(ctype))[0] = value

    # ---- device ----
    def _device_count(self, out):
        self._out(out, 1 if self.active else 0, ctypes.c_int)
        return SUCCESS if self.active else NO_DEVICE

    def _device_props(self, device, arch_out, name_out, cus_out, mem_out):
        if not self.active or device != 0:
            return INVALID_DEVICE
        ctypes.memmove(arch_out, self.arch.encode() + b"\0", len(self.arch) + 1)
        name = b"rocke stand-in (emulator)\0"
        ctypes.memmove(name_out, name, len(name))
        processor = self.arch.split(":", 1)[0]
        self._out(cus_out, TARGETS[processor].cu_count if processor in TARGETS else 304,
                  ctypes.c_int)
        self._out(mem_out, 192 << 30, ctypes.c_size_t)
        return SUCCESS

    # ---- memory ----
    def _malloc(self, out, size):
        if size == 0:
            self._out(out, None)
            return SUCCESS
        backing = np.full(size + 256, 0xA5, np.uint8)      # not zeroed, like device memory
        skip = -backing.ctypes.data % 256
        array = backing[skip:skip + size]
        self.allocations[array.ctypes.data] = (array, size)
        self._out(out, array.ctypes.data)
        return SUCCESS

    def _free(self, pointer):
        if pointer is None:
            return SUCCESS
        if self.allocations.pop(pointer, None) is None:
            return self._fail(INVALID_VALUE, f"hipFree of {pointer:#x}, not a hipMalloc pointer")
        return SUCCESS

    def _allocation_of(self, address, size=1):
        for start, (array, length) in self.allocations.items():
            if start <= address and address + size <= start + length:
                return start, array
        return None

    def _memcpy(self, dst, src, size, kind):
        if kind in (HOST_TO_DEVICE, DEVICE_TO_DEVICE) and self._allocation_of(dst, size) is None:
            return self._fail(INVALID_VALUE, f"hipMemcpy: destination {dst:#x}+{size} is not "
                                             "inside one hipMalloc range")
        if kind in (DEVICE_TO_HOST, DEVICE_TO_DEVICE) and self._allocation_of(src, size) is None:
            return self._fail(INVALID_VALUE, f"hipMemcpy: source {src:#x}+{size} is not inside "
                                             "one hipMalloc range")
        ctypes.memmove(dst, src, size)
        return SUCCESS

    # ---- modules ----
    def _module_load(self, out, image):
        if image is None:
            return INVALID_VALUE
        header = ctypes.string_at(image, 64)
        if header[:4] != ELF_MAGIC or header[4] != 2 or struct.unpack_from("<H", header, 18)[0] \
                != EM_AMDGPU:
            return self._fail(INVALID_IMAGE, "hipModuleLoadData: not an AMDGPU ELF64 image")
        data = ctypes.string_at(image, _elf_size(image, header))
        built_for = code_object_target(data).split(":", 1)[0]
        if built_for != self.arch.split(":", 1)[0]:
            return self._fail(NO_BINARY_FOR_GPU, f"hipModuleLoadData: a {built_for} code object "
                                                 f"on a {self.arch} device")
        if hashlib.sha256(data).hexdigest() not in self.code_objects:
            return self._fail(INVALID_IMAGE, "hipModuleLoadData: the stand-in was not told to "
                                             "accept this code object (register(compiled))")
        handle = self._handle()
        self.modules[handle] = data
        self._out(out, handle)
        return SUCCESS

    def _module_unload(self, module):
        return SUCCESS if self.modules.pop(module, None) is not None else INVALID_HANDLE

    def _get_function(self, out, module, name):
        image = self.modules.get(module)
        if image is None:
            return INVALID_HANDLE
        kernels = {k[".name"]: k for k in
                   code_object_metadata(image).get("amdhsa.kernels", [])}
        entry = kernels.get(name.decode())
        if entry is None:
            return NOT_FOUND
        handle = self._handle()
        runnable = self.listings.get(hashlib.sha256(image).hexdigest(), image)
        self.functions[handle] = _Function(image, name.decode(), abi.parse_kernel_args(entry),
                                           int(entry.get(".kernarg_segment_size", 0)), runnable)
        self._out(out, handle)
        return SUCCESS

    def _launch(self, function, gx, gy, gz, bx, by, bz, shared_mem, stream, buffer, size):
        if function not in self.functions:
            return INVALID_HANDLE
        if stream is not None and stream not in self.streams:
            return INVALID_HANDLE
        record = _Launch(function, (gx, gy, gz), (bx, by, bz), shared_mem,
                         ctypes.string_at(buffer, size), stream)
        capture = self.streams[stream].capture if stream is not None else None
        if capture is not None:
            capture.append(record)          # captured launches do not run now
            return SUCCESS
        return self._run(record)

    def _run(self, record: _Launch) -> int:
        fn = self.functions[record.function]
        if len(record.kernarg) < fn.kernarg_size:
            return self._fail(INVALID_VALUE, f"{fn.name}: kernarg buffer of {len(record.kernarg)} "
                                             f"bytes, the kernel needs {fn.kernarg_size}")
        values = []
        for arg in abi.explicit_args(fn.args):
            raw = record.kernarg[arg.offset:arg.offset + arg.size]
            if arg.value_kind == "global_buffer":
                address = int.from_bytes(raw, "little")
                if address == 0:
                    values.append(None)
                    continue
                found = self._allocation_of(address)
                if found is None:
                    return self._fail(LAUNCH_FAILURE, f"{fn.name}: {arg.label} points at "
                                      f"{address:#x}, outside every hipMalloc range")
                start, array = found
                values.append(torch.from_numpy(array)[address - start:])
            else:
                dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(arg.size)
                values.append(np.frombuffer(raw, dtype)[0] if dtype else np.void(raw))
        repacked = abi.pack_kernarg_segment(fn.args, values, record.grid, record.block,
                                            record.shared_mem, lambda t: t.data_ptr(),
                                            fn.kernarg_size)
        if repacked != record.kernarg[:len(repacked)]:
            return self._fail(INVALID_VALUE, f"{fn.name}: the kernarg buffer differs from what "
                                             "rocke.arch.abi packs for its own values")
        try:
            # views reach to the end of their hipMalloc range (extents are unknown here), and
            # HIP itself never refuses aliasing arguments: the stand-in does not either. One
            # launch at a time, like work on one device queue.
            with self._serial:
                report = emu.launch(fn.runnable, fn.name, record.grid, record.block, values,
                                    shared_mem=record.shared_mem, check=True, allow_alias=True,
                                    kernarg=record.kernarg, target=self.arch.split(":", 1)[0])
        except Exception as e:
            return self._fail(LAUNCH_FAILURE, f"{fn.name}: the emulator stopped: {e}")
        self.executed.append(dataclasses.replace(record, ran=report.kernarg))
        return SUCCESS

    # ---- streams, capture, graphs ----
    def _stream_create(self, out):
        handle = self._handle()
        self.streams[handle] = _Stream()
        self._stream_state(handle, 0)
        self._out(out, handle)
        return SUCCESS

    def _stream_destroy(self, stream):
        if self.streams.pop(stream, None) is None:
            return INVALID_HANDLE
        self._stream_state(stream, -1)
        return SUCCESS

    def _stream_sync(self, stream):
        if stream is not None and stream not in self.streams:
            return INVALID_HANDLE
        if stream is not None and self.streams[stream].capture is not None:
            return CAPTURE_UNSUPPORTED
        return SUCCESS

    def _begin_capture(self, stream, mode):
        if stream is None:
            return CAPTURE_UNSUPPORTED      # the null stream cannot be captured
        if stream not in self.streams:
            return INVALID_HANDLE
        if self.streams[stream].capture is not None:
            return ILLEGAL_STATE
        self.streams[stream].capture = []
        self._stream_state(stream, CAPTURE_ACTIVE)
        return SUCCESS

    def _end_capture(self, stream, out):
        s = self.streams.get(stream)
        if s is None:
            return INVALID_HANDLE
        if s.capture is None:
            return ILLEGAL_STATE
        handle = self._handle()
        self.graphs[handle], s.capture = s.capture, None
        self._stream_state(stream, CAPTURE_NONE)
        self._out(out, handle)
        return SUCCESS

    def _is_capturing(self, stream, out):     # what hip_stub.c's state table does not answer
        s = self.streams.get(stream) if stream is not None else _Stream()
        if s is None:
            return INVALID_HANDLE
        self._out(out, CAPTURE_ACTIVE if s.capture is not None else CAPTURE_NONE, ctypes.c_int)
        return SUCCESS

    def _graph_instantiate(self, graph, out):
        if graph not in self.graphs:
            return INVALID_HANDLE
        handle = self._handle()
        self.execs[handle] = list(self.graphs[graph])
        self._out(out, handle)
        return SUCCESS

    def _graph_launch(self, exec_, stream):
        if exec_ not in self.execs:
            return INVALID_HANDLE
        return self._run_graph(self.execs[exec_], stream)

    def _run_graph(self, nodes: list, stream) -> int:
        with self._serial:
            for record in nodes:       # a graph's nodes run on the launch's stream
                code = self._run(_Launch(record.function, record.grid, record.block,
                                         record.shared_mem, record.kernarg, stream))
                if code != SUCCESS:
                    return code
        return SUCCESS

    def _graph_destroy(self, graph):
        return SUCCESS if self.graphs.pop(graph, None) is not None else INVALID_HANDLE

    def _graph_exec_destroy(self, exec_):
        return SUCCESS if self.execs.pop(exec_, None) is not None else INVALID_HANDLE

    # ---- events ----
    def _event_create(self, out):
        handle = self._handle()
        self.events[handle] = None
        self._out(out, handle)
        return SUCCESS

    def _event_destroy(self, event):
        return SUCCESS if self.events.pop(event, 0) != 0 else INVALID_HANDLE

    def _event_record(self, event, stream):
        if event not in self.events:
            return INVALID_HANDLE
        self.events[event] = time.perf_counter()
        return SUCCESS

    def _event_sync(self, event):
        return SUCCESS if event in self.events else INVALID_HANDLE

    def _event_elapsed(self, out, start, stop):
        t0, t1 = self.events.get(start), self.events.get(stop)
        if t0 is None or t1 is None:
            return INVALID_HANDLE
        self._out(out, (t1 - t0) * 1e3, ctypes.c_float)
        return SUCCESS


def _elf_size(image: int, header: bytes) -> int:
    """Bytes of the ELF64 image at `image`: the furthest end of its headers and sections."""
    phoff, shoff = struct.unpack_from("<QQ", header, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, 54)
    end = max(64, phoff + phentsize * phnum, shoff + shentsize * shnum)
    sections = ctypes.string_at(image + shoff, shentsize * shnum) if shnum else b""
    for i in range(shnum):
        sh_type, = struct.unpack_from("<I", sections, i * shentsize + 4)
        offset, size = struct.unpack_from("<QQ", sections, i * shentsize + 24)
        if sh_type != 8:      # SHT_NOBITS occupies no file bytes
            end = max(end, offset + size)
    return end


def load(directory: Path) -> StandIn:
    """Build the stand-in into `directory`, load it so hip-python finds it, and wire it up.

    hip-python 7.x dlopens the bare name "libamdhip64.so", which the dynamic loader resolves to an
    already loaded library with that soname; hip-python >= 10 looks in $ROCM_PATH/lib. Loading it
    here first (RTLD_GLOBAL) and pointing ROCM_PATH at `directory` covers both.
    """
    lib = build(directory)
    os.environ["ROCM_PATH"] = str(directory)
    return StandIn(ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL))
