"""tools/triton_ld_lld.py: an ld.lld stand-in through Triton's bundled lld, for re-modelling on
machines with Triton but no LLVM linker (docs/cli.md)."""
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "triton_ld_lld.py"


@pytest.mark.parametrize("argv", [[], ["-shared", "-o", "out"], ["-o", "out", "-x"],
                                  ["--version", "x"], ["-shared", "in.o", "-o"]])
def test_refuses_any_other_command_line(argv):
    """Only rocke's own link line (or --version) is taken; anything else names what it expects,
    exit 2, before Triton is even imported."""
    proc = subprocess.run([sys.executable, str(TOOL), *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "expected -shared --no-undefined -o OUT IN" in proc.stderr


def test_links_a_kernel_the_emulator_runs(tmp_path, monkeypatch):
    """Where Triton is installed (the `triton` extra): ROCKE_LD_LLD pointed at the tool links a
    kernel whose code object validates and runs right in the emulator."""
    pytest.importorskip("triton")
    import torch
    from rocke.compiler import compile_ir
    from rocke.compiler.toolchain import find_linker
    from rocke.dsl import Kernel, f32
    from rocke.runtime import launch
    wrapper = tmp_path / "ld.lld"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {TOOL} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("ROCKE_LD_LLD", str(wrapper))
    find_linker.cache_clear()
    try:
        k = Kernel("scale_triton_lld", workgroup_size=64)
        x = k.arg_ptr("x", f32)
        n = k.arg_i32("n")
        i = k.block_id(0) * 64 + k.thread_id(0)
        buf = x.buffer(n)
        buf.store(i, buf.load(i) * 3.0)
        ck = compile_ir(k.ir(), name=k.name, cache=False)
        assert ck.linker == "ld.lld" and ck.code_object[:4] == b"\x7fELF"
        t = torch.arange(100, dtype=torch.float32)
        launch(ck, grid=(2,), block=(64,), args=[t, 100])
        assert torch.equal(t, torch.arange(100, dtype=torch.float32) * 3.0)
    finally:
        find_linker.cache_clear()
