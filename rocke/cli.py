"""The `rocke` command: list variants, emit ll/asm/code objects, resource reports, golden table.

Exit codes: 0 success; 1 a check failed (golden table differs, a variant spills);
2 usage or user error (bad option, unknown variant, unreadable golden table, unwritable
output); 3 toolchain or compile error (no or broken ld.lld, LLVM rejected or aborted on a
kernel). Errors are one line on stderr, never a traceback. Files are written by
``rocke.fileio.write_output``: a regular file atomically (a temporary file in the same directory,
renamed into place, removed on failure), a device or FIFO (``-o /dev/null``) directly, never
replaced.
"""
from __future__ import annotations

import json
import os
import sys
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


def _write_output(path: str | Path, data: bytes | None) -> None:
    """``rocke.fileio.write_output``, its errors as one line (exit 2); with ``data`` None only
    the checks that need no data (before a compile is spent on an unwritable path)."""
    from .fileio import check_writable, write_output
    try:
        if data is None:
            check_writable(path)
        else:
            write_output(path, data)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}", EXIT_USER_ERROR) from None


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
    """The named variants, or with none every variant of the families that load; a family that
    cannot be loaded is a one-line warning (see ``_exit_for_broken_families``), not the end of
    rocke's own."""
    from .kernels.registry import get_variant, loadable_variants
    try:
        if not names:
            variants, broken = loadable_variants()
            for message in broken.values():
                click.echo(f"Warning: {message}", err=True)
            return list(variants.values())
        return [get_variant(n) for n in names]
    except ValueError as e:   # an unknown variant, or the named variant's family cannot be loaded
        raise click.UsageError(str(e)) from None


def _exit_for_broken_families() -> None:
    """After a command over every variant has done the rest: exit 2 if a family could not be
    loaded, so scripts notice (its warning was printed first)."""
    from .kernels.registry import loadable_variants
    broken = loadable_variants()[1]
    if broken:
        raise CliError(f"{len(broken)} kernel famil{'y' if len(broken) == 1 else 'ies'} could not "
                       f"be loaded: {', '.join(broken)} (see the warnings above)", EXIT_USER_ERROR)


@click.group(cls=_Cli)
def main():
    """rocke: a Python DSL for AMD CDNA (gfx942) kernels."""
    from . import env
    env.check_all()     # a bad ROCKE_* lever: exit 2 naming it, before any command's work


def _variant_target(v) -> str:
    """The processor a variant is built for: its spec's ``target``, else its kernel's."""
    target = getattr(v.spec, "target", None)
    return target if isinstance(target, str) else v.kernel().target


def _of_target(variants, target: str | None):
    """``variants`` built for ``target`` (all for None); an unknown processor is a usage error."""
    if target is None:
        return variants
    from .arch import TARGETS
    if target not in TARGETS:
        raise click.UsageError(f"--target: rocke knows {', '.join(sorted(TARGETS))}, got {target!r}")
    return [v for v in variants if _variant_target(v) == target]


_RAY_OPTION = click.option(
    "--ray", "ray", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]",
    help="run one task per spec on a Ray cluster (pip install 'rocke[cluster]'): --ray alone "
         "connects to RAY_ADDRESS, else starts a local cluster; --ray HOST:PORT (or ray://...) a "
         "running one; --ray local a local one")
_TARGET_OPTION = click.option("--target", default=None, metavar="PROCESSOR",
                              help="only the variants built for this processor (gfx942, gfx950)")


@main.command("list")
@_TARGET_OPTION
def list_cmd(target):
    """List every shipped kernel variant (a family that cannot be loaded: a warning, the others
    listed, exit 2)."""
    for v in _of_target(_variants(()), target):
        click.echo(f"{v.name:48s} {v.spec!r}")
    _exit_for_broken_families()


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
    if output:
        _write_output(output, None)
    if fmt == "ll":
        data = v.ir().encode()
    else:
        ck = v.compile()
        data = ck.asm.encode() if fmt == "asm" else ck.code_object
    if output:
        _write_output(output, data)
        click.echo(f"wrote {len(data)} bytes to {output}", err=True)
    else:
        sys.stdout.write(data.decode())


@main.command()
@click.argument("variants", nargs=-1)
@click.option("--no-cache", is_flag=True, help="compile from scratch, bypassing the on-disk cache")
@click.option("--reachable", is_flag=True,
              help="instead of the shipped variants: every attention spec the dispatcher can reach "
                   "(features x geometry x dtype x head size x block size x cache encoding); "
                   "prints the spilling ones and a one-line summary; --target gfx950: gfx950's "
                   "dispatcher's specs (default gfx942)")
@click.option("--corners", is_flag=True,
              help="with --reachable: only the heaviest spec (every feature on) of each class")
@click.option("--jobs", type=click.IntRange(1, 256), default=None,
              help="with --reachable: compile in this many processes (default 1); with --ray and "
                   "no address: the local Ray cluster's CPUs (default: this machine's)")
@click.option("--progress", type=click.IntRange(0), default=100, show_default=True,
              help="with --reachable: a progress line on stderr every this many specs (0: none)")
@click.option("--shard", default="1/1", show_default=True, metavar="I/N", hidden=True,
              help="(superseded by --ray and the result store) with --reachable: only the I-th "
                   "of N interleaved parts of the (sorted) specs")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="with --reachable: also write the counts and every spilling spec (with its "
                   "spill fallback) to this JSON file")
@click.option("--match", "match", default=None, metavar="REGEX",
              help="with --reachable: only the specs whose kernel name contains a match of REGEX")
@click.option("--merge", is_flag=True,
              help="with --reachable: compile nothing; VARIANTS are the --json files of the N "
                   "shards of one old sharded run (same enumeration, same code), summarised as "
                   "one run")
@_RAY_OPTION
@_TARGET_OPTION
def report(variants, no_cache, reachable, corners, jobs, progress, shard, json_path, match, merge,
           ray, target):
    """Compile variants (default: all) and print their resource report with occupancy."""
    if reachable:
        if target is not None and target not in _REACHABLE_TARGETS:
            raise click.UsageError(f"--reachable --target: rocke enumerates the attention specs of "
                                   f"{', '.join(_REACHABLE_TARGETS)}, got {target!r}")
        if merge:
            if not variants:
                raise click.UsageError("--merge wants the shard reports' JSON files")
            if corners or jobs is not None or shard != "1/1" or json_path or match or target \
                    or ray is not None:
                raise click.UsageError("--merge takes only the shard reports' JSON files")
            _merge_reachable(variants)
            return
        if variants:
            raise click.UsageError("--reachable enumerates its own specs: name no variants")
        pattern = _regex(match) if match is not None else None
        shard = _shard(shard)
        engine = _engine(ray, jobs)
        if ray is not None and shard != (1, 1):
            raise click.UsageError("--shard is for runs without --ray: on a cluster every spec "
                                   "is its own task")
        if json_path:
            _write_output(json_path, None)        # before hours of compiling, not after
        _report_reachable(corners, engine, progress, shard, json_path, pattern,
                          target or "gfx942", read_store=not no_cache)
        return
    if corners or jobs is not None or shard != "1/1" or json_path or match is not None or merge \
            or ray is not None:
        raise click.UsageError("--corners, --jobs, --shard, --json, --match, --merge and --ray go "
                               "with --reachable")
    spills = 0
    rows = []
    advice = []
    targets = []
    for v in _of_target(_variants(variants), target):
        ck = v.compile(cache=not no_cache)
        i = ck.info
        if i.target.split(":")[0] not in targets:
            targets.append(i.target.split(":")[0])
        spills += i.spills
        advice += [a for a in (i.occupancy_advice(), i.spill_advice()) if a]
        o = i.occupancy
        wanted = "" if i.requested_waves_per_eu is None else \
            f" want {i.requested_waves_per_eu}: {'MISSED' if i.occupancy_missed else 'met'}"
        rows.append((v.name, i.vgprs, i.agprs, i.sgprs, i.lds_bytes, i.scratch_bytes,
                     f"{i.vgpr_spills}/{i.sgpr_spills}", i.max_workgroup_size,
                     f"{o.waves_per_simd}w/SIMD {o.workgroups_per_cu}WG/CU ({o.limiter}){wanted}",
                     f"{ck.build_seconds * 1e3:.0f}{' (cached)' if ck.cache_hit else ''}"))
    head = ("variant", "VGPR", "AGPR", "SGPR", "LDS", "scratch", "spill v/s", "WG", "occupancy", "build ms")
    widths = [max(len(str(r[c])) for r in rows + [head]) for c in range(len(head))]
    for r in [head] + rows:
        click.echo("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    missed = sum("MISSED" in r[8] for r in rows)
    click.echo(f"\n{len(rows)} variants for {', '.join(targets) or 'no target'}; total spills: {spills}"
               + (f"; {missed} miss their requested occupancy (waves_per_eu)" if missed else ""))
    for text in advice:
        click.echo(text)
    if spills:
        raise SystemExit(EXIT_CHECK_FAILED)
    if not variants:
        _exit_for_broken_families()


def _shard(text: str) -> tuple[int, int]:
    """'I/N' -> (I, N), 1 <= I <= N; a usage error otherwise."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise click.BadParameter(f"want I/N, e.g. 2/4, got {text!r}", param_hint="--shard") from None
    if not 1 <= i <= n:
        raise click.BadParameter(f"want 1 <= I <= N, got {text!r}", param_hint="--shard")
    return i, n


def _regex(text: str):
    import re
    try:
        return re.compile(text)
    except re.error as e:
        raise click.BadParameter(f"not a regular expression ({e}): {text!r}",
                                 param_hint="--match") from None


_REACHABLE_TARGETS = ("gfx942", "gfx950")     # targets with an enumeration (attention_reachable)


def _engine(ray: str | None, jobs: int | None):
    """rocke.tasks.choose, its refusal (Ray not installed, a bad address) a one-line error
    (exit 2) before any work."""
    from . import tasks
    try:
        return tasks.choose(ray, jobs)
    except tasks.EngineError as e:
        raise CliError(str(e), EXIT_USER_ERROR) from None


def _report_reachable(corners: bool, engine, progress: int, shard=(1, 1),
                      json_path: str | None = None, pattern=None, target: str = "gfx942",
                      read_store: bool = True) -> None:
    """``report --reachable``: compile every reachable attention spec (or each class's
    heaviest) to assembly -- no link, so no ld.lld needed -- and summarise its spills in one
    line. A spec whose code spills is followed by what a call launches instead (the spill
    fallback, ALGORITHM.md §10.5) and whether that is spill-free; exit 1 when any spec would
    launch spilling, 3 when any failed to compile. ``target``: whose dispatcher is asked."""
    import json
    import time
    from rocke.kernels.gfx942 import attention_reachable
    code_sha256 = attention_reachable.code_fingerprint()    # the code compiled, not edited later
    specs = (attention_reachable.corner_specs(target) if corners
             else attention_reachable.reachable_specs(target))
    if pattern is not None:
        specs = {n: s for n, s in specs.items() if pattern.search(n)}
        if not specs:
            raise CliError(f"--match {pattern.pattern!r}: no reachable spec's name matches",
                           EXIT_USER_ERROR)
    items = sorted(specs.items())[shard[0] - 1::shard[1]]
    kinds: dict[str, int] = {}
    spilling, failed, launch_spilling = [], [], []
    stored = [0]
    t0 = time.monotonic()

    def tally(results):
        for done, (_, task) in enumerate(results, 1):
            if task["code"] != code_sha256:
                raise CliError(f"a task ran other rocke code or another LLVM (fingerprint "
                               f"{task['code'][:12]}, here {code_sha256[:12]}): install the same "
                               "rocke on every node of the cluster, and do not edit rocke/ while "
                               "a run is in progress", EXIT_USER_ERROR)
            stored[0] += task["stored"]
            name, kind, vs, ss, error, fallback = task["counts"]
            kinds[kind] = kinds.get(kind, 0) + 1
            if error:
                failed.append((name, error))
                click.echo(f"{name}  failed: {error}")
            elif vs or ss:
                spilling.append((name, vs, ss, fallback))
                if fallback is None or not fallback.spill_free:
                    launch_spilling.append(name)
                click.echo(f"{name}  spills v/s {vs}/{ss}"
                           + (fallback.outcome() if fallback is not None else ""))
            if progress and (done % progress == 0 or done == len(items)):
                click.echo(f"report --reachable: {done}/{len(items)} specs, {len(spilling)} spill, "
                           f"{len(launch_spilling)} launch spilling, {len(failed)} failed, "
                           f"{time.monotonic() - t0:.0f} s", err=True)
    import functools
    from . import tasks
    store = attention_reachable.result_store()
    try:
        tally(tasks.run(functools.partial(attention_reachable.report_task, read=read_store),
                        [spec for _, spec in items], engine,
                        progress="report --reachable" if progress else None))
    except tasks.TaskFailed as e:
        raise CliError(str(e), EXIT_TOOLCHAIN_ERROR) from None
    click.echo(f"report --reachable: {stored[0]} of {len(items)} specs answered by the result "
               f"store ({store.root if store is not None else 'off'}), "
               f"{len(items) - stored[0]} compiled; {engine.describe()}, "
               f"{time.monotonic() - t0:.1f} s", err=True)
    total = sum(v + s for _, v, s, _ in spilling)
    what = "heaviest reachable" if corners else "reachable"
    owner = "the" if target == "gfx942" else f"{target}'s"
    if shard != (1, 1):
        what = f"shard {shard[0]}/{shard[1]} of {owner} {what}"
    elif target != "gfx942":
        what = f"{owner} {what}"
    summary = _reachable_summary(what, kinds, len(spilling), total, len(launch_spilling),
                                 len(failed), pattern.pattern if pattern is not None else None)
    click.echo(summary)
    if json_path:
        record = dict(
            summary=summary, target=target, corners=corners, shard=list(shard),
            specs=sum(kinds.values()),
            match=pattern.pattern if pattern is not None else None, enumerated=len(specs),
            enumeration_sha256=attention_reachable.enumeration_fingerprint(specs),
            code_sha256=code_sha256,
            kinds=kinds, seconds=round(time.monotonic() - t0, 1),
            engine=engine.describe(), from_store=stored[0],
            spilling=[dict(name=n, vgpr_spills=v, sgpr_spills=s,
                           fallback=None if f is None else dict(
                               chosen=f.chosen, vgpr_spills=f.chosen_spills[0],
                               sgpr_spills=f.chosen_spills[1], spill_free=f.spill_free,
                               tried=f.tried))
                      for n, v, s, f in sorted(spilling, key=lambda x: x[0])],
            launch_spilling=sorted(launch_spilling),
            failed=[dict(name=n, error=e) for n, e in sorted(failed)])
        _write_output(json_path, (json.dumps(record, indent=1) + "\n").encode())
    if failed:
        raise SystemExit(EXIT_TOOLCHAIN_ERROR)
    if launch_spilling:
        raise SystemExit(EXIT_CHECK_FAILED)


def _reachable_summary(what: str, kinds: dict, spilling: int, spills: int, launch_spilling: int,
                       failed: int, match: str | None) -> str:
    """The one summary line of ``report --reachable`` (a run, a shard or merged shards)."""
    return (f"{what} attention specs" + (f" matching {match!r}" if match is not None else "")
            + f": {sum(kinds.values())} ("
            + ", ".join(f"{n} {k.removesuffix('Spec')}" for k, n in sorted(kinds.items()))
            + f"); {spilling} spill ({spills} spills); {launch_spilling} launch "
              f"spilling after the fallback"
            + (f"; {failed} failed to compile" if failed else ""))


_SHARD_KEYS = ("summary", "corners", "shard", "specs", "match", "enumerated",
               "enumeration_sha256", "code_sha256", "kinds", "spilling", "launch_spilling",
               "failed")


def _is_count(x) -> bool:
    return type(x) is int and x >= 0


def _fields_problem(where: str, record, fields: dict) -> str | None:
    """What is wrong with ``record`` (a JSON value) against ``fields``: name -> (test, what the
    value must be); None when it is a JSON object whose every field passes."""
    if not isinstance(record, dict):
        return f"{where} must be a JSON object, got {json.dumps(record)[:80]}"
    for field, (test, want) in fields.items():
        if field not in record:
            return f"{where} lacks field {field!r}"
        if not test(record[field]):
            return f"{where}'s field {field!r} must be {want}, got {json.dumps(record[field])[:80]}"
    return None


_STRING = (lambda x: isinstance(x, str), "a string")
_COUNT = (_is_count, "a non-negative integer")
_FALLBACK_FIELDS = {"chosen": _STRING, "vgpr_spills": _COUNT, "sgpr_spills": _COUNT,
                    "spill_free": (lambda x: type(x) is bool, "true or false"),
                    "tried": _COUNT}
_SPILLING_FIELDS = {"name": _STRING, "vgpr_spills": _COUNT, "sgpr_spills": _COUNT,
                    "fallback": (lambda x: x is None or isinstance(x, dict),
                                 "null or a JSON object")}
_FAILED_FIELDS = {"name": _STRING, "error": _STRING}


def _shard_report_problem(record: dict) -> str | None:
    """What makes ``record`` (a JSON object with every key of _SHARD_KEYS) no shard report of
    ``report --reachable --json``, naming the field; None when it is one. A shard report is
    input: every field the merge reads is checked before any is used."""
    def is_list_of(test):
        return lambda x: isinstance(x, list) and all(test(e) for e in x)
    top = {
        "summary": _STRING,
        "corners": (lambda x: type(x) is bool, "true or false"),
        "shard": (lambda x: isinstance(x, list) and len(x) == 2 and all(type(e) is int for e in x)
                  and 1 <= x[0] <= x[1], "[I, N] with integers 1 <= I <= N"),
        "specs": _COUNT,
        "match": (lambda x: x is None or isinstance(x, str), "null or a string"),
        "enumerated": _COUNT,
        "enumeration_sha256": _STRING,
        "code_sha256": _STRING,
        "kinds": (lambda x: isinstance(x, dict) and all(_is_count(n) for n in x.values()),
                  "a JSON object of spec class -> non-negative integer"),
        "spilling": (lambda x: isinstance(x, list), "a list"),
        "launch_spilling": (is_list_of(lambda e: isinstance(e, str)), "a list of spec names"),
        "failed": (lambda x: isinstance(x, list), "a list"),
    }
    if "target" in record:
        top["target"] = (lambda x: x in _REACHABLE_TARGETS,
                         f"one of {', '.join(_REACHABLE_TARGETS)}")
    problem = _fields_problem("the report", record, top)
    if problem:
        return problem
    if sum(record["kinds"].values()) != record["specs"]:
        return (f"its field 'kinds' counts {sum(record['kinds'].values())} specs, its field "
                f"'specs' {record['specs']}")
    for i, entry in enumerate(record["spilling"]):
        problem = _fields_problem(f"'spilling'[{i}]", entry, _SPILLING_FIELDS)
        if not problem and entry["fallback"] is not None:
            problem = _fields_problem(f"'spilling'[{i}]'s 'fallback'", entry["fallback"],
                                      _FALLBACK_FIELDS)
        if problem:
            return problem
    for i, entry in enumerate(record["failed"]):
        problem = _fields_problem(f"'failed'[{i}]", entry, _FAILED_FIELDS)
        if problem:
            return problem
    return None


def _merge_reachable(paths) -> None:
    """``report --reachable --merge``: the shard reports (``--json``) of one enumeration run as
    N commands, summarised as one run. Refused, naming the file, unless they are exactly shards
    1..N of one N, of the same enumeration (names) and the same code and toolchain."""
    import json
    records = []
    for path in paths:
        try:
            record = json.loads(Path(path).read_text())
        except OSError as e:
            raise CliError(f"cannot read {path}: {e.strerror or e}", EXIT_USER_ERROR) from None
        except ValueError as e:
            raise CliError(f"{path} is not JSON: {e}", EXIT_USER_ERROR) from None
        missing = [k for k in _SHARD_KEYS if not isinstance(record, dict) or k not in record]
        if missing:
            raise CliError(f"{path} is not a shard report of `rocke report --reachable --json` "
                           f"(it lacks {', '.join(missing)})", EXIT_USER_ERROR)
        problem = _shard_report_problem(record)
        if problem:
            raise CliError(f"{path} is not a valid shard report of `rocke report --reachable "
                           f"--json`: {problem}", EXIT_USER_ERROR)
        records.append((path, record))
    first_path, first = records[0]
    for key in ("corners", "match", "enumerated", "enumeration_sha256", "code_sha256"):
        for path, record in records[1:]:
            if record[key] != first[key]:
                what = {"code_sha256": "rocke's code or LLVM toolchain",
                        "enumeration_sha256": "enumeration (spec names)"}.get(key, key)
                raise CliError(f"{path} and {first_path} differ in their {what}: they are not "
                               "shards of one run", EXIT_USER_ERROR)
    n = first["shard"][1]
    seen = {}
    for path, record in records:
        i, of = record["shard"]
        if of != n:
            raise CliError(f"{path} is shard {i}/{of}, {first_path} one of {n}", EXIT_USER_ERROR)
        if i in seen:
            raise CliError(f"{path} and {seen[i]} are both shard {i}/{n}", EXIT_USER_ERROR)
        seen[i] = path
    absent = sorted(set(range(1, n + 1)) - set(seen))
    if absent:
        raise CliError(f"shards {', '.join(f'{i}/{n}' for i in absent)} are missing",
                       EXIT_USER_ERROR)
    specs = sum(r["specs"] for _, r in records)
    if specs != first["enumerated"]:
        raise CliError(f"the shards hold {specs} specs, the enumeration {first['enumerated']}",
                       EXIT_USER_ERROR)
    kinds: dict[str, int] = {}
    for _, record in records:
        for kind, count in record["kinds"].items():
            kinds[kind] = kinds.get(kind, 0) + count
    spilling = [s for _, r in records for s in r["spilling"]]
    launch_spilling = sorted(x for _, r in records for x in r["launch_spilling"])
    failed = [f for _, r in records for f in r["failed"]]
    for s in sorted(spilling, key=lambda s: s["name"]):
        f = s["fallback"]
        click.echo(f"{s['name']}  spills v/s {s['vgpr_spills']}/{s['sgpr_spills']}"
                   + (f" -> {f['chosen']} v/s {f['vgpr_spills']}/{f['sgpr_spills']}"
                      f"{'' if f['spill_free'] else ' (spilling)'}" if f else ""))
    for f in failed:
        click.echo(f"{f['name']}  failed: {f['error']}")
    what = "heaviest reachable" if first["corners"] else "reachable"
    target = first.get("target", "gfx942")      # (the enumeration's sha256 pins it too)
    if target != "gfx942":
        what = f"{target}'s {what}"
    click.echo(_reachable_summary(
        f"{n} shards merged: {what}", kinds, len(spilling),
        sum(s["vgpr_spills"] + s["sgpr_spills"] for s in spilling), len(launch_spilling),
        len(failed), first["match"]))
    if failed:
        raise SystemExit(EXIT_TOOLCHAIN_ERROR)
    if launch_spilling:
        raise SystemExit(EXIT_CHECK_FAILED)


@main.group()
def golden():
    """Check or rewrite the golden IR-hash table (rocke/kernels/golden_ir_hashes.json)."""


_path_option = click.option("--path", type=click.Path(dir_okay=False), default=None,
                            help="table to use (default: rocke's own, rocke/kernels/golden_ir_hashes.json)")
_family_option = click.option("--family", "families", multiple=True,
                              help="only these kernel families (repeatable), e.g. for a user's own table; "
                                   "default: rocke's own families for the default table, the families "
                                   "the table names with --path")


def _table_families(table: dict[str, str]) -> tuple[str, ...]:
    """The families a golden table pins (the part of each variant name before '/')."""
    return tuple(sorted({name.split("/", 1)[0] for name in table}))


def _current_hashes(families, path, table=None):
    from .kernels.golden import current_hashes
    from .kernels.registry import FAMILIES
    named_by = ""
    if not families and not path:      # rocke's table pins rocke's own families only
        families = tuple(FAMILIES)
    elif not families and table is not None:   # a user's table: the families it names
        families = _table_families(table)
        if not families:
            raise click.UsageError(f"golden table {path} pins no variants; name the families "
                                   "with --family")
        named_by = f" (named by the golden table {path})"
    try:
        return current_hashes(families)
    except ValueError as e:
        raise click.UsageError(f"{e}{named_by}") from None


@golden.command("check")
@_path_option
@_family_option
def golden_check(path, families):
    """Exit non-zero if any variant's IR hash differs from the table."""
    from .kernels.golden import GOLDEN_PATH, diff_golden
    table = _read_golden(Path(path) if path else GOLDEN_PATH)
    d = diff_golden(table, _current_hashes(families, path, table))
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
    """Rewrite the table from the current IR (a deliberate act: say why in the commit). With
    --family, only those families' entries are rewritten (stale ones of theirs dropped); every
    other family's entries in the table are kept, so updating family by family builds one
    table. A table that does not exist yet is created."""
    from .kernels.golden import GOLDEN_PATH, diff_golden, write_golden
    target = Path(path) if path else GOLDEN_PATH
    if target.is_dir():
        raise CliError(f"cannot write {target}: it is a directory", EXIT_USER_ERROR)
    try:
        old = _read_golden(target)
    except CliError as e:
        old = None
        if path and not families:
            raise CliError(f"{e.message}; to start a table of your own, name its families with "
                           "--family", EXIT_USER_ERROR) from None
        if target.exists():
            click.echo(f"replacing: {e.message}", err=True)
        else:
            click.echo(f"creating {target}", err=True)
    cur = _current_hashes(families, path, old)
    table, kept = cur, 0
    if old is not None and families:
        named = set(families)
        others = {n: h for n, h in old.items() if n.split("/", 1)[0] not in named}
        old = {n: h for n, h in old.items() if n.split("/", 1)[0] in named}
        table, kept = {**others, **cur}, len(others)
    d = diff_golden(old, cur) if old is not None else {"missing": sorted(cur)}
    try:
        write_golden(table, target)
    except OSError as e:
        raise CliError(f"cannot write {target}: {e.strerror or e}", EXIT_USER_ERROR) from None
    for kind, names in d.items():
        for n in names:
            click.echo(f"{kind}: {n}")
    click.echo(f"wrote {len(table)} hashes to {target}"
               + (f" ({len(cur)} of {', '.join(sorted(families))}; {kept} of other families "
                  "kept)" if kept else ""))


def golden_perturbation_problems(family: str, golden: dict[str, str]) -> list[str]:
    """The golden perturbation contract of ``family``: rebuilding its first variant with the
    family's ``GOLDEN_PERTURBATION`` must move that variant's IR hash, and every other variant
    of the family pinned in ``golden``, rebuilt after it in the same process, must keep its
    hash (a spec change reaches the IR; variants do not leak state into each other). Returns
    what broke ([] when the contract holds); a malformed declaration raises ValueError."""
    import dataclasses
    import hashlib

    from .kernels.registry import all_variants, golden_perturbation
    variants = all_variants()
    mine = [v for v in variants.values() if v.family == family]
    if not mine:
        raise ValueError(f"kernel family {family!r} has no variants")
    victim = mine[0]
    field, change = golden_perturbation(family)
    if not hasattr(victim.spec, field) or getattr(victim.spec, field) not in change:
        raise ValueError(f"kernel family {family!r}: GOLDEN_PERTURBATION names {field!r} but has "
                         f"no other value for {victim.name}'s {field}="
                         f"{getattr(victim.spec, field, '<missing>')!r}")
    if victim.name not in golden:
        return [f"{victim.name} is not pinned in the table; run `rocke golden update` first"]
    new_spec = dataclasses.replace(victim.spec, **{field: change[getattr(victim.spec, field)]})
    problems = []
    for v in mine:
        if v.name not in golden:
            continue
        spec = new_spec if v is victim else v.spec
        digest = hashlib.sha256(v.builder(spec).ir().encode()).hexdigest()
        if v is victim and digest == golden[v.name]:
            problems.append(f"{v.name} with {field}={change[getattr(victim.spec, field)]!r} (was "
                            f"{getattr(victim.spec, field)!r}) emits the same IR: the field does "
                            "not reach the code")
        elif v is not victim and digest != golden[v.name]:
            problems.append(f"{v.name} changed after {victim.name} was rebuilt with another "
                            f"{field}: state leaks between builds, or its IR moved (`rocke "
                            "golden check` builds it alone)")
    return problems


@golden.command("perturb")
@_path_option
@_family_option
def golden_perturb(path, families):
    """Run the golden perturbation contract (GOLDEN_PERTURBATION) on kernel families."""
    from .kernels.golden import GOLDEN_PATH, current_hashes
    from .kernels.registry import FAMILIES
    table = _read_golden(Path(path)) if path else _read_golden(GOLDEN_PATH)
    if not families:
        families = _table_families(table) if path else tuple(FAMILIES)
        if not families:
            raise click.UsageError(f"golden table {path} pins no variants; name the families with --family")
    failed = 0
    for family in families:
        try:
            pinned = {n: h for n, h in table.items() if n.split("/", 1)[0] == family}
            against = "its pinned hashes"
            if not pinned:        # not in this table: check against its own current IR
                pinned, against = current_hashes([family]), "its current IR (not pinned in the table)"
            problems = golden_perturbation_problems(family, pinned)
        except ValueError as e:
            raise click.UsageError(str(e)) from None
        for problem in problems:
            click.echo(f"FAILED: {family}: {problem}")
        if problems:
            failed += 1
        else:
            click.echo(f"ok: {family} (against {against})")
    if failed:
        raise SystemExit(EXIT_CHECK_FAILED)


# ---------------------------------------------------------------- rocke profile (issue 20)
@main.command("profile")
@click.argument("variant")
@click.option("--shape", default=None, help="problem size as key=value pairs, e.g. M=512,N=512,K=256")
@click.option("--annotate", is_flag=True, help="print the assembly with counts, hottest blocks first")
@click.option("--json", "as_json", is_flag=True, help="print counters and the model as JSON")
@click.option("--sample-rows", type=click.IntRange(min=1), default=None,
              help="emulate only the first rows of grid y; the model repeats them over the grid")
def profile_cmd(variant, shape, annotate, as_json, sample_rows):
    """Exact counters of one variant's launch in the emulator, its modelled MI300X time, and
    advice naming the builder lines behind what binds it."""
    from .perf import model_time
    from .perf.advice import advise
    from .perf.problems import build_problem, parse_shape, sample_grid
    from .runtime import launch
    (v,) = _variants((variant,))
    problem = build_problem(v, parse_shape(shape))
    grid = sample_grid(problem.grid, sample_rows)
    compiled = _compiled_with_lines(v)
    report = launch(compiled, grid, problem.block, problem.args, device="emu", profile=True)
    p = report.profile
    sampled = grid != problem.grid
    model = model_time(p, grid=problem.grid if sampled else None,
                       footprint=problem.footprint if sampled else None)
    advice = advise(p, model, grid=problem.grid)
    if as_json:
        out = {"variant": v.name, "shape": problem.shape, "grid": list(problem.grid),
               "emulated_grid": list(grid), "block": list(problem.block),
               "resources": p.resources, "counters": p.counters(), "model": model.as_dict(),
               "advice": [a.as_dict() for a in advice]}
        if problem.flops:
            out["model"]["tflops"] = round(problem.flops / (model.us * 1e-6) / 1e12, 2)
        click.echo(json.dumps(out, indent=2))
        return
    c = p.counters()
    click.echo(f"{v.name} {problem.shape or '(default shape)'}: grid {problem.grid}"
               + (f" (emulated {grid})" if sampled else "") + f", block {problem.block}")
    click.echo("issues   " + "  ".join(f"{k} {c[k]}" for k in
                                       ("valu", "mfma", "salu", "smem", "ds", "vmem", "branch",
                                        "s_waitcnt", "s_barrier", "s_nop")))
    click.echo(f"LDS      {c['lds_bytes']} B, {c['lds_bank_conflicts']} bank-conflict cycles, "
               f"LDS-DMA {c['lds_dma_bytes']} B")
    click.echo(f"global   read {c['global_read_bytes']} B, write {c['global_write_bytes']} B, "
               f"{c['segments64']} 64-B segments; unique read {c['unique_read_bytes']} B, "
               f"unique write {c['unique_write_bytes']} B")
    if c["mfma_by_atom"]:
        click.echo("mfma     " + ", ".join(f"{k} {n}" for k, n in c["mfma_by_atom"].items()))
    click.echo(f"occupancy {model.occupancy}")
    click.echo(str(model))
    click.echo("         " + ", ".join(f"{k} {t:.2f} us" for k, t in model.parts_us.items()))
    for a in advice:
        click.echo(f"advice   {a}")
    if annotate:
        click.echo(p.annotate())


def _compiled_with_lines(v):
    """The variant compiled from its Kernel, so the listing carries the builder's lines (the
    code is the same as the shipped build's); the shipped build where nothing here can link."""
    from .arch import get_target
    from .compiler import CompileCache, compile_ir
    from .compiler.toolchain import ToolchainError
    k = v.kernel()
    try:      # the on-disk cache only: the prebuilt bundle's listings carry no lines
        return compile_ir(k, variant=v.name, target=get_target(k.target).target_id,
                          cache=CompileCache())
    except ToolchainError:
        return v.compile()




_OTHER_TARGET = "other target"


def _aot_one(name: str, golden_hash: str | None):
    """(name, spec, CompiledKernel, workgroup size) of one variant, None when its IR is not the
    one the golden table pins, or _OTHER_TARGET when it is built for another processor than the
    bundle's (the bundle is gfx942's)."""
    import hashlib
    from .arch import get_target
    from .compiler import DEFAULT_TARGET, compile_ir
    from .kernels.registry import get_variant
    v = get_variant(name)
    if get_target(_variant_target(v)).target_id != DEFAULT_TARGET:   # no build for another processor
        return _OTHER_TARGET
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
              help="bundle directory: new, empty, or an existing bundle (default: "
                   "rocke/prebuilt/<processor> in the package)")
@click.option("--replace", is_flag=True,
              help="the bundle holds only the variants built now (the default with no VARIANTS)")
@click.option("--quiet", is_flag=True, help="print only the summary line")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              show_default="the CPU count", help="variants compiled at once (processes); with "
                                                 "--ray and no address: the local cluster's CPUs")
@click.option("--match", "match", default=None, metavar="REGEX",
              help="only the variants (with --reachable: the specs' kernel names) that contain a "
                   "match of REGEX")
@click.option("--reachable", is_flag=True,
              help="bundle the specs gfx942's attention dispatcher can reach (rocke report "
                   "--reachable), not the shipped variants; needs --out; its entries are served "
                   "by spec to the same rocke and LLVM (no golden table pins them)")
@_RAY_OPTION
def aot_build(variants, out, replace, quiet, jobs, match, reachable, ray):
    """Compile variants (default: all shipped) into the prebuilt bundle. A variant whose IR no
    longer matches the golden IR table is refused, never bundled (exit 1).

    Named VARIANTS are added to the bundle: each replaces its own entry, the bundle's other
    entries are kept; with --replace the bundle holds only them. With no VARIANTS every
    shipped variant is built and the bundle replaced (entries of variants no longer shipped go).

    --out must be a new or empty directory or an existing bundle (its index.json): any other
    non-empty directory is refused (exit 2) before anything is compiled, and nothing in it is
    touched. In a bundle only the files its index names are ever removed or replaced; other
    files there are left alone. The new index replaces the old by one rename once every file it
    names is written, so an interrupted build leaves the old bundle whole."""
    import time
    from . import tasks
    from .compiler import DEFAULT_TARGET, prebuilt
    from .compiler.toolchain import source_fingerprint
    from .kernels.golden import GOLDEN_PATH
    pattern = _regex(match) if match is not None else None
    if reachable and variants:
        raise click.UsageError("--reachable enumerates its own specs: name no variants")
    if reachable and not out:
        raise click.UsageError("--reachable wants --out DIR: the reachable bundle is not the "
                               "package's")
    engine = _engine(ray, jobs if ray is not None else (jobs or os.cpu_count() or 1))
    target = Path(out) if out else prebuilt.default_dir(DEFAULT_TARGET)
    try:      # before any compile: refuse a directory that is not a bundle, or not writable
        prebuilt.check_bundle_dir(target)
    except prebuilt.NotABundle as e:
        raise CliError(f"cannot write the bundle: {e}", EXIT_USER_ERROR) from None
    except OSError as e:
        raise CliError(f"cannot write the bundle {target}: {e.strerror or e}",
                       EXIT_USER_ERROR) from None
    replace = replace or not (variants or pattern or reachable)
    table = _read_golden(GOLDEN_PATH)
    t0 = time.monotonic()
    if reachable:
        from rocke.kernels.gfx942 import attention_reachable
        specs = attention_reachable.reachable_specs()
        work = [(f"reachable/{n}", s) for n, s in sorted(specs.items())
                if pattern is None or pattern.search(n)]
        task = _aot_reachable_one
    else:
        chosen = _variants(variants)
        names = list(dict.fromkeys(v.name for v in chosen))    # a variant named twice: built once
        work = [(n, table.get(n)) for n in names if pattern is None or pattern.search(n)]
        task = _aot_task
    if not work:
        raise CliError(f"--match {match!r}: nothing to bundle matches", EXIT_USER_ERROR)
    built = [None] * len(work)
    try:
        for i, item in tasks.run(task, work, engine, progress=None if quiet else "aot build"):
            built[i] = item
    except tasks.TaskFailed as e:
        raise CliError(str(e), EXIT_TOOLCHAIN_ERROR) from None
    names = [w[0] for w in work]
    items = [item for item in built if item is not None and item != _OTHER_TARGET]
    refused = [n for n, item in zip(names, built) if item is None]
    skipped = sum(item == _OTHER_TARGET for item in built)
    try:
        done = prebuilt.write_bundle(
            target, items, replace=replace,
            progress=None if quiet else lambda name: click.echo(f"  {name}"),
            code_sha256=source_fingerprint() if reachable else None)
    except prebuilt.NotABundle as e:
        raise CliError(f"cannot write the bundle: {e}", EXIT_USER_ERROR) from None
    except OSError as e:
        where = f" ({e.filename})" if e.filename and str(e.filename) != str(target) else ""
        raise CliError(f"cannot write the bundle {target}: {e.strerror or e}{where}",
                       EXIT_USER_ERROR) from None
    for name in refused:
        click.echo(f"refused (IR differs from the golden table): {name}", err=True)
    what = [f"{done.added + done.updated} added/updated"] \
        + ([f"{done.kept} kept"] if done.kept else []) \
        + ([f"{done.removed} removed"] if done.removed else [])
    click.echo(f"prebuilt {len(items)} variants into {target} "
               f"({len(done.index['entries'])} entries; {', '.join(what)})"
               + (f"; refused {len(refused)}" if refused else "")
               + (f"; {skipped} built for another processor left out" if skipped else ""))
    if items and not quiet:
        size, first = prebuilt.measure(target, items[0][1], table, items[0][2].target)
        click.echo(f"bundle {size / 2**20:.1f} MiB; first use of {items[0][0]} by spec (no IR "
                   f"build, no link): " + (f"{first * 1e3:.1f} ms" if first is not None
                                            else "not served") +
                   f"; built on {engine.describe()} in {time.monotonic() - t0:.1f} s", err=True)
    if refused:
        raise SystemExit(EXIT_CHECK_FAILED)


def _aot_task(item):
    return _aot_one(*item)


def _aot_reachable_one(item):
    """(name, spec, CompiledKernel, workgroup size) of one reachable spec (no golden check:
    its entry records the code that built it)."""
    from .arch import get_target
    from .compiler import compile_ir
    name, spec = item
    import importlib
    kern = importlib.import_module(type(spec).__module__).build(spec)
    workgroup_size = getattr(kern, "workgroup_size", None)
    ck = compile_ir(kern.ir(), name=kern.name, variant=name, workgroup_size=workgroup_size,
                    target=get_target(kern.target).target_id)
    return name, spec, ck, workgroup_size


if __name__ == "__main__":
    main()
