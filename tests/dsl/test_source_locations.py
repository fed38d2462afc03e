"""Emulator findings name the builder's file.py:line (rocke.dsl.debuginfo): the kernel's
located IR carries each instruction's builder line to the assembly's `.loc` directives, which
the emulator reads. The plain IR (what the golden table hashes) is unchanged and path-free."""
import hashlib
import re
import sys

import pytest
import torch

from rocke import dsl
from rocke.compiler import compile_ir
from rocke.emu.asm import parse_program
from rocke.emu.errors import LdsRace, MemoryFault
from rocke.runtime import launch

HERE = __file__


def _line() -> int:
    """The caller's previous line (the statement just written above the call)."""
    return sys._getframe(1).f_lineno - 1


def _racy_kernel():
    k = dsl.Kernel("racy", workgroup_size=128)
    x = k.arg_ptr("x", dsl.f32)
    t = k.thread_id(0)
    tile = k.lds("tile", (128,), dsl.f32)
    tile.store(t, x.load(t))
    lines = {"write": _line()}
    other = tile.load((t + 64) % 128)            # no barrier: wave 1 reads what wave 0 writes
    lines["read"] = _line()
    x.store(t, other)
    return k, lines


def test_an_lds_race_names_the_builders_lines():
    k, lines = _racy_kernel()
    with pytest.raises(LdsRace) as info:
        launch(compile_ir(k, cache=False), (1,), (128,), [torch.zeros(128)])
    message = str(info.value)
    assert f"[{HERE}:{lines['write']}]" in message and f"[{HERE}:{lines['read']}]" in message, message
    assert "`ds_write_b32" in message and "`ds_read_b32" in message     # the assembly lines too


def test_a_memory_fault_names_the_builders_line():
    k = dsl.Kernel("faulty", workgroup_size=64)
    x = k.arg_ptr("x", dsl.f32)
    t = k.thread_id(0)
    far = x.load(t + (1 << 28))                  # 1 GiB past a 256-byte tensor
    line = _line()
    x.store(t, far)
    with pytest.raises(MemoryFault) as info:
        launch(compile_ir(k, cache=False), (1,), (64,), [torch.zeros(64)])
    assert f"[{HERE}:{line}]" in str(info.value), str(info.value)


def test_plain_text_without_locations_names_only_the_assembly_line():
    k, _ = _racy_kernel()
    with pytest.raises(LdsRace) as info:
        launch(compile_ir(k.ir(), name=k.name, cache=False), (1,), (128,), [torch.zeros(128)])
    assert HERE not in str(info.value) and "at line" in str(info.value)


def test_locations_change_neither_the_hashed_ir_nor_the_code():
    k, _ = _racy_kernel()
    plain = k.ir()
    located = k.located_ir()
    assert k.ir() is plain and "!dbg" not in plain and HERE not in plain   # path-free, as before
    assert "!dbg" in located and "DebugDirectivesOnly" in located
    fresh, _ = _racy_kernel()
    assert fresh.ir() == plain                                             # still a pure function
    with_loc, without = compile_ir(k, cache=False), compile_ir(plain, name=k.name, cache=False)
    assert with_loc.ir == plain and with_loc.ir_hash == hashlib.sha256(plain.encode()).hexdigest()
    ours = [(i.mnemonic, i.operands, i.modifiers) for i in parse_program(with_loc.asm).instrs]
    theirs = [(i.mnemonic, i.operands, i.modifiers) for i in parse_program(without.asm).instrs]
    assert ours == theirs
    sources = {i.source for i in parse_program(with_loc.asm).instrs}
    assert any(s and s.startswith(HERE + ":") for s in sources)


def test_loc_directives_are_read_from_both_file_forms():
    text = compile_ir(_racy_kernel()[0], cache=False).asm
    one = text.replace(f'.file\t1 "{HERE.rsplit("/", 1)[0]}" "{HERE.rsplit("/", 1)[1]}"',
                       f'.file\t1 "{HERE}"')
    assert one != text
    assert [i.source for i in parse_program(one).instrs] == [i.source for i in parse_program(text).instrs]


def test_a_timeout_names_the_builders_lines_of_the_loop(monkeypatch):
    from rocke.emu.errors import LaunchTimeout
    k = dsl.Kernel("endless", workgroup_size=64)
    x = k.arg_ptr("x", dsl.f32)
    n = k.arg_i32("n")
    t = k.thread_id(0)
    first = _line() + 2
    with k.for_range(0, n, carry=x.load(t)) as loop:
        loop.yield_(loop.carry * 0.5 + 1.0)
    last = _line()
    x.store(t, loop.results)
    monkeypatch.setenv("ROCKE_EMU_TIMEOUT_S", "0.3")
    with pytest.raises(LaunchTimeout) as info:
        launch(compile_ir(k, cache=False), (1,), (64,), [torch.zeros(64), 2**31 - 1])
    named = [int(m) for m in re.findall(rf"\[{HERE}:(\d+)\]", str(info.value))]
    assert named and all(first <= line <= last + 1 for line in named), (first, last, str(info.value))


def test_a_trap_names_the_builders_line():
    from rocke.emu.errors import EmulatorError
    k = dsl.Kernel("trapping", workgroup_size=64)
    x = k.arg_ptr("x", dsl.f32)
    t = k.thread_id(0)
    with k.if_(x.load(t) < 0.0):
        k.call_intrinsic("llvm.trap", [])
        line = _line()
    x.store(t, x.load(t) + 1.0)
    data = torch.zeros(64)
    data[5] = -1.0
    with pytest.raises(EmulatorError) as info:
        launch(compile_ir(k, cache=False), (1,), (64,), [data])
    assert "s_trap" in str(info.value) and f"[{HERE}:{line}]" in str(info.value), str(info.value)
