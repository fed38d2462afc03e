"""Build-time errors that point at the kernel author's line, not at DSL internals."""

from __future__ import annotations

import os
import sys

_DSL_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_location() -> str:
    """``file:line`` of the innermost stack frame outside ``rocke/dsl``."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_DSL_DIR) and not filename.startswith("<frozen"):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>:0"


def dsl_type_error(message: str) -> TypeError:
    return TypeError(f"{user_location()}: {message}")


def dsl_value_error(message: str) -> ValueError:
    return ValueError(f"{user_location()}: {message}")


_FILES: dict[str, str | None] = {}      # co_filename -> its absolute path, None if internal
_LLVMLITE_DIR = os.path.dirname(os.path.abspath(__import__("llvmlite").__file__)) + os.sep


def user_frame() -> tuple[str, int]:
    """(file, line) of the innermost frame outside ``rocke/dsl`` (and llvmlite, whose builder
    calls back into the DSL's) -- ``user_location`` without the string, cheap enough to call
    for every emitted instruction (each file is classified once)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        try:
            path = _FILES[name]
        except KeyError:
            path = os.path.abspath(name)
            if path.startswith((_DSL_DIR, _LLVMLITE_DIR)) or name.startswith("<frozen"):
                path = None
            _FILES[name] = path
        if path is not None:
            return path, frame.f_lineno
        frame = frame.f_back
    return "<unknown>", 0
