"""Content-addressed on-disk cache of compiled kernels.

Key: SHA-256 over (IR text, target id, toolchain fingerprint -- llvmlite, LLVM, and the linker's
path, size, mtime and version --, options, format version). An ld.lld entry is also named by an
alias without the linker's fingerprint, looked up only where no ld.lld is found (a machine that
cannot link is served what one that can built; with a linker, only its own entries serve). An entry is a directory written
atomically (temp dir + rename). An entry that cannot be read, has the wrong shape, a recorded
key or digest that does not match, or (checked by the compiler) a code object that is not one
is deleted and rebuilt, never an exception.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .. import env

FORMAT_VERSION = 3      # 3: the object is emitted from a clone, like the listing (pipeline)
_FILES = ("kernel.s", "kernel.o", "kernel.hsaco")


def default_cache_dir() -> Path:
    return env.cache_dir()


def cache_key(ir: str, target_id: str, toolchain: str, options: dict) -> str:
    h = hashlib.sha256()
    for part in (f"v{FORMAT_VERSION}", target_id, toolchain, json.dumps(options, sort_keys=True), ir):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class CompileCache:
    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()

    def _dir(self, key: str) -> Path:
        return self.root / key[:2] / key

    def load(self, key: str) -> dict | None:
        d = self._dir(key)
        try:
            if not d.exists():
                return None
            meta = json.loads((d / "entry.json").read_text())
            if not isinstance(meta, dict) or meta.get("key") != key:
                raise ValueError("wrong shape or key mismatch")
            blobs = {f: (d / f).read_bytes() for f in _FILES}
            if hashlib.sha256(b"".join(blobs.values())).hexdigest() != meta.get("digest"):
                raise ValueError("content digest mismatch")
            asm = blobs["kernel.s"].decode()
        except Exception:        # unreadable or wrong-shaped entry: drop it, the caller rebuilds
            self.drop(key)
            return None
        return {**meta, "asm": asm, "object": blobs["kernel.o"], "code_object": blobs["kernel.hsaco"]}

    def drop(self, key: str) -> None:
        """Delete an entry (a directory, or whatever else squats on its path)."""
        d = self._dir(key)
        try:
            if d.is_dir() and not d.is_symlink():
                shutil.rmtree(d, ignore_errors=True)
            else:
                d.unlink(missing_ok=True)
        except OSError:
            pass

    def alias(self, alias: str, key: str | None = None) -> str | None:
        """With `key`: record that `alias` names entry `key`. Without: the key `alias` names,
        or None. (An entry's ld.lld-independent key: a machine without ld.lld can still be
        served what a machine with one built; a missing or broken alias is a miss.)"""
        path = self.root / alias[:2] / f"{alias}.alias"
        if key is None:
            try:
                named = path.read_text().strip()
            except OSError:
                return None
            return named if len(named) == 64 and all(c in "0123456789abcdef" for c in named) \
                else None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.write_text(key)
            os.replace(tmp, path)
        except OSError:
            pass
        return key

    def store(self, key: str, asm: str, obj: bytes, code_object: bytes, extra: dict) -> None:
        d = self._dir(key)
        blobs = {"kernel.s": asm.encode(), "kernel.o": obj, "kernel.hsaco": code_object}
        meta = {"key": key, "digest": hashlib.sha256(b"".join(blobs.values())).hexdigest(), **extra}
        try:
            d.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(dir=d.parent, prefix=".tmp-"))
            for f, b in blobs.items():
                (tmp / f).write_bytes(b)
            (tmp / "entry.json").write_text(json.dumps(meta, sort_keys=True))
            try:
                os.rename(tmp, d)
            except OSError:          # another process stored it first; keep theirs
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass                     # a read-only or full cache dir only costs a rebuild later
