"""Regenerate gfx942's dispatch table from the model (issue 41): per problem of a sweep, the 2D
path and the 3D path at a set of segment counts, each as a modelled MI300X time (rocke/perf over
the emulator's exact counters, benchmarks/dispatch_sweep.py's sampling: one KV head and one
repeat of the pattern emulated, the model repeating them over the full grid), and per problem
class (attention_dispatch.problem_class) the option the model puts fastest at the 2000-cycle
round trip. The result is rocke/kernels/gfx942/dispatch_table.json, which
attention_dispatch.plan follows; classes the sweep did not reach keep the rule tables.

Every time here is "modelled MI300X time": a model, not GPU time.

Deterministic: the same kernels and the same model give the same file (no clock, no random
input the model reads; make_inputs is seeded). tests/kernels/test_dispatch_table.py re-runs a
small subset and checks the committed entries equal what this tool produces.

One task per problem through rocke.tasks (`--jobs N` forked processes, `--ray [ADDRESS]` a Ray
cluster; serial by default): the rows come back as each problem is done and are kept, logged
and appended to --rows-out in the problems' order, so the table, the report and stdout are the
serial run's byte for byte; each problem's modelling time goes to the progress line on stderr.

Usage:
  python tools/dispatch_tables.py --grid full            # the whole grid (>= 500 problems; hours on 2 cores)
  python tools/dispatch_tables.py --grid full --only-configs f16/128/32/8 --kv 1024 2048 \\
      --batches 1 8 --kinds decode                       # a subset, merged into the file
  python tools/dispatch_tables.py --grid full --only-configs f16/128/32/8 --kv 2048 \\
      --kv-dtypes fp8 int8_per_token_head --block-sizes 16 64   # quantized caches, 16-token pages
  python tools/dispatch_tables.py --problems profile vllm033   # benchmarks/profile.py's shapes
                                                         # (f16/bf16 x d64/128/256) and vLLM 0.33's grid
  python tools/dispatch_tables.py ... --check            # compare with the committed file, write nothing
  python tools/dispatch_tables.py --add-regimes --jobs 8 # only the other 2D regime's time, for every
                                                         # committed class that lacks it
  python tools/dispatch_tables.py --remodel '/d256/' --jobs 8   # the committed d256 classes again
  python tools/dispatch_tables.py ... --jobs 8           # one task a problem in 8 processes
  python tools/dispatch_tables.py ... --ray [HOST:PORT]  # ... on a Ray cluster (rocke.tasks)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import dispatch_sweep as ds  # noqa: E402
from benchmarks import engine as engines  # noqa: E402
from rocke.kernels.gfx942 import attention_dispatch as ad  # noqa: E402

TABLE = ROOT / "rocke" / "kernels" / "gfx942" / ad.MODEL_TABLE_FILE
LATENCY = 2000          # the model's central round trip (rocke/arch/costs.py)
WITHIN = 1.03           # the dispatcher's plan must be the model's best within 3 % (issue 41)
# 3D segment counts weighed (normalized to the problem's tiles, plus the rule's own count)
SEGMENT_CANDIDATES = (2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64)
FILL_ROUNDS = (1, 2)    # decode: also the counts that fill the resident slots once / twice

# (dtype, head size, query heads, KV heads): vLLM-style production shapes, GQA 1-32, d64/128/256
CONFIGS = ("f16/128/32/8", "bf16/128/32/8", "f16/64/32/8", "bf16/64/32/8", "f16/128/64/8",
           "bf16/256/16/2", "f16/128/32/32", "f16/128/32/2", "bf16/128/64/2")
DECODE_KV = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# not swept by this tool (the sweep harness passes the window and softcap arguments and the
# caches of --kv-dtypes, nothing else): their classes keep the rule tables
NOT_SWEPT = ("score features other than a 1024-key window and softcap 50 (ALiBi, QQ-bias, sinks, "
             "...; --problems profile / vllm033 sweep their shapes' own windows and softcaps), "
             "int4 KV caches, fp8 output and fp8 queries, and the fields "
             "attention_dispatch.UNSWEPT_FIELDS names (non-causal, padded heads, chunks, ...)")


def parse_config(text: str):
    dt, d, hq, hk = text.split("/")
    return dt, int(d), int(hq), int(hk)


# score features swept (--features): a sliding window of 1024 keys (Mistral / Gemma-style
# local layers) and a logit softcap of 50 (Gemma 2)
FEATURES = {"none": {}, "window1024": {"window": 1024}, "softcap50": {"softcap": 50.0}}


def grid(configs=CONFIGS, kvs=DECODE_KV, batches=DECODE_BATCHES, kinds=None,
         features=("none",), kv_dtypes=("auto",), block_sizes=(64,)) -> list:
    """The sweep's cases: per config, KV cache (dispatch_sweep.KV_DTYPES: "auto" -- q's dtype;
    fp8 with a per-tensor descale; int8 / fp8 with per-token-head scales), block size and score
    feature, decode batches x KV lengths and dispatch_sweep's prefill patterns (prefill mix,
    chunked, long prefill, decode-heavy mix) at their repeats."""
    out = []
    for cfg in configs:
        dt, d, hq, hk = parse_config(cfg)
        for cache in kv_dtypes:
            for bs in block_sizes:
                for f in features:
                    fk = dict(FEATURES[f], kv=cache, block_size=bs)
                    out += [ds.Case("decode", ((1, kv),), b, hq, hk, dt, d, **fk)
                            for kv in kvs for b in batches]
                    for kind, pattern, repeats in ds.PREFILL:
                        out += [ds.Case(kind, pattern, b, hq, hk, dt, d, **fk)
                                for b in repeats]
    return [c for c in out if kinds is None or c.kind in kinds]


# --problems: the problem sets swept. "grid" is the grid above; "profile" benchmarks/profile.py's
# default shapes (SHAPES) at PROFILE_DTYPES x PROFILE_HEAD_SIZES; "vllm033" the plain cases of
# vLLM 0.33's unified-attention test grid (profile.py --grid vllm033), each at its own dtype, head
# size, heads, block size, window and softcap. A profile / vllm033 shape is one Case: batch 1,
# its own sequences the pattern, so the Case's full problem is the one profile.py launches.
PROBLEM_SETS = ("grid", "profile", "vllm033")
PROFILE_DTYPES = ("f16", "bf16")
PROFILE_HEAD_SIZES = (64, 128, 256)


def case_problem(case: ds.Case):
    """The full problem a Case stands for (dispatch_sweep's sampling, the dispatcher's view)."""
    _, sp = ds.sampled_inputs(case)
    return ds.full_problem(case, sp)


def shape_case(kind: str, shape, dtype: str, d: int):
    """(Case, None) for benchmarks/profile.py's ``shape`` (a profile.Shape) at ``dtype`` / ``d``:
    batch 1 over the shape's own sequences, its heads, block size, window and softcap; or (None,
    why) where the sweep cannot stand for it or the table leaves it unswept
    (attention_dispatch.UNSWEPT_FIELDS, e.g. a padded head size)."""
    if shape.block_size not in ds.BLOCK_SIZES:
        return None, f"block size {shape.block_size}: the sweep's pages are {ds.BLOCK_SIZES}"
    if shape.hq % shape.hk:
        return None, f"heads {shape.hq}/{shape.hk}: not whole GQA groups"
    other = sorted(set(shape.extra) - {"window_size", "softcap"})
    if other:
        return None, f"arguments {', '.join(other)}: not passed by the sweep's harness"
    window = -1
    if "window_size" in shape.extra:
        left, right = shape.extra["window_size"]
        if (left, right) != (-1, -1):
            if right != 0 or left < 0:
                return None, f"window_size {(left, right)}: the sweep passes (left, 0) only"
            window = left
    case = ds.Case(kind, tuple(tuple(s) for s in shape.seqs), 1, shape.hq, shape.hk, dtype, d,
                   block_size=shape.block_size, window=window,
                   softcap=float(shape.extra.get("softcap", 0.0)))
    try:
        p = case_problem(case)
        ad.CAPABILITIES.check(p)
    except (ValueError, NotImplementedError) as e:
        return None, f"not representable: {e}"
    unswept = [f"{name}={getattr(p, name)}" for name, default in ad.UNSWEPT_FIELDS
               if getattr(p, name) != default]
    if unswept:
        return None, (f"{', '.join(unswept)}: a field the table leaves unswept "
                      "(attention_dispatch.UNSWEPT_FIELDS; the rules decide)")
    return case, None


def profile_problems(dtypes=PROFILE_DTYPES, head_sizes=PROFILE_HEAD_SIZES, log=print) -> list:
    """benchmarks/profile.py's default shapes (SHAPES) at ``dtypes`` x ``head_sizes``: one Case
    each (shape_case; kind "profile-<shape key>"); a shape the sweep cannot take is logged."""
    from benchmarks import profile as pf
    out = []
    for key, shape in pf.SHAPES.items():
        for dt in dtypes:
            for d in head_sizes:
                case, why = shape_case(f"profile-{key}", shape, dt, d)
                if case is None:
                    log(f"skipped: profile {shape.name} {dt} d{d}: {why}")
                else:
                    out.append(case)
    return out


def vllm033_problems(log=print) -> list:
    """profile.py --grid vllm033's shapes (the plain cases of vLLM 0.33's test grid), each at its
    own dtype and head size: one Case each (shape_case; kind "vllm033"); a shape the sweep cannot
    take is logged."""
    from benchmarks import profile as pf
    out = []
    for name, shape in pf.vllm033_shapes().items():
        case, why = shape_case("vllm033", shape, shape.dtype, shape.head_size)
        if case is None:
            log(f"skipped: {name} ({shape.dtype}): {why}")
        else:
            out.append(case)
    return out


def problems(sets, grid_cases=(), log=print) -> list:
    """The cases of the problem sets ``sets`` (PROBLEM_SETS; "grid" is ``grid_cases``), each
    problem once (the first of equal labels)."""
    out = []
    for name in sets:
        out += (list(grid_cases) if name == "grid" else profile_problems(log=log)
                if name == "profile" else vllm033_problems(log=log))
    seen: dict = {}
    for c in out:
        seen.setdefault(c.label, c)
    return list(seen.values())


def rule_choice(p) -> str:
    """The rule tables' plan (select_path, the 3D geometry's rule count), as before the table."""
    path, _ = ad.select_path(p)
    return "2d" if path == "2d" else f"3d/{ad.geometry(p, '3d').num_segments}"


def model_case(case: ds.Case) -> dict:
    """One problem: its class, every option's modelled us (at LATENCY), the rules' choice."""
    _, sp = ds.sampled_inputs(case)
    p = ds.full_problem(case, sp)
    tiles = ad.cdiv(p.max_seqlen_k, ad.geometry(p, "3d").tile_size)
    rule = rule_choice(p)
    counts = {ad.table_segments(n, tiles) for n in SEGMENT_CANDIDATES}
    counts.add(ad.geometry(p, "3d").num_segments)
    us = {"2d": float(ds.modelled(case, "2d")[LATENCY])}
    other = other_regime_option(p)
    if other:
        us[other] = float(ds.modelled(case, other)[LATENCY])
    for n in sorted(counts):
        us[f"3d/{n}"] = float(ds.modelled(case, "3d", n)[LATENCY])
    row = {"case": case.label, "class": ad.problem_class(p), "us": us, "rule": rule}
    return add_fill(case, row)


def other_regime_option(p) -> str | None:
    """The 2D option in the regime the rules do not pick ("2d:x8t" / "2d:narrow"), where both
    regimes apply to ``p`` (attention_dispatch.regime_geometry); None elsewhere."""
    rules = ad.geometry(p, "2d").regime
    for option, regime in ds.REGIME_OPTIONS.items():
        if regime != rules and ad.regime_geometry(p, regime) is not None:
            return option
    return None


def add_fill(case: ds.Case, row: dict) -> dict:
    """Decode rows gain the options "3d/fill1" and "3d/fill2": the count that fills the CUs'
    resident 3D slots once / twice for this problem's own grid (rounds_segments; the mechanism
    of ALGORITHM.md §10.1's fill rule), so that a class's entry can follow each problem's grid.
    A count not modelled yet is modelled here."""
    _, sp = ds.sampled_inputs(case)
    p = ds.full_problem(case, sp)
    if not p.is_decode:
        return row
    geo = ad.geometry(p, "3d")
    for rounds in FILL_ROUNDS:
        n = ad.rounds_segments(p, geo, rounds)
        if n:
            if f"3d/{n}" not in row["us"]:
                row["us"][f"3d/{n}"] = float(ds.modelled(case, "3d", n)[LATENCY])
            row.setdefault("fill", {})[f"fill{rounds}"] = n
            row["us"][f"3d/fill{rounds}"] = row["us"][f"3d/{n}"]
    return row


def _key(option: str):
    """Preference among equals: 2D in the rules' regime, then in the other, then the fill
    options (they follow a problem's grid), then fewer segments."""
    if option == "2d":
        return (0, 0)
    if option in ds.REGIME_OPTIONS:
        return (0, 1)
    n = option.split("/")[1]
    return (1, int(n[4:]) - 10) if n.startswith("fill") else (1, int(n))


def choose(rows: list) -> dict:
    """The class's entry from its problems' rows: the option whose worst ratio to each
    problem's fastest is least (ties: 2D, then fewer segments), and the best 3D count alike
    (for a forced 3D call); a 2D best in the regime the rules do not pick is named
    ("regime", which attention_dispatch.plan follows)."""
    options = sorted({o for r in rows for o in r["us"]}, key=_key)

    def worst(o):
        return max(r["us"][o] / min(r["us"].values()) if o in r["us"] else float("inf")
                   for r in rows)
    best = min(options, key=lambda o: (round(worst(o), 9), _key(o)))
    best3 = min((o for o in options if o.startswith("3d/")),
                key=lambda o: (round(worst(o), 9), _key(o)))
    us = {o: round(rows[0]["us"][o], 3) for o in sorted(rows[0]["us"], key=_key)}
    n3 = best3.split("/")[1]
    entry = {"path": "2d" if ds.is_2d(best) else "3d",
             "segments": n3 if n3.startswith("fill") else int(n3), "best": best,
             "worst_ratio": round(float(worst(best)), 4),
             "problems": sorted(r["case"] for r in rows), "us": us}
    if best in ds.REGIME_OPTIONS:
        entry["regime"] = ds.REGIME_OPTIONS[best]
    return entry


def case_options(case: ds.Case) -> list[tuple[str, int]]:
    """Every (path, segments) option ``model_case`` models for ``case`` (the fill counts
    ``add_fill`` adds included), each once, in the order model_case takes them."""
    _, sp = ds.sampled_inputs(case)
    p = ds.full_problem(case, sp)
    geo = ad.geometry(p, "3d")
    tiles = ad.cdiv(p.max_seqlen_k, geo.tile_size)
    counts = {ad.table_segments(n, tiles) for n in SEGMENT_CANDIDATES} | {geo.num_segments}
    options = [("2d", 1)]
    other = other_regime_option(p)
    if other:
        options.append((other, 1))
    options += [("3d", n) for n in sorted(counts)]
    if p.is_decode:
        fills = {ad.rounds_segments(p, geo, rounds) for rounds in FILL_ROUNDS} - {0, None}
        options += [("3d", n) for n in sorted(fills - counts)]
    return options


def option_task(item: tuple) -> float:
    """One option of one problem (rocke.tasks): modelled and kept in the result store, so that
    ``model_case`` then finds it; returns the seconds it took."""
    case, path, ns = item
    start = time.perf_counter()
    ds.modelled(case, path, ns)
    return time.perf_counter() - start


def model_options(cases: list, engine, log=print) -> None:
    """``--per-option``: every option of every case as its own task, the longest KV walks
    first, each kept in the result store (which must be on). A problem's options then run on
    as many processes as there are, so a few long problems no longer hold the run's end."""
    from rocke import tasks
    from rocke.compiler.results import default_store
    if default_store() is None:
        raise ValueError("--per-option keeps each option in the result store, and "
                         "ROCKE_RESULTS_DIR is off")
    items = [(c, path, ns) for c in cases for path, ns in case_options(c)]
    items.sort(key=lambda it: -max(k for _, k in it[0].pattern))   # stable: cases' order
    t0 = time.monotonic()
    for count, (i, seconds) in enumerate(tasks.run(option_task, items, engine), 1):
        case, path, ns = items[i]
        print(f"dispatch_tables --per-option: {count}/{len(items)} options, "
              f"{time.monotonic() - t0:.0f} s; {case.label} {path}/{ns} in {seconds:.0f} s",
              file=sys.stderr, flush=True)
    log(f"per-option: {len(items)} options of {len(cases)} problems modelled")


def model_task(case: ds.Case) -> tuple[dict, float]:
    """One problem's task (rocke.tasks): its row (model_case) and the seconds it took."""
    start = time.perf_counter()
    row = model_case(case)
    return row, time.perf_counter() - start


def build(cases: list, log=print, rows_out: Path | None = None, rows=(), engine=None,
          progress: bool = False) -> tuple[dict, list]:
    """({class: entry}, rows) over `cases` (each modelled, one task a problem on `engine`, a
    rocke.tasks.Engine, default serial; the rows kept in the cases' order whatever the engine,
    each appended to `rows_out` as a JSON line and logged as soon as it and every case before
    it are done) and the already modelled `rows`. `progress`: a line on stderr per problem
    done, with the seconds it took."""
    from rocke import tasks
    rows = list(rows)
    engine = engine or tasks.Engine("serial", 1)
    if progress:
        results = engines.run_ordered(model_task, cases, engine, "dispatch_tables", describe=lambda
                                 done: f"; {done[0]['case']} modelled in {done[1]:.0f} s")
    else:
        results = tasks.ordered(tasks.run(model_task, cases, engine))
    for r, _ in results:
        rows.append(r)
        if rows_out is not None:
            with open(rows_out, "a") as f:
                f.write(json.dumps(r) + "\n")
        best = min(r["us"], key=r["us"].get)
        log(f"{r['case']}: class {r['class']} | fastest {best} {r['us'][best]:.1f} us | rules "
            f"{r['rule']} {r['us'].get(r['rule'], float('nan')):.1f} us "
            f"({r['us'].get(r['rule'], float('nan')) / r['us'][best]:.2f}x)")
    by_class: dict = {}
    for r in rows:
        by_class.setdefault(r["class"], []).append(r)
    return {k: choose(v) for k, v in sorted(by_class.items())}, rows


def launched_option(row: dict, option: str) -> str:
    """``option`` as the count it launches on ``row``'s problem ("3d/fill1" -> "3d/<n>")."""
    if option.startswith("3d/fill"):
        n = row.get("fill", {}).get(option[3:])
        return f"3d/{n}" if n else option
    return option


def report(table: dict, rows: list, log=print) -> int:
    """Per problem: the table's plan and the rules' against the fastest; returns how many
    problems the table puts beyond WITHIN. Also how many problems the table moves off the
    rules' plan, and on how many the rules' plan is beyond WITHIN."""
    beyond = moved = rules_beyond = 0
    worst_rule = worst_table = (1.0, "")
    for r in rows:
        fastest = min(r["us"].values())
        e = table[r["class"]]
        ratio = r["us"][e["best"]] / fastest
        rule = r["us"].get(r["rule"], float("nan")) / fastest
        worst_table = max(worst_table, (ratio, r["case"]))
        worst_rule = max(worst_rule, (rule, r["case"]))
        beyond += ratio > WITHIN
        moved += launched_option(r, e["best"]) != r["rule"]
        rules_beyond += not rule <= WITHIN
    log(f"{len(rows)} problems, {len(table)} classes (modelled MI300X time, round trip "
        f"{LATENCY} cycles): the table's plan within {100 * (WITHIN - 1):.0f} % of the fastest "
        f"option on {len(rows) - beyond}, worst {worst_table[0]:.3f}x ({worst_table[1]}); the "
        f"rule tables' worst {worst_rule[0]:.3f}x ({worst_rule[1]})")
    log(f"moved vs the rules: the table's plan differs from the rules' on {moved} of "
        f"{len(rows)} problems; the rules' plan is beyond {100 * (WITHIN - 1):.0f} % of the "
        f"fastest on {rules_beyond}")
    log(f"not swept (the rule tables decide): {NOT_SWEPT}")
    return beyond


def merge(committed: dict, classes: dict, rows: list) -> dict:
    """The committed table with this run's ``classes`` (built from ``rows``) merged in: a class
    new to it is added; a class whose committed problems this run modelled again is replaced; a
    class committed from other problems too (e.g. a grid problem of the same exact class as a
    profile shape) is chosen again over this run's rows and, for each committed problem not
    modelled here, the committed entry's times (its "us": one exact class's problems are the
    same problem to the dispatcher), the rows in their labels' order -- so a re-run of the same
    problems leaves the entry as it is."""
    merged = dict(committed)
    by_class: dict = {}
    for r in rows:
        by_class.setdefault(r["class"], []).append(r)
    for key, entry in classes.items():
        old = committed.get(key)
        labels = {r["case"] for r in by_class[key]}
        if old is None or set(old["problems"]) <= labels:
            merged[key] = entry
            continue
        kept = [{"case": c, "us": old["us"]} for c in old["problems"] if c not in labels]
        merged[key] = choose(sorted(kept + by_class[key], key=lambda r: r["case"]))
    return merged


def label_batches(labels) -> set:
    """The batch counts Case labels name ("<kind> [<pattern>]x<batch> ...")."""
    return {int(m.group(1)) for c in labels if (m := re.search(r"\]x(\d+) ", c))}


def cases_by_label(labels, kvs=DECODE_KV) -> dict:
    """{label: Case} over every problem a committed entry or a row can name: the grid at every
    config, score feature, cache and page size (decode at ``kvs`` x the default batches and
    every batch ``labels`` name, e.g. held-out ones), and the profile and vllm033 shapes."""
    batches = sorted(set(DECODE_BATCHES) | label_batches(labels))
    out = {c.label: c for c in grid(CONFIGS, kvs, batches, features=tuple(FEATURES),
                                    kv_dtypes=ds.KV_DTYPES, block_sizes=ds.BLOCK_SIZES)}
    out.update((c.label, c) for c in problems(["profile", "vllm033"], log=lambda *_: None))
    return out


def committed_cases(committed: dict, pattern: str) -> list:
    """The Cases of every problem of the committed classes whose key matches ``pattern``
    (re.search), in label order; a label this tool cannot name is an error (ValueError)."""
    rx = re.compile(pattern)
    labels = sorted({c for key, e in committed.items() if rx.search(key) for c in e["problems"]})
    if not labels:
        return []
    by_label = cases_by_label(labels)
    unknown = [c for c in labels if c not in by_label]
    if unknown:
        raise ValueError(f"committed problems this tool cannot name: {unknown[:3]} "
                         f"({len(unknown)} in all)")
    return [by_label[c] for c in labels]


def missing_regimes(committed: dict, log=print) -> list:
    """[(class, Case, option)]: each committed class whose problem can launch 2D in the regime
    the rules do not pick (other_regime_option) and whose times lack that option -- one Case a
    class, its first problem (one exact class's problems are the same problem to the
    dispatcher). A class none of whose problems this tool can name is logged and left."""
    by_label = cases_by_label({c for e in committed.values() for c in e["problems"]})
    out = []
    for key, entry in committed.items():
        case = next((by_label[c] for c in entry["problems"] if c in by_label), None)
        if case is None:
            log(f"add-regimes: {key}: no problem of it can be named here ({entry['problems'][0]})")
            continue
        option = other_regime_option(case_problem(case))
        if option is not None and option not in entry["us"]:
            out.append((key, case, option))
    return out


def regime_task(item: tuple) -> tuple[str, str, float, float]:
    """One class's missing option (rocke.tasks): (class, option, modelled us at LATENCY,
    seconds it took)."""
    key, case, option = item
    start = time.perf_counter()
    us = float(ds.modelled(case, option)[LATENCY])
    return key, option, us, time.perf_counter() - start


def add_regime(entry: dict, option: str, us: float) -> dict:
    """``entry`` with ``option``'s time added: where it is faster than the entry's best, the
    entry is chosen again over its problems (each with the entry's times, as merge does);
    otherwise only the time is added and the plan stays."""
    times = {**entry["us"], option: us}
    if us < entry["us"][entry["best"]]:
        return choose([{"case": c, "us": times} for c in entry["problems"]])
    return {**entry, "us": {o: round(times[o], 3) for o in sorted(times, key=_key)}}


def add_regimes(committed: dict, engine=None, log=print) -> tuple[dict, int]:
    """The committed table with every missing other-regime option modelled (one task a class on
    ``engine``, default serial) and added (add_regime); and how many entries changed plan."""
    from rocke import tasks
    todo = missing_regimes(committed, log=log)
    engine = engine or tasks.Engine("serial", 1)
    log(f"add-regimes: {len(todo)} classes lack the other regime's 2D time")
    merged, moved = dict(committed), 0
    for key, option, us, _ in engines.run_ordered(
            regime_task, todo, engine, "add-regimes",
            describe=lambda done: f"; {done[0]} {done[1]} {done[2]:.1f} us in {done[3]:.0f} s"):
        old = committed[key]
        merged[key] = add_regime(old, option, us)
        if merged[key]["best"] != old["best"]:
            moved += 1
            log(f"{key}: {old['best']} {old['us'][old['best']]:.1f} us -> {option} {us:.1f} us")
    return merged, moved


def read_table(path: Path = TABLE) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {"classes": {}}


def write_table(classes: dict, path: Path = TABLE) -> None:
    doc = {"about": "gfx942 dispatch table: per problem class (attention_dispatch.problem_class) "
                    "the plan the model puts fastest (modelled MI300X time at a "
                    f"{LATENCY}-cycle round trip, not GPU time); written by "
                    "tools/dispatch_tables.py, do not edit by hand",
           "latency_cycles": LATENCY, "classes": dict(sorted(classes.items()))}
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only-configs", nargs="+", default=list(CONFIGS),
                    help="DTYPE/HEAD/QHEADS/KVHEADS, e.g. f16/128/32/8")
    ap.add_argument("--kv", nargs="+", type=int, default=list(DECODE_KV))
    ap.add_argument("--batches", nargs="+", type=int, default=list(DECODE_BATCHES))
    ap.add_argument("--kinds", nargs="+")
    ap.add_argument("--features", nargs="+", default=["none"], choices=sorted(FEATURES),
                    help="score features swept (default: none)")
    ap.add_argument("--kv-dtypes", nargs="+", default=["auto"], choices=list(ds.KV_DTYPES),
                    help="KV caches swept (default: auto, q's dtype): fp8 (per-tensor descale), "
                         "int8_per_token_head, fp8_per_token_head")
    ap.add_argument("--block-sizes", nargs="+", type=int, default=[64],
                    choices=list(ds.BLOCK_SIZES), help="the caches' page sizes (default: 64)")
    ap.add_argument("--check", action="store_true",
                    help="compare with the committed table; write nothing; exit 1 on a difference")
    ap.add_argument("--fresh", action="store_true", help="replace the table instead of merging")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--rows-out", type=Path, help="append each problem's modelled row to this "
                    "JSON-lines file as it is done")
    ap.add_argument("--from-rows", type=Path, nargs="+", help="build from these JSON-lines "
                    "files (earlier --rows-out runs) instead of modelling anything")
    ap.add_argument("--per-option", action="store_true", help="first model every option of "
                    "every problem as its own task (kept in the result store), then build the "
                    "rows from the store: balances --jobs / --ray when a few problems are long")
    ap.add_argument("--grid", choices=["full"], default="full")
    ap.add_argument("--problems", nargs="+", choices=PROBLEM_SETS, default=["grid"],
                    help="the problem sets swept (default: grid, the options above): profile -- "
                         "benchmarks/profile.py's default shapes at f16/bf16 x d64/128/256; "
                         "vllm033 -- profile.py --grid vllm033's shapes (vLLM 0.33's test grid); "
                         "one problem a shape (batch 1, its own sequences); shapes the table "
                         "leaves unswept are skipped with the reason")
    ap.add_argument("--refill", action="store_true", help="with --from-rows: add the fill "
                    "options to decode rows that lack them (modelling the missing counts)")
    ap.add_argument("--remodel", metavar="REGEX", help="model again every problem of the "
                    "committed classes whose key matches REGEX (re.search), e.g. after a kernel "
                    "change that moves only their times, and merge them (the other options "
                    "select nothing)")
    ap.add_argument("--add-regimes", action="store_true", help="model only the 2D option in "
                    "the regime the rules do not pick, for every committed class that can take "
                    "it and lacks its time (one task a class), and choose those entries again")
    engines.add_engine_options(ap)
    a = ap.parse_args(argv)
    modes = [m for m, on in (("--add-regimes", a.add_regimes), ("--remodel", a.remodel),
                             ("--from-rows", a.from_rows)) if on]
    if len(modes) > 1:
        ap.error(f"{' and '.join(modes)}: choose one (each decides what is modelled)")
    if a.per_option and (a.add_regimes or a.from_rows):
        ap.error(f"--per-option models the problems of --remodel or the grid; "
                 f"{'--add-regimes' if a.add_regimes else '--from-rows'} models no such set")
    engine = engines.engine_of(ap, a)
    if a.add_regimes:
        committed = read_table()["classes"]
        merged, moved = add_regimes(committed, engine)
        print(f"add-regimes: {sum(merged[k] != committed[k] for k in committed)} entries gained "
              f"a time, {moved} of them another plan; the table holds {len(merged)} classes")
        if not a.check:
            write_table(merged)
            print(f"wrote {TABLE.relative_to(ROOT)}")
        return 1 if a.check and merged != committed else 0
    if a.remodel:
        try:
            cases = committed_cases(read_table()["classes"], a.remodel)
        except (ValueError, re.error) as e:
            ap.error(f"--remodel {a.remodel!r}: {e}")
        if not cases:
            ap.error(f"--remodel {a.remodel!r}: no committed class matches")
    else:
        cases = problems(a.problems, grid(a.only_configs, a.kv, a.batches, a.kinds, a.features,
                                          a.kv_dtypes, a.block_sizes)
                         if "grid" in a.problems else ())
    if a.list:
        for c in cases:
            print(c.label)
        print(f"{len(cases)} problems")
        return 0
    if a.from_rows:
        rows = [json.loads(line) for f in a.from_rows for line in f.read_text().splitlines()
                if line.strip()]
        seen = {}
        for r in rows:      # a problem modelled twice: the last row
            seen[r["case"]] = r
        by_label = cases_by_label(seen, sorted(set(DECODE_KV) | set(a.kv)))
        for r in seen.values():     # the class as problem_class gives it now
            if r["case"] in by_label:
                _, sp = ds.sampled_inputs(by_label[r["case"]])
                r["class"] = ad.problem_class(ds.full_problem(by_label[r["case"]], sp))
        if a.refill:        # rows of an earlier run without the fill options
            for r in seen.values():
                if "fill" not in r and r["case"] in by_label:
                    add_fill(by_label[r["case"]], r)
        if a.rows_out:
            a.rows_out.write_text("".join(json.dumps(r) + "\n" for r in seen.values()))
        classes, rows = build([], rows=list(seen.values()))
    else:
        if a.per_option:
            try:
                model_options(cases, engine)
            except ValueError as e:
                ap.error(str(e))
        classes, rows = build(cases, rows_out=a.rows_out, engine=engine, progress=True)
    beyond = report(classes, rows)
    committed = read_table()["classes"]
    merged = classes if a.fresh else merge(committed, classes, rows)
    if a.check:
        diff = [k for k in classes if committed.get(k) != merged.get(k)]
        for k in diff:
            print(f"differs: {k}: committed {committed.get(k)} | tool {merged.get(k)}")
        print(f"check: {len(classes) - len(diff)} of {len(classes)} classes equal the committed table")
        return 1 if diff else 0
    added = sum(k not in committed for k in classes)
    plan = ("path", "segments", "best")
    moved = sum(k in committed and [committed[k][f] for f in plan] != [merged[k][f] for f in plan]
                for k in classes)
    changed = sum(k in committed and committed[k] != merged[k] for k in classes) - moved
    print(f"merged: {added} classes added; of the {len(classes) - added} already tabulated, "
          f"{moved} with another plan, {changed} with the same plan and more problems or other "
          f"times, {len(classes) - added - moved - changed} as committed; the table holds "
          f"{len(merged)} classes")
    write_table(merged)
    print(f"wrote {TABLE.relative_to(ROOT)}")
    return 1 if beyond else 0


if __name__ == "__main__":
    # run as the importable module (tools.dispatch_tables, not __main__), so that a task's
    # function reaches forked processes and Ray workers by reference
    from tools import dispatch_tables
    raise SystemExit(dispatch_tables.main())
