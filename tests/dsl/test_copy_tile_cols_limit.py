"""``copy_tile_to_lds(..., cols_limit=...)`` fills the columns past the limit with a 0 of the
tile's element type: integer tiles used to fail at build time with "float constant 0.0 cannot
become integer type i8" (reliability round 4), blamed on the caller's line."""

import pytest
import torch

from rocke import dsl
from rocke.dsl.fragment import copy_tile_to_lds

from .emu_helper import run

ROWS, THREADS = 16, 64
CASES = {   # dtype: (torch dtype, vector, columns): 4 segments a row, so 16 rows x 4 = 64 threads
    "i8": (torch.int8, 8, 32),
    "i32": (torch.int32, 4, 16),
    "u8": (torch.uint8, 8, 32),
    "fp8_e4m3fnuz": (torch.uint8, 8, 32),      # raw fp8 bytes; 0 is +0.0
}


def _round_trip_kernel(dtype: str, vector: int, cols: int, limit):
    """x -> LDS with ``cols_limit`` (an int, or the runtime argument ``n`` when None) -> y."""
    k = dsl.Kernel(f"copy_cols_limit_{dtype}", workgroup_size=THREADS)
    x, y = k.arg_ptr("x", dtype, readonly=True), k.arg_ptr("y", dtype)
    n = k.arg_i32("n")
    tile = k.lds("tile", (ROWS, cols), dtype)
    tid = k.thread_id(0)
    copy_tile_to_lds(x.buffer(ROWS * cols), tile, (0, 0), cols, thread_index=tid, threads=THREADS,
                     vector=vector, cols_limit=n if limit is None else limit)
    k.barrier()
    per_row = cols // vector
    r, c = tid // per_row, (tid % per_row) * vector
    y.buffer(ROWS * cols).store(r * cols + c, tile.load((r, c), width=vector))
    return k


@pytest.mark.parametrize("dtype", list(CASES))
@pytest.mark.parametrize("limit", [None, 5])
def test_integer_tile_with_cols_limit_zero_fills_masked_columns(dtype, limit):
    torch_dtype, vector, cols = CASES[dtype]
    k = _round_trip_kernel(dtype, vector, cols, limit)
    for n in ((0, 1, 13, cols - 3, cols) if limit is None else (limit,)):
        gen = torch.Generator().manual_seed(n)
        lo, hi = (1, 100) if torch_dtype == torch.uint8 else (-100, 100)
        X = torch.randint(lo, hi, (ROWS, cols), generator=gen, dtype=torch.int64).to(torch_dtype)
        X[X == 0] = 7                      # no zero in the source: a zero in y is the fill
        Y = torch.full((ROWS, cols), 55, dtype=torch_dtype)
        run(k, (1,), [X, Y, n])
        want = X.clone()
        want[:, n:] = 0
        assert torch.equal(Y, want), (dtype, n)
