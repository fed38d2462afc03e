"""Fused Triton kernels of the torch backend on an NVIDIA GPU: the dense MFMAs and the LDS
reads and writes (ROCKE_EMU_CUDA_KERNELS, as torch_cuda_kernels).

Why: on a wide pool (tens of thousands of waves) the GPU's time is the bytes its kernels move.
Made of torch operations, an MFMA writes about seven times its result's bytes (float64
operands and products, C added in float64, the rounding to float32, the EXEC select), and an
LDS access builds an int64 index per byte it moves. Here each is one kernel that reads its
operands once and writes its result into the VGPR file in place.

Bits:
- MFMA: each product of two f16/bf16 values is exact in float64; the K products of a D
  element are summed in float64 in k order from +0, C (float32, exact in float64) is added,
  and the sum is rounded once to float32: rocke/emu/mfma.py's numerics. Wherever the K-sum is
  exact (mfma.py: realistic ranges), its order does not matter; the torch operations (cuBLAS)
  and numpy sum in orders of their own.
- LDS: bytes are moved, never interpreted.
The CUDA cases of tests/emu/test_torch_triton_kernels.py compare each kernel with the torch
operations bit for bit.

Captured graphs: a Triton kernel compiles and loads at its first launch, which a CUDA graph's
capture must not see. Each kernel is launched once per variant (its compile-time flags) on a
one-wave scratch file the first time an instruction runs it (always eagerly: a stretch's first
sighting runs step by step).
"""
from __future__ import annotations

import numpy as np

_UNAVAILABLE: list = [None]
_KERNELS: dict = {}


def unavailable() -> str:
    """Why the kernels cannot run in this process ("" when they can): Triton must import, and
    torch must be an NVIDIA CUDA build."""
    if _UNAVAILABLE[0] is None:
        import torch
        if torch.version.hip is not None or torch.version.cuda is None:
            _UNAVAILABLE[0] = "torch is not an NVIDIA CUDA build"
        else:
            try:
                _kernels()
                _UNAVAILABLE[0] = ""
            except ImportError as err:
                _UNAVAILABLE[0] = f"Triton is not importable: {err}"
    return _UNAVAILABLE[0]


def enabled(x) -> bool:
    """Whether `x` (a torch tensor) is on a CUDA device, ROCKE_EMU_CUDA_KERNELS is on and the
    kernels can run here."""
    if x.device.type != "cuda":
        return False
    from rocke import env
    return env.emu_cuda_kernels() and not unavailable()


def _kernels() -> dict:
    """The Triton kernels, defined at first use (Triton is optional)."""
    if _KERNELS:
        return _KERNELS
    import triton
    import triton.language as tl

    # one compiled variant per set of compile-time flags: no specialization on the values or
    # alignment of the other arguments (a variant first met inside a graph capture would
    # compile there)
    mfma_args = ["tv", "waves", "first", "mask", "a_index", "b_index", "a_row", "b_row",
                 "c_row", "d_row"]

    @triton.jit(do_not_specialize=mfma_args)
    def mfma(tv, waves, first, mask, a_index, b_index, a_row, b_row, c_row, d_row,
             REGS: tl.constexpr, E: tl.constexpr, K: tl.constexpr, BF16: tl.constexpr,
             ADD_C: tl.constexpr, WAVE_LIST: tl.constexpr, MASKED: tl.constexpr,
             BLOCK: tl.constexpr):
        # one program: BLOCK D elements (register * 64 + lane) of batch wave w
        w = tl.program_id(0)
        e = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        live = e < E
        if WAVE_LIST:
            wave = tl.load(waves + w)
        else:
            wave = first + w
        base = tv + wave.to(tl.int64) * (REGS * 64)
        acc = tl.zeros([BLOCK], dtype=tl.float64)
        for k in tl.static_range(K):
            ha = tl.load(a_index + k * E + e, mask=live, other=0)   # A's half of this term
            hb = tl.load(b_index + k * E + e, mask=live, other=0)
            wa = tl.load(base + a_row * 64 + (ha >> 1), mask=live, other=0)
            wb = tl.load(base + b_row * 64 + (hb >> 1), mask=live, other=0)
            xa = (wa >> ((ha & 1) * 16)) & 0xFFFF
            xb = (wb >> ((hb & 1) * 16)) & 0xFFFF
            if BF16:
                va = (xa << 16).to(tl.float32, bitcast=True).to(tl.float64)
                vb = (xb << 16).to(tl.float32, bitcast=True).to(tl.float64)
            else:
                va = xa.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float64)
                vb = xb.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float64)
            acc += va * vb      # an exact product: an fma here rounds as the add alone
        if ADD_C:
            c = tl.load(base + c_row * 64 + e, mask=live, other=0)
            acc += c.to(tl.float32, bitcast=True).to(tl.float64)
        out = acc.to(tl.float32).to(tl.int32, bitcast=True)
        if MASKED:
            on = tl.load(mask + w * 64 + e % 64, mask=live, other=0)
            old = tl.load(base + d_row * 64 + e, mask=live, other=0)
            out = tl.where(on != 0, out, old)
        tl.store(base + d_row * 64 + e, out, mask=live)

    lane_args = ["tv", "lds", "flat", "waves", "first", "mask", "lanes", "row"]

    @triton.jit
    def lane_block(tv, flat, waves, first, lanes, row, REGS: tl.constexpr,
                   WAVE_LIST: tl.constexpr, BLOCK: tl.constexpr):
        # this program's BLOCK lanes: (lane number, whether it is one, its flat LDS byte
        # index, the address of its register `row`)
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = i < lanes
        if WAVE_LIST:
            wave = tl.load(waves + i // 64, mask=live, other=0)
        else:
            wave = first + i // 64
        at = tl.load(flat + i, mask=live, other=0)
        return i, live, at, tv + wave.to(tl.int64) * (REGS * 64) + row * 64 + i % 64

    @triton.jit(do_not_specialize=lane_args)
    def lds_read(tv, lds, flat, waves, first, mask, lanes, row, REGS: tl.constexpr,
                 NBYTES: tl.constexpr, WORDS: tl.constexpr, WAVE_LIST: tl.constexpr,
                 MASKED: tl.constexpr, BLOCK: tl.constexpr):
        # one program: BLOCK lanes (batch wave * 64 + lane); each reads NBYTES at its flat
        # LDS byte index into WORDS registers (a u8 / u16 read zero-extended)
        i, live, at, dst = lane_block(tv, flat, waves, first, lanes, row, REGS, WAVE_LIST,
                                      BLOCK)
        if MASKED:
            on = tl.load(mask + i, mask=live, other=0) != 0
        for j in tl.static_range(WORDS):
            word = tl.zeros([BLOCK], dtype=tl.int32)
            for b in tl.static_range(4):
                if j * 4 + b < NBYTES:
                    byte = tl.load(lds + at + (j * 4 + b), mask=live, other=0)
                    word = word | ((byte.to(tl.int32) & 0xFF) << (8 * b))
            if MASKED:
                word = tl.where(on, word, tl.load(dst + j * 64, mask=live, other=0))
            tl.store(dst + j * 64, word, mask=live)

    @triton.jit(do_not_specialize=lane_args)
    def lds_write(tv, lds, flat, waves, first, mask, lanes, row, REGS: tl.constexpr,
                  NBYTES: tl.constexpr, SHIFT: tl.constexpr, WAVE_LIST: tl.constexpr,
                  BLOCK: tl.constexpr):
        # one program: BLOCK lanes; each writes the low NBYTES of its registers row.. (each
        # shifted right by SHIFT: a d16_hi write) at its flat LDS byte index (a lane that is
        # off points at the sink past the pool's LDS). `mask` is unused.
        i, live, at, src = lane_block(tv, flat, waves, first, lanes, row, REGS, WAVE_LIST,
                                      BLOCK)
        for j in tl.static_range((NBYTES + 3) // 4):
            word = tl.load(src + j * 64, mask=live, other=0) >> SHIFT
            for b in tl.static_range(4):
                if j * 4 + b < NBYTES:
                    tl.store(lds + at + (j * 4 + b), ((word >> (8 * b)) & 0xFF).to(tl.uint8),
                             mask=live)

    _KERNELS.update(mfma=mfma, lds_read=lds_read, lds_write=lds_write)
    return _KERNELS


MFMA_BLOCK = 256      # D elements of one MFMA program
LANE_BLOCK = 256      # lanes of one LDS program
_WARM: set = set()    # (kernel, device, flags) whose variants all ran once (module docstring)
_BOTH_WAYS = ((False, False), (False, True), (True, False), (True, True))  # (wave list, masked)


_PLACEHOLDERS: dict = {}


def _placeholder(device, dtype):
    """A one-element tensor for an argument a variant does not read (a wave list, a mask),
    of the dtype the argument has when read: the compiled variant depends on it. Kept for the
    process: a captured graph holds its address."""
    key = (str(device), dtype)
    tensor = _PLACEHOLDERS.get(key)
    if tensor is None:
        import torch
        tensor = _PLACEHOLDERS[key] = torch.zeros(64, dtype=dtype, device=device)
    return tensor


def _batch(P, sel):
    """(device int64 wave list, or a placeholder; first wave; whether a list) of the batch
    `sel`."""
    ts = P.tsel(sel)
    if isinstance(ts, slice):
        if ts.step not in (None, 1):
            raise ValueError("a batch slice must have step 1")
        return _placeholder(P.tv.device, P.torch.int64), int(ts.start or 0), False
    return ts, 0, True


def _mask(P, tmask, full):
    """EXEC as device uint8 (n, 64), or a placeholder when every lane is on."""
    if full:
        return _placeholder(P.tv.device, P.torch.uint8)
    return tmask.contiguous().view(P.torch.uint8)


def _warm(name, device, flags, launch, variants) -> bool:
    """Launch kernel `name` once for each (wave list, masked) variant on scratch tensors.
    False when one fails to compile or launch: the kernels are then off for the process
    (`unavailable` says why) and the caller runs the torch operations; only scratch tensors
    were written."""
    key = (name, str(device), tuple(flags.items()))   # flags: built in one order per kernel
    if key in _WARM:
        return True
    for wave_list, masked in variants:
        try:
            launch(wave_list, masked)
        except Exception as err:    # a Triton or driver error: compile, load, launch
            _UNAVAILABLE[0] = f"Triton kernel {name} failed: {type(err).__name__}: {err}"
            return False
    _WARM.add(key)
    return True


class MfmaTables:
    """Per MFMA op: for each D element (register * 64 + lane), the index of its A and B half
    in each k term, in the operands' (register, lane, half) order, from the op's layout maps
    (mfma.MfmaOp.layout_maps): int32 (K, E)."""

    def __init__(self, a_map, b_map, d_map, m, n):
        e = d_map
        block, i, j = e // (m * n), e // n % m, e % n
        self.a = np.ascontiguousarray(a_map[block, i, :].T).astype(np.int32)
        self.b = np.ascontiguousarray(b_map[block, :, j].T).astype(np.int32)
        self.k, self.e = self.a.shape
        self._on = {}

    def on(self, device):
        """The tables on `device`, made once (a captured graph reads them)."""
        tables = self._on.get(str(device))
        if tables is None:
            import torch
            tables = self._on[str(device)] = (torch.from_numpy(self.a).to(device),
                                              torch.from_numpy(self.b).to(device))
        return tables


def mfma(P, sel, n, tables, rows, bf16, tmask, full):
    """D := A x B + C for the batch, into the VGPR file in place. `rows`: the first register
    of A, B, C (None: C is 0) and D; lanes off in `tmask` (device bool (n, 64)) keep their D
    unless `full`. False (nothing written) where the kernel failed to build: see `_warm`."""
    torch, kernels = P.torch, _kernels()
    a_row, b_row, c_row, d_row = rows
    a_index, b_index = tables.on(P.tv.device)
    flags = dict(REGS=P.tv.shape[1], E=tables.e, K=tables.k, BF16=bool(bf16),
                 ADD_C=c_row is not None, BLOCK=MFMA_BLOCK)

    def warm(wave_list, masked):
        scratch = torch.zeros((1,) + tuple(P.tv.shape[1:]), dtype=torch.int32,
                              device=P.tv.device)
        waves = _placeholder(P.tv.device, torch.int64)
        mask = _placeholder(P.tv.device, torch.uint8)
        kernels["mfma"][(1, 1)](scratch, waves, 0, mask, a_index, b_index, a_row, b_row,
                                c_row or 0, d_row, WAVE_LIST=wave_list, MASKED=masked, **flags)
    if not _warm("mfma", P.tv.device, flags, warm, _BOTH_WAYS):
        return False
    waves, first, wave_list = _batch(P, sel)
    mask = _mask(P, tmask, full)
    kernels["mfma"][(n, -(-tables.e // MFMA_BLOCK))](
        P.tv, waves, first, mask, a_index, b_index, a_row, b_row, c_row or 0, d_row,
        WAVE_LIST=wave_list, MASKED=not full, **flags)
    return True


def _lane_kernel(P, name, flags, variants):
    torch, kernel = P.torch, _kernels()[name]

    def warm(wave_list, masked):
        device = P.tv.device
        scratch = torch.zeros((1,) + tuple(P.tv.shape[1:]), dtype=torch.int32, device=device)
        lds = torch.zeros(64, dtype=torch.uint8, device=device)
        flat = _placeholder(device, torch.int64)     # lane i at byte 0
        mask = _placeholder(device, torch.uint8)
        extra = {} if name == "lds_write" else {"MASKED": masked}
        kernel[(1,)](scratch, lds, flat, flat, 0, mask, 64, 0, WAVE_LIST=wave_list,
                     **extra, **flags)
    return kernel if _warm(name, P.tv.device, flags, warm, variants) else None


def lds_read(P, sel, n, flat, nbytes, row, tmask, full):
    """Registers row.. := the `nbytes` at each lane's flat LDS byte index (device int64
    (n, 64)): whole words, or a u8 / u16 zero-extended; lanes off in `tmask` keep theirs
    unless `full`. False (nothing written) where the kernel failed to build."""
    flags = dict(REGS=P.tv.shape[1], NBYTES=nbytes, WORDS=max(1, nbytes // 4),
                 BLOCK=LANE_BLOCK)
    kernel = _lane_kernel(P, "lds_read", flags, _BOTH_WAYS)
    if kernel is None:
        return False
    waves, first, wave_list = _batch(P, sel)
    mask = _mask(P, tmask, full)
    kernel[(-(-n * 64 // LANE_BLOCK),)](P.tv, P.tl, flat.contiguous(), waves, first, mask,
                                        n * 64, row, WAVE_LIST=wave_list, MASKED=not full,
                                        **flags)
    return True


def lds_write(P, sel, n, flat, nbytes, row, shift):
    """The low `nbytes` of each lane's registers row.. (each shifted right by `shift`) to its
    flat LDS byte index (device int64 (n, 64); a lane that is off points at the sink). False
    (nothing written) where the kernel failed to build."""
    flags = dict(REGS=P.tv.shape[1], NBYTES=nbytes, SHIFT=shift, BLOCK=LANE_BLOCK)
    kernel = _lane_kernel(P, "lds_write", flags, ((False, False), (True, False)))
    if kernel is None:
        return False
    waves, first, wave_list = _batch(P, sel)
    kernel[(-(-n * 64 // LANE_BLOCK),)](P.tv, P.tl, flat.contiguous(), waves, first,
                                        _placeholder(P.tv.device, P.torch.uint8), n * 64, row,
                                        WAVE_LIST=wave_list, **flags)
    return True
