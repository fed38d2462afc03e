"""Every MFMA atom of the catalog, on each target that has it, as DSL fragments through
``k.mfma``, run in the emulator, against torch.

This is where rocke's two independent derivations of the MFMA lane layouts meet: the DSL places
A, B and C into registers with the catalog's thread-value tables (``rocke.arch.mfma`` via
``TVLayout``), the emulator executes the instruction with semantics written from the ISA. Any
disagreement scrambles D. The reference is a float64 (or int64) matmul of the same inputs,
decoded by torch (never by rocke). Multi-block atoms are checked under the DSL's folded-tile
reading: A is (blocks*M) x K, B is K x (blocks*N), C/D are (blocks*M) x N, block b multiplies
its own row band of A with its own column band of B.
"""

from functools import cache

import numpy as np
import pytest
import torch

from rocke import dsl
from rocke.arch import MFMA_CATALOG
from rocke.compiler import compile_ir
from rocke.dsl.fragment import Fragment, load_fragment_global, store_fragment_global
from rocke.dsl.tv_layout import TVLayout
from rocke.runtime import launch
from rocke import emu

CASES = sorted((target, key) for key, atom in MFMA_CATALOG.items() for target in atom.targets)
# MFMA operand format -> (DSL dtype name, torch dtype holding the inputs)
FORMATS = {"f16": ("f16", torch.float16), "bf16": ("bf16", torch.bfloat16),
           "fp8": ("fp8_e4m3fnuz", torch.float8_e4m3fnuz), "bf8": ("fp8_e5m2fnuz", torch.float8_e5m2fnuz),
           "fp8_ocp": ("fp8_e4m3fn", torch.float8_e4m3fn), "bf8_ocp": ("fp8_e5m2", torch.float8_e5m2),
           "i8": ("i8", torch.int8), "f32": ("f32", torch.float32), "xf32": ("f32", torch.float32),
           "f64": ("f64", torch.float64)}
ACC = {"f32": (torch.float32, 2.0 ** -24), "i32": (torch.int32, 0), "f64": (torch.float64, 2.0 ** -53)}


def test_catalog_families_are_all_covered():
    """The catalog's operand families per target, so a new family cannot slip past this file."""
    per_target = {t: {MFMA_CATALOG[k].a_type for tt, k in CASES if tt == t} for t in ("gfx942", "gfx950")}
    assert per_target["gfx942"] == {"f16", "bf16", "fp8", "bf8", "i8", "f32", "xf32", "f64"}
    assert per_target["gfx950"] == {"f16", "bf16", "fp8_ocp", "bf8_ocp", "i8", "f32", "f64"}
    assert sum(t == "gfx942" for t, _ in CASES) == 18 + 5 + 5 + 2 + 2
    assert {k for t, k in CASES if t == "gfx950" and MFMA_CATALOG[k].scaled} == {
        f"{s}_{a}_{b}_ocp" for s in ("16x16x128", "32x32x64") for a in ("fp8", "bf8") for b in ("fp8", "bf8")}


def _shapes(atom):
    """(A, B^T, C) storage shapes of the folded tiles."""
    rows, cols = atom.blocks * atom.m, atom.blocks * atom.n
    return (rows, atom.k), (cols, atom.k), (rows, atom.n)


def _build(target: str, key: str, swap_a_values: tuple[int, int] | None = None) -> dsl.Kernel:
    """D = A @ B + C for one atom: A from row-major A, B from row-major B^T, C from row-major C,
    each through its fragment layout. The atom is found by shape and dtypes, as a user asks.
    ``swap_a_values`` deliberately mislabels two of A's values (to show the comparison catches
    a wrong layout)."""
    atom = MFMA_CATALOG[key]
    a_dtype, b_dtype = FORMATS[atom.a_type][0], FORMATS[atom.b_type][0]
    k = dsl.Kernel(f"mfma_atom_{key}" + ("_perturbed" if swap_a_values else ""), target=target,
                   workgroup_size=64)
    a = k.arg_ptr("a", a_dtype, readonly=True)
    bt = k.arg_ptr("bt", b_dtype, readonly=True)
    c = k.arg_ptr("c", atom.acc_type, readonly=True)
    d = k.arg_ptr("d", atom.acc_type)
    shape = f"{atom.m}x{atom.n}x{atom.k}" + (f"_{atom.blocks}b" if atom.blocks > 1 else "")
    mma = k.mfma(shape, a_dtype, b_dtype=b_dtype)
    assert mma.atom is atom and mma.acc_dtype.name == atom.acc_type
    (a_rows, kk), (bt_rows, _), (c_rows, n) = _shapes(atom)
    assert mma.A.shape == (a_rows, kk) and mma.B.shape == (kk, bt_rows) and mma.C.shape == (c_rows, n)
    a_layout = mma.A
    if swap_a_values:
        coords = mma.A.coords.copy()
        i, j = swap_a_values
        coords[:, [i, j]] = coords[:, [j, i]]
        a_layout = mma.A = TVLayout("perturbed_A", mma.A.shape, coords)
    fa = load_fragment_global(a.buffer(a_rows * kk), a_layout, (0, 0), kk)
    fb = load_fragment_global(bt.buffer(bt_rows * kk), mma.B, (0, 0), kk, transposed=True)
    fc = load_fragment_global(c.buffer(c_rows * n), mma.C, (0, 0), n)
    store_fragment_global(d.buffer(c_rows * n), mma(fa, fb, fc), (0, 0), n)
    return k


@cache
def _compiled(target: str, key: str, swap_a_values=None):
    k = _build(target, key, swap_a_values)
    ck = compile_ir(k, target=target, cache=False)
    assert ck.info.vgpr_spills == 0 and ck.info.sgpr_spills == 0
    assert MFMA_CATALOG[key].mnemonic in ck.asm
    return ck


def _inputs(fmt: str, shape, gen):
    if fmt == "i8":
        return torch.randint(-128, 128, shape, generator=gen, dtype=torch.int8)
    x = torch.randn(*shape, generator=gen, dtype=torch.float64)
    if fmt == "xf32":   # values xf32 holds exactly: the low 13 of f32's 23 mantissa bits clear
        return (x.float().view(torch.int32) & ~0x1FFF).view(torch.float32)
    return x.to(FORMATS[fmt][1])


def _run(target: str, key: str, swap_a_values=None):
    """(D from the emulator, float64/int64 reference, error bound) for random inputs."""
    atom = MFMA_CATALOG[key]
    a_shape, bt_shape, c_shape = _shapes(atom)
    gen = torch.Generator().manual_seed(sum(map(ord, key)))
    A = _inputs(atom.a_type, a_shape, gen)
    Bt = _inputs(atom.b_type, bt_shape, gen)
    acc_dtype, eps = ACC[atom.acc_type]
    C = (torch.randint(-2 ** 20, 2 ** 20, c_shape, generator=gen, dtype=torch.int32) if acc_dtype == torch.int32
         else torch.randn(*c_shape, generator=gen, dtype=torch.float64).to(acc_dtype))
    D = torch.zeros(*c_shape, dtype=acc_dtype)
    ck = _compiled(target, key, swap_a_values)
    emu.launch(ck.asm, ck.name, (1, 1, 1), (64, 1, 1), [A, Bt, C, D], target=target)

    wide = torch.int64 if acc_dtype == torch.int32 else torch.float64
    a64, b64, c64 = (t.to(wide) for t in (A, Bt.t(), C))
    ref, magnitude = torch.empty_like(c64), torch.empty_like(c64)
    for blk in range(atom.blocks):
        rows, cols = slice(blk * atom.m, (blk + 1) * atom.m), slice(blk * atom.n, (blk + 1) * atom.n)
        ref[rows] = a64[rows] @ b64[:, cols] + c64[rows]
        magnitude[rows] = a64[rows].abs() @ b64[:, cols].abs() + c64[rows].abs()
    # exact products, one rounding per addition of the K + 1 terms at most (integers: exact)
    bound = (atom.k + 2) * eps * magnitude.double()
    return D.to(wide).numpy(), ref.numpy(), bound.numpy()


@pytest.mark.parametrize("target, key", CASES)
def test_atom_fragments_match_torch(target, key):
    got, ref, bound = _run(target, key)
    err = np.abs(got - ref)
    worst = np.unravel_index(err.argmax(), err.shape)
    assert (err <= bound).all(), f"{target} {key}: max error {err.max():.3g} at (row, col) {worst}"


@pytest.mark.parametrize("target, key", [("gfx942", "4x4x4_16b_bf16"), ("gfx942", "16x16x32_fp8_bf8"),
                                         ("gfx942", "16x16x4_4b_i8"), ("gfx950", "16x16x128_fp8_bf8_ocp")])
def test_a_wrong_layout_is_caught(target, key):
    """Mislabel two of A's per-lane values: the same comparison must fail."""
    got, ref, bound = _run(target, key, swap_a_values=(0, 1))
    assert (np.abs(got - ref) > bound).any()


def test_a_wrong_f64_accumulator_layout_is_caught():
    """f64 accumulators are laid out unlike f32 ones: reading D with the f32 formula must fail
    the same comparison (so the catalog's f64 case is what makes the f64 atoms pass)."""
    atom, f32_twin = MFMA_CATALOG["16x16x4_f64"], MFMA_CATALOG["16x16x4_f32"]
    got, ref, bound = _run("gfx942", atom.key)
    misread = np.empty_like(got)
    for lane in range(64):
        for v in range(atom.acc_regs):
            _, r, c = atom.c_coord(lane, v)
            _, r2, c2 = f32_twin.c_coord(lane, v)
            misread[r2, c2] = got[r, c]
    assert (np.abs(misread - ref) > bound).any()


def test_xf32_input_beyond_xf32_is_refused_by_the_emulator():
    """An f32 with mantissa bits xf32 does not hold stops the run naming it (its rounding is
    not modelled) instead of returning a guess."""
    atom = MFMA_CATALOG["16x16x8_xf32"]
    a_shape, bt_shape, c_shape = _shapes(atom)
    A = torch.full(a_shape, 1.0 + 2.0 ** -20)
    Bt, C, D = torch.ones(bt_shape), torch.zeros(c_shape), torch.zeros(c_shape)
    ck = _compiled("gfx942", "16x16x8_xf32")
    with pytest.raises(emu.EmulatorError, match="more than xf32's 10 mantissa bits"):
        emu.launch(ck.asm, ck.name, (1, 1, 1), (64, 1, 1), [A, Bt, C, D], target="gfx942")


@pytest.mark.parametrize("shape, fmt", [("16x16x128", ("fp8_e4m3fn", "fp8_e5m2")),
                                        ("32x32x64", ("fp8_e5m2", "fp8_e4m3fn"))])
@pytest.mark.parametrize("which", ["both", "a_only"])
def test_block_scaled_f8f6f4_matches_torch(shape, fmt, which):
    """gfx950's block-scaled MFMA through ``mma(a, b, c, a_scale=, b_scale=)``: every 32-K block
    of a row of A (column of B) times 2^(e - 127) of its E8M0 byte, checked against torch."""
    k = dsl.Kernel(f"scaled_{shape}_{which}", target="gfx950", workgroup_size=64)
    mma = k.mfma(shape, fmt[0], b_dtype=fmt[1])
    m, n, kk = mma.atom.m, mma.atom.n, mma.atom.k
    a = k.arg_ptr("a", fmt[0], readonly=True)
    bt = k.arg_ptr("bt", fmt[1], readonly=True)
    sa = k.arg_ptr("sa", "u8", readonly=True)
    sbt = k.arg_ptr("sbt", "u8", readonly=True)
    d = k.arg_ptr("d", "f32")
    assert mma.A_scale.shape == (m, kk // 32) and mma.B_scale.shape == (kk // 32, n)
    fa = load_fragment_global(a.buffer(m * kk), mma.A, (0, 0), kk)
    fb = load_fragment_global(bt.buffer(n * kk), mma.B, (0, 0), kk, transposed=True)
    scales = {"a_scale": load_fragment_global(sa.buffer(m * kk // 32), mma.A_scale, (0, 0), kk // 32)}
    if which == "both":
        scales["b_scale"] = load_fragment_global(sbt.buffer(n * kk // 32), mma.B_scale, (0, 0), kk // 32,
                                                 transposed=True)
    store_fragment_global(d.buffer(m * n), mma(fa, fb, mma.zeros(), **scales), (0, 0), n)
    ck = compile_ir(k, target="gfx950", cache=False)
    assert f"v_mfma_scale_f32_{shape}_f8f6f4" in ck.asm

    gen = torch.Generator().manual_seed(7)
    A = torch.randn(m, kk, generator=gen).to(getattr(torch, "float8_" + fmt[0][4:]))
    Bt = torch.randn(n, kk, generator=gen).to(getattr(torch, "float8_" + fmt[1][4:]))
    SA = torch.randint(120, 135, (m, kk // 32), generator=gen, dtype=torch.uint8)
    SBt = torch.randint(120, 135, (n, kk // 32), generator=gen, dtype=torch.uint8)
    D = torch.zeros(m, n)
    emu.launch(ck.asm, ck.name, (1, 1, 1), (64, 1, 1), [A, Bt, SA, SBt, D], target="gfx950")

    a64 = A.double() * torch.exp2(SA.double() - 127).repeat_interleave(32, dim=1)
    b64 = Bt.double()
    if which == "both":
        b64 = b64 * torch.exp2(SBt.double() - 127).repeat_interleave(32, dim=1)
    ref = a64 @ b64.t()
    bound = (kk + 2) * 2.0 ** -24 * (a64.abs() @ b64.abs().t())
    assert ((D.double() - ref).abs() <= bound).all()
    # and the scales matter: the unscaled product is far off
    assert ((D.double() - A.double() @ Bt.double().t()).abs() > bound).any()


def test_scales_on_an_unscaled_atom_and_mixed_operands_are_refused():
    k = dsl.Kernel("refusals", workgroup_size=64)
    mma = k.mfma("16x16x32", "i8")
    acc = mma.zeros()
    assert acc.dtype.name == "i32"
    fa, fb = (Fragment.full(k, layout, "i8", 0) for layout in (mma.A, mma.B))
    assert mma(fa, fb, acc).dtype.name == "i32"
    with pytest.raises(ValueError, match="takes no block scales"):
        mma(fa, fb, acc, a_scale=acc)
    with pytest.raises(TypeError, match="operand C must be i32"):
        mma(fa, fb, acc.to("f32"))
    with pytest.raises(ValueError, match="no MFMA multiplies i8 by f16"):
        k.mfma("16x16x32", "i8", b_dtype="f16")
    with pytest.raises(ValueError, match="no MFMA atom '16x16x64_i8' on gfx942"):
        k.mfma("16x16x64", "i8")
    with pytest.raises(ValueError, match="no MFMA atom '16x16x8_xf32' on gfx950"):
        dsl.Kernel("x", target="gfx950", workgroup_size=64).mfma("16x16x8", "f32")
    with pytest.raises(ValueError, match="no MFMA operand type for dtype 'u8'"):
        k.mfma("16x16x32", "u8")
