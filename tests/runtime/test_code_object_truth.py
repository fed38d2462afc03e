"""One artifact is the truth: both devices run the linked code object. The compile cache's
assembly listing is what `rocke emit --format asm` shows, never what runs, so a listing edited in
the cache (its digest recomputed, so the cache serves it) changes nothing a launch does."""
from __future__ import annotations

import hashlib
import json

import torch

from rocke import runtime
from rocke.compiler import CompileCache, compile_ir
from tests.doubling_kernel import doubling_kernel

N = 64


def _doubler_ir():
    return doubling_kernel("double_for_truth")


def test_an_edited_assembly_listing_in_the_cache_is_not_what_runs(tmp_path):
    k = _doubler_ir()
    store = CompileCache(tmp_path)
    first = compile_ir(k.ir(), name=k.name, workgroup_size=64, cache=store)
    (entry,) = [d for d in tmp_path.glob("*/*") if d.is_dir()]
    listing = (entry / "kernel.s").read_text()
    assert "v_add_f32_e32 v1, v1, v1" in listing           # x + x
    forged = listing.replace("v_add_f32_e32 v1, v1, v1", "v_sub_f32_e32 v1, v1, v1")   # x - x
    (entry / "kernel.s").write_text(forged)
    meta = json.loads((entry / "entry.json").read_text())
    meta["digest"] = hashlib.sha256(b"".join((entry / f).read_bytes() for f in
                                             ("kernel.s", "kernel.o", "kernel.hsaco"))).hexdigest()
    (entry / "entry.json").write_text(json.dumps(meta))

    served = compile_ir(k.ir(), name=k.name, workgroup_size=64, cache=store)
    assert served.cache_hit and served.code_object == first.code_object
    x = torch.full((N,), 3.0)
    runtime.launch(served, 1, 64, [x, N], device="emu")
    assert torch.equal(x, torch.full((N,), 6.0))           # the code object ran, not the listing


def test_the_listing_is_the_code_objects_kernel():
    """The compiler's listing and code object come from identical module copies, so they are one
    kernel instruction for instruction (these two variants' listings used to be another
    schedule than their code objects); the emulator then runs the listing, with its lines."""
    from rocke.emu.codeobject import listing_matches
    from rocke.kernels.registry import all_variants
    for name in ("gemm/f16_32x32x8", "attention_2d/narrow_f16_d64_b16_g8_swa"):
        k = all_variants()[name].kernel()
        ck = compile_ir(k.ir(), name=k.name, cache=False)
        assert listing_matches(ck.asm, ck.code_object, ck.name), name


def test_a_listing_of_another_kernel_does_not_match():
    from rocke.emu.codeobject import listing_matches
    k = _doubler_ir()
    ck = compile_ir(k.ir(), name=k.name, workgroup_size=64, cache=False)
    assert listing_matches(ck.asm, ck.code_object, ck.name)
    forged = ck.asm.replace("v_add_f32_e32 v1, v1, v1", "v_sub_f32_e32 v1, v1, v1")
    assert forged != ck.asm and not listing_matches(forged, ck.code_object, ck.name)
