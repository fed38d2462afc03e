"""The result store: small facts computed from a kernel's IR (spill counts, resources, modelled
times), kept on disk under the content they were computed from, so a re-run computes only what
moved and machines sharing the directory never compute the same thing twice.

Key: SHA-256 over (the store's format, what was computed -- ``kind`` --, the target id, the
toolchain fingerprint -- llvmlite and LLVM versions --, the compile pipeline's format version,
the options, the IR's own SHA-256). A change anywhere in a kernel's builder that reaches its IR
gives it a new key; a change that does not (another family, a comment) keeps every key.

An entry is one JSON file ``<root>/<key[:2]>/<key>.json`` holding the key, the value and the
SHA-256 of the value's canonical JSON. It is written to a temporary file in the same directory
and renamed into place (``os.replace``): a reader sees the whole old entry, the whole new one, or
none, never half of one, and two writers of one key write the same content. An entry that cannot
be read, is not JSON, has the wrong shape, another key or a value that does not hash to its
checksum is corrupt: ``get`` deletes it and answers a miss, so the caller recomputes (and counts
it in ``corrupt``). A store that cannot be written (read-only, full) costs only recomputation.

Where: ROCKE_RESULTS_DIR (a directory, or ``off``), default ``$ROCKE_CACHE_DIR/results``.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from .. import env
from ..fileio import write_output

FORMAT_VERSION = 1


def _canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def result_key(kind: str, ir: str, target: str, options: dict | None = None) -> str:
    """The store key of ``kind`` computed from IR text ``ir`` for ``target`` with this
    toolchain and compile pipeline."""
    from .cache import FORMAT_VERSION as CODEGEN
    from .toolchain import toolchain_fingerprint
    h = hashlib.sha256()
    for part in (f"results-v{FORMAT_VERSION}", kind, target, toolchain_fingerprint(),
                 f"codegen-v{CODEGEN}", json.dumps(options or {}, sort_keys=True),
                 hashlib.sha256(ir.encode()).hexdigest()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def sources_digest(*paths: str | Path) -> str:
    """sha256 of the Python sources at ``paths`` (files, or directories searched for ``*.py``),
    names and bytes: for results that depend on code besides a kernel's IR (the emulator that
    counted, the model that timed, a harness's inputs), so that a change there moves their keys
    and a change elsewhere does not."""
    h = hashlib.sha256()
    for root in sorted(Path(p).resolve() for p in paths):
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for f in files:
            h.update(f"{f.relative_to(root.parent)}".encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


class ResultStore:
    """Content-addressed JSON values under ``root`` (see the module's docstring). ``hits``,
    ``misses`` and ``corrupt`` count this object's lookups."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.hits = self.misses = self.corrupt = 0

    def path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"a result key is 64 lowercase hex digits, got {key!r}")
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str):
        """The value stored under ``key``, or None (a miss; a corrupt entry is deleted)."""
        path = self.path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError:
            data = None
        try:
            entry = json.loads(data)
            if not isinstance(entry, dict) or entry.get("key") != key or \
                    entry.get("format") != FORMAT_VERSION or "value" not in entry or \
                    hashlib.sha256(_canonical(entry["value"])).hexdigest() != entry.get("sha256"):
                raise ValueError("wrong shape, key or checksum")
        except (TypeError, ValueError):              # (UnicodeDecodeError is a ValueError)
            self.corrupt += 1
            self.misses += 1
            try:             # whatever is there (a file, a directory squatting on the name)
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except OSError:
                pass
            return None
        self.hits += 1
        return entry["value"]

    def put(self, key: str, value) -> None:
        """Store ``value`` (JSON-serialisable) under ``key``, atomically; an unwritable store
        is silently skipped (the value is recomputed next time)."""
        path = self.path(key)
        entry = {"format": FORMAT_VERSION, "key": key, "value": value,
                 "sha256": hashlib.sha256(_canonical(value)).hexdigest()}
        data = json.dumps(entry, sort_keys=True).encode()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_output(path, data)        # a temporary renamed over the entry: all or nothing
        except OSError:
            pass

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("??/*.json")) if self.root.is_dir() else 0


def default_store() -> ResultStore | None:
    """The store at ROCKE_RESULTS_DIR (default ``$ROCKE_CACHE_DIR/results``); None when off."""
    root = env.results_dir()
    return None if root is None else ResultStore(root)
