"""The emulator must not grade its own homework: it may not load the DSL, the compiler, the
kernels, or rocke.arch's MFMA layout tables (ARCHITECTURE.md, 'The one hard fact')."""
import subprocess
import sys


def test_emu_imports_nothing_above_arch_abi():
    code = ("import sys, rocke.emu; "
            "bad = sorted(m for m in sys.modules if m.startswith(('rocke.dsl', 'rocke.compiler', "
            "'rocke.kernels', 'rocke.runtime', 'rocke.arch.mfma', 'llvmlite'))); print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
