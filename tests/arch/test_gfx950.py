"""gfx950 (CDNA4) facts in rocke.arch: lookups by target, the MFMA catalog's gfx950 atoms checked
against LLVM (each intrinsic must select the named instruction), occupancy with 160 KiB LDS."""
import re

import pytest

from rocke.arch import MFMA_CATALOG, atom_for, get_atom, get_target, occupancy
from rocke.arch.occupancy_rules import unified_vgpr_count

GFX950_ATOMS = sorted(k for k, a in MFMA_CATALOG.items() if "gfx950" in a.targets)


def test_target_lookup_and_lds():
    t = get_target("gfx950:sramecc+:xnack-")
    assert t.name == "gfx950" and t.target_id.startswith("gfx950")
    assert (t.cu_count, t.max_lds_per_workgroup, t.lds_alloc_granule) == (256, 163840, 1280)
    # 100 KiB fits gfx950's workgroup LDS, not gfx942's
    assert occupancy(vgprs=64, lds_bytes=100 * 1024, workgroup_size=256, target="gfx950").limiter == "lds"
    with pytest.raises(ValueError, match="exceeds gfx942's 65536"):
        occupancy(vgprs=64, lds_bytes=100 * 1024, workgroup_size=256, target="gfx942")


def test_lds_rounds_to_1280_byte_blocks_on_gfx950():
    occ = occupancy(vgprs=32, lds_bytes=40 * 1024 + 1, workgroup_size=256, target="gfx950")
    assert occ.lds_alloc_bytes == 33 * 1280            # 40961 bytes -> 33 blocks of 1280
    assert occ.workgroups_per_cu == 163840 // (33 * 1280)   # 3 workgroups of 42240 bytes
    same_regs = unified_vgpr_count(100, 60, get_target("gfx950"))
    assert same_regs == unified_vgpr_count(100, 60, get_target("gfx942"))   # register rules unchanged


@pytest.mark.parametrize("shape, dtype, key", [
    ("16x16x32", "f16", "16x16x32_f16"), ("32x32x16", "bf16", "32x32x16_bf16"),
    ("16x16x32", "fp8_e4m3fn", "16x16x32_fp8_fp8_ocp"),
    ("16x16x128", "fp8_e4m3fn", "16x16x128_fp8_fp8_ocp"),
])
def test_gfx950_atoms_are_gfx950_only(shape, dtype, key):
    assert atom_for(shape, dtype, target="gfx950").key == key
    with pytest.raises(ValueError, match="on gfx942"):
        atom_for(shape, dtype, target="gfx942")


def test_fnuz_fp8_is_not_a_gfx950_format():
    with pytest.raises(ValueError, match="no MFMA atom '16x16x32_fp8_fp8' on gfx950"):
        atom_for("16x16x32", "fp8_e4m3fnuz", target="gfx950")
    assert get_atom("16x16x32_f16", "gfx950").k_per_lane == 8


def test_gfx950_catalog_intrinsics_select_their_instructions_in_llvm():
    """Each gfx950 atom's intrinsic, compiled by LLVM (llvmlite) for gfx950, prints its mnemonic
    with the accumulator width the catalog states."""
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    lines = []
    for index, key in enumerate(GFX950_ATOMS):
        atom = MFMA_CATALOG[key]
        op, acc = atom.ir_operand_type, atom.ir_acc_type
        if "f8f6f4" in atom.mnemonic:
            fmt = {"fp8_ocp": 0, "bf8_ocp": 1}
            name = f"{atom.intrinsic}.v8i32.v8i32"
            extra = f"i32 {fmt[atom.a_type]}, i32 {fmt[atom.b_type]}, i32 0, i32 0, i32 0, i32 0"
            decl = f"declare {acc} @{name}({op}, {op}, {acc}, i32, i32, i32, i32, i32, i32)"
        else:
            name, extra = atom.intrinsic, "i32 0, i32 0, i32 0"
            decl = f"declare {acc} @{name}({op}, {op}, {acc}, i32, i32, i32)"
        if decl not in lines:
            lines.append(decl)
        lines.append(f"define amdgpu_kernel void @k{index}(ptr addrspace(1) %p, {op} %a, {op} %b) {{\n"
                     f"  %c = load {acc}, ptr addrspace(1) %p\n"
                     f"  %d = call {acc} @{name}({op} %a, {op} %b, {acc} %c, {extra})\n"
                     f"  store {acc} %d, ptr addrspace(1) %p\n  ret void\n}}")
    machine = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(
        cpu="gfx950", features="+sramecc,-xnack", opt=2)
    asm = machine.emit_assembly(llvm.parse_assembly("\n".join(lines)))
    bodies = re.split(r"^k(\d+):", asm, flags=re.M)
    found = {int(bodies[i]): bodies[i + 1] for i in range(1, len(bodies) - 1, 2)}
    for index, key in enumerate(GFX950_ATOMS):
        atom = MFMA_CATALOG[key]
        m = re.search(r"\b(v_mfma_\w+) ([av]\[\d+:\d+\]|[av]\d+), ([av]\[\d+:\d+\]|[av]\d+)", found[index])
        assert m and m.group(1) == atom.mnemonic, (key, m and m.group(1))
        assert _registers(m.group(2)) == atom.acc_regs * (2 if atom.acc_type == "f64" else 1), key
        assert _registers(m.group(3)) == atom.k_per_lane * _BITS[atom.a_type] // 32, key
        if "f8f6f4" in atom.mnemonic:   # formats travel in cbsz (A) / blgp (B)
            fmt = {"fp8_ocp": 0, "bf8_ocp": 1}
            line = found[index].split("\n")[[i for i, l in enumerate(found[index].split("\n")) if "v_mfma" in l][0]]
            assert (f"cbsz:{fmt[atom.a_type]}" in line) == bool(fmt[atom.a_type]), line
            assert (f"blgp:{fmt[atom.b_type]}" in line) == bool(fmt[atom.b_type]), line


_BITS = {"f16": 16, "bf16": 16, "fp8_ocp": 8, "bf8_ocp": 8, "i8": 8, "f32": 32, "f64": 64}


def _registers(operand: str) -> int:
    """32-bit registers of an operand as LLVM prints it: v7 or v[4:11]."""
    m = re.fullmatch(r"[av]\[(\d+):(\d+)\]", operand)
    return int(m.group(2)) - int(m.group(1)) + 1 if m else 1


def test_emulator_runs_every_gfx950_catalog_atom():
    """The emulator's gfx950 table knows every instruction the gfx950 catalog can emit."""
    from rocke.emu import mfma as emu_mfma
    from rocke.emu.gfx950 import mfma_ops
    table = mfma_ops(emu_mfma.MFMA_OPS, emu_mfma.MfmaOp, emu_mfma.IndexedMfmaOp)
    assert {MFMA_CATALOG[k].mnemonic for k in GFX950_ATOMS} <= set(table)
