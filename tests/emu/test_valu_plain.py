"""valu._plain_run: the closure of a VALU instruction without operand modifiers, DPP, SDWA or
flushing gives the general closure's bits (full and partial EXEC, VGPR / SGPR / constant
sources, VGPR and lane-mask destinations)."""
import importlib

import numpy as np

from rocke.emu import valu
from rocke.emu.lru import RecentCache

from .asm_runner import run_asm

launch_module = importlib.import_module("rocke.emu.launch")

BODY = """
  v_add_u32_e32 v3, v0, v1
  v_sub_f32_e32 v4, s16, v1
  v_mul_f32_e32 v5, 1.0, v2
  v_max_i32_e32 v6, 7, v0
  v_xor_b32_e64 v7, v0, s17
  v_cmp_gt_f32_e64 s[18:19], v1, v2
  v_cmp_lt_u32_e32 vcc, v0, v2
  s_mov_b64 exec, s[20:21]
  v_add_f32_e32 v8, v1, v2
  v_fma_f32 v9, v0, v1, v2
  v_mul_lo_u32 v10, v0, s17
  v_cmp_eq_u32_e64 s[22:23], v0, v1
  v_min_f32_e32 v11, v1, v2
"""


def run(monkeypatch, plain: bool, vgprs, sgprs):
    monkeypatch.setattr(launch_module, "_CACHE", RecentCache(32))   # decode afresh
    if not plain:
        monkeypatch.setattr(valu, "_plain_run", lambda *args: None)
    result = run_asm(BODY, vgprs=vgprs, sgprs=sgprs)
    (_, decoded), = [entry[:2] for entry in launch_module._CACHE.values()]
    names = [d.run.__name__ for d in next(iter(decoded.values())).code if d is not None]
    return result, names


def test_plain_closures_give_the_general_closures_bits(monkeypatch):
    rng = np.random.default_rng(7)
    waves = 3
    vgprs = rng.integers(0, 2 ** 32, (waves, 3, 64), dtype=np.uint64).astype(np.uint32)
    vgprs[:, 1, ::5] = vgprs[:, 2, ::5]                       # equal operands
    vgprs[:, 1:, 1::7] = np.float32(np.nan).view(np.uint32)   # NaNs
    vgprs[:, 1, 2::9] = np.float32(-0.0).view(np.uint32)      # signed zeros
    sgprs = rng.integers(0, 2 ** 32, (waves, 32), dtype=np.uint64)
    sgprs[:, 4:6] = [[0xFFFFFFFF, 0xFFFFFFFF], [0x0F0F1234, 0x80000001], [0, 0]]   # s[20:21]
    general, general_names = run(monkeypatch, False, vgprs, sgprs)
    monkeypatch.undo()
    fast, fast_names = run(monkeypatch, True, vgprs, sgprs)
    assert "run_to_vgpr" in fast_names and "run_to_mask" in fast_names
    assert "run_to_vgpr" not in general_names and "run_to_mask" not in general_names
    np.testing.assert_array_equal(fast.vgprs, general.vgprs)
    np.testing.assert_array_equal(fast.sgprs, general.sgprs)
    np.testing.assert_array_equal(fast.vcc, general.vcc)
    np.testing.assert_array_equal(fast.exec, general.exec)
