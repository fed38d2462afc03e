"""Global memory for the torch backend: the launch's tensor arguments themselves, on their device.

A tensor argument's range is registered with a uint8 torch view of its storage (memory.Region
.tensor): on CUDA the bytes never leave the GPU — loads gather from the view into the pool's
device, stores scatter into it. Addresses are still checked on the host against the launch's
regions (the same checks and fault messages as the numpy backend); the host sees addresses,
never the data. Ranges without a tensor (the kernarg segment, dispatch packet, queue) are host
bytes, copied to the device when a vector load reads them.
"""
from __future__ import annotations

import numpy as np


def _torch():
    import torch
    return torch


def range_views(ranges, tensors) -> list:
    """A uint8 torch view of each (start, end, ...) range, from the tensor argument whose storage
    holds it (None when none does)."""
    torch = _torch()
    storages = []
    for t in tensors:
        storage = t.untyped_storage()
        base = int(storage.data_ptr())
        storages.append((base, base + int(storage.nbytes()), t.device, storage))
    views = []
    for start, end, *_ in ranges:
        for base, stop, device, storage in storages:
            if base <= start and end <= stop:
                whole = torch.empty(0, dtype=torch.uint8, device=device).set_(storage)
                views.append(whole[start - base:end - base])
                break
        else:
            views.append(None)
    return views


def device_only(view, copies_mode: bool) -> bool:
    """Whether a range is reached only through its torch view: on a GPU, and on the CPU in
    torch_exec's copies mode (so CI without a GPU runs the GPU's memory path)."""
    return view is not None and (view.device.type != "cpu" or copies_mode)


def take(region, offsets: np.ndarray, nbytes: int, device):
    """uint8 (m, nbytes) tensor on `device`: `nbytes` at each byte offset into `region`."""
    torch = _torch()
    if region.tensor is None:   # host bytes (kernarg, dispatch packet, queue)
        from .memory import region_rows
        rows = region_rows(region, offsets, nbytes, take=True)
        return torch.from_numpy(np.ascontiguousarray(rows)).to(device)
    src = region.tensor
    index = torch.from_numpy(np.asarray(offsets, np.int64)).to(src.device, non_blocking=True)
    if nbytes > 1:
        index = index[:, None] + torch.arange(nbytes, device=src.device)
    else:
        index = index[:, None]
    return src[index].to(device)


def put(region, offsets: np.ndarray, data):
    """Scatter uint8 (m, nbytes) tensor `data` at byte offsets into `region`; of accesses that
    overlap, the later lane wins (the numpy backend's order; a device scatter with duplicate
    indices would pick any)."""
    torch = _torch()
    m, nbytes = data.shape
    offsets = np.asarray(offsets, np.int64)
    if region.tensor is None:
        from .memory import region_rows
        region_rows(region, offsets, nbytes, put=data.cpu().numpy())
        return
    index = offsets[:, None] + np.arange(nbytes) if nbytes > 1 else offsets[:, None]
    ordered = np.sort(offsets)
    if m > 1 and (np.diff(ordered) < nbytes).any():   # overlapping lanes: keep the last writer
        flat = index.reshape(-1)
        _, first_from_end = np.unique(flat[::-1], return_index=True)
        keep = np.sort(len(flat) - 1 - first_from_end)
        dst = region.tensor
        keep_t = torch.from_numpy(keep).to(dst.device)
        dst[torch.from_numpy(flat[keep]).to(dst.device)] = data.to(dst.device).reshape(-1)[keep_t]
        return
    dst = region.tensor
    dst[torch.from_numpy(index).to(dst.device, non_blocking=True)] = data.to(dst.device)
