"""Spec -> IR is a pure function, not an accident of one process: the IR of variants of each
attention family (and a sample) hashes the same in two processes with different hash seeds, and
equal to the golden table."""
import os
import subprocess
import sys
from pathlib import Path

from rocke.kernels.golden import load_golden

REPO = Path(__file__).resolve().parents[2]
VARIANTS = (
    "attention_2d/wide4_f16_d128_b16_g4",          # transposed-x8 flash regime
    "attention_2d/narrow_bf16_d64_b16_g4_sinks",   # narrow path with a score feature
    "attention_3d/narrow_bf16_d64_b32_g5",         # split-KV partials, GQA 5
    "reduce_segments/bf16_d128",
    "flash_attention/bf16_d64_causal",
    "softmax/bf16_workgroup",
    "dense_prefill_gfx942/bf16_d128_h64kv8_s4096_causal",
)
SCRIPT = """
import sys
from rocke.kernels.registry import get_variant
for name in sys.argv[1:]:
    print(name, get_variant(name).ir_hash())
"""


def _hashes(seeds: tuple[str, ...]) -> list[str]:
    """The variants' IR hashes from one fresh process per hash seed, run side by side."""
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, *VARIANTS], cwd=REPO,
                              env=dict(os.environ, PYTHONHASHSEED=seed), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for seed in seeds]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        outs.append(out)
    return outs


def test_ir_is_identical_across_processes_and_hash_seeds():
    first, second = _hashes(("0", "4242"))
    assert first == second
    hashes = dict(line.split() for line in first.splitlines())
    assert list(hashes) == list(VARIANTS)
    golden = load_golden()
    assert hashes == {name: golden[name] for name in VARIANTS}
