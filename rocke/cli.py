"""The `rocke` command: list variants, emit ll/asm/code objects, resource reports, golden table."""
from __future__ import annotations

import sys
from pathlib import Path

import click


def _variants(names):
    from .kernels.registry import all_variants, get_variant
    try:
        if not names:
            return list(all_variants().values())
        return [get_variant(n) for n in names]
    except ValueError as e:   # an unknown variant, or a family that cannot be loaded
        raise click.UsageError(str(e)) from None


@click.group()
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
        tmp = Path(output + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(output)
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
    for v in _variants(variants):
        ck = v.compile(cache=not no_cache)
        i = ck.info
        spills += i.spills
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
    if spills:
        raise SystemExit(1)


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
    from .kernels.golden import GOLDEN_PATH, diff_golden, load_golden
    try:
        table = load_golden(Path(path) if path else GOLDEN_PATH)
    except FileNotFoundError as e:
        raise click.ClickException(str(e)) from None
    d = diff_golden(table, _current_hashes(families, path))
    for kind, names in d.items():
        for n in names:
            click.echo(f"{kind}: {n}")
    if any(d.values()):
        raise SystemExit(1)
    click.echo("golden IR table matches")


@golden.command("update")
@_path_option
@_family_option
def golden_update(path, families):
    """Rewrite the table from the current IR (a deliberate act: say why in the commit)."""
    from .kernels.golden import GOLDEN_PATH, diff_golden, load_golden, write_golden
    target = Path(path) if path else GOLDEN_PATH
    cur = _current_hashes(families, path)
    try:
        d = diff_golden(load_golden(target), cur)
    except FileNotFoundError:
        d = {"missing": sorted(cur)}
    write_golden(cur, target)
    for kind, names in d.items():
        for n in names:
            click.echo(f"{kind}: {n}")
    click.echo(f"wrote {len(cur)} hashes to {target}")


if __name__ == "__main__":
    main()
