"""Prebuilt code objects: the shipped variants compiled ahead of time (`rocke aot build`, run by
scripts/setup.sh) into a bundle inside the package, so a shipped variant's first use needs no
link and no ld.lld -- and, looked up by its spec, no IR build either.

A bundle is a directory: `index.json` plus, per variant, its linked code object, relocatable
object and assembly listing. The index records for each entry the variant, the kernel symbol, the
target, the spec key it is filed under, the LLVM version that generated it, the SHA-256 of the IR
it was built from (checked against the golden IR table when the bundle was built) and of each
file. An entry is served only when all of that still holds: its files hash to the recorded
digests and the code object validates; the current LLVM and compile pipeline are the ones that
built it; looked up by IR, the IR is the recorded one; looked up by spec, the entry is the one
written for that spec (its recorded spec key is the key asked for and its kernel symbol the spec's
`kernel_name`; an entry from before the key was recorded is served by IR only) and the golden IR
table (the caller's) still pins the recorded IR hash. Anything else is not served -- the caller
builds as usual -- and never an error.

Writing (`write_bundle`) never removes a file the bundle's own index does not name: it refuses a
non-empty directory that has no index of this format (`NotABundle`), leaves any other file in a
bundle directory where it is, and adds to the bundle's entries (or, with `replace`, writes only the
new ones). Entry files are named by their content, so new ones are written beside the old; the
index is replaced by one rename (the commit point: a crash before it leaves the old bundle whole),
and only then are the files that only the old index named removed.

Where: ROCKE_PREBUILT (a directory, or `off`), else `rocke/prebuilt/<processor>` in the package.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from .. import env

try:
    import fcntl
except ImportError:         # not POSIX: concurrent builds into one bundle are not serialised
    fcntl = None

FORMAT_VERSION = 1
INDEX = "index.json"
_FILES = {"code_object": ".hsaco", "object": ".o", "asm": ".s"}


def default_dir(target: str) -> Path:
    return Path(__file__).resolve().parents[1] / "prebuilt" / target.split(":", 1)[0]


def bundle_dir(target: str) -> Path | None:
    """The bundle directory for `target`, or None when ROCKE_PREBUILT is `off`."""
    chosen = env.prebuilt_dir()
    if chosen == "off":
        return None
    return Path(chosen) if chosen else default_dir(target)


def spec_key(spec, target: str) -> str:
    """A variant's key without building anything: the spec's class and its field values (a spec
    is a frozen dataclass, its repr lists every field) for `target`."""
    kind = type(spec)
    text = f"{kind.__module__}.{kind.__qualname__}|{spec!r}|{target}"
    return hashlib.sha256(text.encode()).hexdigest()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=8)
def _index(root: str, mtime_ns: int) -> tuple[dict, dict]:
    """(entries by spec key, entries by IR hash) of the bundle at `root` (re-read when its
    index changes)."""
    try:
        index = json.loads((Path(root) / INDEX).read_text())
    except (OSError, ValueError):
        return {}, {}
    entries = index.get("entries") if isinstance(index, dict) and \
        index.get("format") == FORMAT_VERSION else None
    if not isinstance(entries, dict):
        return {}, {}
    by_ir = {}
    for entry in entries.values():
        if isinstance(entry, dict):
            by_ir.setdefault(entry.get("ir_sha256"), []).append(entry)
    return entries, by_ir


def _entries(target: str, root: Path | None = None) -> tuple[Path, dict, dict] | None:
    root = bundle_dir(target) if root is None else Path(root)
    if root is None:
        return None
    try:
        mtime = (root / INDEX).stat().st_mtime_ns
    except OSError:
        return None
    return (root, *_index(str(root), mtime))


def _serve(root: Path, entry: dict, ir: str, workgroup_size, t0: float, variant=None):
    """A CompiledKernel of `entry`, or None when anything about it does not check out."""
    from .elf import ET_DYN, validate_code_object
    from .metadata import kernel_info
    from .compiled import CompiledKernel
    from .cache import FORMAT_VERSION as CODEGEN
    from .toolchain import llvm_version
    try:
        if entry.get("llvm") != llvm_version() or entry.get("codegen") != CODEGEN:
            return None
        blobs = {}
        for field, suffix in _FILES.items():
            data = (root / (entry["file"] + suffix)).read_bytes()
            if _sha(data) != entry[field + "_sha256"]:
                return None
            blobs[field] = data
        name, target = entry["name"], entry["target"]
        validate_code_object(blobs["code_object"], name, e_type=ET_DYN)
        asm = blobs["asm"].decode()
        info = kernel_info(asm, name, target, workgroup_size or entry.get("workgroup_size"))
    except Exception:        # a missing, damaged or wrong-shaped entry is built instead
        return None
    return CompiledKernel(name, variant or entry["variant"], target, ir, asm, blobs["object"],
                          blobs["code_object"], info, cache_hit=True,
                          build_seconds=time.perf_counter() - t0, linker=entry["linker"],
                          source_ir_sha256=entry["ir_sha256"], prebuilt=True)


def lookup_ir(ir: str, name: str, target: str, opt: int, workgroup_size=None, variant=None):
    """The bundle's kernel for exactly this IR (any variant built from it), else None."""
    t0 = time.perf_counter()
    found = _entries(target)
    if found is None:
        return None
    root, _, by_ir = found
    for entry in by_ir.get(_sha(ir.encode()), ()):
        if entry.get("name") == name and entry.get("target") == target and \
                entry.get("opt") == opt:
            return _serve(root, entry, ir, workgroup_size, t0, variant)
    return None


def lookup_spec(spec, golden: dict, target: str, workgroup_size=None, root=None):
    """The bundle's kernel for `spec` without building its IR, when the golden IR table `golden`
    (variant -> IR hash) still pins the IR the entry was built from, or the entry records this
    rocke and LLVM (``code_sha256``); else None. ``root``: that bundle, not ROCKE_PREBUILT's."""
    t0 = time.perf_counter()
    found = _entries(target, root)
    if found is None:
        return None
    root, entries, _ = found
    key = spec_key(spec, target)
    entry = entries.get(key)
    # the entry must be the one written for this spec (not another filed under its key) ...
    if not isinstance(entry, dict) or entry.get("spec_key") != key or \
            entry.get("target") != target:
        return None
    try:
        kernel_name = getattr(spec, "kernel_name", None)
    except Exception:
        kernel_name = None
    if isinstance(kernel_name, str) and kernel_name != entry.get("name"):
        return None
    # ... and built from the IR the golden table pins for its variant, or (an entry no table
    # pins: `rocke aot build --reachable`) by exactly this rocke and LLVM
    if golden.get(entry.get("variant")) != entry.get("ir_sha256"):
        from .toolchain import source_fingerprint
        code = entry.get("code_sha256")
        if not isinstance(code, str) or code != source_fingerprint():
            return None
    return _serve(root, entry, "", workgroup_size, t0)


class NotABundle(ValueError):
    """A non-empty directory with no index of this format: nothing in it is known to be rocke's,
    so no bundle is written there (and nothing there is removed)."""


class Written(NamedTuple):
    """What `write_bundle` did: the index written and its entries counted by what became of
    them (`added`: a key the bundle did not have; `updated`: replaced an entry of the same key
    or variant; `kept`: an entry of the old bundle left as it was; `removed`: an entry of the old
    bundle dropped)."""
    index: dict
    added: int
    updated: int
    kept: int
    removed: int


def _plain_name(name) -> bool:
    """A file name of the directory itself (an index naming ../x never reaches outside it)."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and \
        "\\" not in name and "\0" not in name


def _entry_files(entry) -> list[str]:
    """The files of the bundle directory an index entry names (none when it names none)."""
    stem = entry.get("file") if isinstance(entry, dict) else None
    return [stem + suffix for suffix in _FILES.values()] if _plain_name(stem) else []


def read_bundle(root: Path) -> dict:
    """The entries (spec key -> entry) of the bundle at `root`; {} when `root` does not exist or
    is empty. Raises NotABundle when `root` holds anything but no `index.json` of this format,
    OSError when it cannot be read."""
    root = Path(root)
    try:
        with os.scandir(root) as listing:
            if next(listing, None) is None:
                return {}
    except FileNotFoundError:
        return {}
    why = None
    try:
        index = json.loads((root / INDEX).read_text())
    except FileNotFoundError:
        why = f"it is not empty and has no {INDEX}"
    except (UnicodeDecodeError, ValueError):
        why = f"its {INDEX} is not JSON"
    else:
        if not isinstance(index, dict) or index.get("format") != FORMAT_VERSION or \
                not isinstance(index.get("entries"), dict):
            why = f"its {INDEX} is not a rocke bundle index (format {FORMAT_VERSION})"
    if why is not None:
        raise NotABundle(f"{root} is not a rocke bundle: {why}; a bundle is written only into a "
                         "new or empty directory or over a bundle, so nothing there was touched")
    return index["entries"]


def check_bundle_dir(root: Path) -> dict:
    """Before any compile work: `read_bundle(root)`, and OSError when the directory exists but
    cannot be written."""
    entries = read_bundle(root)
    root = Path(root)
    if root.is_dir() and not os.access(root, os.W_OK | os.X_OK):
        raise PermissionError(13, f"directory {root} is not writable", str(root))
    return entries


def _matches(path: Path, digest: str) -> bool:
    try:
        return _sha(path.read_bytes()) == digest
    except OSError:
        return False


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_bundle(root: Path, items, *, replace: bool = False, progress=None,
                 code_sha256: str | None = None) -> Written:
    """Write `items` -- (variant name, spec, CompiledKernel, workgroup_size) -- into the bundle at
    `root` (created when missing). By default the bundle keeps its other entries and the new ones
    take the place of those of the same spec key or variant; with `replace` it holds only the new
    ones. Raises NotABundle (before writing anything) when `root` is a non-empty directory that is
    not a bundle. Files the index does not name are never removed or overwritten; the new index
    replaces the old by one rename, after every file it names is in place, and only then are the
    files that only the old index named removed. Concurrent builds into one bundle take turns.
    ``code_sha256`` (``toolchain.source_fingerprint()``) is recorded in each new entry: entries
    no golden table pins are served by spec only to the same rocke and LLVM."""
    from .cache import FORMAT_VERSION as CODEGEN
    from .toolchain import llvm_version
    root = Path(root)
    try:
        root.mkdir(parents=True)
        root.chmod(0o755)         # a package directory: readable by everyone, like the rest
    except FileExistsError:
        pass
    fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)        # released when fd closes
        old = read_bundle(root)
        owned = {INDEX} | {name for entry in old.values() for name in _entry_files(entry)}
        new = {}
        stage = Path(tempfile.mkdtemp(dir=root, prefix=".rocke-tmp-"))
        try:
            staged = []
            for variant, spec, ck, workgroup_size in items:
                blobs = {"code_object": ck.code_object, "object": ck.object,
                         "asm": ck.asm.encode()}
                digests = {field: _sha(data) for field, data in blobs.items()}
                # named by content: never the name of a different file the old index needs
                stem = variant.replace("/", "__") + "." + \
                    _sha("".join(digests[f] for f in _FILES).encode())[:16]
                for field, suffix in _FILES.items():
                    name = stem + suffix
                    if name in staged or _matches(root / name, digests[field]):
                        continue                  # already there, byte for byte
                    if name not in owned and os.path.lexists(root / name):
                        raise FileExistsError(17, "a file rocke did not write is in the way",
                                              str(root / name))
                    _write_synced(stage / name, blobs[field])
                    staged.append(name)
                key = spec_key(spec, ck.target)
                new[key] = dict(
                    variant=variant, spec_key=key, name=ck.name, target=ck.target, opt=3,
                    file=stem, ir_sha256=ck.ir_hash, llvm=llvm_version(), codegen=CODEGEN,
                    linker=ck.linker, workgroup_size=workgroup_size,
                    **({"code_sha256": code_sha256} if code_sha256 else {}),
                    **{field + "_sha256": digest for field, digest in digests.items()})
                if progress is not None:
                    progress(variant)
            built = {entry["variant"] for entry in new.values()}
            kept = {} if replace else {
                key: entry for key, entry in old.items()
                if key not in new and isinstance(entry, dict) and entry.get("variant") not in built}
            entries = {**kept, **new}
            index = {"format": FORMAT_VERSION, "entries": entries}
            _write_synced(stage / INDEX,
                          (json.dumps(index, indent=1, sort_keys=True) + "\n").encode())
            for name in staged:
                os.replace(stage / name, root / name)
            os.replace(stage / INDEX, root / INDEX)          # the commit point
            try:
                os.fsync(fd)
            except OSError:
                pass
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        named = {INDEX} | {name for entry in entries.values() for name in _entry_files(entry)}
        for name in sorted(owned - named):               # what only the old index named
            path = root / name
            try:
                if path.is_symlink() or not path.is_dir():
                    path.unlink()
            except OSError:
                pass
    finally:
        os.close(fd)
    old_variants = {entry.get("variant") for entry in old.values() if isinstance(entry, dict)}
    replaced = {key for key, entry in old.items()
                if key in new or (isinstance(entry, dict) and entry.get("variant") in built)}
    updated = sum(key in old or entry["variant"] in old_variants for key, entry in new.items())
    return Written(index, added=len(new) - updated, updated=updated, kept=len(kept),
                   removed=len(old) - len(kept) - len(replaced))


def measure(root: Path, spec, golden: dict, target: str) -> tuple[int, float | None]:
    """(bytes, first-use seconds) of the bundle at `root`: the index and every file it names,
    and the time a process's first lookup of `spec` takes (the index read and parsed, the
    entry's files read, hashed and validated; no IR build, no link), None when not served."""
    root = Path(root)
    entries = read_bundle(root)
    size = (root / INDEX).stat().st_size + sum(
        (root / name).stat().st_size for entry in entries.values() for name in _entry_files(entry))
    _index.cache_clear()
    t0 = time.perf_counter()
    served = lookup_spec(spec, golden, target, root=root)
    return size, (time.perf_counter() - t0) if served is not None else None
