"""Checks that run on the device and are reported when the host next looks.

A device check kernel (e.g. rocke's attention metadata guard) cannot raise: it records the first
violation it finds in the device's *error record*, a few int32 allocated once per device
(outside any capture, so a guard launch is capture-safe: one more enqueued launch), and the host
reports it at ``check_errors()``, at the device's ``synchronize()`` / a ``Graph.replay(...,
synchronize=True)``, or right after each call with a debug lever.

The record is ``RECORD_INTS`` int32: ``[code, sequence, index, value, lo, hi, 0, 0]``; code 0
means nothing was found. A kernel family registers how its codes read (``register_codes``), so
this module knows nothing of attention.
"""
from __future__ import annotations

import threading
from typing import Callable

RECORD_INTS = 8
RECORD_BYTES = 4 * RECORD_INTS

_codes: dict[int, Callable[..., str]] = {}
_codes_lock = threading.Lock()


class DeviceCheckError(ValueError):
    """A device check kernel found bad input; ``code`` and ``record`` (the raw int32s) say what."""

    def __init__(self, message: str, record: tuple):
        super().__init__(message)
        self.code = record[0]
        self.record = record


def register_codes(codes: dict[int, Callable[..., str]]) -> None:
    """Map error codes to message makers ``(sequence, index, value, lo, hi) -> str``. A code
    already registered to another maker is refused (two families must not share a code)."""
    with _codes_lock:
        for code, make in codes.items():
            if not isinstance(code, int) or code <= 0:
                raise ValueError(f"device error codes are positive ints, got {code!r}")
            if _codes.get(code, make) is not make:
                raise ValueError(f"device error code {code} is already registered")
            _codes[code] = make


def message(record: tuple) -> str:
    code, seq, index, value, lo, hi = record[:6]
    make = _codes.get(code)
    what = make(seq, index, value, lo, hi) if make is not None else \
        f"device check error code {code} (sequence {seq}, index {index}, value {value}, " \
        f"range [{lo}, {hi}])"
    return f"{what} (found on the device by a check kernel)"


def raise_recorded(record: tuple) -> None:
    """Raise the DeviceCheckError a read record holds, if any."""
    if record[0] != 0:
        raise DeviceCheckError(message(record), record)
