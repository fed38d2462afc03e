"""Decode vector memory (global/flat/buffer, LDS DMA, atomics) and LDS (DS) instructions."""
from __future__ import annotations

import sys

import numpy as np

from .access import U32, U64, scalar_raw_reader, sgpr_column, sgpr_pair, vgpr_pair
from .operands import M0, PRIVATE_APERTURE_HI, SHARED_APERTURE_HI
from .errors import DecodeError, EmulatorError


class PrivateAccessError(EmulatorError):
    """A scratch instruction ran in a kernel whose descriptor gives it no private memory."""

# bytes per lane, and how loaded bytes land in the destination VGPR(s)
LOAD_KINDS = {"dword": (4, "full"), "dwordx2": (8, "full"), "dwordx3": (12, "full"),
              "dwordx4": (16, "full"), "ubyte": (1, "zext"), "sbyte": (1, "sext"),
              "ushort": (2, "zext"), "sshort": (2, "sext"),
              "ubyte_d16": (1, "d16_lo_zext"), "ubyte_d16_hi": (1, "d16_hi_zext"),
              "sbyte_d16": (1, "d16_lo_sext"), "sbyte_d16_hi": (1, "d16_hi_sext"),
              "short_d16": (2, "d16_lo_zext"), "short_d16_hi": (2, "d16_hi_zext")}
STORE_KINDS = {"dword": (4, "full"), "dwordx2": (8, "full"), "dwordx3": (12, "full"),
               "dwordx4": (16, "full"), "byte": (1, "lo"), "short": (2, "lo"),
               "byte_d16_hi": (1, "hi"), "short_d16_hi": (2, "hi")}
DS_READ = {"b32": (4, "full"), "b64": (8, "full"), "b96": (12, "full"), "b128": (16, "full"),
           "u8": (1, "zext"), "i8": (1, "sext"), "u16": (2, "zext"), "i16": (2, "sext"),
           "u8_d16": (1, "d16_lo_zext"), "u8_d16_hi": (1, "d16_hi_zext"),
           "i8_d16": (1, "d16_lo_sext"), "i8_d16_hi": (1, "d16_hi_sext"),
           "u16_d16": (2, "d16_lo_zext"), "u16_d16_hi": (2, "d16_hi_zext")}
DS_WRITE = {"b32": (4, "full"), "b64": (8, "full"), "b96": (12, "full"), "b128": (16, "full"),
            "b8": (1, "lo"), "b16": (2, "lo"), "b8_d16_hi": (1, "hi"), "b16_d16_hi": (2, "hi")}


# ---------------------------------------------------------------- register <-> bytes helpers

def _gather_rows(P, sel, row, count):
    """(n, 64, count) uint32 of consecutive VGPR rows."""
    return np.moveaxis(P.vgpr[sel, row:row + count], 1, 2)


def _pack_store_bytes(words, nbytes, how):
    """(m, k) uint32 register words -> (m, nbytes) uint8 to store."""
    if how == "full":
        return np.ascontiguousarray(words, U32).view(np.uint8)[:, :nbytes]
    value = words[:, 0] >> U32(16) if how == "hi" else words[:, 0]
    if sys.byteorder == "little":   # the low bytes, contiguous (a narrowing cast keeps them)
        return value.astype(np.uint8 if nbytes == 1 else np.uint16).view(np.uint8).reshape(-1, nbytes)
    return np.ascontiguousarray(value.astype(U32)).view(np.uint8).reshape(-1, 4)[:, :nbytes]


def _loaded_words(data, nbytes, how, old_rows):
    """(m, nbytes) uint8 loaded -> (m, k) uint32 register words (old_rows: (m,) for d16 forms)."""
    if how == "full":
        return np.ascontiguousarray(data).view(U32).reshape(len(data), nbytes // 4)
    value = data[:, 0].astype(U32) if nbytes == 1 else \
        np.ascontiguousarray(data).view(np.uint16)[:, 0].astype(U32)
    if how.endswith("sext"):
        sign = U32(1 << (8 * nbytes - 1))
        value = (value ^ sign) - sign
        if how.startswith("d16"):
            value &= U32(0xFFFF)
    if how.startswith("d16_lo"):
        value = (old_rows & U32(0xFFFF0000)) | (value & U32(0xFFFF))
    elif how.startswith("d16_hi"):
        value = (old_rows & U32(0xFFFF)) | (value << U32(16))
    return value.astype(U32, copy=False)[:, None]


LDS_DMA_BYTES = {"dword": 4, "dwordx3": 12, "dwordx4": 16}


def _write_loaded(P, sel, row, active, words):
    """Scatter (m, k) words for the active lanes into rows row..row+k-1."""
    k = words.shape[1]
    if len(words) == active.size:   # every lane active: no merge with the old values
        lanes_first = words.reshape(active.shape + (k,))
        if k == 2 and not isinstance(sel, slice):   # see valu.write_rows: one register at a time
            P.vgpr[sel, row] = lanes_first[:, :, 0]
            P.vgpr[sel, row + 1] = lanes_first[:, :, 1]
            return
        P.vgpr[sel, row:row + k] = lanes_first.transpose(0, 2, 1)
        return
    block = _gather_rows(P, sel, row, k).copy()
    block[active] = words
    P.vgpr[sel, row:row + k] = np.moveaxis(block, 2, 1)


write_loaded = _write_loaded   # for the gfx950 transposed LDS reads


# ---------------------------------------------------------------- global / flat / buffer

class _AddressPlan:
    """Per-lane 64-bit addresses of a global/flat/buffer instruction (and buffer range checks)."""

    def __init__(self, family, ops_addr, mods, ins):
        self.family = family
        self.imm = int(mods.get("offset", 0))
        if family in ("global", "flat"):
            vaddr, saddr = ops_addr
            if vaddr.kind != "v":
                raise DecodeError(f"{ins.mnemonic}: address {vaddr.text!r} must be a VGPR")
            self.vrow = vaddr.index
            self.saddr = None
            if saddr is not None and saddr.kind == "s":
                self.saddr = saddr.index
                if vaddr.count != 1:
                    raise DecodeError("with an SGPR base the VGPR offset is 32-bit")
            elif vaddr.count != 2:
                raise DecodeError(f"{ins.mnemonic}: 64-bit address needs a VGPR pair")
        else:
            vaddr, srsrc, soffset = ops_addr
            self.offen, self.idxen = bool(mods.get("offen")), bool(mods.get("idxen"))
            if mods.get("addr64"):
                raise DecodeError("addr64 buffer addressing does not exist on gfx942")
            if (self.offen or self.idxen) and vaddr.kind != "v":
                raise DecodeError("offen/idxen need a VGPR address")
            self.vrow = vaddr.index if vaddr.kind == "v" else None
            if srsrc.kind != "s" or srsrc.count != 4:
                raise DecodeError("buffer resource must be 4 SGPRs")
            self.rsrc = srsrc.index
            self.soffset = scalar_raw_reader(soffset, "b32")

    def addresses(self, P, sel, n):
        """(addresses uint64 (n, 64), in_range bool (n, 64) or None, range offsets)."""
        if self.family in ("global", "flat"):
            if self.saddr is not None:
                base = sgpr_pair(P, sel, self.saddr)
                addr = base[:, None] + P.vgpr[sel, self.vrow].astype(U64)
            else:
                addr = vgpr_pair(P, sel, self.vrow, n)
            if self.imm:   # a fresh array: the signed offset added modulo 2**64 in place
                addr += U64(self.imm % (1 << 64))
            return addr, None
        r = self.rsrc
        sgpr = P.sgpr
        w0, w1, w2, w3 = (sgpr_column(sgpr, r + i)[sel] for i in range(4))
        if (w3 & U32(1 << 23)).any():
            raise DecodeError("buffer resources with ADD_TID_ENABLE are not supported")
        base = w0.astype(U64) | ((w1 & U32(0xFFFF)).astype(U64) << U64(32))
        stride = ((w1 >> U32(16)) & U32(0x3FFF)).astype(np.int64)
        num_records = w2.astype(np.int64)
        voffset = np.zeros((n, 64), np.int64)
        index = np.zeros((n, 64), np.int64)
        if self.idxen and self.offen:
            index = P.vgpr[sel, self.vrow].astype(np.int64)
            voffset = P.vgpr[sel, self.vrow + 1].astype(np.int64)
        elif self.idxen:
            index = P.vgpr[sel, self.vrow].astype(np.int64)
        elif self.offen:
            voffset = P.vgpr[sel, self.vrow].astype(np.int64)
        # VOFFSET + the instruction offset wrap at 32 bits; SOFFSET is added after the wrap and
        # counts toward the range check (see rocke/emu/launch.py)
        offset = (voffset + self.imm) & 0xFFFFFFFF
        soffset = self.soffset(P, sel, n).astype(np.int64)
        byte_offset = soffset[:, None] + offset
        addr = base[:, None].astype(np.int64) + byte_offset + index * stride[:, None]
        # only IDXEN on a strided buffer checks the index; everything else the byte offset
        structured = (stride != 0)[:, None] & self.idxen
        return addr.astype(U64), (structured, index, byte_offset, num_records[:, None])

    @staticmethod
    def in_range(check, nbytes_from, nbytes):
        """Lanes whose bytes [nbytes_from, nbytes_from + nbytes) of the access are in range."""
        structured, index, byte_offset, limit = check
        by_offset = byte_offset + (nbytes_from + nbytes) <= limit
        if not structured.any():
            return by_offset
        return np.where(structured, index < limit, by_offset)


def _check_flat_apertures(P, ins, sel, addr, active, private_ok=False):
    """Fault on lanes a flat access cannot serve; returns the lanes addressing the private
    aperture (their low 32 bits are the private offset) when `private_ok`, else None."""
    hi = (addr >> U64(32)).astype(np.int64)
    private = active & (hi == PRIVATE_APERTURE_HI)
    if private.any() and not private_ok:
        P.fault_at(ins, sel, private, addr, "flat atomic on the private aperture is not supported")
    if private.any() and getattr(P, "private", None) is None:
        P.fault_at(ins, sel, private, addr, "flat access to the private aperture by a kernel "
                   "with no private segment (.amdhsa_private_segment_fixed_size 0)")
    bad = active & (hi == SHARED_APERTURE_HI)
    if bad.any():
        P.fault_at(ins, sel, bad, addr, "flat access to the LDS aperture is not supported")
    return private if private.any() else None


class _ScratchPlan:
    """Per-lane private byte offsets of a `scratch_*` instruction: [VADDR] + [SADDR] + the
    signed instruction offset (either register may be `off`; gfx940 allows both)."""

    def __init__(self, vaddr, saddr, mods, ins):
        self.imm = int(mods.get("offset", 0))
        self.vrow = None
        if vaddr is not None and vaddr.kind != "off":
            if vaddr.kind != "v" or vaddr.count != 1:
                raise DecodeError(f"{ins.mnemonic}: address {vaddr.text!r} must be one VGPR or off")
            self.vrow = vaddr.index
        self.soffset = None
        if saddr is not None and saddr.kind != "off":
            if saddr.kind != "s" or saddr.count != 1:
                raise DecodeError(f"{ins.mnemonic}: offset {saddr.text!r} must be one SGPR or off")
            self.soffset = scalar_raw_reader(saddr, "b32")

    def offsets(self, P, sel, n):
        """int64 (n, 64): unwrapped, so a negative or past-4-GiB sum stays out of range."""
        total = np.full((n, 64), self.imm, np.int64)
        if self.vrow is not None:
            total += P.vgpr[sel, self.vrow]
        if self.soffset is not None:
            total += self.soffset(P, sel, n).astype(np.int64)[:, None]
        return total


def _private(P, ins):
    segments = getattr(P, "private", None)
    if segments is None:
        raise PrivateAccessError(f"{ins.at} accesses private (scratch) "
                                 "memory but the kernel descriptor gives it none "
                                 "(.amdhsa_private_segment_fixed_size 0)")
    return segments


def _decode_scratch(ins, ops, mods, rest):
    if rest.startswith("load_") and rest[len("load_"):] in LOAD_KINDS:
        nbytes, how = LOAD_KINDS[rest[len("load_"):]]
        dst = ops[0]
        if dst.kind != "v":
            raise DecodeError("load destination must be a VGPR")
        plan = _ScratchPlan(ops[1], ops[2] if len(ops) > 2 else None, mods, ins)
        row = dst.index

        def run_load(P, sel, n):
            active, full, lanes = P.exec_state(sel)
            P.vm_issue(sel)
            data = _private(P, ins).load(P, ins, sel, plan.offsets(P, sel, n), nbytes, active)
            old = P.vgpr[sel, row][active] if how.startswith("d16") else None
            _write_loaded(P, sel, row, active, _loaded_words(data, nbytes, how, old))
            return lanes
        return run_load
    if rest.startswith("store_") and rest[len("store_"):] in STORE_KINDS:
        nbytes, how = STORE_KINDS[rest[len("store_"):]]
        data_op = ops[1]
        if data_op.kind != "v":
            raise DecodeError("store data must be a VGPR")
        plan = _ScratchPlan(ops[0], ops[2] if len(ops) > 2 else None, mods, ins)
        row, k = data_op.index, max(1, (nbytes + 3) // 4)

        def run_store(P, sel, n):
            active, full, lanes = P.exec_state(sel)
            P.vm_issue(sel)
            words = _gather_rows(P, sel, row, k)[active]
            _private(P, ins).store(P, ins, sel, plan.offsets(P, sel, n),
                                   _pack_store_bytes(words, nbytes, how), active)
            return lanes
        return run_store
    raise DecodeError(f"opcode {ins.mnemonic!r} is not implemented")


def decode_vmem(ins, ops, mods):
    name = ins.mnemonic
    family = name.split("_")[0]
    rest = name[len(family) + 1:]
    unknown = set(mods) - {"glc", "slc", "nt", "sc0", "sc1", "dlc", "offset", "offen", "idxen", "lds"}
    if unknown:
        raise DecodeError(f"unsupported modifier(s) {sorted(unknown)}")
    if family == "scratch":
        return _decode_scratch(ins, ops, mods, rest)
    if family not in ("global", "flat", "buffer"):
        raise DecodeError(f"opcode {name!r} is not implemented")
    if rest.startswith("atomic_"):
        return _decode_atomic(ins, ops, mods, family, rest[len("atomic_"):])
    if rest.startswith("load_lds_"):
        kind = rest[len("load_lds_"):]
        if kind not in LDS_DMA_BYTES:
            raise DecodeError(f"LDS DMA of {kind} is not implemented")
        plan = _AddressPlan(family, (ops[0], ops[1] if len(ops) > 1 else None), mods, ins)
        return _lds_dma(ins, plan, mods, LDS_DMA_BYTES[kind])
    if rest.startswith("load_"):
        kind = rest[len("load_"):]
        if kind not in LOAD_KINDS:
            raise DecodeError(f"opcode {name!r} is not implemented")
        nbytes, how = LOAD_KINDS[kind]
        if family == "buffer" and mods.get("lds"):
            if kind not in LDS_DMA_BYTES:
                raise DecodeError(f"LDS DMA of {kind} is not implemented")
            return _lds_dma(ins, _AddressPlan(family, ops[0:3], mods, ins), mods, LDS_DMA_BYTES[kind])
        dst = ops[0]
        if dst.kind != "v":
            raise DecodeError("load destination must be a VGPR")
        addr_ops = ops[1:4] if family == "buffer" else (ops[1], ops[2] if len(ops) > 2 else None)
        return _load(ins, _AddressPlan(family, addr_ops, mods, ins), dst.index, nbytes, how, family)
    if rest.startswith("store_"):
        kind = rest[len("store_"):]
        if kind not in STORE_KINDS:
            raise DecodeError(f"opcode {name!r} is not implemented")
        nbytes, how = STORE_KINDS[kind]
        if family == "buffer":
            data, addr_ops = ops[0], ops[1:4]
        else:
            data, addr_ops = ops[1], (ops[0], ops[2] if len(ops) > 2 else None)
        if data.kind != "v":
            raise DecodeError("store data must be a VGPR")
        return _store(ins, _AddressPlan(family, addr_ops, mods, ins), data.index, nbytes, how, family)
    if rest in ("wbl2", "inv", "wbinvl1", "wbinvl1_vol", "invl2"):
        return None  # cache maintenance: memory is coherent here
    raise DecodeError(f"opcode {name!r} is not implemented")


def _load(ins, plan, row, nbytes, how, family):
    def run(P, sel, n):
        active, full, lanes = P.exec_state(sel)
        addr, check = plan.addresses(P, sel, n)
        P.vm_issue(sel)
        private = _check_flat_apertures(P, ins, sel, addr, active, True) \
            if family == "flat" else None
        if private is not None:
            fetch = active
            data = _flat_private_load(P, ins, sel, addr, nbytes, active, private)
        elif check is None:
            fetch = active
            data = P.global_load(ins, sel, addr.reshape(-1) if full else addr[fetch], nbytes,
                                 fetch, addr)
        else:
            # buffer: each dword is range-checked on its own; out-of-range dwords read 0
            fetch = active
            data = None if nbytes <= 4 else np.zeros((lanes, nbytes), np.uint8)
            lane_addr = None
            for k in range(0, nbytes, 4):
                width = min(4, nbytes - k)
                ok_lanes = active & plan.in_range(check, k, width)
                in_range = int(np.count_nonzero(ok_lanes))
                if in_range == lanes and lanes:   # every active lane: the same lanes, unmasked
                    if lane_addr is None:
                        lane_addr = addr.reshape(-1) if full else addr[active]
                    loaded = P.global_load(ins, sel, lane_addr + U64(k) if k else lane_addr,
                                           width, ok_lanes, None)
                    if data is None:
                        data = loaded
                    else:
                        data[:, k:k + width] = loaded
                    continue
                if data is None:
                    data = np.zeros((lanes, nbytes), np.uint8)
                if in_range:
                    data[ok_lanes[active], k:k + width] = P.global_load(
                        ins, sel, addr[ok_lanes] + U64(k), width, ok_lanes, None)
        old = P.vgpr[sel, row][fetch] if how.startswith("d16") else None
        _write_loaded(P, sel, row, fetch, _loaded_words(data, nbytes, how, old))
        return lanes
    return run


def _store(ins, plan, row, nbytes, how, family):
    k = max(1, (nbytes + 3) // 4)
    def run(P, sel, n):
        active, full, lanes = P.exec_state(sel)
        addr, check = plan.addresses(P, sel, n)
        P.vm_issue(sel)
        private = _check_flat_apertures(P, ins, sel, addr, active, True) \
            if family == "flat" else None
        if private is not None:
            words = _gather_rows(P, sel, row, k)[active]
            _flat_private_store(P, ins, sel, addr, _pack_store_bytes(words, nbytes, how),
                                active, private)
            return lanes
        words = _gather_rows(P, sel, row, k)
        data = _pack_store_bytes(words.reshape(-1, k) if full else words[active], nbytes, how)
        lane_addr = addr.reshape(-1) if full else addr[active]
        if check is None:
            P.global_store(ins, sel, lane_addr, data, active, addr)
        else:
            for j in range(0, nbytes, 4):
                width = min(4, nbytes - j)
                ok_lanes = active & plan.in_range(check, j, width)  # out-of-range dwords are dropped
                in_range = int(np.count_nonzero(ok_lanes))
                if in_range == lanes and lanes:   # every active lane: the same lanes, unmasked
                    P.global_store(ins, sel, lane_addr + U64(j) if j else lane_addr,
                                   data[:, j:j + width], ok_lanes, None)
                elif in_range:
                    P.global_store(ins, sel, addr[ok_lanes] + U64(j),
                                   data[ok_lanes[active], j:j + width], ok_lanes, None)
        return lanes
    return run


def _flat_private_load(P, ins, sel, addr, nbytes, active, private):
    """(m, nbytes) for the active lanes of a flat load some of whose lanes are private."""
    data = np.zeros((int(active.sum()), nbytes), np.uint8)
    offsets = (addr & U64(0xFFFFFFFF)).astype(np.int64)
    data[private[active]] = P.private.load(P, ins, sel, offsets, nbytes, private)
    rest = active & ~private
    if rest.any():
        data[rest[active]] = P.global_load(ins, sel, addr[rest], nbytes, rest, addr)
    return data


def _flat_private_store(P, ins, sel, addr, data, active, private):
    offsets = (addr & U64(0xFFFFFFFF)).astype(np.int64)
    P.private.store(P, ins, sel, offsets, data[private[active]], private)
    rest = active & ~private
    if rest.any():
        P.global_store(ins, sel, addr[rest], data[rest[active]], rest, addr)


def _lds_dma(ins, plan, mods, nbytes=4):
    """LDS DMA: each lane's `nbytes` go to LDS at M0 + offset + nbytes * lane (dword on gfx942;
    dwordx3/x4 are gfx950's, which the target gate in rocke.emu.gfx950 keeps off gfx942)."""
    imm = int(mods.get("offset", 0))
    words = nbytes // 4
    def run(P, sel, n):
        active = P.exec_mask(sel)
        addr, check = plan.addresses(P, sel, n)
        values = np.zeros((n, 64, words), U32)
        if check is None:
            if active.any():
                values[active] = P.global_load(ins, sel, addr[active], nbytes, active,
                                               addr).view(U32).reshape(-1, words)
        else:   # buffer: each dword is range-checked on its own; out-of-range dwords read 0
            for w in range(words):
                ok = active & plan.in_range(check, 4 * w, 4)
                if ok.any():
                    values[ok, w] = P.global_load(ins, sel, addr[ok] + np.uint64(4 * w), 4, ok,
                                                  addr).view(U32)[:, 0]
        lds_addr = (sgpr_column(P.sgpr, M0)[sel].astype(np.int64) & 0x3FFFF)[:, None] + imm + nbytes * np.arange(64)
        P.vm_issue(sel)
        P.lds_write(ins, sel, lds_addr, values.view(np.uint8).reshape(n, 64, nbytes), active, dma=True)
        return int(np.count_nonzero(active))
    return run


# ---------------------------------------------------------------- atomics (global and LDS)

def _atomic_fn(op):
    """(dtype, update(old, data, cmp) -> new) for an atomic opcode suffix."""
    def pk_f16_add(old, data, cmp):
        s = (old.copy().view(np.float16) + data.copy().view(np.float16)).astype(np.float16)
        return s.view(U32)
    def pk_bf16_add(old, data, cmp):
        from . import numerics
        lo_hi = []
        for shift in (0, 16):
            a = ((old >> U32(shift)) & U32(0xFFFF)).astype(U32) << U32(16)
            b = ((data >> U32(shift)) & U32(0xFFFF)).astype(U32) << U32(16)
            total = a.view(np.float32) + b.view(np.float32)
            lo_hi.append(np.asarray(numerics.f32_to_bf16_bits(total)).astype(U32))
        return lo_hi[0] | (lo_hi[1] << U32(16))
    table = {
        "add": (U32, lambda o, d, c: o + d), "sub": (U32, lambda o, d, c: o - d),
        "smin": (np.int32, lambda o, d, c: np.minimum(o, d)), "smax": (np.int32, lambda o, d, c: np.maximum(o, d)),
        "umin": (U32, lambda o, d, c: np.minimum(o, d)), "umax": (U32, lambda o, d, c: np.maximum(o, d)),
        "and": (U32, lambda o, d, c: o & d), "or": (U32, lambda o, d, c: o | d), "xor": (U32, lambda o, d, c: o ^ d),
        "swap": (U32, lambda o, d, c: d),
        "cmpswap": (U32, lambda o, d, c: np.where(o == c, d, o)),
        "inc": (U32, lambda o, d, c: np.where(o >= d, U32(0), o + U32(1))),
        "dec": (U32, lambda o, d, c: np.where((o == 0) | (o > d), d, o - U32(1))),
        "add_f32": (np.float32, lambda o, d, c: (o + d).astype(np.float32)),
        "pk_add_f16": (U32, pk_f16_add), "pk_add_bf16": (U32, pk_bf16_add),
        "add_f64": (np.float64, lambda o, d, c: o + d),
        "min_f64": (np.float64, lambda o, d, c: np.fmin(o, d)), "max_f64": (np.float64, lambda o, d, c: np.fmax(o, d)),
        "add_x2": (U64, lambda o, d, c: o + d), "sub_x2": (U64, lambda o, d, c: o - d),
        "smin_x2": (np.int64, lambda o, d, c: np.minimum(o, d)), "smax_x2": (np.int64, lambda o, d, c: np.maximum(o, d)),
        "umin_x2": (U64, lambda o, d, c: np.minimum(o, d)), "umax_x2": (U64, lambda o, d, c: np.maximum(o, d)),
        "and_x2": (U64, lambda o, d, c: o & d), "or_x2": (U64, lambda o, d, c: o | d), "xor_x2": (U64, lambda o, d, c: o ^ d),
        "swap_x2": (U64, lambda o, d, c: d), "cmpswap_x2": (U64, lambda o, d, c: np.where(o == c, d, o)),
    }
    if op not in table:
        raise DecodeError(f"atomic operation {op!r} is not implemented")
    return table[op]


_UNORDERED_NORET = {"add": np.add, "add_f32": np.add, "add_f64": np.add, "add_x2": np.add,
                    "smin": np.minimum, "smax": np.maximum, "umin": np.minimum, "umax": np.maximum,
                    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


def apply_atomics(view, index, data, cmp, update, unordered_ufunc, want_old):
    """Apply lane atomics to `view[index]` in lane order; returns the old values if wanted.

    Lanes hitting the same element are serialized: round r applies every element's r-th hit.
    """
    if not want_old and unordered_ufunc is not None:
        unordered_ufunc.at(view, index, data)
        return None
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    first = np.r_[True, sorted_index[1:] != sorted_index[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(index)), 0))
    rank = np.empty(len(index), np.int64)
    rank[order] = np.arange(len(index)) - group_start
    old_values = np.empty(len(index), view.dtype) if want_old else None
    for r in range(int(rank.max()) + 1 if len(index) else 0):
        pick = np.flatnonzero(rank == r)
        where = index[pick]
        old = view[where]
        view[where] = update(old, data[pick], None if cmp is None else cmp[pick])
        if want_old:
            old_values[pick] = old
    return old_values


def _decode_atomic(ins, ops, mods, family, op):
    dtype, update = _atomic_fn(op)
    width = np.dtype(dtype).itemsize // 4
    returns = bool(mods.get("sc0") or mods.get("glc"))
    is_cmpswap = op.startswith("cmpswap")
    if family == "buffer":
        data_op, addr_ops = ops[0], ops[1:4]
        dst_row = data_op.index if returns else None
    else:
        if returns:
            dst, addr_op, data_op = ops[0], ops[1], ops[2]
            dst_row = dst.index
            saddr = ops[3] if len(ops) > 3 else None
        else:
            addr_op, data_op = ops[0], ops[1]
            dst_row = None
            saddr = ops[2] if len(ops) > 2 else None
        addr_ops = (addr_op, saddr)
    if data_op.kind != "v":
        raise DecodeError("atomic data must be a VGPR")
    plan = _AddressPlan(family, addr_ops, mods, ins)
    data_row = data_op.index
    ufunc = None if is_cmpswap else _UNORDERED_NORET.get(op)

    def run(P, sel, n):
        issued = P.exec_mask(sel)
        addr, check = plan.addresses(P, sel, n)
        P.vm_issue(sel)
        # buffer atomics are range-checked all or nothing: an out-of-range lane changes no
        # memory and, when it returns, reads 0
        active = issued if check is None else issued & plan.in_range(check, 0, 4 * width)
        if family == "flat":
            _check_flat_apertures(P, ins, sel, addr, active)
        rows = _gather_rows(P, sel, data_row, width * (2 if is_cmpswap else 1))[active]
        data = np.ascontiguousarray(rows[:, :width]).view(dtype)[:, 0]
        cmp = np.ascontiguousarray(rows[:, width:]).view(dtype)[:, 0] if is_cmpswap else None
        lane_addr = addr[active]
        old_all = P.global_atomic(ins, sel, lane_addr, dtype, data, cmp, update, ufunc,
                                  dst_row is not None, active, addr)
        if dst_row is not None:
            words = np.ascontiguousarray(old_all).view(U32).reshape(-1, width)
            if active is not issued:
                returned = np.zeros(issued.shape + (width,), U32)
                returned[active] = words
                words = returned[issued]
            _write_loaded(P, sel, dst_row, issued, words)
        return int(np.count_nonzero(issued))
    return run


# ---------------------------------------------------------------- LDS (DS) instructions

# DS atomic opcode (its `_rtn` dropped) -> the shared atomic table's name. ds_wrxchg exists only
# as `ds_wrxchg_rtn_*`, so its key is `wrxchg_*` once `_rtn` is dropped like every other.
_DS_ATOMIC = {"add_u32": "add", "sub_u32": "sub", "min_i32": "smin", "max_i32": "smax",
              "min_u32": "umin", "max_u32": "umax", "and_b32": "and", "or_b32": "or",
              "xor_b32": "xor", "add_f32": "add_f32", "inc_u32": "inc", "dec_u32": "dec",
              "wrxchg_b32": "swap", "pk_add_f16": "pk_add_f16", "pk_add_bf16": "pk_add_bf16",
              "min_f32": "min_f32", "max_f32": "max_f32", "cmpst_b32": "cmpswap",
              "add_u64": "add_x2", "sub_u64": "sub_x2", "min_i64": "smin_x2", "max_i64": "smax_x2",
              "min_u64": "umin_x2", "max_u64": "umax_x2", "and_b64": "and_x2", "or_b64": "or_x2",
              "xor_b64": "xor_x2", "wrxchg_b64": "swap_x2", "cmpst_b64": "cmpswap_x2",
              "add_f64": "add_f64", "min_f64": "min_f64", "max_f64": "max_f64"}


def decode_swizzle_offset(value) -> int:
    """ds_swizzle offset: an integer or LLVM's swizzle(MODE, ...) macro -> 16-bit offset."""
    if isinstance(value, int):
        return value
    text = str(value)
    if not text.startswith("swizzle(") or not text.endswith(")"):
        raise DecodeError(f"unsupported ds_swizzle offset {text!r}")
    parts = [p.strip() for p in text[len("swizzle("):-1].split(",")]
    mode = parts[0]
    if mode == "QUAD_PERM":
        lanes = [int(p, 0) for p in parts[1:5]]
        return 0x8000 | sum(l << (2 * i) for i, l in enumerate(lanes))
    if mode == "BITMASK_PERM":
        pattern = parts[1].strip('"')
        and_mask = or_mask = xor_mask = 0
        for i, ch in enumerate(reversed(pattern)):
            bit = 1 << i
            if ch == "p":
                and_mask |= bit
            elif ch == "1":
                or_mask |= bit
            elif ch == "i":
                and_mask |= bit
                xor_mask |= bit
        return and_mask | (or_mask << 5) | (xor_mask << 10)
    if mode == "SWAP":
        return 0x1F | (int(parts[1], 0) << 10)
    if mode == "REVERSE":
        return 0x1F | ((int(parts[1], 0) - 1) << 10)
    if mode == "BROADCAST":
        size, lane = int(parts[1], 0), int(parts[2], 0)
        return (0x1F & ~(size - 1)) | (lane << 5)
    raise DecodeError(f"unsupported ds_swizzle mode {mode!r}")


def swizzle_source_lanes(offset: int) -> np.ndarray:
    lane = np.arange(64)
    if offset & 0x8000:
        return (lane & ~3) | ((offset >> (2 * (lane & 3))) & 3)
    and_mask, or_mask, xor_mask = offset & 0x1F, (offset >> 5) & 0x1F, (offset >> 10) & 0x1F
    return (lane & ~0x1F) | ((((lane & 0x1F) & and_mask) | or_mask) ^ xor_mask)


def decode_ds(ins, ops, mods):
    name = ins.mnemonic
    rest = name[3:]
    unknown = set(mods) - {"offset", "offset0", "offset1", "gds"}
    if unknown or mods.get("gds"):
        raise DecodeError(f"unsupported modifier(s) {sorted(unknown) or ['gds']}")
    if rest == "swizzle_b32":
        src_lanes = swizzle_source_lanes(decode_swizzle_offset(mods.get("offset", 0)))
        dst, src = ops[0].index, ops[1].index

        def run_swizzle(P, sel, n):
            active = P.exec_mask(sel)
            values = np.where(active[:, src_lanes], P.vgpr[sel, src][:, src_lanes], U32(0))
            _write_loaded(P, sel, dst, active, values[active][:, None])
            return int(np.count_nonzero(active))
        return run_swizzle
    if rest in ("bpermute_b32", "permute_b32"):
        dst, addr, data = ops[0].index, ops[1].index, ops[2].index
        imm = int(mods.get("offset", 0))
        backward = rest == "bpermute_b32"

        def run_permute(P, sel, n):
            active = P.exec_mask(sel)
            lanes = ((P.vgpr[sel, addr].astype(np.int64) + imm) >> 2) & 63
            values = P.vgpr[sel, data]
            rows = np.arange(n)[:, None]
            if backward:
                out = np.where(active[rows, lanes], values[rows, lanes], U32(0))
            else:
                out = np.zeros((n, 64), U32)
                # ascending lane order: the highest-numbered source lane wins a shared target
                w, l = np.nonzero(active)
                out[w, lanes[w, l]] = values[w, l]
            _write_loaded(P, sel, dst, active, out[active][:, None])
            return int(np.count_nonzero(active))
        return run_permute
    if rest.startswith("read2") or rest.startswith("write2"):
        is_read = rest.startswith("read2")
        kind = rest.split("_")[-1]
        st64 = "st64" in rest
        size = 4 if kind == "b32" else 8
        scale = size * (64 if st64 else 1)
        off0, off1 = int(mods.get("offset0", 0)) * scale, int(mods.get("offset1", 0)) * scale
        if is_read:
            dst, addr = ops[0], ops[1].index
            return _ds_read(ins, addr, [(off0, size, "full", dst.index),
                                        (off1, size, "full", dst.index + size // 4)])
        addr, d0, d1 = ops[0].index, ops[1].index, ops[2].index
        return _ds_write(ins, addr, [(off0, size, "full", d0), (off1, size, "full", d1)])
    if rest.startswith("read_") and rest[5:] in DS_READ:
        nbytes, how = DS_READ[rest[5:]]
        return _ds_read(ins, ops[1].index, [(int(mods.get("offset", 0)), nbytes, how, ops[0].index)])
    if rest.startswith("write_") and rest[6:] in DS_WRITE:
        nbytes, how = DS_WRITE[rest[6:]]
        return _ds_write(ins, ops[0].index, [(int(mods.get("offset", 0)), nbytes, how, ops[1].index)])
    returns = "_rtn_" in rest
    key = rest.replace("_rtn", "")
    if key in _DS_ATOMIC:
        atomic = _DS_ATOMIC[key]
        if atomic in ("min_f32", "max_f32"):
            dtype, update = np.float32, (lambda o, d, c: np.fmin(o, d)) if atomic == "min_f32" else (lambda o, d, c: np.fmax(o, d))
        else:
            dtype, update = _atomic_fn(atomic)
        if returns:
            dst_row, addr, data = ops[0].index, ops[1].index, ops[2].index
            extra = ops[3].index if len(ops) > 3 else None
        else:
            dst_row, addr, data = None, ops[0].index, ops[1].index
            extra = ops[2].index if len(ops) > 2 else None
        return _ds_atomic(ins, addr, data, extra, dst_row, int(mods.get("offset", 0)), dtype,
                          update, atomic.startswith("cmpswap"), _UNORDERED_NORET.get(atomic))
    raise DecodeError(f"opcode {name!r} is not implemented")


def _ds_read(ins, addr_row, parts):
    def run(P, sel, n):
        active, full, lanes = P.exec_state(sel)
        base = P.vgpr[sel, addr_row]
        loaded = []
        for offset, nbytes, how, row in parts:
            loaded.append(P.lds_read(ins, sel, _lds_address(base, offset), nbytes, active))
        for (offset, nbytes, how, row), data in zip(parts, loaded):
            old = P.vgpr[sel, row][active] if how.startswith("d16") else None
            _write_loaded(P, sel, row, active, _loaded_words(data, nbytes, how, old))
        return lanes
    return run


def _lds_address(base, offset):
    """32-bit LDS address of a lane as int64: VGPR (uint32) + instruction offset, wrapped (the
    uint32 sum wraps by itself)."""
    return (base + U32(offset) if offset else base).astype(np.int64)


def _ds_write(ins, addr_row, parts):
    def run(P, sel, n):
        active, full, lanes = P.exec_state(sel)
        base = P.vgpr[sel, addr_row]
        for offset, nbytes, how, row in parts:
            words = _gather_rows(P, sel, row, max(1, (nbytes + 3) // 4))
            data = _pack_store_bytes(words.reshape(n * 64, -1), nbytes, how).reshape(n, 64, nbytes)
            P.lds_write(ins, sel, _lds_address(base, offset), data, active)
        return lanes
    return run


def _ds_atomic(ins, addr_row, data_row, extra_row, dst_row, offset, dtype, update, is_cmpswap,
               ufunc):
    width = np.dtype(dtype).itemsize // 4

    def run(P, sel, n):
        active = P.exec_mask(sel)
        addr = (P.vgpr[sel, addr_row].astype(np.int64) + offset) & 0xFFFFFFFF
        data = np.ascontiguousarray(_gather_rows(P, sel, data_row, width)[active]).view(dtype)[:, 0]
        cmp = None
        if is_cmpswap:
            # ds_cmpst: data0 is the compare value, data1 the new value
            cmp, data = data, np.ascontiguousarray(_gather_rows(P, sel, extra_row, width)[active]).view(dtype)[:, 0]
        old = P.lds_atomic(ins, sel, addr, dtype, data, cmp, update, ufunc, dst_row is not None,
                           active)
        if dst_row is not None:
            _write_loaded(P, sel, dst_row, active, np.ascontiguousarray(old).view(U32).reshape(-1, width))
        return int(np.count_nonzero(active))
    return run
