"""Global memory of one launch: the host ranges it was given, addressed by real host address."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np


@dataclass
class Region:
    start: int
    size: int
    name: str
    writable: bool
    bytes: np.ndarray      # uint8 view of the range
    words: np.ndarray | None  # uint32 view when the range is 4-byte aligned

    @property
    def end(self) -> int:
        return self.start + self.size


def host_view(address: int, size: int) -> np.ndarray:
    pointer = ctypes.cast(ctypes.c_void_p(address), ctypes.POINTER(ctypes.c_uint8))
    return np.ctypeslib.as_array(pointer, shape=(size,))


class AccessFault(Exception):
    """Internal: `flat_index` of the first access that hit no (writable) region."""

    def __init__(self, flat_index: int, address: int, reason: str):
        super().__init__(reason)
        self.flat_index, self.address, self.reason = flat_index, address, reason


class GlobalMemory:
    def __init__(self):
        self.regions: list[Region] = []
        self._starts = np.zeros(0, np.uint64)
        self._ends = np.zeros(0, np.uint64)

    def add(self, start: int, size: int, name: str, writable: bool, array: np.ndarray | None = None):
        """Register [start, start+size). Ranges already covered only extend the name."""
        if size <= 0:
            return
        for region in self.regions:
            if region.start <= start and start + size <= region.end:
                if name not in region.name.split(" / "):
                    region.name += " / " + name
                region.writable |= writable
                return
        view = array if array is not None else host_view(start, size)
        words = view[: size - size % 4].view(np.uint32) if start % 4 == 0 and size >= 4 else None
        self.regions.append(Region(start, size, name, writable, view, words))
        self.regions.sort(key=lambda r: r.start)
        self._starts = np.array([r.start for r in self.regions], np.uint64)
        self._ends = np.array([r.end for r in self.regions], np.uint64)

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
        return (f"nearest buffer: {best.name} [0x{best.start:x}, 0x{best.end:x}), "
                f"{best.size} bytes; the address is {where}")

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

    def load(self, addresses: np.ndarray, nbytes: int) -> np.ndarray:
        """Bytes at flat uint64 `addresses`: returns uint8 (m, nbytes)."""
        if addresses.size == 0:
            return np.zeros((0, nbytes), np.uint8)
        ridx = self._locate(addresses, nbytes, False)
        out = np.empty((addresses.size, nbytes), np.uint8)
        for r in np.unique(ridx) if len(self.regions) > 1 else (0,):
            region = self.regions[r]
            pick = slice(None) if len(self.regions) == 1 else (ridx == r)
            offsets = (addresses[pick] - np.uint64(region.start)).astype(np.int64)
            if nbytes % 4 == 0 and region.words is not None and not (offsets & 3).any():
                words = region.words[(offsets >> 2)[:, None] + np.arange(nbytes // 4)]
                out[pick] = words.view(np.uint8).reshape(-1, nbytes)
            else:
                out[pick] = region.bytes[offsets[:, None] + np.arange(nbytes)]
        return out

    def store(self, addresses: np.ndarray, data: np.ndarray):
        """Write uint8 (m, nbytes) `data` at flat `addresses` (later rows win on overlap)."""
        if addresses.size == 0:
            return
        nbytes = data.shape[1]
        ridx = self._locate(addresses, nbytes, True)
        for r in np.unique(ridx) if len(self.regions) > 1 else (0,):
            region = self.regions[r]
            pick = slice(None) if len(self.regions) == 1 else (ridx == r)
            offsets = (addresses[pick] - np.uint64(region.start)).astype(np.int64)
            if nbytes % 4 == 0 and region.words is not None and not (offsets & 3).any():
                region.words[(offsets >> 2)[:, None] + np.arange(nbytes // 4)] = \
                    np.ascontiguousarray(data[pick]).view(np.uint32).reshape(-1, nbytes // 4)
            else:
                region.bytes[offsets[:, None] + np.arange(nbytes)] = data[pick]

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
            groups.append((pick, view, ((addresses[pick] - np.uint64(region.start)) // np.uint64(size)).astype(np.int64)))
        return groups
