"""Global memory of one launch: the host ranges it was given, addressed by real host address."""
from __future__ import annotations

import bisect
import ctypes
import functools
from dataclasses import dataclass

import numpy as np


@dataclass
class Region:
    start: int
    size: int
    name: str
    writable: bool
    bytes: np.ndarray | None   # uint8 view of the range (None: it lives only on a GPU)
    tensor: object = None      # uint8 torch view of the range, for the torch backend

    @property
    def end(self) -> int:
        return self.start + self.size


def host_view(address: int, size: int) -> np.ndarray:
    pointer = ctypes.cast(ctypes.c_void_p(address), ctypes.POINTER(ctypes.c_uint8))
    return np.ctypeslib.as_array(pointer, shape=(size,))


@functools.lru_cache(maxsize=None)
def _opaque(nbytes: int) -> np.dtype:
    return np.dtype((np.void, nbytes))


def _as_rows(array: np.ndarray, granule: int) -> np.ndarray:
    """1-D view of contiguous `array` with one opaque item per `granule` elements."""
    return array.view(_opaque(granule * array.itemsize))


def take_rows(array: np.ndarray, granule: int, rows: np.ndarray) -> np.ndarray:
    """`array` (1-D, length a multiple of granule) as rows of `granule` elements, gathered at
    `rows`: (len(rows), granule). np.take of opaque items is far faster than 2-D fancy indexing."""
    return np.take(_as_rows(array, granule), rows).view(array.dtype).reshape(-1, granule)


def put_rows(array: np.ndarray, granule: int, rows: np.ndarray, values):
    """Scatter (len(rows), granule) or (1, granule) `values` into rows of `array`; like fancy
    assignment, the last of duplicate rows wins."""
    items = _as_rows(array, granule)
    values = np.ascontiguousarray(values, array.dtype).reshape(-1, granule)
    items[rows] = values.view(items.dtype).reshape(-1)


def access_rows(offsets: np.ndarray, nbytes: int, limit: int = 16) -> tuple[int, np.ndarray]:
    """(granule, rows): accesses of `nbytes` at byte `offsets` (m,) as m * nbytes / granule rows
    of `granule` bytes (access-major), granule the largest power of two <= limit dividing
    nbytes and every offset."""
    alignment = (int(np.bitwise_or.reduce(offsets)) if len(offsets) else 0) | nbytes | limit
    granule = alignment & -alignment
    rows = offsets >> (granule.bit_length() - 1)   # granule is a power of two: floor division
    if nbytes > granule:
        rows = (rows[:, None] + np.arange(nbytes // granule)).reshape(-1)
    return granule, rows


def region_rows(region: "Region", offsets: np.ndarray, nbytes: int, take=False, put=None):
    """Load (take) or store (put: uint8 (m, nbytes)) `nbytes` at each byte offset of a region."""
    if region.bytes is None:   # GPU-resident: a scalar load's few bytes read back
        return _tensor_rows(region, offsets, nbytes, take, put)
    granule, rows = access_rows(offsets, nbytes)
    body = region.bytes[: region.size - region.size % granule]
    if take:
        return take_rows(body, granule, rows).reshape(len(offsets), nbytes)
    put_rows(body, granule, rows, put)


def _tensor_rows(region: "Region", offsets: np.ndarray, nbytes: int, take, put):
    import torch
    index = torch.from_numpy(np.asarray(offsets, np.int64)).to(region.tensor.device)
    index = index[:, None] + torch.arange(nbytes, device=index.device)
    if take:
        return region.tensor[index].cpu().numpy()
    region.tensor[index] = torch.from_numpy(np.ascontiguousarray(put, np.uint8)
                                            .reshape(len(offsets), nbytes)).to(index.device)


class AccessFault(Exception):
    """Internal: `flat_index` of the first access that hit no (writable) region."""

    def __init__(self, flat_index: int, address: int, reason: str):
        super().__init__(reason)
        self.flat_index, self.address, self.reason = flat_index, address, reason


class GlobalMemory:
    def __init__(self, scope: str = "view", allocations=()):
        """`scope`: what the tensor regions cover ("view" or "allocation", see
        launch.MEMCHECK_SCOPES); `allocations`: (start, end, name) of each tensor argument's
        storage, to tell a fault outside a view but inside its allocation."""
        self.scope = scope
        self.allocations = list(allocations)
        self.regions: list[Region] = []
        self._starts = np.zeros(0, np.uint64)
        self._ends = np.zeros(0, np.uint64)
        self._start_list: list[int] = []
        self.written: dict[int, np.ndarray] | None = None   # see track_writes
        self.read: dict[int, np.ndarray] | None = None      # see track_reads

    def track_writes(self):
        """From now on mark every byte stored (or atomically updated) in a per-region mask, so
        a worker process can hand back exactly the bytes it wrote (see written_bytes)."""
        self.written = {}

    def track_reads(self):
        """From now on mark every byte loaded from a writable region (read-only ones cannot
        change), so a worker process can hand back which bytes it read (see read_bytes)."""
        self.read = {}

    def _mark(self, region: Region, table: dict | None = None) -> np.ndarray:
        table = self.written if table is None else table
        index = next(i for i, r in enumerate(self.regions) if r is region)
        mask = table.get(index)
        if mask is None:
            mask = table[index] = np.zeros(region.size, np.uint8)
        return mask

    def read_bytes(self) -> list[tuple[int, int, int, np.ndarray]]:
        """(region index, first and one past the last read byte offset, packed mask of the
        read bytes between them) per writable region read since track_reads."""
        out = []
        for index, mask in sorted((self.read or {}).items()):
            hit = mask.view(bool)
            if hit.any():
                low, high = int(hit.argmax()), len(hit) - int(hit[::-1].argmax())
                out.append((index, low, high, np.packbits(hit[low:high])))
        return out

    def read_any_written(self, read: list[tuple[int, int, int, np.ndarray]]) -> bool:
        """Whether bytes another process read (its read_bytes) include any byte stored here
        since track_writes (by this process or by apply_written)."""
        for index, low, high, packed in read:
            mask = (self.written or {}).get(index)
            if mask is not None and (mask[low:high].view(bool)
                                     & np.unpackbits(packed, count=high - low).view(bool)).any():
                return True
        return False

    def written_bytes(self) -> list[tuple[int, int, int, np.ndarray, np.ndarray]]:
        """(region index, first and one past the last written byte offset, packed mask of the
        written bytes between them, those bytes in order) per region written since
        track_writes."""
        out = []
        for index, mask in sorted(self.written.items()):
            hit = mask.view(bool)
            if not hit.any():
                continue
            low, high = int(hit.argmax()), len(hit) - int(hit[::-1].argmax())
            hit = hit[low:high]
            out.append((index, low, high, np.packbits(hit),
                        self.regions[index].bytes[low:high][hit]))
        return out

    def apply_written(self, written: list[tuple[int, int, int, np.ndarray, np.ndarray]]):
        """Store what another process's written_bytes returned (same regions, same order)."""
        for index, low, high, packed, values in written:
            hit = np.unpackbits(packed, count=high - low).view(bool)
            self.regions[index].bytes[low:high][hit] = values
            if self.written is not None:   # this process tracks what the launch stored so far
                self._mark(self.regions[index])[low:high][hit] = 1

    def add(self, start: int, size: int, name: str, writable: bool, array: np.ndarray | None = None,
            tensor=None, on_host=True):
        """Register [start, start+size). Ranges already covered only extend the name. `tensor`:
        a uint8 torch view of the range (the torch backend's); `on_host=False`: the range is
        reached only through it (GPU memory)."""
        if size <= 0:
            return
        for region in self.regions:
            if region.start <= start and start + size <= region.end:
                if name not in region.name.split(" / "):
                    region.name += " / " + name
                region.writable |= writable
                return
        view = array if array is not None or not on_host else host_view(start, size)
        self.regions.append(Region(start, size, name, writable, view, tensor))
        self.regions.sort(key=lambda r: r.start)
        self._starts = np.array([r.start for r in self.regions], np.uint64)
        self._ends = np.array([r.end for r in self.regions], np.uint64)
        self._start_list = [r.start for r in self.regions]

    def nearest(self, address: int) -> str:
        if not self.regions:
            return "no buffers were registered"
        best = min(self.regions, key=lambda r: 0 if r.start <= address < r.end else
                   min(abs(address - r.start), abs(address - (r.end - 1))))
        if address < best.start:
            where = f"{best.start - address} bytes before its start"
        elif address >= best.end:
            where = f"{address - best.end} bytes past its end"
        else:
            where = f"inside it at byte {address - best.start}"
        text = (f"nearest buffer: {best.name} [0x{best.start:x}, 0x{best.end:x}), "
                f"{best.size} bytes; the address is {where}")
        return text + "; " + self._scope_note(address)

    def _scope_note(self, address: int) -> str:
        if self.scope == "allocation":
            return ("memcheck scope: allocation (each tensor argument's whole storage is "
                    "addressable)")
        inside = [name for start, end, name in self.allocations if start <= address < end]
        if inside:
            return (f"memcheck scope: view; the address is inside the allocation of "
                    f"{inside[0]} but outside its view: a kernel that addresses its "
                    f"arguments' whole allocations runs with memcheck=\"allocation\"")
        return ("memcheck scope: view (each tensor argument is addressable over its view; "
                "memcheck=\"allocation\" widens it to the argument's storage)")

    def _locate(self, addresses: np.ndarray, nbytes: int, write: bool) -> np.ndarray:
        """Region index of every address; raises AccessFault on the first bad one."""
        idx = np.searchsorted(self._starts, addresses, side="right").astype(np.int64) - 1
        clipped = np.maximum(idx, 0)
        ok = (idx >= 0) & (addresses + np.uint64(nbytes) <= self._ends[clipped]) if len(self.regions) \
            else np.zeros(addresses.shape, bool)
        if write and ok.all():
            ok &= np.array([r.writable for r in self.regions])[clipped]
            if not ok.all():
                bad = int(np.flatnonzero(~ok)[0])
                raise AccessFault(bad, int(addresses[bad]), "write to a read-only range")
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            raise AccessFault(bad, int(addresses[bad]), "outside every buffer of the launch")
        return clipped

    def _by_region(self, addresses: np.ndarray, nbytes: int, write: bool):
        """[(region, rows picked (slice or mask), byte offsets into the region)], checked."""
        region = self._enclosing(int(addresses.min()), int(addresses.max()) + nbytes)
        if region is not None and (region.writable or not write):   # the common case
            groups = [(region, slice(None))]
        else:
            ridx = self._locate(addresses, nbytes, write)
            groups = [(self.regions[int(r)], ridx == r) for r in np.unique(ridx)]
        # addresses are below 2**63: their int64 view is their value
        return [(region, pick, addresses[pick].view(np.int64) - region.start)
                for region, pick in groups]

    def groups(self, addresses: np.ndarray, nbytes: int, write: bool):
        """[(region, rows picked (slice or bool mask), byte offsets into the region)] of flat
        uint64 `addresses`, checked: AccessFault on the first that hits no (writable) region."""
        return self._by_region(addresses, nbytes, write)

    def enclosing(self, start: int, end: int) -> Region | None:
        """The region holding all of [start, end), if one does."""
        return self._enclosing(start, end)

    def _enclosing(self, start: int, end: int) -> Region | None:
        """The region holding all of [start, end), if one does."""
        # bisect on Python ints: np.searchsorted costs microseconds per call on a short array
        index = bisect.bisect_right(self._start_list, start) - 1
        if index >= 0 and end <= self.regions[index].end:
            return self.regions[index]
        return None

    def load(self, addresses: np.ndarray, nbytes: int) -> np.ndarray:
        """Bytes at flat uint64 `addresses`: returns uint8 (m, nbytes)."""
        if addresses.size == 0:
            return np.zeros((0, nbytes), np.uint8)
        groups = self._by_region(addresses, nbytes, False)
        if self.read is not None:
            for region, _, offsets in groups:
                if region.writable:
                    granule, rows = access_rows(offsets, nbytes)
                    put_rows(self._mark(region, self.read)[: region.size - region.size % granule],
                             granule, rows, np.ones((1, granule), np.uint8))
        if len(groups) == 1:
            region, _, offsets = groups[0]
            return region_rows(region, offsets, nbytes, take=True)
        out = np.empty((addresses.size, nbytes), np.uint8)
        for region, pick, offsets in groups:
            out[pick] = region_rows(region, offsets, nbytes, take=True)
        return out

    def store(self, addresses: np.ndarray, data: np.ndarray):
        """Write uint8 (m, nbytes) `data` at flat `addresses` (later rows win on overlap)."""
        if addresses.size == 0:
            return
        nbytes = data.shape[1]
        for region, pick, offsets in self._by_region(addresses, nbytes, True):
            region_rows(region, offsets, nbytes, put=data[pick])
            if self.written is not None:
                granule, rows = access_rows(offsets, nbytes)
                put_rows(self._mark(region)[: region.size - region.size % granule], granule,
                         rows, np.ones((1, granule), np.uint8))

    def typed_view(self, addresses: np.ndarray, dtype, write: bool):
        """(region views, offsets in elements) for atomics on naturally aligned `dtype` data."""
        size = np.dtype(dtype).itemsize
        ridx = self._locate(addresses, size, write)
        if (addresses % np.uint64(size)).any():
            bad = int(np.flatnonzero(addresses % np.uint64(size))[0])
            raise AccessFault(bad, int(addresses[bad]), f"misaligned {size}-byte atomic")
        groups = []
        for r in np.unique(ridx):
            region = self.regions[int(r)]
            if region.start % size:
                raise AccessFault(0, int(addresses[0]), "atomic on a misaligned buffer")
            pick = np.flatnonzero(ridx == r)
            view = region.bytes[: region.size - region.size % size].view(dtype)
            index = ((addresses[pick] - np.uint64(region.start)) // np.uint64(size)).astype(np.int64)
            groups.append((pick, view, index))
            if write and self.written is not None:   # the caller updates these elements
                self._mark(region)[(index[:, None] * size + np.arange(size)).reshape(-1)] = 1
        return groups
