"""Running a planned unified-attention call: eager launches or the replay of a captured graph,
the metadata guard on a GPU, and the call cache (each call's problem, plan and packed launches by
its metadata, so a repeated call is looked up before any other work)."""
from __future__ import annotations

import itertools
import operator
import threading
from collections import OrderedDict
from dataclasses import dataclass

from rocke import env
from rocke.kernels.common import knobs as knobs_mod
from rocke.kernels.common import attention_kernels
from rocke.kernels.common.attention_validation import (ARG_INDEX, byte_range, check_contents,
                                                      lengths_plainly_valid, table_plainly_valid)
from rocke.runtime import device_generation
from rocke.runtime.kernel_cache import GraphCache


@dataclass
class RunRecord:
    plan: object              # the target dispatcher's Plan
    reports: list               # one launch report per kernel launched
    replayed: bool = False      # the launches ran as a replay of a cached graph
    kernels: tuple = ()         # compile_only: the names of the kernels built for the call


# Graphs the entry point captured, by the identity of everything their launches read (see
# _graph_key); each holds its own 3D workspace. Bounded: the oldest is released first.
GRAPH_CACHE_SIZE = 8
GRAPHS = GraphCache(GRAPH_CACHE_SIZE)


def _graph_key(device_kind, plan, launches, workspace) -> tuple:
    """What a captured graph's launches depend on: the device, the plan, and per launch its grid
    and every argument -- a tensor by its address, shape, strides, dtype and device (its
    contents may change: a replay reads them anew), a number by its value. A 3D workspace the
    entry point allocated is the graph's own, so only its shape counts; the caller's workspaces
    are caller tensors like any other."""
    def identity(a):
        if any(a is w for w in workspace):
            return ("workspace", tuple(a.shape))
        if hasattr(a, "data_ptr") and not hasattr(a, "shape"):   # the guard's error record
            return ("buffer", a.data_ptr())
        if hasattr(a, "data_ptr"):
            return ("tensor", a.data_ptr(), tuple(a.shape), tuple(a.stride()), str(a.dtype),
                    str(a.device))
        return (type(a).__name__, a)
    return (device_kind, plan.specs, plan.geometry) + tuple(
        (compiled.name, grid, block, tuple(identity(a) for a in args))
        for compiled, grid, block, args in launches)


def guard_launches(device_kind, problem, args) -> list:
    """On a GPU, the metadata guard first: the content checks the host does on the emulator,
    done on the device (``metadata_guard.py``; ``ROCKE_CHECK_METADATA=off`` leaves it out)."""
    if args[0].device.type == "cpu" or device_kind == "emu" or env.check_metadata() == "off":
        return []
    from rocke.kernels.common import metadata_guard as guard
    from rocke.runtime import get_device
    cu, used, table, max_q, max_k = (args[ARG_INDEX[n]] for n in (
        "cu_seqlens_q", "seqused_k", "block_table", "max_seqlen_q", "max_seqlen_k"))
    device = get_device(device_kind)
    record = device.error_record()
    spec = guard.spec_for(device.arch)      # the GPU's processor: gfx942 or gfx950
    grid, block = guard.launch_geometry(spec, problem.num_seqs)
    return [(attention_kernels.compiled(spec), grid, block, guard.kernel_args(
        cu, used, table, record, total_q=problem.total_q, num_blocks=problem.num_blocks,
        block_size=problem.block_size, causal=problem.causal, max_seqlen_q=max_q,
        max_seqlen_k=max_k))]


def check_after(q) -> bool:
    return q.device.type != "cpu" and env.check_metadata() == "sync"


def check_device_now(device) -> None:
    """ROCKE_CHECK_METADATA=sync: report the guard's finding right after the call (a
    synchronisation), except inside a capture, where nothing has run yet."""
    if not device.is_capturing():
        device.check_errors()


def run_launches(device_kind, plan, launches, workspace) -> RunRecord:
    """Launch eagerly on ``device_kind``, or -- where the dispatcher recommends graph replay --
    replay a graph of the same launches, capturing it on first use."""
    from rocke.runtime import Graph, launch
    if not plan.graph_replay:
        return RunRecord(plan, [launch(c, g, b, a, device=device_kind) for c, g, b, a in launches])
    key = _graph_key(device_kind, plan, launches, workspace)

    def capture():
        graph = Graph(device=device_kind)
        with graph.capture():
            for c, g, b, a in launches:
                launch(c, g, b, a, device=device_kind)
        return graph
    reports, _ = GRAPHS.replay(key, capture)
    return RunRecord(plan, reports, replayed=True)


def _meta(t):
    """A tensor's identity for the kernels: address, shape, strides, dtype, device."""
    return (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device)


# Per-call derived data (problem, plan, kernels, packed launches) by the call's metadata: a call
# whose tensors have the same addresses, shapes, strides, dtypes and devices and whose numbers
# and levers are the same launches the same bytes, so it is validated, planned and packed once.
CALL_CACHE_SIZE = 64
CALLS: "OrderedDict[tuple, CachedCall]" = OrderedDict()
# the same entries by their key's addresses: addresses -> ((rest of the key, entry), ...)
BY_ADDRESSES: dict = {}
CALLS_LOCK = threading.Lock()
CALL_SERIAL = itertools.count()


@dataclass
class CachedCall:
    plan: object
    device: object                  # the rocke.runtime Device the launches run on
    prepared: tuple                 # PreparedLaunch per kernel, in order
    workspace: tuple                # the 3D workspace the entry point allocated, if any
    would_replay: bool              # graph replay, unless the caller is capturing
    graph_key: tuple | None
    capture: object                 # () -> Graph of the launches
    check_contents: object          # (cu_seqlens_q, seqused_k, block_table) -> None: host
                                    # content checks (emulator, HostContents), or None
    check_after: bool = False       # ROCKE_CHECK_METADATA=sync: read the guard's record now

    def run(self) -> RunRecord:
        if self.would_replay and not self.device.is_capturing():
            return RunRecord(self.plan, GRAPHS.replay(self.graph_key, self.capture)[0], True)
        return RunRecord(self.plan, [self.device.execute(p) for p in self.prepared])


# the levers a call's plan depends on, read raw per call (one read each, plus the number of
# environment variables); a changed value misses the cache, and the miss parses them
_KEY_LEVERS = tuple(knobs_mod.PREFIX + lever for lever in knobs_mod.LEVERS) + (
    "ROCKE_DEVICE", "ROCKE_CHECK_METADATA", "ROCKE_BATCH_INVARIANT")
_levers_now = env.state_reader(_KEY_LEVERS)
# what a tensor's key reads, each in one C-level pass over the call's tensors: its class, shape,
# dtype and device, then its address and strides by torch's own methods (a class that overrides
# either is never cached: cacheable)
_LAYOUT = operator.attrgetter("__class__", "shape", "dtype", "device")
# number types a key may hold: immutable, so equal keys mean equal values (a tensor or other
# mutable object as a number is validated on every call, never cached)
_KEYABLE_VALUES = frozenset((int, float, bool, type(None), tuple))


def _tensor_methods():
    import torch
    _TENSOR_METHODS[:] = torch.Tensor.data_ptr, torch.Tensor.stride
    return _TENSOR_METHODS


_TENSOR_METHODS: list = []      # torch.Tensor's data_ptr and stride, once torch is imported
NO_DESCALES = (None, None, None)


def call_key(tensors: tuple, values: tuple, descales: tuple, segm_workspaces, backend,
              num_segments, batch_invariant) -> tuple | None:
    """The cache key of a call, as (addresses, the rest): each tensor's address, and its class,
    shape, dtype, device and strides; each number with its type (and a window's items' types:
    ``(-1.0, -1)`` is not ``(-1, -1)``; ``batch_invariant=0`` is not ``False``); the levers' raw
    values; the devices' generation. None
    when the call cannot be keyed (host descales: their contents are checked on every call; an
    argument not what it should be: the full validation names it)."""
    data_ptr, stride = _TENSOR_METHODS or _tensor_methods()
    try:
        window = values[-1]     # a window tuple's items' types follow the numbers' (one pass)
        rest = (tuple(map(_LAYOUT, tensors)), tuple(map(stride, tensors)), values,
                tuple(map(type, values if window is None else values + tuple(window))),
                _levers_now(), device_generation(), backend, num_segments,
                batch_invariant, num_segments.__class__, batch_invariant.__class__)
        if descales is not NO_DESCALES and descales != NO_DESCALES:
            if any(t is not None and t.device.type == "cpu" for t in descales):
                return None
            rest += (tuple(None if t is None else _meta(t) for t in descales),)
        if segm_workspaces is not None:     # what _meta reads, and the class, per C-level pass
            rest += (tuple(map(_LAYOUT, segm_workspaces)), tuple(map(stride, segm_workspaces)),
                     tuple(map(data_ptr, segm_workspaces)))
        return tuple(map(data_ptr, tensors)), rest
    except (AttributeError, TypeError, RuntimeError):     # not a plain tensor
        return None


def cacheable(tensors: tuple, values: tuple) -> bool:
    """Whether a call may be cached (checked once, when it is recorded): its numbers immutable,
    and its tensors' address and strides what torch's own methods (the key's) say."""
    data_ptr, stride = _TENSOR_METHODS or _tensor_methods()
    window = values[-1]
    return all(type(v) in _KEYABLE_VALUES for v in values) and (
        window is None or all(type(x) is int for x in window)) and all(
        type(t).data_ptr is data_ptr and type(t).stride is stride for t in tensors)


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


def remember(key, device_kind, the_plan, launches, workspace, problem, target, knobs,
              args) -> CachedCall:
    import dataclasses
    from rocke.runtime import Graph, get_device, prepare_launch
    device = get_device(device_kind)
    prepared = tuple(prepare_launch(c, g, b, a, device_kind=device.kind)
                     for c, g, b, a in launches)
    if device.kind != "emu":
        # a GPU launch is its kernarg bytes: holding the caller's tensors would keep torch's
        # allocator from handing the next step the same addresses (the key's hit)
        prepared = tuple(dataclasses.replace(p, args=tuple(None if hasattr(a, "data_ptr") else a
                                                           for a in p.args)) for p in prepared)
    check = None
    if args[0].device.type == "cpu":
        check = HostContents([args[ARG_INDEX[n]] for n in ("cu_seqlens_q", "seqused_k",
                                                            "block_table")], problem,
                              args[ARG_INDEX["max_seqlen_q"]], args[ARG_INDEX["max_seqlen_k"]])
    elif device.kind == "emu":      # GPU tensors emulated: checked on the host from a copy

        def check(cu_seqlens_q, seqused_k, block_table):
            check_contents(cu_seqlens_q.cpu(), seqused_k.cpu(), block_table.cpu(),
                            problem.total_q, problem.num_blocks, problem.block_size,
                            problem.causal, args[ARG_INDEX["max_seqlen_q"]],
                            args[ARG_INDEX["max_seqlen_k"]])

    def capture():
        graph = Graph(device=device)
        with graph.capture():
            for p in prepared:
                device.execute(p)
        graph.keep_alive = (prepared, workspace)     # an own workspace outlives the graph
        return graph
    would_replay = target.recommend_graph_replay(problem, knobs, path=the_plan.path,
                                                 capturing=False)
    # the cached call's graph by a serial number: hashing the launches' identity per call
    # would cost more than the replay (the call key already names everything they read)
    entry = CachedCall(the_plan, device, prepared, workspace, would_replay,
                      ("call", next(CALL_SERIAL)), capture, check, check_after(args[0]))
    with CALLS_LOCK:
        try:
            CALLS[key] = entry
        except TypeError:           # an unhashable argument (a list): validated on every call
            return entry
        BY_ADDRESSES[key[0]] = tuple(item for item in BY_ADDRESSES.get(key[0], ())
                                      if item[0] != key[1]) + ((key[1], entry),)
        while len(CALLS) > CALL_CACHE_SIZE:
            (addresses, rest), _ = CALLS.popitem(last=False)
            kept = tuple(item for item in BY_ADDRESSES[addresses] if item[0] != rest)
            if kept:
                BY_ADDRESSES[addresses] = kept
            else:
                del BY_ADDRESSES[addresses]
    return entry
