"""The `rocke` command: list variants, emit ll/asm/code objects, resource reports, golden table.

Exit codes: 0 success; 1 a check failed (golden table differs, a variant spills);
2 usage or user error (bad option, unknown variant, unreadable golden table, unwritable
output); 3 toolchain or compile error (no or broken ld.lld, LLVM rejected or aborted on a
kernel). Errors are one line on stderr, never a traceback. Files are written atomically
(a temporary file in the same directory, renamed into place, removed on failure).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import click

EXIT_CHECK_FAILED = 1
EXIT_USER_ERROR = 2
EXIT_TOOLCHAIN_ERROR = 3


class CliError(click.ClickException):
    """A one-line error with a documented exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(" | ".join(line.strip() for line in str(message).splitlines() if line.strip()))
        self.exit_code = exit_code


class _Cli(click.Group):
    """Turns the errors a user can cause into one-line messages with an exit code."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except BrokenPipeError:
            # the reader went away (`rocke list | head`): stop quietly, as other Unix tools do;
            # point stdout at /dev/null so the interpreter's final flush cannot fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(0) from None
        except Exception as e:
            from .compiler import CompileError, ToolchainError
            if isinstance(e, (ToolchainError, CompileError)):
                raise CliError(str(e), EXIT_TOOLCHAIN_ERROR) from None
            if isinstance(e, (ValueError, OSError)):
                raise CliError(str(e), EXIT_USER_ERROR) from None
            raise


def _atomic_write(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` via a temporary file in the same directory and a rename; on any
    failure the temporary file is removed and the target is left as it was."""
    path = Path(path)
    if path.is_dir():
        raise CliError(f"cannot write {path}: it is a directory", EXIT_USER_ERROR)
    if not path.parent.is_dir():
        raise CliError(f"cannot write {path}: directory {path.parent} does not exist", EXIT_USER_ERROR)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror}", EXIT_USER_ERROR) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise CliError(f"cannot write {path}: {e.strerror or e}", EXIT_USER_ERROR) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _read_golden(path: Path) -> dict[str, str]:
    """The golden table at `path`: a JSON object of variant name -> hex digest."""
    from .kernels.golden import load_golden
    try:
        table = load_golden(path)
    except FileNotFoundError as e:
        raise CliError(str(e), EXIT_USER_ERROR) from None
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read golden table {path}: {e}", EXIT_USER_ERROR) from None
    except json.JSONDecodeError as e:
        raise CliError(f"golden table {path} is not valid JSON ({e}); regenerate it with "
                       "`rocke golden update`", EXIT_USER_ERROR) from None
    if not isinstance(table, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in table.items()):
        raise CliError(f"golden table {path} must be a JSON object of variant name -> hash string; "
                       "regenerate it with `rocke golden update`", EXIT_USER_ERROR)
    return table


def _variants(names):
    from .kernels.registry import all_variants, get_variant
    try:
        if not names:
            return list(all_variants().values())
        return [get_variant(n) for n in names]
    except ValueError as e:   # an unknown variant, or a family that cannot be loaded
        raise click.UsageError(str(e)) from None


@click.group(cls=_Cli)
def main():
    """rocke: a Python DSL for AMD CDNA (gfx942) kernels."""


@main.command("list")
def list_cmd():
    """List every shipped kernel variant."""
    for v in _variants(()):
        click.echo(f"{v.name:48s} {v.spec!r}")


@main.command()
@click.argument("variant")
@click.option("--format", "fmt", type=click.Choice(["ll", "asm", "co"]), default="ll",
              show_default=True, help="LLVM IR, gfx942 assembly, or a linked code object")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True),
              help="write here instead of stdout (required for --format co)")
def emit(variant, fmt, output):
    """Emit one variant's IR, assembly or code object."""
    (v,) = _variants((variant,))
    if fmt == "co" and not output:
        raise click.UsageError("--format co writes binary: give -o FILE")
    if fmt == "ll":
        data = v.ir().encode()
    else:
        ck = v.compile()
        data = ck.asm.encode() if fmt == "asm" else ck.code_object
    if output:
        _atomic_write(output, data)
        click.echo(f"wrote {len(data)} bytes to {output}", err=True)
    else:
        sys.stdout.write(data.decode())


@main.command()
@click.argument("variants", nargs=-1)
@click.option("--no-cache", is_flag=True, help="compile from scratch, bypassing the on-disk cache")
def report(variants, no_cache):
    """Compile variants (default: all) and print their resource report with occupancy."""
    spills = 0
    rows = []
    advice = []
    for v in _variants(variants):
        ck = v.compile(cache=not no_cache)
        i = ck.info
        spills += i.spills
        if i.spills:
            advice.append(i.spill_advice())
        o = i.occupancy
        rows.append((v.name, i.vgprs, i.agprs, i.sgprs, i.lds_bytes, i.scratch_bytes,
                     f"{i.vgpr_spills}/{i.sgpr_spills}", i.max_workgroup_size,
                     f"{o.waves_per_simd}w/SIMD {o.workgroups_per_cu}WG/CU ({o.limiter})",
                     f"{ck.build_seconds * 1e3:.0f}{' (cached)' if ck.cache_hit else ''}"))
    head = ("variant", "VGPR", "AGPR", "SGPR", "LDS", "scratch", "spill v/s", "WG", "occupancy", "build ms")
    widths = [max(len(str(r[c])) for r in rows + [head]) for c in range(len(head))]
    for r in [head] + rows:
        click.echo("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    click.echo(f"\n{len(rows)} variants for gfx942; total spills: {spills}")
    for text in advice:
        click.echo(text)
    if spills:
        raise SystemExit(EXIT_CHECK_FAILED)


@main.group()
def golden():
    """Check or rewrite the golden IR-hash table (tests/golden/ir_hashes.json)."""


_path_option = click.option("--path", type=click.Path(dir_okay=False), default=None,
                            help="table to use (default: tests/golden/ir_hashes.json)")
_family_option = click.option("--family", "families", multiple=True,
                              help="only these kernel families (repeatable), e.g. for a user's own table; "
                                   "default: rocke's own families for the default table, all with --path")


def _current_hashes(families, path):
    from .kernels.golden import current_hashes
    from .kernels.registry import FAMILIES
    if not families and not path:      # rocke's table pins rocke's own families only
        families = tuple(FAMILIES)
    try:
        return current_hashes(families)
    except ValueError as e:
        raise click.UsageError(str(e)) from None


@golden.command("check")
@_path_option
@_family_option
def golden_check(path, families):
    """Exit non-zero if any variant's IR hash differs from the table."""
    from .kernels.golden import GOLDEN_PATH, diff_golden
    table = _read_golden(Path(path) if path else GOLDEN_PATH)
    d = diff_golden(table, _current_hashes(families, path))
    for kind, names in d.items():
        for n in names:
            click.echo(f"{kind}: {n}")
    if any(d.values()):
        raise SystemExit(EXIT_CHECK_FAILED)
    click.echo("golden IR table matches")


@golden.command("update")
@_path_option
@_family_option
def golden_update(path, families):
    """Rewrite the table from the current IR (a deliberate act: say why in the commit)."""
    from .kernels.golden import GOLDEN_PATH, diff_golden, write_golden
    target = Path(path) if path else GOLDEN_PATH
    cur = _current_hashes(families, path)
    try:
        d = diff_golden(_read_golden(target), cur)
    except CliError as e:
        click.echo(f"replacing: {e.message}", err=True)
        d = {"missing": sorted(cur)}
    if target.is_dir():
        raise CliError(f"cannot write {target}: it is a directory", EXIT_USER_ERROR)
    try:
        write_golden(cur, target)
    except OSError as e:
        raise CliError(f"cannot write {target}: {e.strerror or e}", EXIT_USER_ERROR) from None
    for kind, names in d.items():
        for n in names:
            click.echo(f"{kind}: {n}")
    click.echo(f"wrote {len(cur)} hashes to {target}")


def _aot_one(name: str, golden_hash: str | None):
    """(name, spec, CompiledKernel, workgroup size) of one variant, or None when its IR is not
    the one the golden table pins."""
    import hashlib
    from .compiler import compile_ir
    from .kernels.registry import get_variant
    v = get_variant(name)
    kern = v.kernel()
    ir = kern.ir()
    if golden_hash != hashlib.sha256(ir.encode()).hexdigest():
        return None
    workgroup_size = getattr(kern, "workgroup_size", None)
    ck = compile_ir(ir, name=kern.name, variant=v.name, workgroup_size=workgroup_size)
    return v.name, v.spec, ck, workgroup_size


@main.group()
def aot():
    """Prebuilt code objects for the shipped variants (a bundle in the package)."""


@aot.command("build")
@click.argument("variants", nargs=-1)
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="bundle directory (default: rocke/prebuilt/<processor> in the package)")
@click.option("--quiet", is_flag=True, help="print only the summary line")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=os.cpu_count() or 1,
              show_default="the CPU count", help="variants compiled at once (processes)")
def aot_build(variants, out, quiet, jobs):
    """Compile variants (default: all shipped) into the prebuilt bundle. A variant whose IR no
    longer matches the golden IR table is refused, never bundled (exit 1)."""
    from .compiler import DEFAULT_TARGET, prebuilt
    from .kernels.golden import GOLDEN_PATH
    table = _read_golden(GOLDEN_PATH)
    chosen = _variants(variants)
    names = [v.name for v in chosen]
    if jobs > 1 and len(chosen) > 1 and hasattr(os, "fork"):
        import concurrent.futures
        import multiprocessing
        with concurrent.futures.ProcessPoolExecutor(
                jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            built = list(pool.map(_aot_one, names, [table.get(n) for n in names]))
    else:
        built = [_aot_one(n, table.get(n)) for n in names]
    items = [item for item in built if item is not None]
    refused = [n for n, item in zip(names, built) if item is None]
    target = Path(out) if out else prebuilt.default_dir(DEFAULT_TARGET)
    try:
        prebuilt.write_bundle(target, items,
                              progress=None if quiet else lambda name: click.echo(f"  {name}"))
    except OSError as e:
        raise CliError(f"cannot write the bundle {target}: {e.strerror or e}",
                       EXIT_USER_ERROR) from None
    for name in refused:
        click.echo(f"refused (IR differs from the golden table): {name}", err=True)
    click.echo(f"prebuilt {len(items)} variants into {target}"
               + (f"; refused {len(refused)}" if refused else ""))
    if refused:
        raise SystemExit(EXIT_CHECK_FAILED)


if __name__ == "__main__":
    main()
