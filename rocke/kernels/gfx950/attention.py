"""gfx950 (MI350X / MI355X) unified paged attention, first step: gfx942's 2D, 3D split-KV and
reduce_segments kernels built for gfx950. Every instruction they use exists on gfx950 (the MFMAs
16x16x16 f16/bf16 and 32x32x8 f16 are in gfx950's catalog, rocke/arch/mfma.py), so the code is
gfx942's; what differs is the target: the LDS budget is gfx950's 160 KiB, the code object is a
gfx950 one, and fp8 (KV caches, the output) is OCP ``fp8_e4m3fn`` (bias 7, max 448, NaN 0x7f /
0xff), gfx942's ``fp8_e4m3fnuz`` is refused: the same v_cvt_f32_fp8 / v_cvt_pk_fp8_f32 read and
write OCP codes on gfx950 (``attention_quant.on_target`` maps the kernels' fp8 names, the DSL's
conversion checks the format against the target). The kernel names end in ``_gfx950``.

The specs are gfx942's with ``target = "gfx950"`` (a class attribute, not a field: the same fields
and rules; a gfx942 spec's IR is untouched). The dispatcher is ``attention_dispatch`` here.
"""
from __future__ import annotations

from dataclasses import dataclass, fields as dataclass_fields
from typing import ClassVar

from rocke import dsl
from rocke.kernels.common.checks import check_choice
from rocke.kernels.gfx942 import attention_policy as policy
from rocke.kernels.gfx942 import attention_tiled_2d as a2
from rocke.kernels.gfx942 import attention_tiled_3d as a3
from rocke.kernels.gfx942 import reduce_segments as rs

TARGET = "gfx950"


NARROW_ATOMS = ("16x16x16", "16x16x32")     # the narrow path's MFMA: gfx942's, or gfx950's wide-K
X8T_ATOMS = ("32x32x8", "32x32x16")         # the transposed-x8 regime's: gfx942's, or gfx950's wide-K
X8T_DEFAULT = "32x32x16"                    # gfx950's transposed-x8 policy (the "combo" on wide-K)


@dataclass(frozen=True)
class UnifiedAttention2DSpec(a2.UnifiedAttention2DSpec):
    """gfx942's 2D spec (fields and rules), built for gfx950, plus the atoms of its two regimes:
    ``narrow_atom="16x16x32"`` reduces 32 head-dim (QK^T) / key (PV) elements per MFMA, twice
    16x16x16's, with the same 16x16 accumulator (so the softmax code is unchanged); it needs a
    tile of whole 32-key steps. ``x8t_atom="32x32x16"`` (the transposed-32x32 "combo" on the
    wide-K atom) does the same for the transposed-x8 regime: 16 elements per MFMA, the same 32x32
    accumulator, P^T still register-resident (its PV operand in the accumulator's key order,
    ``rocke.dsl.softmax.transposed_pv_operand``), and, unlike 32x32x8, bf16 as well as fp16.
    It is gfx950's transposed-x8 policy: ``x8t_atom=None`` resolves to it on that regime (as
    ``tile_size=0`` resolves to the regime's tile); ``"32x32x8"`` keeps gfx942's atom (fp16)."""
    target: ClassVar[str] = TARGET
    narrow_atom: str = "16x16x16"
    x8t_atom: str | None = None          # transposed-x8 only; None: X8T_DEFAULT

    def __post_init__(self):
        if self.x8t_atom is None and self.regime == policy.TRANSPOSED_X8:
            object.__setattr__(self, "x8t_atom", X8T_DEFAULT)
        problems = x8t_atom_problems(self)
        if problems:
            raise ValueError(problems[0])
        super().__post_init__()
        if self.narrow_atom != NARROW_ATOMS[0]:
            if self.transposed_x8:
                raise ValueError(f"narrow_atom: {self.narrow_atom} is the narrow path's; the "
                                 f"transposed-x8 regime takes x8t_atom")
            if self.tile_size % 32:
                raise ValueError(f"narrow_atom: {self.narrow_atom} walks 32 keys per PV step; "
                                 f"tile_size {self.tile_size} is not a multiple of 32")

    @property
    def kernel_name(self) -> str:
        wide = f"_{self.narrow_atom}" if self.narrow_atom != NARROW_ATOMS[0] else ""
        wide += f"_{self.x8t_atom}" if self.x8t_atom not in (None, X8T_ATOMS[0]) else ""
        return f"{super().kernel_name}{wide}_{TARGET}"


def x8t_atom_problems(spec) -> list[str]:
    """The gfx950 atom fields' own rules (before gfx942's, which read ``x8t_atom`` for the
    transposed regime's dtypes): each a choice, and the wide-K 32x32x16 only on the
    transposed-x8 regime."""
    out = []
    for name, choices in (("narrow_atom", NARROW_ATOMS), ("x8t_atom", (None,) + X8T_ATOMS)):
        try:
            check_choice(name, getattr(spec, name), choices)
        except ValueError as e:
            out.append(str(e))
    if not out and spec.x8t_atom is not None and spec.regime == policy.NARROW:
        out.append(f"x8t_atom: {spec.x8t_atom} is the transposed-x8 regime's; regime "
                   f"{spec.regime!r} takes narrow_atom")
    return out


def supports_tiled_2d(spec=None, **fields) -> bool:
    """gfx950's 2D gate: True iff ``UnifiedAttention2DSpec(**fields)`` is accepted (a spec's
    fields, overridden by keyword fields): gfx942's rules at gfx950's LDS, and the atoms'."""
    if spec is not None:
        fields = {**{f.name: getattr(spec, f.name) for f in dataclass_fields(spec)}, **fields}
    try:
        UnifiedAttention2DSpec(**fields)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class UnifiedAttention3DSpec(a3.UnifiedAttention3DSpec):
    """gfx942's 3D split-KV spec (fields and rules), built for gfx950."""
    target: ClassVar[str] = TARGET

    @property
    def kernel_name(self) -> str:
        return f"{super().kernel_name}_{TARGET}"


@dataclass(frozen=True)
class ReduceSegmentsSpec(rs.ReduceSegmentsSpec):
    """gfx942's segment merge, built for gfx950."""
    target: ClassVar[str] = TARGET

    @property
    def kernel_name(self) -> str:
        return f"{super().kernel_name}_{TARGET}"


SPEC_CLASSES = (UnifiedAttention2DSpec, UnifiedAttention3DSpec, ReduceSegmentsSpec)


def build(spec) -> dsl.Kernel:
    """The gfx950 kernel of any of this module's specs."""
    if isinstance(spec, UnifiedAttention3DSpec):
        return a3.build(spec)
    if isinstance(spec, UnifiedAttention2DSpec):
        return a2.build(spec)
    if isinstance(spec, ReduceSegmentsSpec):
        return rs.build(spec)
    raise TypeError(f"gfx950 attention build needs one of {', '.join(c.__name__ for c in SPEC_CLASSES)} "
                    f"from {__name__}, got {type(spec).__module__}.{type(spec).__name__}")
