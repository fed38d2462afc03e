"""Every ``HIPDNN_GFX942_*`` lever of the gfx942 attention family, read in this one
module. The ``ROCKE_*`` levers live in ``rocke/env.py``.

``read_knobs(environ)`` parses and validates them into an ``AttentionKnobs`` (a bad value is a
``ValueError`` naming the variable; a CK-internal lever rocke has no mechanism for is rejected with
a message saying what rocke does instead). The dispatcher (``attention_unified``) applies them:
each lever that changes code becomes a field of the 2D/3D kernel spec (``spec_overrides``), so it
is encoded in the kernel's name and has its own golden hash. ``describe()`` is what a harness
echoes at start-up.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, fields
from typing import Mapping

from rocke import env

PREFIX = "HIPDNN_GFX942_"

#: FLASH_WIDE value -> (geometry name, num_warps) of the transposed-x8 regime (ALGORITHM.md §10.2)
FLASH_GEOMETRIES: dict[int, tuple[str, int]] = {4: ("wide4", 4), 2: ("wide2", 2), 0: ("L4", 1)}
KV_CACHE_POLICIES = ("stream", "normal")

_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")

#: lever -> (default shown by describe(), meaning)
LEVERS: dict[str, tuple[str, str]] = {
    "FLASH_WIDE": ("4", "flash geometry for the transposed-x8 regime: 4 = wide4 (WG 256), "
                        "2 = wide2 (WG 128), 0 = L4 (WG 64)"),
    "NUM_WARPS": ("unset", "override num_warps of the flash regime (1, 2, 4 or 8)"),
    "WAVES_PER_EU": ("unset", "amdgpu-waves-per-eu occupancy hint (1..8)"),
    "IGLP": ("0", "emit an iglp_opt scheduling hint in the tile step (strategy 0: the kernel's; "
                  "see ALGORITHM.md §9)"),
    "KV_CACHE_POLICY": ("unset", "KV-cache load policy: stream (non-temporal) or normal; unset = "
                                 "the shipped variants' policy (normal)"),
    "Q_DIRECT": ("0", "load Q straight from global memory into registers (no Q LDS stage)"),
    "GLOBAL_LOAD_LDS_K": ("0", "move K tiles global -> LDS with buffer-load-to-LDS DMA"),
    "Q_MAJOR_GRID": ("0", "query-major launch grid (total_num_q_blocks, num_kv_heads)"),
    "CFV_STORE": ("0", "conflict-free V store: a V LDS layout whose stores and PV reads are "
                       "bank-conflict-free"),
    "2D_GRAPH": ("1", "allow graph replay of the 2D path where the dispatcher recommends it"),
    "3D_GRAPH": ("1", "allow graph replay of the 3D path where the dispatcher recommends it"),
    # CK-internal levers: accepted only at the value that matches what rocke does
    "CFV": ("0", "CK's legacy gather-fill conflict-free V path (rocke: not provided)"),
    "CFV_STORE_SPLIT": ("1", "CK sub-knob of CFV_STORE (rocke: always on inside CFV_STORE)"),
    "CFV_CK_VLDS": ("1", "CK sub-knob of CFV_STORE (rocke: always on inside CFV_STORE)"),
    "K_SLICED_RING": ("0", "CK's sliced-K ring (rocke: not provided)"),
    "K_LDSSEQ": ("0", "CK Tile's LdsSeq sliced-K variant (rocke: not provided)"),
}

# What rocke does instead of each CK-internal lever, for the start-up rejection.
_REJECTED_ON = {
    "CFV": "rocke has no legacy gather-fill V path; its conflict-free V layout is "
           "HIPDNN_GFX942_CFV_STORE=1",
    "K_SLICED_RING": "rocke does not slice K into a ring; K is single- or double-buffered in LDS "
                     "by the dispatcher's geometry rule (use_k_single_buffer) and can be moved by "
                     "LDS DMA with HIPDNN_GFX942_GLOBAL_LOAD_LDS_K=1",
    "K_LDSSEQ": "rocke does not slice K through an LdsSeq; use HIPDNN_GFX942_GLOBAL_LOAD_LDS_K=1 "
                "for direct global -> LDS K loads",
}
_REJECTED_OFF = {
    "CFV_STORE_SPLIT": "rocke's conflict-free V store always splits its V stores; it cannot be "
                       "turned off separately (turn the whole layout off with "
                       "HIPDNN_GFX942_CFV_STORE=0)",
    "CFV_CK_VLDS": "rocke's conflict-free V store always reads V with its own LDS layout; it "
                   "cannot be turned off separately (use HIPDNN_GFX942_CFV_STORE=0)",
}


@dataclass(frozen=True)
class AttentionKnobs:
    flash_wide: int = 4
    num_warps: int | None = None
    waves_per_eu: int | None = None
    iglp: bool = False
    kv_cache_policy: str | None = None     # None: the kernel's (shipped variants') default
    q_direct: bool = False
    global_load_lds_k: bool = False
    q_major_grid: bool = False
    cfv_store: bool = False
    graph_2d: bool = True
    graph_3d: bool = True

    @property
    def flash_geometry(self) -> str:
        return FLASH_GEOMETRIES[self.flash_wide][0]

    @property
    def flash_num_warps(self) -> int:
        """num_warps of the flash regime: NUM_WARPS if set, else FLASH_WIDE's geometry."""
        return self.num_warps if self.num_warps is not None else FLASH_GEOMETRIES[self.flash_wide][1]

    def is_default(self) -> bool:
        return self == AttentionKnobs()


# knob field -> the 2D/3D spec field it sets (attention_tiled_2d / _3d share the names). An
# unset KV_CACHE_POLICY keeps the kernel's default ("normal", the shipped variants'), so the
# dispatcher picks only variants `rocke list` shows; non-temporal K/V loads are
# HIPDNN_GFX942_KV_CACHE_POLICY=stream.
SPEC_FIELDS: dict[str, str] = {
    "waves_per_eu": "waves_per_eu",
    "iglp": "iglp",
    "kv_cache_policy": "kv_cache_policy",
    "q_direct": "q_direct",
    "global_load_lds_k": "global_load_lds_k",
    "q_major_grid": "q_major_grid",
    "cfv_store": "cfv_store",
}


def _spec_value(knob: str, value):
    if knob == "waves_per_eu":
        return 0 if value is None else value     # the spec's "no hint"
    return value


@functools.lru_cache(maxsize=None)
def spec_field_names(spec_cls) -> frozenset:
    """The field names of a spec dataclass (asked on every plan; a class's fields never change)."""
    return frozenset(f.name for f in fields(spec_cls))


def spec_overrides(knobs: AttentionKnobs, spec_cls) -> dict:
    """The spec fields the levers set, for a spec dataclass ``spec_cls``. Every lever is applied
    (so the provider defaults hold); a lever the kernel has no field for is an error naming
    both when it is set away from its default, never silently dropped."""
    have = spec_field_names(spec_cls)
    default = AttentionKnobs()
    out = {}
    for knob, field_name in SPEC_FIELDS.items():
        value = getattr(knobs, knob)
        if field_name not in have:
            if value != getattr(default, knob):
                raise ValueError(f"{PREFIX}{knob.upper()}: {spec_cls.__name__} has no field "
                                 f"{field_name!r} for this lever")
            continue
        if value is None and knob == "kv_cache_policy":
            continue
        out[field_name] = _spec_value(knob, value)
    return out


def _raw(environ: Mapping[str, str], lever: str) -> str | None:
    value = environ.get(PREFIX + lever)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _bool(environ, lever: str, default: bool) -> bool:
    value = _raw(environ, lever)
    if value is None:
        return default
    low = value.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"{PREFIX}{lever}: must be 0 or 1 (or true/false, on/off), got {value!r}")


def _int(environ, lever: str, choices) -> int | None:
    value = _raw(environ, lever)
    if value is None:
        return None
    try:
        number = int(value, 10)
    except ValueError:
        number = None
    if number not in choices:
        raise ValueError(f"{PREFIX}{lever}: must be one of {', '.join(map(str, choices))}, "
                         f"got {value!r}")
    return number


_LEVER_VARIABLES = tuple(PREFIX + lever for lever in LEVERS)
# the last parse: [number of environment variables, every lever variable's value, knobs]
_current: list = [None, None, None]


def current_knobs() -> AttentionKnobs:
    """``read_knobs()`` of os.environ, parsed again only when a lever variable's value changes
    (set, unset or edited: every one is read each call, a few dict look-ups) or the number of
    environment variables changes (an unknown HIPDNN_GFX942_* variable appearing is refused at
    the next parse)."""
    count, values, knobs = _current
    now = env.lookup(_LEVER_VARIABLES)
    if count == len(os.environ) and values == now:
        return knobs
    knobs = read_knobs()
    _current[:] = (len(os.environ), now, knobs)
    return knobs


def read_knobs(environ: Mapping[str, str] | None = None) -> AttentionKnobs:
    """Parse and validate every HIPDNN_GFX942_* lever from ``environ`` (default os.environ)."""
    env = os.environ if environ is None else environ
    unknown = sorted(k for k in env if k.startswith(PREFIX) and k[len(PREFIX):] not in LEVERS)
    if unknown:
        raise ValueError(f"{unknown[0]}: not a gfx942 attention lever; known: "
                         f"{', '.join(PREFIX + k for k in LEVERS)}")
    for lever, why in _REJECTED_ON.items():
        if _bool(env, lever, False):
            raise ValueError(f"{PREFIX}{lever}=1 is not supported: {why}")
    for lever, why in _REJECTED_OFF.items():
        if not _bool(env, lever, True):
            raise ValueError(f"{PREFIX}{lever}=0 is not supported: {why}")
    flash_wide = _int(env, "FLASH_WIDE", sorted(FLASH_GEOMETRIES))
    policy = _raw(env, "KV_CACHE_POLICY")
    if policy is not None and policy.lower() not in KV_CACHE_POLICIES:
        raise ValueError(f"{PREFIX}KV_CACHE_POLICY: must be one of {', '.join(KV_CACHE_POLICIES)}, "
                         f"got {policy!r}")
    return AttentionKnobs(
        flash_wide=4 if flash_wide is None else flash_wide,
        num_warps=_int(env, "NUM_WARPS", (1, 2, 4, 8)),
        waves_per_eu=_int(env, "WAVES_PER_EU", tuple(range(1, 9))),
        iglp=_bool(env, "IGLP", False),
        kv_cache_policy=None if policy is None else policy.lower(),
        q_direct=_bool(env, "Q_DIRECT", False),
        global_load_lds_k=_bool(env, "GLOBAL_LOAD_LDS_K", False),
        q_major_grid=_bool(env, "Q_MAJOR_GRID", False),
        cfv_store=_bool(env, "CFV_STORE", False),
        graph_2d=_bool(env, "2D_GRAPH", True),
        graph_3d=_bool(env, "3D_GRAPH", True),
    )


def describe(knobs: AttentionKnobs | None = None, environ: Mapping[str, str] | None = None) -> str:
    """One line per lever: its variable, the value in effect, whether set, and what it does."""
    env = os.environ if environ is None else environ
    knobs = read_knobs(env) if knobs is None else knobs
    shown = {
        "FLASH_WIDE": f"{knobs.flash_wide} ({knobs.flash_geometry}, num_warps {knobs.flash_num_warps})",
        "NUM_WARPS": "unset" if knobs.num_warps is None else str(knobs.num_warps),
        "WAVES_PER_EU": "unset" if knobs.waves_per_eu is None else str(knobs.waves_per_eu),
        "IGLP": str(int(knobs.iglp)),
        "KV_CACHE_POLICY": knobs.kv_cache_policy or "unset (kernel default: normal)",
        "Q_DIRECT": str(int(knobs.q_direct)), "GLOBAL_LOAD_LDS_K": str(int(knobs.global_load_lds_k)),
        "Q_MAJOR_GRID": str(int(knobs.q_major_grid)), "CFV_STORE": str(int(knobs.cfv_store)),
        "2D_GRAPH": str(int(knobs.graph_2d)), "3D_GRAPH": str(int(knobs.graph_3d)),
    }
    lines = ["gfx942 attention levers (HIPDNN_GFX942_*):"]
    for lever, (default, meaning) in LEVERS.items():
        value = shown.get(lever, _raw(env, lever) or default)
        origin = "set" if _raw(env, lever) is not None else "default"
        lines.append(f"  {PREFIX}{lever}={value} [{origin}] - {meaning}")
    return "\n".join(lines)
