"""rocke.dsl.softmax is the online-softmax step kernel authors import from the DSL, and the one
definition the shipped kernels use: the paged decode sample, built through it, emits exactly its
pinned IR."""
import hashlib

from rocke.dsl import softmax
from rocke.kernels.golden import load_golden
from rocke.kernels.samples import paged_decode


def test_the_paged_decode_sample_built_on_dsl_softmax_keeps_its_pinned_ir(monkeypatch):
    calls = []

    def counted(*args, **kw):
        calls.append(1)
        return softmax.online_softmax_update(*args, **kw)
    monkeypatch.setattr(paged_decode, "online_softmax_update", counted)
    monkeypatch.setattr(paged_decode, "LOG2E", softmax.LOG2E)
    golden = load_golden()
    name = "paged_decode/" + next(iter(paged_decode.VARIANTS))
    ir = paged_decode.build(paged_decode.VARIANTS[name.split("/", 1)[1]]).ir()
    assert calls and hashlib.sha256(ir.encode()).hexdigest() == golden[name]


def test_log2e_is_log2_of_e():
    import math
    assert softmax.LOG2E == math.log2(math.e)


def test_the_shipped_kernels_use_the_one_definition():
    from rocke.kernels.gfx942 import attention_pipeline, reduce_segments
    from rocke.kernels.samples import flash_attention
    assert attention_pipeline.online_softmax_update is softmax.online_softmax_update
    assert flash_attention.online_softmax_update is softmax.online_softmax_update
    assert reduce_segments.finite_base is softmax.finite_base
