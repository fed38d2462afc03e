"""The LDS initialisation check (compute-sanitizer initcheck's idea, for LDS): wherever the race
checker runs, a DS read of LDS bytes that no write of its workgroup set stops the launch with
`LdsUninitialised`, naming the read's assembly line and the builder's line, the workgroup, the
wave, its lanes and the byte range. The emulator's LDS starts at 0; the hardware's holds what
the previous workgroup left, so a forgotten fill passes on the emulator only by luck."""
import importlib
import re
import sys

import numpy as np
import pytest
import torch

import rocke.emu as emu
from rocke import dsl
from rocke.compiler import compile_ir
from rocke.emu import torch_exec, torch_graphs
from rocke.runtime import launch

from .asm_runner import run_asm

HERE = __file__


def _line() -> int:
    """The caller's previous line (the statement just written above the call)."""
    return sys._getframe(1).f_lineno - 1


def _tile_kernel(fill: str):
    """Workgroups of 128 threads: thread t copies x into an LDS tile (as `fill` says), waits at
    a barrier and writes tile[(t + 64) % 128] (the other wave's element) to out. `fill`: "all";
    "dma" (all, by LDS DMA); "none" (the kernel fills a B tile and forgets its A tile);
    "first_wave" (only wave 0 fills); "first_workgroup" (only workgroup 0 fills). Returns the
    kernel and the builder's line of the tile read."""
    k = dsl.Kernel(f"tile_{fill}", workgroup_size=128)
    x_ptr, out_ptr = k.arg_ptr("x", dsl.f32), k.arg_ptr("out", dsl.f32)
    x, out = x_ptr.buffer(1024), out_ptr.buffer(1024)   # 32-bit offsets, as torch ports them
    t = k.thread_id(0)
    g = k.block_id(0)
    a = k.lds("a", (128,), dsl.f32)
    b = k.lds("b", (128,), dsl.f32)
    value = x.load(g * 128 + t)
    if fill == "all":
        a.store(t, value)
    elif fill == "dma":    # LDS DMA (buffer_load_dword ... lds): each wave fills its 64 floats
        x.load_to_lds(a.address(k.wave_id() * 64), g * 128 + t)
        k.wait_vmcnt(0)
    elif fill == "none":
        b.store(t, value)
    elif fill == "first_wave":
        with k.if_(t < 64):
            a.store(t, value)
    else:
        with k.if_(g == 0):
            a.store(t, value)
    k.barrier()
    other = a.load((t + 64) % 128)
    line = _line()
    out.store(g * 128 + t, other + b.load(t) * 0.0 if fill == "none" else other)
    return k, line


def _run(fill, grid=1):
    k, line = _tile_kernel(fill)
    x = torch.arange(1, 128 * grid + 1, dtype=torch.float32)
    out = torch.zeros(128 * grid)
    launch(compile_ir(k, cache=False), (grid,), (128,), [x, out])
    return x, out, line


def test_a_filled_tile_reads_clean():
    x, out, _ = _run("all", grid=2)
    assert torch.equal(out, x.view(2, 2, 64).flip(1).reshape(-1))


def test_a_tile_filled_by_lds_dma_reads_clean():
    x, out, _ = _run("dma", grid=2)
    assert torch.equal(out, x.view(2, 2, 64).flip(1).reshape(-1))


def test_a_tile_never_filled_names_the_builders_line():
    with pytest.raises(emu.LdsUninitialised) as info:
        _run("none")
    message = str(info.value)
    _, line = _tile_kernel("none")
    assert f"[{HERE}:{line}]" in message, message                  # the builder's line
    assert re.search(r"at line \d+ `ds_read", message), message       # and the assembly line
    assert "workgroup (0, 0, 0): wave 0 reads unwritten LDS bytes" in message, message
    assert "lanes 0-63" in message, message
    assert "tile_none" in message


def test_a_half_filled_tile_names_the_wave_and_bytes_left_unwritten():
    with pytest.raises(emu.LdsUninitialised) as info:
        _run("first_wave")
    message = str(info.value)
    # wave 0 wrote a[0:64] (bytes 0..255) and reads a[64:128]: bytes 256..511, never written
    assert "wave 0 reads unwritten LDS bytes 256..511 (0x100..0x1ff)" in message, message
    assert "lanes 0-63 (lane 0: 4-byte read at LDS address 256 (0x100))" in message, message
    _, line = _tile_kernel("first_wave")
    assert f"[{HERE}:{line}]" in message, message


def test_the_marks_are_per_workgroup():
    """Workgroup 1 shares a pool (and the LDS array) with workgroup 0, which filled its tile:
    its own never-written tile is still a finding."""
    with pytest.raises(emu.LdsUninitialised, match=r"workgroup \(1, 0, 0\): wave 0 reads"):
        _run("first_workgroup", grid=2)


def test_the_lever_and_the_race_checker_turn_it_off(monkeypatch):
    monkeypatch.setenv("ROCKE_EMU_INIT_CHECK", "0")
    _, out, _ = _run("none")
    assert not out.any()                     # the emulator's LDS reads 0 (hardware: stale data)
    monkeypatch.setenv("ROCKE_EMU_INIT_CHECK", "1")
    monkeypatch.setenv("ROCKE_EMU_RACE_CHECK", "0")
    _run("none")                             # off wherever the race checker is
    monkeypatch.delenv("ROCKE_EMU_RACE_CHECK")
    k, _ = _tile_kernel("none")
    launch(compile_ir(k, cache=False), (1,), (128,), [torch.ones(128), torch.zeros(128)],
           check=False)
    monkeypatch.setenv("ROCKE_EMU_INIT_CHECK", "off")
    with pytest.raises(ValueError, match="ROCKE_EMU_INIT_CHECK must be 0 or 1"):
        _run("none")


@pytest.mark.parametrize("device", ["cpu", "cpu-copies"])
def test_the_torch_backend_reports_it_too(monkeypatch, device):
    """The torch backend's DS closures feed the same checker (cpu-copies: CUDA's code path)."""
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", device == "cpu-copies")
    monkeypatch.setattr(torch_graphs, "SIMULATE_CAPTURE", device == "cpu-copies")
    monkeypatch.setenv("ROCKE_EMU_BACKEND", "torch")
    monkeypatch.setenv("ROCKE_EMU_DEVICE", "cpu")
    x, out, _ = _run("all", grid=2)
    assert torch.equal(out, x.view(2, 2, 64).flip(1).reshape(-1))
    with pytest.raises(emu.LdsUninitialised) as info:
        _run("first_wave")
    message = str(info.value)
    _, line = _tile_kernel("first_wave")
    assert "wave 0 reads unwritten LDS bytes 256..511 (0x100..0x1ff)" in message, message
    assert f"[{HERE}:{line}]" in message, message


# ---- byte granularity, in assembly: every DS write form sets exactly its bytes

def _asm(body):
    return run_asm(body, vgprs=np.zeros((1, 1, 64), np.uint32), lds_bytes=512)


def test_a_byte_write_sets_only_its_byte():
    body = """
  v_mov_b32_e32 v1, 0
  v_mov_b32_e32 v2, 0x11
  ds_write_b8 v1, v2
  s_waitcnt lgkmcnt(0)
  ds_read_b32 v3, v1
  s_waitcnt lgkmcnt(0)"""
    with pytest.raises(emu.LdsUninitialised) as info:
        _asm(body)
    message = str(info.value)
    assert "reads unwritten LDS bytes 1..3 (0x1..0x3) at line" in message, message
    assert "`ds_read_b32 v3, v1`" in message, message
    assert "lane 0: 4-byte read at LDS address 0 (0x0)" in message, message


@pytest.mark.parametrize("writes, width", [
    ("ds_write_b8 v1, v2\n  ds_write_b8 v1, v2 offset:1\n  ds_write_b16 v1, v2 offset:2", 4),
    ("ds_write_b16 v1, v2\n  ds_write_b16_d16_hi v1, v2 offset:2", 4),
    ("ds_write2_b32 v1, v2, v3 offset1:1", 8),
    ("ds_write_b64 v1, v[2:3]", 8),
    ("ds_write_b128 v1, v[2:5]", 16),
    ("ds_write2st64_b32 v1, v2, v3 offset1:1\n  ds_write_b32 v1, v2 offset:4\n"
     "  ds_write_b64 v1, v[2:3] offset:8", 16),
    ("ds_write_b32 v1, v2\n  ds_add_u32 v1, v2 offset:4", 8),
    ("ds_write_b32 v1, v2\n  ds_cmpst_rtn_b32 v6, v1, v2, v3 offset:4", 8),
])
def test_every_write_form_sets_exactly_its_bytes(writes, width):
    """DS writes of every width, d16_hi, write2 and atomics set what they write: reading those
    `width` bytes back (as one read and as bytes) is clean, one byte more is a finding."""
    setup = """
  v_mov_b32_e32 v1, 0
  v_mov_b32_e32 v2, 0x11
  v_mov_b32_e32 v3, 0x22
  v_mov_b32_e32 v4, 0x33
  v_mov_b32_e32 v5, 0x44
  """
    read = {4: "ds_read_b32 v8, v1", 8: "ds_read_b64 v[8:9], v1",
            16: "ds_read_b128 v[8:11], v1"}[width]
    _asm(f"""{setup}{writes}
  s_waitcnt lgkmcnt(0)
  {read}
  ds_read_u8 v12, v1 offset:{width - 1}
  s_waitcnt lgkmcnt(0)""")
    with pytest.raises(emu.LdsUninitialised, match=rf"bytes {width}\.\.{width} "):
        _asm(f"""{setup}{writes}
  s_waitcnt lgkmcnt(0)
  ds_read_u8 v12, v1 offset:{width}
  s_waitcnt lgkmcnt(0)""")


def test_swizzle_and_bpermute_touch_no_lds():
    """ds_swizzle / ds_bpermute move data between lanes without LDS: nothing to check."""
    result = _asm("""
  v_mbcnt_lo_u32_b32 v4, -1, 0
  v_mbcnt_hi_u32_b32 v4, -1, v4
  v_add_u32_e32 v1, 1, v4
  v_and_b32_e32 v1, 63, v1
  v_lshlrev_b32_e32 v1, 2, v1
  ds_bpermute_b32 v2, v1, v4
  ds_swizzle_b32 v3, v4 offset:swizzle(SWAP,1)
  s_waitcnt lgkmcnt(0)""")
    lanes = np.arange(64)
    assert (result.vgprs[0, 2] == (lanes + 1) % 64).all()
    assert (result.vgprs[0, 3] == lanes ^ 1).all()


def test_a_finding_in_a_forked_worker_is_the_serial_runs(monkeypatch):
    """ROCKE_EMU_WORKERS=2: the workgroups' pools run in forked processes; the finding comes
    back with the type and message the serial run raises (workgroup 1, its first)."""
    launch_module = importlib.import_module("rocke.emu.launch")
    k, _ = _tile_kernel("first_workgroup")
    compiled = compile_ir(k, cache=False)
    messages = []
    for workers in ("1", "2"):
        monkeypatch.setenv("ROCKE_EMU_WORKERS", workers)
        monkeypatch.setattr(launch_module, "PARALLEL_MIN_WORK", 0)
        with pytest.raises(emu.LdsUninitialised) as info:
            launch(compiled, (4,), (128,), [torch.ones(512), torch.zeros(512)])
        messages.append(str(info.value))
    assert messages[0] == messages[1] and "workgroup (1, 0, 0)" in messages[0], messages
    filled = compile_ir(_tile_kernel("all")[0], cache=False)
    assert launch(filled, (4,), (128,), [torch.ones(512), torch.zeros(512)]).workers == 2
