"""Writing an output file without ever leaving a half-written one, and without replacing what is
not a file (a leaf like ``rocke.env``: it imports only the stdlib).

One rule for every file rocke writes (``rocke emit -o``, ``rocke golden update``, the example
harnesses' ``--report``): a regular file, or a path where nothing exists yet, gets a temporary file
in the same directory renamed over it, so a failed write leaves the old file as it was. Anything
else -- a character device (``/dev/null``, ``/dev/full``), a FIFO, a socket, or a name reached
through ``/proc`` (``/dev/stdout`` leads to ``/proc/self/fd/1``, an open stream) -- is written
directly, since renaming over it would replace the node with a regular file; its errors are
reported as they come (``/dev/full``: "No space left on device"). A symlink to a regular file
stays a link: the file it points to is replaced.
"""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

#: a symlink chain through here reaches an open stream (/proc/self/fd/N), never renamed over
_PROC = "/proc/"
_MAX_LINK_HOPS = 40     # the kernel's own limit on symlinks followed in one lookup


def _link_chain(path: Path) -> list[Path]:
    """``path`` and every name its symlinks lead to, in order (the last is not a symlink)."""
    chain = [path]
    while path.is_symlink() and len(chain) <= _MAX_LINK_HOPS:
        target = Path(os.readlink(path))
        path = target if target.is_absolute() else path.parent / target
        chain.append(path)
    return chain


def renames_over(path: str | Path) -> bool:
    """Whether ``write_output(path, ...)`` replaces ``path`` by a rename (True) or writes into the
    existing node directly (False)."""
    chain = _link_chain(Path(path))
    if any(os.path.abspath(p).startswith(_PROC) for p in chain):
        return False
    try:
        mode = os.stat(chain[-1]).st_mode
    except FileNotFoundError:
        return True
    return stat.S_ISREG(mode)


def check_writable(path: str | Path) -> None:
    """Raise ``OSError`` (with ``strerror`` and ``filename`` set) if ``write_output(path, ...)``
    cannot succeed for a reason known before any data exists: ``path`` is a directory, its
    directory does not exist or is not writable. Callers check this before long work."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "it is a directory", str(path))
    if not renames_over(path):
        if not os.access(path, os.W_OK):
            raise PermissionError(13, "not writable", str(path))
        return
    target = _link_chain(path)[-1]
    parent = target.parent
    if not parent.is_dir():
        raise FileNotFoundError(2, f"directory {parent} does not exist", str(path))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(13, f"directory {parent} is not writable", str(path))
    if target.exists() and not os.access(target, os.W_OK):
        raise PermissionError(13, "the file is not writable", str(path))


def write_output(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` by the rule above. Raises ``OSError`` with the reason in
    ``strerror``; on failure a regular target keeps its old content and no temporary remains."""
    path = Path(path)
    check_writable(path)
    if not renames_over(path):
        with open(path, "wb") as f:      # a device or FIFO: the write and the close report errors
            f.write(data)
        return
    target = _link_chain(path)[-1]
    try:
        keep_mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        keep_mode = None                 # a new file: 0o666 less the umask, as open() gives
    tmp = target.parent / f".{target.name[:200]}.{secrets.token_hex(6)}.tmp"   # within NAME_MAX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if keep_mode is not None:
            os.chmod(tmp, keep_mode)
        tmp.replace(target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
