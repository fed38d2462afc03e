"""The AMDGPU metadata note read in Python (rocke.emu.codeobject) against LLVM's own reader:
llvm-readelf prints the same note as YAML; both must give the same map, for a clang HIP code
object and for a kernel rocke compiles."""
import subprocess
from pathlib import Path

import pytest

from rocke.emu import codeobject
from rocke.emu.asm import load_metadata_yaml
from rocke.emu.codeobject import CodeObjectError, code_object_metadata

HIP_CODE_OBJECT = Path(__file__).resolve().parent.parent / "fixtures" / "hip" / "kernels.co"


def readelf_metadata(data: bytes, tmp_path) -> dict:
    """The metadata map as llvm-readelf --notes prints it (YAML between its markers)."""
    path = tmp_path / "k.co"
    path.write_bytes(data)
    notes = subprocess.run([codeobject.find_llvm_tool("llvm-readelf"), "--notes", str(path)],
                           capture_output=True, text=True, check=True).stdout
    lines = notes[notes.index("AMDGPU Metadata:"):].splitlines()[1:]
    text = []
    for line in lines:
        if line.strip() == "...":
            break
        text.append(line[8:] if line.startswith("        ---") else line)
    return load_metadata_yaml("\n".join(text))


def test_hip_code_object_note_is_llvm_readelfs(tmp_path):
    data = HIP_CODE_OBJECT.read_bytes()
    ours = code_object_metadata(data)
    assert len(ours["amdhsa.kernels"]) == 6
    assert ours == readelf_metadata(data, tmp_path)


def test_rocke_kernel_note_is_llvm_readelfs(tmp_path):
    from rocke.compiler import compile_ir
    from rocke.dsl import Kernel, f16, f32
    k = Kernel("scale_f16", workgroup_size=256)
    x, n, alpha = k.arg_ptr("x", f16), k.arg_i32("n"), k.arg_f32("alpha")
    buf = x.buffer(n)
    i = k.block_id(0) * 256 + k.thread_id(0)
    buf.store(i, (buf.load(i).to(f32) * alpha).to(f16))
    compiled = compile_ir(k.ir(), name=k.name)
    ours = code_object_metadata(compiled.code_object)
    assert ours["amdhsa.kernels"][0][".name"] == "scale_f16"
    assert ours == readelf_metadata(compiled.code_object, tmp_path)
    # and the assembly text built from it parses back to the same map
    from rocke.emu.asm import parse_program
    program = parse_program(codeobject.code_object_assembly(compiled.code_object))
    assert program.kernels["scale_f16"].metadata == ours["amdhsa.kernels"][0]


def test_a_code_object_without_the_note_is_refused():
    data = bytearray(HIP_CODE_OBJECT.read_bytes())
    owner = data.find(b"AMDGPU\0\0")
    assert owner > 0
    data[owner:owner + 6] = b"XMDGPU"   # the note's owner renamed: no AMDGPU metadata left
    with pytest.raises(CodeObjectError, match="no AMDGPU metadata note"):
        code_object_metadata(bytes(data))
