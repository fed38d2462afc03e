"""Running a planned unified-attention call: the call cache (each call's problem, plan and packed
launches by its metadata, so a repeated call is looked up before any other work), the capture
policy for graph replay on a GPU, the 3D workspace pool and the opt-in metadata guard.

The rules (docs/architecture.md, "GPU calls"):
- a GPU call captures a graph only once it has repeated (``CAPTURE_AFTER`` identical calls), never
  while the caller is capturing, and on rocke's own capture stream (no synchronisation, no
  allocation, every module loaded by the eager calls before); fresh-tensor calls stay eager;
- a cache entry holds no caller tensor: a GPU entry keeps kernarg bytes, an emulator entry
  re-packs its launches from each call's own tensors; entries are evicted least recently used;
- the entry point's own 3D workspaces come from one pool per device and size class, allocated
  outside any capture, never per call."""
from __future__ import annotations

import itertools
import operator
import threading
from dataclasses import dataclass

from rocke import env
from rocke.kernels.common import knobs as knobs_mod
from rocke.kernels.common import attention_kernels
from rocke.kernels.common.attention_validation import (byte_range, check_contents,
                                                      lengths_plainly_valid, table_plainly_valid)
from rocke.runtime import device_generation
from rocke.runtime.kernel_cache import GraphCache


@dataclass
class RunRecord:
    plan: object              # the target dispatcher's Plan
    reports: list               # one launch report per kernel launched
    replayed: bool = False      # the launches ran as a replay of a cached graph
    kernels: tuple = ()         # compile_only: the names of the kernels built for the call


# Graphs the entry point captured, one per cached GPU call (by the call's serial number).
# Bounded: the least recently replayed is released first. A model's decode step is one call
# per layer (80 for a 70B model, 126 for 405B) times the batch shapes in rotation: fewer graphs
# than that capture and release one per call, which costs more than eager launches.
GRAPH_CACHE_SIZE = 256
GRAPHS = GraphCache(GRAPH_CACHE_SIZE)
# identical calls (cache hits included) before a GPU call's launches are captured and replayed:
# a call that does not repeat (fresh tensors each step) never pays for a capture
CAPTURE_AFTER = 3


def guard_launches(device, problem, cu_seqlens_q, seqused_k, block_table, max_seqlen_q: int,
                   max_seqlen_k: int) -> list:
    """``ROCKE_CHECK_METADATA=device`` or ``sync`` on a GPU: the metadata guard, launched before
    the call's kernels (the content checks the host does on the emulator, done on the device;
    ``metadata_guard.py``). Off by default: one more launch per call than vLLM's kernel costs,
    and the kernels read a lying page id as an empty page anyway (ALGORITHM.md §6)."""
    if device.kind == "emu" or env.check_metadata() == "off":
        return []
    from rocke.kernels.common import metadata_guard as guard
    record = device.error_record()
    spec = guard.spec_for(device.arch)      # the GPU's processor: gfx942 or gfx950
    grid, block = guard.launch_geometry(spec, problem.num_seqs)
    return [(attention_kernels.compiled(spec), grid, block, guard.kernel_args(
        cu_seqlens_q, seqused_k, block_table, record, total_q=problem.total_q,
        num_blocks=problem.num_blocks, block_size=problem.block_size, causal=problem.causal,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k))]


def check_after(device) -> bool:
    return device.kind != "emu" and env.check_metadata() == "sync"


def check_device_now(device) -> None:
    """ROCKE_CHECK_METADATA=sync: report the guard's finding right after the call (a
    synchronisation), except inside a capture, where nothing has run yet."""
    if not device.is_capturing():
        device.check_errors()


def prepare_all(launches, device_kind: str) -> list:
    """``prepare_launch`` of each (compiled, grid, block, args) launch."""
    from rocke.runtime import prepare_launch
    return [prepare_launch(c, g, b, a, device_kind=device_kind) for c, g, b, a in launches]


def run_eagerly(device, plan, launches) -> RunRecord:
    """Launch a call that is not cached (features, host descales, an unusual tensor class):
    eagerly, never captured."""
    return RunRecord(plan, [device.execute(p) for p in prepare_all(launches, device.kind)])


class WorkspacePool:
    """The entry point's own 3D workspaces (partial outputs, maxima, sums), one set per device and
    size class (a power of two of ``total_q * num_q_heads * num_segments`` rows), allocated on
    the first call that needs it -- outside any capture -- and reused by every later call and
    graph of that class: calls on one device run in stream order, so one set serves them all.
    Calls on several streams of one device at once pass their own ``segm_workspaces``."""

    def __init__(self):
        self._sets: dict = {}
        self._lock = threading.Lock()
        self.allocations = 0

    def views(self, device, capturing: bool, total_q: int, num_q_heads: int,
              num_segments: int, head_size: int) -> tuple:
        """(output [total_q, Hq, S, D], max [total_q, Hq, S], expsum [total_q, Hq, S]) fp32."""
        import torch
        rows = max(1, total_q * num_q_heads * num_segments)
        size_class = 1 << (rows - 1).bit_length()
        key = (device.type, device.index, device_generation(), size_class, head_size)
        found = self._sets.get(key)
        if found is None:
            if capturing:
                raise ValueError(
                    f"segm_workspaces: this 3D call needs {rows} workspace rows, which no earlier "
                    f"call on {device} allocated, and allocating inside the caller's graph "
                    "capture is not capture-safe: pass segm_workspaces, or make one call of this "
                    "shape before capturing")
            with self._lock:
                found = self._sets.get(key)
                if found is None:
                    found = (torch.empty(size_class * head_size, dtype=torch.float32, device=device),
                             torch.empty(size_class, dtype=torch.float32, device=device),
                             torch.empty(size_class, dtype=torch.float32, device=device))
                    self._sets[key] = found
                    self.allocations += 1
        out, m, l = found
        shape = (total_q, num_q_heads, num_segments)
        return (out[:rows * head_size].view(*shape, head_size), m[:rows].view(shape),
                l[:rows].view(shape))

    def clear(self) -> None:
        with self._lock:
            self._sets.clear()


WORKSPACES = WorkspacePool()


# the levers a call's plan depends on, read raw per call (one read each, plus the number of
# environment variables); a changed value misses the cache, and the miss parses them.
# VLLM_BATCH_INVARIANT: rocke.vllm's adapter decides its path by it (its calls key by this too)
_KEY_LEVERS = tuple(knobs_mod.PREFIX + lever for lever in knobs_mod.LEVERS) + (
    "ROCKE_DEVICE", "ROCKE_CHECK_METADATA", "ROCKE_BATCH_INVARIANT", env.VLLM_BATCH_INVARIANT)
_levers_now = env.state_reader(_KEY_LEVERS)
# what a tensor's key reads, each in one C-level pass over the call's tensors: its class, shape
# and dtype, then its address, device index (-1 on the host) and strides by torch's own methods
# (a class that overrides one of those is never cached: cacheable)
_LAYOUT = operator.attrgetter("__class__", "shape", "dtype")
# number types a key may hold: immutable, so equal keys mean equal values (a tensor or other
# mutable object as a number is validated on every call, never cached)
_KEYABLE_VALUES = frozenset((int, float, bool, str, type(None), tuple))


def _tensor_methods():
    import torch
    from rocke.runtime import tensor_key
    _TENSOR_METHODS[:] = (torch.Tensor.data_ptr, torch.Tensor.stride, torch.Tensor.get_device,
                          tensor_key.native())
    return _TENSOR_METHODS


# torch.Tensor's data_ptr, stride and get_device, and the native tensor key (None where it is
# not built: rocke/runtime/tensor_key.py), once torch is imported
_TENSOR_METHODS: list = []


def call_key(tensors: tuple, numbers: tuple, window, more_tensors=None) -> tuple | None:
    """(the cache key of a call, the tensors it holds: ``tensors`` then ``more_tensors``). The
    key is (a first look-up, the rest): its tensors' layouts -- each
    tensor's class, address, shape, dtype, device and strides --, each number with its type,
    and the window's items with theirs (``(-1.0, -1)`` is not ``(-1, -1)``;
    ``batch_invariant=0`` is not ``False``); the levers' raw values; the devices' generation. A
    caller's numbers say what it is (the entry point's and rocke.vllm's keys never meet). None
    when an argument is not what it should be (not a tensor, a window that is not a sequence):
    the full validation names it. ``more_tensors``: the caller's workspaces, keyed as tensors.

    The layouts come from rocke's native helper in one C++ pass where it is built (the first
    look-up is then its hash of them), else from torch's getters (the first look-up is the
    addresses; each tensor's six reads, about 0.4 us a tensor on a 2-core EPYC, are then most
    of a hit's cost): rocke/runtime/tensor_key.py. The look-up hashes the first part only and
    compares the rest (``lookup``)."""
    data_ptr, stride, device_index, native = _TENSOR_METHODS or _tensor_methods()
    try:
        if more_tensors is not None:        # the caller's workspaces
            tensors += tuple(more_tensors)
        if native is not None:              # one C++ pass: (hash, bytes) or None
            found = native(tensors)
            if found is None:
                return None
            head, layout = found
        else:
            head = tuple(map(data_ptr, tensors))
            layout = (tensors[0].device, *map(_LAYOUT, tensors), *map(device_index, tensors),
                      *map(stride, tensors))
        return (head, (layout, *numbers, *map(type, numbers), window,
                       *(() if window is None else map(type, window)), _levers_now(),
                       device_generation())), tensors
    except (AttributeError, TypeError, RuntimeError):     # not a plain tensor
        return None


def keyed_descales(q_descale, k_descale, v_descale) -> tuple | None:
    """The descale tensors a call's key holds: those given (the key's numbers say which), or
    None when one cannot be keyed -- on the host, its contents are checked on every call; not
    a tensor, the validation names it. vLLM passes k and v descales (expanded views of a layer's
    scale) on every call, fp8 cache or not."""
    given = ()
    for descale in (q_descale, k_descale, v_descale):
        if descale is not None:
            if getattr(descale, "is_cpu", True) is not False:
                return None
            given += (descale,)
    return given


def cacheable(tensors: tuple, numbers: tuple, window) -> bool:
    """Whether a call may be cached (checked once, when it is recorded): its numbers immutable,
    and its tensors' address and strides what torch's own methods (the key's) say."""
    data_ptr, stride, device_index, _ = _TENSOR_METHODS or _tensor_methods()
    return all(type(v) in _KEYABLE_VALUES for v in numbers) and (
        window is None or type(window) is tuple and all(type(x) is int for x in window)) and all(
        type(t).data_ptr is data_ptr and type(t).stride is stride and
        type(t).get_device is device_index for t in tensors)


class HostContents:
    """The emulator's content checks of one cached call (``check_contents``), skipped while the
    bytes they read are, byte for byte, the bytes they last passed: the checks are a pure
    function of those bytes and of what the call key holds (shapes, lengths, causal). A decode
    step's new lengths over an unchanged block table take ``contents_plainly_valid`` without
    its table scan (the table's bytes are those it last found inside the cache).

    The bytes are read at the addresses the key holds: only on a key hit, when the call's own
    cu_seqlens_q, seqused_k and block_table have exactly those addresses, shapes and strides."""

    def __init__(self, tensors, problem, max_seqlen_q: int, max_seqlen_k: int):
        import ctypes
        self._views = tuple((ctypes.c_char * (hi - lo)).from_address(lo)
                            for lo, hi in map(byte_range, tensors))
        self._numbers = (problem.total_q, problem.num_blocks, problem.block_size, problem.causal,
                         max_seqlen_q, max_seqlen_k)
        self._passed = None             # the bytes of all three the checks last passed
        self._table_inside = None       # the table's bytes last found wholly inside the cache

    def _bytes(self) -> tuple:
        return tuple(map(_RAW, self._views))

    def __call__(self, cu_seqlens_q, seqused_k, block_table) -> None:
        now = self._bytes()
        if now == self._passed:
            return
        self._passed = None
        total_q, num_blocks, block_size, causal, max_q, max_k = self._numbers
        if now[2] != self._table_inside:
            self._table_inside = now[2] if block_table.numel() and table_plainly_valid(
                block_table, num_blocks) else None
        if self._table_inside is None or lengths_plainly_valid(
                cu_seqlens_q, seqused_k, block_table, total_q, block_size, causal, max_q,
                max_k) is None:
            check_contents(cu_seqlens_q, seqused_k, block_table, total_q, num_blocks,
                            block_size, causal, max_q, max_k)   # decides, names what is wrong
        if self._bytes() == now:        # what was checked is what was read
            self._passed = now
        else:
            self._table_inside = None


_RAW = operator.attrgetter("raw")

# Per-call derived data (problem, plan, kernels, packed launches) by the call's metadata: a call
# whose tensors have the same addresses, shapes, strides, dtypes and devices and whose numbers
# and levers are the same launches the same bytes, so it is validated, planned and packed once.
# A tensor's death needs no eviction: no entry holds one, and a new tensor at the same address
# with the same layout launches the same bytes (the key's hit is right for it).
CALL_CACHE_SIZE = 512      # every layer's decode and prefill calls of a large model, twice over
CALLS: dict = {}
# the same entries by their key's first look-up (the tensors' addresses, or the native key's
# hash of their layouts): first look-up -> ((rest of the key, entry), ...)
BY_ADDRESSES: dict = {}
CALLS_LOCK = threading.Lock()
CALL_SERIAL = itertools.count()
KEYED_CLASSES: set = set()        # every tensor class a cached call was keyed with
_USE = itertools.count()          # the least recently used entry goes first


@dataclass(eq=False)
class CachedCall:
    plan: object
    device: object                  # the rocke.runtime Device the launches run on
    prepared: tuple                 # GPU: PreparedLaunch per kernel (kernarg bytes, no tensor)
    repack: object                  # emulator: (call's arguments) -> PreparedLaunch per kernel
    would_replay: bool              # GPU graph replay, unless the caller is capturing
    graph_key: tuple
    check_contents: object          # (cu_seqlens_q, seqused_k, block_table) -> None: host
                                    # content checks (emulator, HostContents), or None
    check_after: bool = False       # ROCKE_CHECK_METADATA=sync: read the guard's record now
    calls: int = 0                  # identical calls so far
    last_use: int = 0

    def __post_init__(self):
        # what a replay hit returns (nothing to report: the launches are asynchronous), and the
        # device's stream reads, bound once (Device.stream_functions)
        self.replayed = RunRecord(self.plan, [], True)
        self.current_stream, self.capturing = self.device.stream_functions()

    def hit(self, cu_seqlens_q, seqused_k, block_table, args: tuple) -> RunRecord:
        """A call of this entry's key: its content checks (emulator), its launches, the guard's
        read-back where ``ROCKE_CHECK_METADATA=sync``."""
        if self.check_contents is not None:
            self.check_contents(cu_seqlens_q, seqused_k, block_table)
        record = self.run(args)
        if self.check_after:
            check_device_now(self.device)
        return record

    def run(self, args: tuple) -> RunRecord:
        self.last_use = next(_USE)
        self.calls += 1
        if self.repack is not None:                     # the emulator: nothing held
            return RunRecord(self.plan, [self.device.execute(p) for p in self.repack(args)])
        if self.would_replay and self.calls >= CAPTURE_AFTER and not self.capturing():
            GRAPHS.replay(self.graph_key, self.capture, self.current_stream())
            return self.replayed
        return RunRecord(self.plan, [self.device.execute(p) for p in self.prepared])

    def capture(self):
        """A graph of the call's launches, recorded on the device's own capture stream; the
        modules were loaded by the eager calls before (and are again here, before recording)."""
        from rocke.runtime import Graph
        for p in self.prepared:
            self.device.ready(p)                    # module loaded, function resolved
        graph = Graph(device=self.device)
        with graph.capture():
            for p in self.prepared:
                self.device.execute(p)
        return graph


def lookup(key) -> CachedCall | None:
    """The cached call of ``key`` (from ``call_key``), or None."""
    for rest, cached in BY_ADDRESSES.get(key[0], ()):
        if rest == key[1]:
            return cached
    return None


def remember(key, keyed: tuple, device, the_plan, call, pack, problem, target, knobs,
             max_seqlen_q: int, max_seqlen_k: int, host_metadata: tuple | None) -> CachedCall:
    """Cache a call that just missed under ``key``, which holds the tensors ``keyed``.
    ``pack``: (call's arguments) -> its (compiled, grid, block, args) launches; a GPU entry
    packs ``call`` once and keeps the kernarg bytes, an emulator entry packs each call it runs
    (``call`` too, when it runs it), holding no tensor.
    ``host_metadata``: the call's cu_seqlens_q, seqused_k and block_table when they live on the
    host (their bytes are re-checked on a hit only when they changed)."""
    import dataclasses
    launches = check = None
    if device.kind == "emu":
        def repack(args):
            return prepare_all(pack(args), device.kind)
        if host_metadata is not None:
            check = HostContents(host_metadata, problem, max_seqlen_q, max_seqlen_k)
        else:       # GPU tensors emulated: checked on the host from a copy
            numbers = (problem.total_q, problem.num_blocks, problem.block_size, problem.causal,
                       max_seqlen_q, max_seqlen_k)

            def check(cu_seqlens_q, seqused_k, block_table):
                check_contents(cu_seqlens_q.cpu(), seqused_k.cpu(), block_table.cpu(), *numbers)
    else:
        repack = None
        # a GPU launch is its kernarg bytes: holding the caller's tensors would keep them alive
        # and keep torch's allocator from handing the next step the same addresses
        launches = tuple(dataclasses.replace(
            p, args=tuple(None if hasattr(x, "data_ptr") else x for x in p.args))
            for p in prepare_all(pack(call), device.kind))
    would_replay = device.kind != "emu" and target.recommend_graph_replay(
        problem, knobs, path=the_plan.path, capturing=False)
    entry = CachedCall(the_plan, device, launches, repack, would_replay,
                       ("call", next(CALL_SERIAL)), check, check_after(device),
                       last_use=next(_USE))
    with CALLS_LOCK:
        try:
            CALLS[key] = entry
        except TypeError:           # an unhashable argument (a list): validated on every call
            return entry
        BY_ADDRESSES[key[0]] = tuple(item for item in BY_ADDRESSES.get(key[0], ())
                                     if item[0] != key[1]) + ((key[1], entry),)
        # the native key holds a class by its address: a keyed class is never freed (so its
        # address never names another class)
        KEYED_CLASSES.update(map(type, keyed))
        while len(CALLS) > CALL_CACHE_SIZE:      # the new entry is the most recent: kept
            _evict_least_recent()
    return entry


def _evict_least_recent() -> None:
    (addresses, rest), entry = min(CALLS.items(), key=lambda item: item[1].last_use)
    del CALLS[(addresses, rest)]
    GRAPHS.discard(entry.graph_key)
    kept = tuple(item for item in BY_ADDRESSES[addresses] if item[0] != rest)
    if kept:
        BY_ADDRESSES[addresses] = kept
    else:
        del BY_ADDRESSES[addresses]


def forget_calls() -> None:
    """Drop every cached call and graph (tests; a process that swaps its devices); the next
    key reads tensors with ``tensor_key.native()`` as it is then."""
    with CALLS_LOCK:
        CALLS.clear()
        BY_ADDRESSES.clear()
        _TENSOR_METHODS.clear()
    GRAPHS.clear()
