"""rocke.dsl.paged: the paged tile copy in the emulator against a torch gather."""

import pytest
import torch

from rocke import dsl
from rocke.compiler import compile_ir
from rocke.dsl.paged import (CACHE_STREAM, BlockTableRow, PagedView, copy_paged_tile,
                             rows_per_wave)
from tests.dsl.emu_helper import run

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}


def _copy_kernel(tokens, dim, page_size, *, dtype="f16", threads=128, transpose=False,
                 lds_dma=False, addr_64=False, aux=0, pad=0, defer=False):
    """Copy one tile of one KV head to LDS, then LDS -> out ([tokens, dim] or [dim, tokens])."""
    name = (f"paged_{tokens}_{dim}_{page_size}_{dtype}_{threads}_{int(transpose)}{int(lds_dma)}"
            f"{int(addr_64)}{aux}_{pad}{int(defer)}")
    k = dsl.Kernel(name, workgroup_size=threads)
    cache_ptr = k.arg_ptr("cache", dtype, readonly=True)
    table_ptr = k.arg_ptr("table", "i32", readonly=True)
    out_ptr = k.arg_ptr("out", dtype)
    num_pages = k.arg_i32("num_pages")
    page_stride = k.arg_i32("page_stride")
    token_stride = k.arg_i32("token_stride")
    head_stride = k.arg_i32("head_stride")
    head = k.arg_i32("head")
    first = k.arg_i32("first_token")
    valid = k.arg_i32("valid_tokens")
    shape = (dim, tokens) if transpose else (tokens, dim)
    tile = k.lds("tile", shape, dtype, pad=pad)
    view = PagedView(cache_ptr, page_size, page_stride, token_stride, head * head_stride, num_pages, addr_64)
    finish = copy_paged_tile(view, BlockTableRow(table_ptr, k.const(0, "i32")), tile,
                             first_token=first, valid_tokens=valid, thread_index=k.thread_id(0),
                             threads=threads, transpose=transpose, lds_dma=lds_dma, aux=aux,
                             defer_stores=defer)
    finish()
    if lds_dma:
        k.wait_vmcnt(0)
    k.barrier()
    out = out_ptr.buffer(shape[0] * shape[1])
    tid = k.thread_id(0)
    for i in range(0, shape[0] * shape[1], threads):
        idx = tid + i
        r, c = idx // shape[1], idx % shape[1]
        with k.if_(idx < shape[0] * shape[1]):
            out.store(idx, tile.load((r, c)))
    return k


def _reference(cache, table, head, first, valid, tokens):
    page_size = cache.shape[1]
    rows = []
    for t in range(first, first + tokens):
        if t < valid:
            rows.append(cache[table[t // page_size], t % page_size, head])
        else:
            rows.append(torch.zeros(cache.shape[-1], dtype=cache.dtype))
    return torch.stack(rows)


@pytest.mark.parametrize("tokens, dim, page_size, dtype, transpose, lds_dma, addr_64, first, valid", [
    (32, 64, 16, "f16", False, False, False, 32, 77),      # two pages per tile
    (16, 128, 16, "bf16", False, False, True, 16, 29),     # ragged: rows past 29 read 0
    (64, 64, 64, "f16", True, False, False, 64, 100),      # V^T tile, one page
    (32, 128, 32, "f16", False, True, False, 0, 20),       # LDS DMA, one row per instruction
    (32, 64, 16, "f16", False, True, True, 32, 60),        # LDS DMA, two rows per instruction
])
def test_paged_copy_matches_gather(tokens, dim, page_size, dtype, transpose, lds_dma, addr_64, first, valid):
    gen = torch.Generator().manual_seed(tokens + dim + first)
    num_pages, heads = 9, 3
    cache = torch.randn(num_pages, page_size, heads, dim, generator=gen).to(TORCH[dtype])
    table = torch.randperm(num_pages, generator=gen).to(torch.int32)
    # entries past the used pages are out of range: the copy must never read them
    used = -(-valid // page_size)
    table[used:] = 10 ** 6
    head = 1
    kern = _copy_kernel(tokens, dim, page_size, dtype=dtype, transpose=transpose, lds_dma=lds_dma,
                        addr_64=addr_64)
    out = torch.full((tokens * dim,), 7.0, dtype=TORCH[dtype])
    s = cache.stride()
    run(kern, (1, 1, 1), [cache, table, out, num_pages, s[0], s[1], s[2], head, first, valid])
    ref = _reference(cache, table, head, first, valid, tokens)
    got = out.view(dim, tokens).T if transpose else out.view(tokens, dim)
    assert torch.equal(got, ref)


def test_paged_copy_streaming_policy_and_padding():
    """The nt cache-policy bit reaches the loads and a padded LDS tile holds the same rows."""
    kern = _copy_kernel(32, 64, 32, aux=CACHE_STREAM, pad=8)
    asm_kernel = kern  # compiled below through run(); check the policy bit in the assembly too
    from rocke.compiler import compile_ir
    asm = compile_ir(asm_kernel.ir(), name=asm_kernel.name, cache=False).asm
    assert any("buffer_load_dwordx4" in line and " nt" in line for line in asm.splitlines())
    gen = torch.Generator().manual_seed(3)
    cache = torch.randn(4, 32, 2, 64, generator=gen).half()
    table = torch.tensor([2, 0, 3, 1], dtype=torch.int32)
    out = torch.zeros(32 * 64, dtype=torch.float16)
    s = cache.stride()
    kern = _copy_kernel(32, 64, 32, aux=CACHE_STREAM, pad=8)
    run(kern, (1, 1, 1), [cache, table, out, 4, s[0], s[1], s[2], 0, 64, 90])
    assert torch.equal(out.view(32, 64), _reference(cache, table, 0, 64, 90, 32))


def test_rows_per_wave():
    assert rows_per_wave(128, 8) == 4 and rows_per_wave(64, 8) == 8
    assert rows_per_wave(128, 8, lds_dma=True) == 1 and rows_per_wave(64, 8, lds_dma=True) == 2


def test_paged_copy_rejects_bad_layouts():
    k = dsl.Kernel("bad", workgroup_size=64)
    cache = k.arg_ptr("cache", "f16", readonly=True)
    table = k.arg_ptr("table", "i32", readonly=True)
    n = k.arg_i32("n")
    view = PagedView(cache, 4, n, n, n, n)
    tile = k.lds("t", (16, 64), "f16", pad=8)
    row = BlockTableRow(table, n)
    with pytest.raises(ValueError, match="must lie in one page"):
        copy_paged_tile(view, row, tile, first_token=n, valid_tokens=n, thread_index=k.thread_id(0), threads=64)
    view16 = PagedView(cache, 16, n, n, n, n)
    with pytest.raises(ValueError, match="unpadded"):
        copy_paged_tile(view16, row, tile, first_token=n, valid_tokens=n, thread_index=k.thread_id(0),
                        threads=64, lds_dma=True)
    with pytest.raises(ValueError, match="cannot transpose"):
        copy_paged_tile(view16, row, k.lds("t2", (64, 16), "f16"), first_token=n, valid_tokens=n,
                        thread_index=k.thread_id(0), threads=64, lds_dma=True, transpose=True)


def _row_scale_kernel(tokens, dim, page_size, code_dtype, dtype, transpose):
    """Copy one tile of per-row quantized codes with their paged f32 row scales into a 16-bit LDS
    tile, then LDS -> out."""
    k = dsl.Kernel(f"paged_rows_{tokens}_{dim}_{page_size}_{code_dtype}_{dtype}_{int(transpose)}",
                   workgroup_size=128)
    cache_ptr = k.arg_ptr("cache", code_dtype, readonly=True)
    scale_ptr = k.arg_ptr("scales", "f32", readonly=True)
    table_ptr = k.arg_ptr("table", "i32", readonly=True)
    out_ptr = k.arg_ptr("out", dtype)
    num_pages, page_stride, token_stride, head_stride, s_page, s_token, head, valid = (
        k.arg_i32(n) for n in ("num_pages", "page_stride", "token_stride", "head_stride",
                               "s_page", "s_token", "head", "valid"))
    shape = (dim, tokens) if transpose else (tokens, dim)
    tile = k.lds("tile", shape, dtype)
    view = PagedView(cache_ptr, page_size, page_stride, token_stride, head * head_stride, num_pages)
    scales = PagedView(scale_ptr, page_size, s_page, s_token, head, num_pages)
    copy_paged_tile(view, BlockTableRow(table_ptr, k.const(0, "i32")), tile,
                    first_token=k.const(0, "i32"), valid_tokens=valid, thread_index=k.thread_id(0),
                    threads=128, transpose=transpose, row_scales=scales)
    k.barrier()
    out = out_ptr.buffer(tokens * dim)
    tid = k.thread_id(0)
    for i in range(0, tokens * dim, 128):
        idx = tid + i
        out.store(idx, tile.load((idx // shape[1], idx % shape[1])))
    return k


@pytest.mark.parametrize("code_dtype, dtype, transpose, dim", [
    ("i8", "f16", False, 64), ("i8", "bf16", True, 64), ("fp8_e4m3fnuz", "bf16", False, 64),
    ("i8", "bf16", False, 256),          # d256 decodes int8 as biased bytes
])
def test_paged_copy_scales_each_row(code_dtype, dtype, transpose, dim):
    """row_scales: each (token, head) row times its own scale from the paged scale cache, rounded
    once to the LDS dtype; every int8 code (-128..127) appears; rows past ``valid`` read 0."""
    tokens, page_size, heads, num_pages, valid = 32, 16, 2, 3, 27
    gen = torch.Generator().manual_seed(5)
    if code_dtype == "i8":
        codes = (torch.arange(num_pages * page_size * heads * dim) % 256 - 128).to(torch.int8)
        cache = codes[torch.randperm(codes.numel(), generator=gen)].view(num_pages, page_size, heads, dim)
    else:
        cache = (torch.rand(num_pages, page_size, heads, dim, generator=gen) * 400 - 200).to(torch.float8_e4m3fnuz)
        cache.view(torch.uint8)[:, :, :, ::7] = 0x80       # e4m3fnuz's NaN code: stays a NaN
    scales = torch.rand(num_pages, page_size, heads, generator=gen) + 0.01
    if code_dtype != "i8":
        scales[0, 3:5] = 1e37       # products past f32's range round to +-inf
    table = torch.tensor([2, 0, 10 ** 6], dtype=torch.int32)     # the third page is never read
    kern = _row_scale_kernel(tokens, dim, page_size, code_dtype, dtype, transpose)
    out = torch.full((tokens * dim,), 7.0, dtype=TORCH[dtype])
    s, ss = cache.stride(), scales.stride()
    run(kern, (1, 1, 1), [cache, scales, table, out, num_pages, s[0], s[1], s[2], ss[0], ss[1], 1, valid])
    head = 1
    want = torch.zeros(tokens, dim)
    for t in range(valid):
        page, row = int(table[t // page_size]), t % page_size
        want[t] = cache[page, row, head].float() * scales[page, row, head]
    got = out.view(dim, tokens).T if transpose else out.view(tokens, dim)
    want = want.to(TORCH[dtype])
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    assert torch.equal(got.nan_to_num(), want.nan_to_num())


@pytest.mark.parametrize("tokens, dim, page_size, dtype, pad, defer, valid", [
    (32, 128, 16, "bf16", 8, False, 41),     # 4 rows per wave step, ragged tail reads 0
    (16, 256, 16, "f16", 0, True, 30),       # 2 rows per wave step, stores deferred
    (32, 64, 32, "bf16", 4, True, 64),       # 8 rows per wave step
])
def test_transposed_copy_stores_column_pairs(tokens, dim, page_size, dtype, pad, defer, valid):
    """A 16-bit V^T copy: neighbouring lanes swap halves (DPP) and write 32-bit column pairs --
    the tile equals the gather, and the code has no 16-bit LDS store left."""
    gen = torch.Generator().manual_seed(dim + valid)
    num_pages, heads, first = 9, 2, 16
    cache = torch.randn(num_pages, page_size, heads, dim, generator=gen).to(TORCH[dtype])
    table = torch.randperm(num_pages, generator=gen).to(torch.int32)
    kern = _copy_kernel(tokens, dim, page_size, dtype=dtype, transpose=True, pad=pad, defer=defer)
    asm = compile_ir(kern.ir(), name=kern.name, cache=False).asm
    assert "ds_write_b16" not in asm and "quad_perm:[1,0,3,2]" in asm
    out = torch.full((tokens * dim,), 7.0, dtype=TORCH[dtype])
    s = cache.stride()
    run(kern, (1, 1, 1), [cache, table, out, num_pages, s[0], s[1], s[2], 1, first, valid])
    assert torch.equal(out.view(dim, tokens).T, _reference(cache, table, 1, first, valid, tokens))
