"""Every gfx942 f16/bf16/fp8 MFMA atom as DSL fragments, run in the emulator, against numpy.

This is where rocke's two independent derivations of the MFMA lane layouts meet: the DSL places
A, B and C into registers with the catalog's thread-value tables (``rocke.arch.mfma`` via
``TVLayout``), the emulator executes the instruction with semantics written from the ISA. Any
disagreement scrambles D. The reference is a float64 numpy matmul of the same inputs, decoded
by torch (never by rocke). Multi-block atoms are checked under the DSL's folded-tile reading:
A is (blocks*M) x K, B is K x (blocks*N), C/D are (blocks*M) x N, block b multiplies its own
row band of A with its own column band of B.
"""

from functools import cache

import numpy as np
import pytest
import torch

from rocke import dsl
from rocke.arch import MFMA_CATALOG
from rocke.compiler import compile_ir
from rocke.dsl.fragment import load_fragment_global, store_fragment_global
from rocke.dsl.tv_layout import TVLayout
from rocke.runtime import launch

GFX942_ATOMS = sorted(key for key, atom in MFMA_CATALOG.items() if "gfx942" in atom.targets)
# MFMA operand format -> (DSL dtype name, torch dtype that decodes it)
FORMATS = {"f16": ("f16", torch.float16), "bf16": ("bf16", torch.bfloat16),
           "fp8": ("fp8_e4m3fnuz", torch.float8_e4m3fnuz), "bf8": ("fp8_e5m2fnuz", torch.float8_e5m2fnuz)}


def test_all_eighteen_dense_atoms_are_covered():
    assert len(GFX942_ATOMS) == 18
    assert sum(MFMA_CATALOG[k].blocks > 1 for k in GFX942_ATOMS) == 6
    assert sum(MFMA_CATALOG[k].a_type in ("fp8", "bf8") for k in GFX942_ATOMS) == 8


def _shapes(atom):
    """(A, B^T, C) storage shapes of the folded tiles."""
    rows, cols = atom.blocks * atom.m, atom.blocks * atom.n
    return (rows, atom.k), (cols, atom.k), (rows, atom.n)


def _build(key: str, swap_a_values: tuple[int, int] | None = None) -> dsl.Kernel:
    """D = A @ B + C for one atom: A from row-major A, B from row-major B^T, C from row-major C,
    each through its fragment layout. ``swap_a_values`` deliberately mislabels two of A's values
    (to show the comparison catches a wrong layout)."""
    atom = MFMA_CATALOG[key]
    a_dtype, b_dtype = FORMATS[atom.a_type][0], FORMATS[atom.b_type][0]
    k = dsl.Kernel(f"mfma_atom_{key}" + ("_perturbed" if swap_a_values else ""), workgroup_size=64)
    a = k.arg_ptr("a", a_dtype, readonly=True)
    bt = k.arg_ptr("bt", b_dtype, readonly=True)
    c = k.arg_ptr("c", dsl.f32, readonly=True)
    d = k.arg_ptr("d", dsl.f32)
    mma = k.mfma(key, a_dtype, b_dtype=b_dtype)
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
def _compiled(key: str, swap_a_values=None):
    k = _build(key, swap_a_values)
    ck = compile_ir(k.ir(), name=k.name, cache=False)
    assert ck.info.vgpr_spills == 0 and ck.info.sgpr_spills == 0
    return ck


def _run(key: str, swap_a_values=None):
    """(D from the emulator, float64 reference, error bound) for random inputs."""
    atom = MFMA_CATALOG[key]
    a_shape, bt_shape, c_shape = _shapes(atom)
    gen = torch.Generator().manual_seed(sum(map(ord, key)))
    A = torch.randn(*a_shape, generator=gen).to(FORMATS[atom.a_type][1])
    Bt = torch.randn(*bt_shape, generator=gen).to(FORMATS[atom.b_type][1])
    C = torch.randn(*c_shape, generator=gen)
    D = torch.zeros(*c_shape)
    launch(_compiled(key, swap_a_values), 1, 64, [A, Bt, C, D])

    a64, b64, c64 = (t.to(torch.float64).numpy() for t in (A, Bt.t(), C))
    ref, magnitude = np.empty_like(c64), np.empty_like(c64)
    for blk in range(atom.blocks):
        rows, cols = slice(blk * atom.m, (blk + 1) * atom.m), slice(blk * atom.n, (blk + 1) * atom.n)
        ref[rows] = a64[rows] @ b64[:, cols] + c64[rows]
        magnitude[rows] = np.abs(a64[rows]) @ np.abs(b64[:, cols]) + np.abs(c64[rows])
    # exact products, fp32 sums: at most one rounding per addition of the K + 1 terms
    bound = (atom.k + 2) * 2.0 ** -24 * magnitude
    return D.numpy().astype(np.float64), ref, bound


@pytest.mark.parametrize("key", GFX942_ATOMS)
def test_atom_fragments_match_numpy(key):
    got, ref, bound = _run(key)
    err = np.abs(got - ref)
    worst = np.unravel_index(err.argmax(), err.shape)
    assert (err <= bound).all(), f"{key}: max error {err.max():.3g} at (row, col) {worst}"


@pytest.mark.parametrize("key", ["4x4x4_16b_bf16", "16x16x32_fp8_bf8"])
def test_a_wrong_layout_is_caught(key):
    """Mislabel two of A's per-lane values: the same comparison must fail."""
    got, ref, bound = _run(key, swap_a_values=(0, 1))
    assert (np.abs(got - ref) > bound).any()
