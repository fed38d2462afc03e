"""The randomized Hadamard transform (RHT) of vLLM's INT4_PER_TOKEN_HEAD caches (ALGORITHM.md
§13.4): vLLM rotates every K and V row by ``H D`` before quantizing it to 4 bits (``H`` the
unnormalized Sylvester Hadamard matrix of order ``b``, ``D`` a fixed diagonal of signs), so
attention over such a cache rotates the query the same way and the output back.

``H D`` scaled by ``1 / sqrt(b)`` is orthogonal, so ``(H D q) . (H D k) = b (q . k)`` and
``D H (H D o) = b o``: the kernels run on rotated q with ``softmax_scale / b`` and the output is
rotated back and divided by ``b``. A head size that is not a power of two is rotated
block-diagonally, in blocks of its largest power-of-two divisor ``b``, as vLLM does.
"""
from __future__ import annotations

import functools

# vLLM 0.33 (vllm/v1/attention/ops/int4_per_token_head.py) draws the signs once per row length
# with torch's CPU generator seeded 0x9E3779B9 (its round 0): one Bernoulli(1/2) draw per
# element, 1 -> +1 and 0 -> -1. A cache vLLM wrote is read with exactly these signs.
RHT_SEED = 0x9E3779B9


def rht_block(head_size: int) -> int:
    """The rotation's block: the largest power of two dividing ``head_size``."""
    return head_size & -head_size


@functools.cache
def _signs(block: int, device: str = "cpu"):
    """Drawn once on the host, copied to a device once (not a copy per call)."""
    import torch
    if device != "cpu":
        return _signs(block).to(device)
    generator = torch.Generator(device="cpu")
    generator.manual_seed(RHT_SEED)
    return torch.bernoulli(torch.full((block,), 0.5), generator=generator) * 2 - 1


def rht_signs(head_size: int, device=None):
    """The ±1 float32 signs ``D`` of a row's blocks (``rht_block(head_size)`` long), on
    ``device`` (default: the host)."""
    return _signs(rht_block(head_size), "cpu" if device is None else str(device))


def hadamard(x):
    """``x @ H`` along the last dimension (a power of two), ``H`` unnormalized Sylvester
    (``H[i, j] = (-1) ** popcount(i & j)``), by the butterfly: log2(n) passes of sums and
    differences of halves."""
    import torch
    n = x.shape[-1]
    h = 1
    while h < n:
        pairs = x.reshape(*x.shape[:-1], n // (2 * h), 2, h)
        x = torch.stack((pairs[..., 0, :] + pairs[..., 1, :],
                         pairs[..., 0, :] - pairs[..., 1, :]), dim=-2).reshape(*x.shape)
        h *= 2
    return x


def _blocks(x):
    b = rht_block(x.shape[-1])
    return x.reshape(*x.shape[:-1], x.shape[-1] // b, b), b


def rotate(x):
    """``H D x`` per block of the last dimension, in float32 (the query's rotation)."""
    blocks, _ = _blocks(x.float())
    return hadamard(blocks * rht_signs(x.shape[-1], x.device)).reshape(x.shape)


def rotate_back(x):
    """The inverse of `rotate`: ``D H x / b`` per block, in float32 (the output's)."""
    blocks, b = _blocks(x.float())
    return (hadamard(blocks) * rht_signs(x.shape[-1], x.device) / b).reshape(x.shape)
