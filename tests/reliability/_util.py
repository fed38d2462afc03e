"""Shared helpers for the host-side reliability tests: snapshots that prove arguments untouched."""
from __future__ import annotations

import copy


def snapshot(values):
    """A deep, byte-level picture of launch arguments (tensor bytes, dtype, shape, strides)."""
    out = []
    for v in values:
        if hasattr(v, "untyped_storage"):
            out.append(("tensor", v.dtype, tuple(v.shape), v.stride(), v.storage_offset(),
                        bytes(v.untyped_storage().cpu())))
        elif hasattr(v, "tobytes"):          # numpy arrays and scalars
            out.append(("numpy", type(v), getattr(v, "dtype", None), v.tobytes()))
        else:
            out.append(("value", type(v), copy.deepcopy(v)))
    return out
