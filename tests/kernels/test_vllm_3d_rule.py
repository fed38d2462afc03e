"""rocke.vllm's choice between the 2D and split-KV (3D) paths is vLLM 0.33's
(vllm/v1/attention/ops/triton_unified_attention.py, `unified_attention`): query lengths up to
MAX_3D_QUERY_LEN (speculative decoding) take 3D, q blocks (not sequences) are counted against
seq_threshold_3D, and a softmax_segm_max with fewer rows than query tokens falls back to 2D.
The path taken is observed as the `backend=` rocke.vllm passes the entry point."""
from __future__ import annotations

import math

import pytest
import torch

from rocke import vllm
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from tests.kernels.test_vllm_contract import D, _problem


@pytest.fixture(name="paths")
def _paths(monkeypatch):
    """The backend= of every entry-point call rocke.vllm makes, and the path its plan took."""
    taken = []
    real = au.run_unified_attention_torch

    def recording(*args, backend="auto", **kwargs):
        record = real(*args, backend=backend, **kwargs)
        taken.append((backend, None if record is None else record.plan.path))
        return record
    monkeypatch.setattr(au, "run_unified_attention_torch", recording)
    return taken


def _batch(q_lens, kv_lens, group=2, hk=1, seed=0):
    return _problem(q_lens, kv_lens, seed, group=group, hk=hk)


def _workspaces(rows, hq, segments=3):
    return dict(softmax_segm_output=torch.full((rows, hq, segments, D), math.nan),
                softmax_segm_max=torch.full((rows, hq, segments), math.nan),
                softmax_segm_expsum=torch.full((rows, hq, segments), math.nan))


def _check(a):
    ref = ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                         a["block_table"], a["softmax_scale"])
    err = (a["out"].float() - ref).abs().max().item()
    assert err <= attention_atol("f16"), f"max abs error {err}"


@pytest.mark.parametrize("q_lens, kv_lens", [((2, 1, 3), (40, 23, 35)), ((8, 5), (30, 64))],
                         ids=["verify-2-3", "verify-8"])
def test_a_speculative_decoding_batch_takes_3d_with_the_callers_workspaces(paths, q_lens,
                                                                           kv_lens):
    """Query lengths 2..8 (1 + speculative tokens): 3D, as in vLLM 0.33, on the caller's
    workspaces (sized by query token, with spare rows), against the fp32 reference."""
    a = _batch(q_lens, kv_lens)
    tokens, hq = a["q"].shape[:2]
    ws = _workspaces(tokens + 2, hq)
    vllm.unified_attention(**a, seq_threshold_3D=4, num_par_softmax_segments=3, **ws)
    assert paths == [("3d", "3d")]
    _check(a)
    for name, t in ws.items():
        assert not t[:tokens].isnan().any(), f"{name}: rows of this batch left unwritten"
        assert t[tokens:].isnan().all(), f"{name}: rows past the batch were written"


@pytest.mark.parametrize("threshold, path", [(4, "3d"), (3, "2d")])
def test_q_blocks_not_sequences_are_counted_against_the_threshold(paths, threshold, path):
    """GQA group 8: vLLM's BLOCK_Q is 16 // 8 = 2 query tokens, so 2 sequences of up to 4 query
    tokens are 2 * ceil(4 / 2) = 4 q blocks: 3D at threshold 4, 2D at 3 (2 sequences <= 3)."""
    a = _batch((4, 3), (20, 33), group=8)
    ws = _workspaces(a["q"].shape[0], a["q"].shape[1])
    vllm.unified_attention(**a, seq_threshold_3D=threshold, num_par_softmax_segments=3, **ws)
    assert paths == [(path, path)]
    _check(a)
    assert all(t.isnan().all() for t in ws.values()) == (path == "2d")


@pytest.mark.parametrize("q_lens, rows", [((1, 1), 1), ((3, 2), 2)],
                         ids=["decode", "verify-rows-per-sequence"])
def test_too_few_workspace_rows_fall_back_to_2d(paths, q_lens, rows):
    """softmax_segm_max with fewer rows than query tokens: 2D, as vLLM 0.33 falls back (rocke
    refused the decode call before); the workspaces are untouched and the output right."""
    a = _batch(q_lens, (40, 23))
    ws = _workspaces(rows, a["q"].shape[1])
    vllm.unified_attention(**a, seq_threshold_3D=4, num_par_softmax_segments=3, **ws)
    assert paths == [("2d", "2d")]
    _check(a)
    assert all(t.isnan().all() for t in ws.values())


def test_a_per_sequence_causal_tensor_keeps_a_verify_batch_on_2d(paths):
    """vLLM reads a per-sequence causal tensor as such (2D for queries past one token), even
    where rocke runs it as causal=True (every flag 1, on the host); decode still takes 3D."""
    for q_lens, path in (((2, 3), "2d"), ((1, 1), "3d")):
        a = _batch(q_lens, (40, 23))
        vllm.unified_attention(**dict(a, causal=torch.ones(2, dtype=torch.int32)),
                               seq_threshold_3D=4, num_par_softmax_segments=3,
                               **_workspaces(a["q"].shape[0], a["q"].shape[1]))
        _check(a)
        assert paths.pop() == (path, path)


def test_a_query_longer_than_max_3d_query_len_takes_2d(paths):
    a = _batch((vllm.MAX_3D_QUERY_LEN + 1, 1), (20, 33))
    vllm.unified_attention(**a, seq_threshold_3D=4, num_par_softmax_segments=3,
                           **_workspaces(a["q"].shape[0], a["q"].shape[1]))
    assert paths == [("2d", "2d")]
    _check(a)


# (max_seqlen_q, num_seqs, tokens, group, threshold, rows, keywords) -> 3D?
RULE = [
    ((1, 4, 4, 2, 4, 4, {}), True),                          # decode at the threshold
    ((1, 5, 5, 2, 4, 8, {}), False),                         # decode past it
    ((8, 4, 20, 2, 4, 20, {}), True),                        # BLOCK_Q 8: one block a sequence
    ((9, 1, 9, 2, 4, 9, {}), False),                         # longer than MAX_3D_QUERY_LEN
    ((2, 2, 4, 2, 4, 4, dict(causal=False)), False),         # non-causal, query > 1
    ((1, 2, 2, 2, 4, 2, dict(causal=False)), True),          # non-causal decode
    ((2, 2, 4, 2, 4, 4, dict(per_seq_causal=True)), False),  # vLLM's per-sequence tensor
    ((1, 2, 2, 2, 4, 2, dict(per_seq_causal=True)), True),
    ((2, 2, 4, 2, 4, 4, dict(mm_prefix=True)), False),       # mm_prefix_range, query > 1
    ((1, 2, 2, 2, 4, 2, dict(mm_prefix=True)), True),
    ((3, 2, 5, 32, 6, 5, {}), True),                         # group 32: BLOCK_Q 1, 6 blocks
    ((3, 2, 5, 32, 5, 5, {}), False),
    ((3, 2, 5, 17, 6, 5, {}), True),                         # group 17: 32 rows, BLOCK_Q 1
    ((3, 2, 5, 2, 4, 4, {}), False),                         # 4 workspace rows < 5 tokens
    ((1, 2, 2, 2, 4, 2, dict(batch_invariant=True)), False),
]


@pytest.mark.parametrize("case, expected", RULE)
def test_uses_3d_is_vllm_033s_rule(case, expected):
    max_q, num_seqs, tokens, group, threshold, rows, keywords = case
    keywords = dict(keywords)
    ws = [torch.empty(rows, 2 * group, 3, D), torch.empty(rows, 2 * group, 3),
          torch.empty(rows, 2 * group, 3)]
    invariant = keywords.pop("batch_invariant", False)
    got = vllm.uses_3d(max_q, num_seqs, threshold, 3, *ws, invariant, num_tokens=tokens,
                       num_queries_per_kv=group, **keywords)
    assert got is expected
    for missing in range(5):                # any 3D argument missing: 2D
        given = [threshold, 3, *ws]
        given[missing] = None
        assert not vllm.uses_3d(max_q, num_seqs, *given, num_tokens=tokens,
                                num_queries_per_kv=group, **keywords)


def test_query_block_is_vllms():
    assert [vllm.query_block(g) for g in (1, 2, 7, 8, 16, 17, 32, 64)] == \
        [16, 8, 2, 2, 1, 1, 1, 1]
