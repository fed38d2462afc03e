"""Spec -> IR is a pure function: byte-identical text across processes and hash seeds."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from rocke.kernels.samples import softmax, vector_add

from .zoo import build_zoo

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import hashlib
from rocke.kernels.samples import softmax, vector_add
from tests.dsl.zoo import build_zoo
kernels = [build_zoo()]
kernels += [vector_add.build(s) for _, s in sorted(vector_add.VARIANTS.items())]
kernels += [softmax.build(s) for _, s in sorted(softmax.VARIANTS.items())]
for k in kernels:
    print(k.name, hashlib.sha256(k.ir().encode()).hexdigest())
"""


def hashes_in_subprocess(seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout


def test_ir_identical_across_hash_seeds_and_processes():
    first = hashes_in_subprocess("0")
    second = hashes_in_subprocess("4242")
    assert first == second
    lines = first.strip().splitlines()
    assert len(lines) == 1 + len(vector_add.VARIANTS) + len(softmax.VARIANTS)
    # and the same as building here, in this process
    here = build_zoo()
    assert f"{here.name} {hashlib.sha256(here.ir().encode()).hexdigest()}" == lines[0]


def test_rebuilding_gives_the_same_text_and_ir_is_idempotent():
    spec = softmax.SoftmaxSpec("bf16", "workgroup", 2, 4, "swizzle")
    k = softmax.build(spec)
    assert k.ir() == k.ir() == softmax.build(spec).ir()
    other = softmax.build(softmax.SoftmaxSpec("bf16", "workgroup", 2, 2, "swizzle"))
    assert other.ir() != k.ir()
