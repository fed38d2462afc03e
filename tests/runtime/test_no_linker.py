"""A machine without ld.lld (the GPU machines the emulator's torch backend runs on): a compile
cache built where ld.lld exists serves it, whatever the builder files' paths, and the emulator
proves the served listing against the code object with an unlinked rebuild."""
from __future__ import annotations

import pytest

from rocke.compiler import CompileCache, ToolchainError, compile_ir, toolchain
from rocke.runtime.emu_device import listing_proven_by_rebuild
from tests.doubling_kernel import doubling_kernel


def _doubler():
    return doubling_kernel("double_without_linker")


@pytest.fixture
def no_linker(monkeypatch, tmp_path):
    def off():
        monkeypatch.setenv("ROCKE_LD_LLD", str(tmp_path / "no-ld.lld"))
        monkeypatch.setenv("ROCKE_PREBUILT", "off")
        toolchain.find_linker.cache_clear()
    yield off
    toolchain.find_linker.cache_clear()


def test_cache_built_with_a_linker_serves_a_machine_without_one(tmp_path, no_linker):
    store = CompileCache(tmp_path / "cache")
    built = compile_ir(_doubler(), cache=store)
    no_linker()
    with pytest.raises(ToolchainError):                      # nothing cached: the usual error
        compile_ir(_doubler(), cache=CompileCache(tmp_path / "empty"))
    served = compile_ir(_doubler(), cache=store)
    assert served.cache_hit and served.code_object == built.code_object


def test_the_linker_free_key_ignores_the_builder_paths(tmp_path, no_linker):
    """Located IR names the builder files' directories, which differ from machine to machine:
    an entry stored from one located text serves another whose paths differ."""
    store = CompileCache(tmp_path / "cache")
    k = _doubler()
    built = compile_ir(k, cache=store)
    moved = _doubler()
    located = moved.located_ir().replace('directory: "/', 'directory: "/elsewhere/')
    assert located != k.located_ir()
    moved.located_ir = lambda: located
    no_linker()
    served = compile_ir(moved, cache=store)
    assert served.cache_hit and served.code_object == built.code_object


def test_listing_proven_without_a_linker_and_a_forged_object_is_not(tmp_path, no_linker):
    built = compile_ir(_doubler(), cache=False)
    no_linker()
    assert listing_proven_by_rebuild(built)
    from rocke.emu.codeobject import kernel_image
    code = bytearray(built.code_object)
    image = kernel_image(bytes(code), built.name)[0]
    start = bytes(code).find(image)
    code[start + 4] ^= 0x01                                  # one bit of the kernel's code
    forged = type(built)(built.name, built.variant, built.target, built.ir, built.asm,
                         built.object, bytes(code), built.info)
    assert not listing_proven_by_rebuild(forged)
