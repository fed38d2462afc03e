"""Decode scalar memory loads (s_load_dword*, s_buffer_load_dword*) into batched closures."""
from __future__ import annotations

import numpy as np

from .access import U32, U64, put_sgpr_words, scalar_raw_reader, sgpr_column
from .errors import DecodeError


def decode_smem(ins, ops, mods, P_memory_read):
    """s_load_dword{,x2,x4,x8,x16} and s_buffer_load_* (scalar loads through the launch memory)."""
    name = ins.mnemonic
    widths = {"dword": 1, "dwordx2": 2, "dwordx4": 4, "dwordx8": 8, "dwordx16": 16}
    kind = name.split("_")[-1]
    if kind not in widths or not (name.startswith("s_load_") or name.startswith("s_buffer_load_")):
        raise DecodeError(f"opcode {name!r} is not implemented")
    count = widths[kind]
    dst = ops[0]
    if dst.kind != "s" or dst.count != count:
        raise DecodeError(f"{name} destination must be {count} SGPRs")
    buffered = name.startswith("s_buffer_load_")
    base_op = ops[1]
    if base_op.kind != "s" or base_op.count != (4 if buffered else 2):
        raise DecodeError(f"{name} base must be an SGPR {'quad' if buffered else 'pair'}")
    offset_reader = scalar_raw_reader(ops[2], "b32") if len(ops) > 2 else None
    imm = int(mods.get("offset", 0))
    b = base_op.index
    d = dst.index

    def run(P, sel, n):
        sgpr = P.sgpr
        lo, hi = sgpr_column(sgpr, b)[sel].astype(U64), sgpr_column(sgpr, b + 1)[sel].astype(U64)
        offset = np.full(n, imm, np.int64)
        if offset_reader is not None:
            offset = offset + offset_reader(P, sel, n).astype(np.int64)
        if buffered:
            base = lo | ((hi & U64(0xFFFF)) << U64(32))
            num_records = sgpr_column(sgpr, b + 2)[sel].astype(np.int64)
            offset = offset & ~3
            dword_offsets = offset[:, None] + 4 * np.arange(count)
            in_range = dword_offsets + 4 <= num_records[:, None]
            addresses = (base[:, None] + dword_offsets.astype(U64))
            values = np.zeros((n, count), U32)
            flat = addresses[in_range]
            if flat.size:
                values[in_range] = P_memory_read(P, sel, ins, flat, 4, in_range).view(U32)[:, 0]
        else:
            base = lo | (hi << U64(32))
            addresses = (base.astype(np.int64) + (offset & ~3)).astype(U64)
            values = P_memory_read(P, sel, ins, addresses, 4 * count, None).view(U32).reshape(n, count)
        put_sgpr_words(P.sgpr, sel, d, values)
        return 0
    return run
