"""The host content check's fast path (``_contents_plainly_valid``, plain Python for small
batches) is never looser than the detailed check: over random honest and lying metadata,
whenever it accepts, the detailed numpy check accepts with the same longest query length; and
it accepts the plain honest case (so the fast path is taken at all)."""
from __future__ import annotations

import random

import pytest
import torch

from rocke.kernels.common import attention_unified as au


def _detailed(*a):
    """The numpy check alone (the fast path switched off), or the exception it raises."""
    saved = au.FAST_CHECK_MAX_SEQS
    au.FAST_CHECK_MAX_SEQS = 0
    try:
        return au.check_contents(*a)
    except (ValueError, NotImplementedError) as e:
        return e
    finally:
        au.FAST_CHECK_MAX_SEQS = saved


def _random_case(rng):
    num_seqs = rng.randint(1, 6)
    block_size = rng.choice([16, 32])
    width = rng.randint(1, 5)
    num_blocks = rng.randint(1, 12)
    q_lens = [rng.randint(0, 4) for _ in range(num_seqs)]
    kv = [rng.randint(q, width * block_size) if q <= width * block_size else q for q in q_lens]
    cu = [0]
    for q in q_lens:
        cu.append(cu[-1] + q)
    table = [[rng.randrange(num_blocks) for _ in range(width)] for _ in range(num_seqs)]
    total_q = cu[-1]
    max_q, max_k = max(q_lens), max(kv)
    causal = True
    lie = rng.randrange(10)               # 0..8: one kind of lie; 9: honest
    if lie == 0:
        cu[0] = rng.choice([-1, 1])
    elif lie == 1 and num_seqs > 1:
        cu[1] = cu[2] + rng.randint(1, 3)
    elif lie == 2:
        total_q += rng.choice([-1, 1])
    elif lie == 3:
        kv[rng.randrange(num_seqs)] = rng.choice([-1, width * block_size + 1, 2 ** 31 - 1])
    elif lie == 4:
        table[rng.randrange(num_seqs)][rng.randrange(width)] = rng.choice([-1, num_blocks,
                                                                           -2 ** 31])
    elif lie == 5:
        max_q -= 1
    elif lie == 6:
        max_k -= 1
    elif lie == 7:
        causal = False
    elif lie == 8:
        s = rng.randrange(num_seqs)
        kv[s] = max(0, q_lens[s] - 1)
    t = torch.tensor
    return (t(cu, dtype=torch.int32), t(kv, dtype=torch.int32), t(table, dtype=torch.int32),
            total_q, num_blocks, block_size, causal, max_q, max_k)


def test_the_fast_path_is_never_looser_than_the_detailed_check():
    rng = random.Random(15)
    accepted = rejected = 0
    for _ in range(3000):
        case = _random_case(rng)
        fast = au.contents_plainly_valid(*case)
        detailed = _detailed(*case)
        if fast is not None:
            accepted += 1
            assert not isinstance(detailed, Exception), (case, detailed)
            assert fast == detailed, case
        elif isinstance(detailed, Exception):
            rejected += 1
    assert accepted > 300 and rejected > 300, (accepted, rejected)     # both sides exercised


@pytest.mark.parametrize("table_fill, fast", [(0, True), (2 ** 30, False)])
def test_an_honest_batch_takes_the_fast_path_unless_unused_entries_lie(table_fill, fast):
    """Unused columns outside the cache send the batch to the detailed check (which accepts)."""
    cu = torch.tensor([0, 1, 4], dtype=torch.int32)
    kv = torch.tensor([20, 5], dtype=torch.int32)
    table = torch.full((2, 3), table_fill, dtype=torch.int32)
    table[0, :2] = torch.tensor([3, 1])
    table[1, 0] = 2
    args = (cu, kv, table, 4, 4, 16, True, 3, 20)
    assert (au.contents_plainly_valid(*args) == 3) is fast
    assert au.check_contents(*args) == 3
