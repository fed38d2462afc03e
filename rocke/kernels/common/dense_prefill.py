"""Dense prefill attention for gfx942 (CDNA3) and gfx950 (CDNA4): O = softmax(Q K^T * scale [+
causal mask]) V. The target is a spec field; the families rocke.kernels.gfx942.dense_prefill and
rocke.kernels.gfx950.dense_prefill ship its variants.

Q and O are contiguous ``[B, S, H, D]``, K and V ``[B, S, H_kv, D]`` (f16 or bf16, D in {64, 128};
``layout="bhsd"``: ``[B, H, S, D]`` and ``[B, H_kv, S, D]``);
S, H, H_kv and D are compile-time (spec fields), B is the grid's z extent. ``seq_lens`` (int32
``[B]``) holds each sequence's length L_b <= S: rows past L_b are padding, handled on chip -- keys
past L_b read 0 from the buffer (its extent ends at row L_b) and are masked, query tiles wholly
past L_b exit at once, and output rows past L_b are never written. GQA: query head h reads KV head
``h // (H / H_kv)``, any integer group (40 / 8, 28 / 4). ``layout="thd"`` packs variable-length
sequences instead: Q/O ``[T_q, H, D]``, K/V ``[T_k, H_kv, D]`` and int32 ``cu_seqlens_q`` /
``cu_seqlens_k`` ``[B + 1]`` (query and key lengths may differ; causal is bottom-right, key <=
query + L_k - L_q); S is then the longest query count the grid covers.

One workgroup computes ``block_m`` queries of one (batch, head) with ``num_warps`` warps of
``block_m / num_warps`` queries each, streaming keys in tiles of ``block_n`` through LDS (K row-major,
V transposed, each row padded by ``lds_pad`` elements against bank conflicts). On gfx950 it uses
the wide-K MFMA (32x32x16: 8 elements per lane, twice gfx942's K per instruction), on gfx942
32x32x8 (``atom`` "auto" picks the target's), in the transposed
orientation of ``rocke.kernels.samples.flash_attention``: S^T = K Q^T with Q^T resident in
registers, so P^T comes out in the registers O^T = V^T P^T takes as its B operand. The softmax is
the log2-domain online update (``rocke.dsl.softmax``): scale * log2(e) folded once, one native
``exp2`` per score.

Causal (bottom-right aligned, S_q == S_k == L_b, so key <= query): KV tiles wholly below the
workgroup's diagonal run an unmasked loop, only the tiles crossing it pay for the mask, tiles
wholly above it are never visited. Without causal, only the last (ragged) tile is masked.

Address width (``check_problem``): element indices are i32, so B * S * H * D (and the KV
equivalent) must stay < 2**31.

Levers (spec fields, each in the kernel name): ``prefetch`` issues the next K/V tile's global
loads into registers right after this tile's LDS staging, so they are in flight during its MFMAs
and are written to LDS at the next tile's start (LLVM's waitcnt insertion places the waits; inside
the loop it emits vmcnt(0), not per-register partial waits); ``pv_setprio`` raises the wave's issue priority
around the PV MFMAs (``s_setprio 1`` .. ``s_setprio 0``) so a warp that reached its PV block keeps
the matrix core while the others do softmax VALU work; ``lazy_rescale`` skips the O^T rescale
(d_frags x 16 multiplies per lane) on tiles where no query's running max moved -- exact, the
skipped factor is 1 -- behind a wave-uniform ballot; ``grid_order`` picks whether a head's query
blocks (qb_major) or the heads of one KV group (hkv_major) are dispatched together (``auto``:
hkv_major for GQA, qb_major for MHA); ``persistent`` launches a fixed grid (default the target's CU
count, at most the work items) whose workgroups walk the work items ``id, id + grid, ...``, each
decoded in ``grid_order``'s axis order, so the grid's size is the host's choice, not the problem's.
``pair_causal`` (causal) runs query
blocks x and n-1-x in one workgroup, so a causal launch's workgroups do equal work (AITER's fwd v3
head/tail pairing); ``vt_by_key`` stages V^T with a wave's lanes on consecutive keys, so each
element write of a 32-lane phase covers 16 consecutive dwords (no bank conflicts; the rows-first
order puts a phase's lanes on one bank). ``rounding`` converts P
and O to the element type to nearest even (rne), to nearest with ties away from zero (rna, bf16)
or toward zero (rtz), the three modes of AITER's fwd v3 code objects. ``prefetch_distance`` 2 keeps two tiles'
loads in flight (covering a round trip longer than one tile's math). ``pin_prefetch`` (with prefetch) puts a
scheduling barrier after the prefetch loads so LLVM cannot sink them to the end of the tile.
``partial_vmcnt`` (with prefetch) writes the staged tile to LDS in the loads' issue order (every K
vector, then every V one), so LLVM's in-order vmcnt waits let each write wait for its own load only
(vmcnt 3, 2, 1, 0 for 4 loads a thread) instead of the interleaved K/V order's 3, 1, 0.
``split_tail`` (bshd / bhsd) takes a 1-D grid and a ``TailSplit`` plan: the first work items run
whole, the grid's last, fractional round's items run as pieces over equal runs of their key
tiles, writing f32 partials (``PARTIALS``); the last piece of a block to finish (a ticket from a
global counter, behind agent-scope release / acquire fences) merges them into the output
(ALGORITHM.md §15).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from rocke import dsl
from rocke.arch import get_target
from rocke.arch.mfma import atom_for
from rocke.dsl import exp2, maximum, minimum, rcp, readfirstlane, select
from rocke.dsl.magic import udiv_const
from rocke.dsl.lanes import ballot
from rocke.dsl.fragment import (AxisVector, ROW, copy_tile_to_lds, load_axis,
                                load_fragment_global, store_axis, store_fragment_global)
from rocke.dsl.softmax import finite_base
from rocke.dsl.softmax import (LOG2E, online_softmax_update, transposed_pv_operand, transposed_scores,
                               transposed_v_operand)
from rocke.kernels.common.checks import (check_bool, check_choice, check_device, check_grid_extent,
                                         check_i32_value, check_multiple, check_positive_int,
                                         check_register_budget, check_tensor)

TARGETS = ("gfx942", "gfx950")
DTYPES = ("f16", "bf16")
HEAD_DIMS = (64, 128)
# per target; PV reads P^T from the 32x32 accumulator (rocke.dsl.softmax.transposed_pv_operand)
ATOMS = {"gfx942": ("32x32x8",), "gfx950": ("32x32x16",)}
STAGING_VECTOR = 8
# qb_major: grid (query blocks, H, B), a head's query blocks dispatch together; hkv_major: grid
# (H, query blocks, B), the heads sharing a KV head dispatch together (their K/V reads meet in L2);
# auto: hkv_major for GQA (group > 1: a KV head's tiles serve the group's neighbouring workgroups),
# qb_major for MHA (no KV head is shared) -- resolved when the spec is made
GRID_ORDERS = ("qb_major", "hkv_major", "auto")
# the rounding of P and O to the element type (rocke.dsl.convert): AITER's fwd v3 bf16_cvt modes
ROUNDINGS = ("rne", "rna", "rtz")
# bshd: [B, S, H, D] (a row of one head every H * D elements); bhsd: [B, H, S, D] (rows contiguous);
# thd: packed varlen, q/o [T_q, H, D] and k/v [T_k, H_kv, D] with int32 cu_seqlens_q / cu_seqlens_k
# [B + 1] (sequence b's rows cu[b] .. cu[b+1]; query and key lengths may differ: cross-attention)
LAYOUTS = ("bshd", "bhsd", "thd")
DIMS = {"bshd": ("B", "S", "H", "D"), "bhsd": ("B", "H", "S", "D"), "thd": ("T", "H", "D")}


@dataclass(frozen=True)
class DensePrefillSpec:
    dtype: str = "bf16"
    head_dim: int = 128
    seq_len: int = 4096        # S: the padded sequence extent of the [B, S, H, D] tensors
    num_heads: int = 32        # H (query heads)
    num_kv_heads: int = 8      # H_kv; H / H_kv query heads share a KV head (GQA)
    causal: bool = True
    block_m: int = 256         # queries per workgroup
    block_n: int = 64          # keys per KV tile
    num_warps: int = 8
    atom: str = "auto"         # auto: the target's (ATOMS)
    lds_pad: int = 8           # elements appended to each K / V^T LDS row
    pv_setprio: bool = False   # s_setprio 1 around the PV MFMAs
    lazy_rescale: bool = False  # skip the O^T rescale when no query's running max moved
    grid_order: str = "qb_major"   # which grid axis walks first: query blocks or heads
    prefetch: bool = False     # load the next K/V tile into registers while this one computes
    persistent: bool = False   # a fixed grid (<= the CUs) walking the work items in grid_order
    partial_vmcnt: bool = False  # prefetch: write the staged tile in load order (partial vmcnt waits)
    vt_by_key: bool = False    # stage V^T with a wave's lanes down the keys (conflict-free writes)
    pair_causal: bool = False  # causal: a workgroup runs query block x and block n-1-x (equal work)
    rounding: str = "rne"      # f32 -> dtype of P and O: rne, rna (bf16: ties away), rtz
    pin_prefetch: bool = False  # prefetch: a scheduling barrier keeps the next tile's loads first
    prefetch_distance: int = 1  # prefetch: how many tiles ahead the loads run (1 or 2)
    layout: str = "bshd"       # the tensors' order: [B, S, H, D] (bshd) or [B, H, S, D] (bhsd)
    target: str = "gfx950"
    split_tail: bool = False   # the last, fractional round's work items split over their keys

    def __post_init__(self):
        check_choice("target", self.target, TARGETS)
        if self.atom == "auto":
            object.__setattr__(self, "atom", ATOMS[self.target][0])
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("head_dim", self.head_dim, HEAD_DIMS)
        for name in ("seq_len", "num_heads", "num_kv_heads", "block_m", "block_n"):
            check_positive_int(name, getattr(self, name))
        check_bool("causal", self.causal)
        check_bool("pv_setprio", self.pv_setprio)
        check_bool("lazy_rescale", self.lazy_rescale)
        check_choice("grid_order", self.grid_order, GRID_ORDERS)
        check_bool("prefetch", self.prefetch)
        check_bool("persistent", self.persistent)
        check_bool("partial_vmcnt", self.partial_vmcnt)
        check_bool("vt_by_key", self.vt_by_key)
        check_bool("pair_causal", self.pair_causal)
        check_choice("rounding", self.rounding, ROUNDINGS)
        check_bool("pin_prefetch", self.pin_prefetch)
        check_choice("prefetch_distance", self.prefetch_distance, (1, 2))
        check_choice("layout", self.layout, LAYOUTS)
        check_bool("split_tail", self.split_tail)
        if self.split_tail and (self.persistent or self.layout == "thd"):
            raise ValueError("split_tail: splits the work items of the grid's last round over "
                             "their keys; it takes neither persistent nor layout 'thd'")
        if self.layout == "thd" and (self.pair_causal or self.persistent):
            raise ValueError("layout: 'thd' (packed varlen) gives each sequence its own count of "
                             "query blocks; it takes neither pair_causal nor persistent")
        if self.prefetch_distance != 1 and not self.prefetch:
            raise ValueError("prefetch_distance: how far ahead the prefetched loads run; it "
                             "needs prefetch=True")
        if self.pin_prefetch and not self.prefetch:
            raise ValueError("pin_prefetch: keeps the prefetched loads at the tile's start; it "
                             "needs prefetch=True")
        if self.rounding == "rna" and self.dtype != "bf16":
            raise ValueError(f"rounding: 'rna' (ties away from zero) is a bf16 mode; {self.dtype} "
                             "takes 'rne' or 'rtz'")
        if self.pair_causal and not self.causal:
            raise ValueError("pair_causal: pairs a causal launch's short and long query blocks; "
                             "it needs causal=True (without the mask every block does equal work)")
        if self.pair_causal and self.persistent:
            raise ValueError("pair_causal: a persistent grid walks single work items; choose one "
                             "of pair_causal and persistent")
        if self.partial_vmcnt and not self.prefetch:
            raise ValueError("partial_vmcnt: orders the prefetched tile's LDS writes; it needs prefetch=True")
        check_choice("atom", self.atom, ATOMS[self.target])
        if self.grid_order == "auto":
            object.__setattr__(self, "grid_order", "hkv_major" if self.group > 1 else "qb_major")
        check_choice("num_warps", self.num_warps, (1, 2, 4, 8, 16))
        check_positive_int("lds_pad", self.lds_pad, allow_zero=True)
        check_multiple("num_heads", self.num_heads, self.num_kv_heads,
                       of=f"num_kv_heads ({self.num_kv_heads})", because="each KV head serves a whole group")
        a = atom_for(self.atom, self.dtype, target=self.target)
        check_multiple("block_m", self.block_m, self.num_warps * a.n,
                       of=f"num_warps ({self.num_warps}) x the atom's N ({a.n})",
                       because="each warp owns whole query columns of S^T")
        check_multiple("block_n", self.block_n, a.m, of=f"the atom's M ({a.m})")
        check_multiple("block_m", self.block_m, self.block_n,
                       because="the causal split puts the diagonal on whole KV tiles")
        check_multiple("lds_pad", self.lds_pad, 4, because="operands are read from LDS 8 bytes at a time")
        lds = 2 * (self.block_n * (self.head_dim + self.lds_pad) + self.head_dim * (self.block_n + self.lds_pad))
        limit = get_target(self.target).max_lds_per_workgroup
        if lds > limit:
            raise ValueError(f"block_n: the K and V^T tiles need {lds} bytes of LDS, {self.target} has {limit}")
        if self.prefetch or self.vt_by_key:
            vectors, threads = self.block_n * self.head_dim // STAGING_VECTOR, self.num_warps * 64
            if vectors % threads:
                lever = "prefetch" if self.prefetch else "vt_by_key"
                raise ValueError(f"block_n: {lever} stages whole {STAGING_VECTOR}-element vectors per "
                                 f"thread, but a {self.block_n} x {self.head_dim} tile has {vectors} for "
                                 f"{threads} threads (make block_n * head_dim / {STAGING_VECTOR} a "
                                 "multiple of the threads)")
        warp_q = self.block_m // self.num_warps
        check_register_budget("block_m/block_n", warp_q * (self.head_dim + self.block_n) // 64,
                              "each warp's fp32 O^T and S^T accumulators", target=self.target)
        for what, heads in (("Q/O", self.num_heads), ("K/V", self.num_kv_heads)):
            check_i32_value("seq_len", self.seq_len * heads * self.head_dim - 1,
                            f"one sequence's {what} elements S * heads * D - 1")

    @property
    def group(self) -> int:
        return self.num_heads // self.num_kv_heads

    @property
    def workgroup_size(self) -> int:
        return dsl.WAVE_SIZE * self.num_warps

    @property
    def kernel_name(self) -> str:
        return (f"dense_prefill_{self.target}_{self.dtype}_d{self.head_dim}_s{self.seq_len}"
                f"_h{self.num_heads}kv{self.num_kv_heads}_{'causal' if self.causal else 'full'}"
                f"_{self.atom.replace('x', '_')}_m{self.block_m}n{self.block_n}_w{self.num_warps}"
                f"_pad{self.lds_pad}{'_prio' if self.pv_setprio else ''}"
                f"{'_lazy' if self.lazy_rescale else ''}{'_hkv' if self.grid_order == 'hkv_major' else ''}"
                f"{'_pf' if self.prefetch else ''}{'_persist' if self.persistent else ''}"
                f"{'_vmcnt' if self.partial_vmcnt else ''}{'_vtkey' if self.vt_by_key else ''}"
                f"{'_pair' if self.pair_causal else ''}"
                f"{'' if self.rounding == 'rne' else '_' + self.rounding}"
                f"{'_pin' if self.pin_prefetch else ''}"
                f"{'' if self.prefetch_distance == 1 else f'_ahead{self.prefetch_distance}'}"
                f"{'' if self.layout == 'bshd' else '_' + self.layout}"
                f"{'_split' if self.split_tail else ''}")


ARGS = ("q", "k", "v", "o", "seq_lens", "sm_scale")
# split_tail's workspace: chunk-major f32 [chunks, rows, D] unnormalised O and [chunks, rows]
# running max / sum of each split block's rows, and an int32 ticket counter per split block (zero
# before a launch; the block's merging piece sets it back to zero)
PARTIALS = ("partial_o", "partial_max", "partial_sum", "split_tickets")
ARGS_THD = ("q", "k", "v", "o", "cu_seqlens_q", "cu_seqlens_k", "sm_scale")


def check_problem(spec: DensePrefillSpec, *, B: int) -> None:
    """A batch of B sequences fits the kernel's i32 element indices and the grid."""
    check_positive_int("B", B)
    check_grid_extent("B", B, axis="z")
    if spec.layout == "thd":        # packed: the token counts are checked with the tensors
        return
    for what, heads in (("q/o", spec.num_heads), ("k/v", spec.num_kv_heads)):
        check_i32_value("B", B * spec.seq_len * heads * spec.head_dim - 1,
                        f"the last {what} element index B * S * heads * D - 1")


def persistent_workgroups(spec: DensePrefillSpec, B: int, workgroups: int | None = None) -> int:
    """The persistent grid's size: ``workgroups`` (default: the target's CU count, one 256-query
    workgroup per CU), at most the work items B * query blocks * H."""
    if workgroups is None:
        workgroups = get_target(spec.target).cu_count
    check_positive_int("workgroups", workgroups)
    check_grid_extent("workgroups", workgroups, axis="x")
    return min(workgroups, B * -(-spec.seq_len // spec.block_m) * spec.num_heads)


def work_items(spec: DensePrefillSpec, B: int) -> int:
    """The launch's work items: B x H x query blocks (pair_causal: pairs of them)."""
    units = -(-spec.seq_len // spec.block_m)
    if spec.pair_causal:
        units = -(-units // 2)
    return B * spec.num_heads * units


@dataclass(frozen=True)
class TailSplit:
    """split_tail's plan for one launch: the first ``full_items`` work items (whole rounds of
    the grid) run whole, each of the ``tail_items`` after them runs as ``chunks`` workgroups over
    equal runs of its key tiles, the last of them to finish merging (ALGORITHM.md §15)."""
    full_items: int
    chunks: int
    tail_items: int

    @property
    def workgroups(self) -> int:
        return self.full_items + self.tail_items * self.chunks

    @property
    def split(self) -> bool:
        return self.tail_items > 0


# split only a tail behind at least this many whole rounds: a launch of fewer items than slots
# gains too little in the model (its clock falls as more CUs load their matrix pipes, ALGORITHM.md
# §15) to repay the pieces' partial writes and merge (B1 H32 S2048 causal: 129.4 us split, 117.6
# whole; behind whole rounds, B8 H32 S1024: 248.6 split, 257.2 whole)
SPLIT_MIN_ROUNDS = 1


def tail_split(spec: DensePrefillSpec, B: int, slots: int | None = None,
               min_rounds: int = SPLIT_MIN_ROUNDS) -> TailSplit:
    """The plan for B sequences: the items of the last, fractional round (items mod ``slots``)
    each split into as many pieces as fill the slots, at most block_m / block_n (a causal
    launch's first block has that many key tiles); none when that is below 2 or fewer than
    ``min_rounds`` whole rounds precede the tail. ``slots``: workgroups resident at once
    (default the target's CU count: the tuned geometry runs one workgroup a CU)."""
    if not spec.split_tail:
        raise ValueError(f"tail_split: {spec.kernel_name} is not a split_tail spec")
    if slots is None:
        slots = get_target(spec.target).cu_count
    check_positive_int("slots", slots)
    check_positive_int("min_rounds", min_rounds, allow_zero=True)
    items = work_items(spec, B)
    tail = items % slots
    chunks = min(slots // tail, spec.block_m // spec.block_n) if tail else 1
    if chunks < 2 or items // slots < min_rounds:
        return TailSplit(items, 1, 0)
    return TailSplit(items - tail, chunks, tail)


def split_blocks(spec: DensePrefillSpec, B: int, plan: TailSplit) -> list[tuple[int, int, int]]:
    """(batch, head, query block) of each split block, in workspace order (a pair's second
    block after its first; an odd count's middle pair has one block: (batch, head, -1))."""
    q_blocks = -(-spec.seq_len // spec.block_m)
    units = -(-q_blocks // 2) if spec.pair_causal else q_blocks
    H = spec.num_heads
    out = []
    for w in range(plan.full_items, plan.full_items + plan.tail_items):
        if spec.grid_order == "qb_major":
            x, head, batch = w % units, (w // units) % H, w // (units * H)
        else:
            head, x, batch = w % H, (w // H) % units, w // (units * H)
        out.append((batch, head, x))
        if spec.pair_causal:
            partner = q_blocks - 1 - x
            out.append((batch, head, partner if partner != x else -1))
    return out


def split_rows(spec: DensePrefillSpec, plan: TailSplit) -> int:
    """The workspace's rows a chunk: every split block's queries (a causal pair's two blocks)."""
    return plan.tail_items * (2 if spec.pair_causal else 1) * spec.block_m


def split_workspace(spec: DensePrefillSpec, plan: TailSplit, device=None) -> tuple:
    """The workspace of ``plan`` (PARTIALS; one element each when nothing is split)."""
    import torch
    rows = split_rows(spec, plan)
    if not plan.split:
        return tuple(torch.empty(1, dtype=dt, device=device)
                     for dt in (torch.float32,) * 3 + (torch.int32,))
    return (torch.empty(plan.chunks, rows, spec.head_dim, dtype=torch.float32, device=device),
            torch.empty(plan.chunks, rows, dtype=torch.float32, device=device),
            torch.empty(plan.chunks, rows, dtype=torch.float32, device=device),
            torch.zeros(rows // spec.block_m, dtype=torch.int32, device=device))


def launch_geometry(spec: DensePrefillSpec, B: int, workgroups: int | None = None,
                    plan: TailSplit | None = None):
    """(grid in workgroups, block in threads): (query blocks of S, H, B), or (H, query blocks,
    B) for grid_order hkv_major; a persistent spec's (``persistent_workgroups``, 1, 1), with
    ``workgroups`` as ``kernel_args`` took it; a split_tail spec's (``plan.workgroups``, 1, 1),
    ``plan`` default ``tail_split(spec, B)``."""
    check_problem(spec, B=B)
    if spec.split_tail:
        plan = tail_split(spec, B) if plan is None else plan
        if work_items(spec, B) != plan.full_items + plan.tail_items:
            raise ValueError(f"plan: {plan} covers {plan.full_items + plan.tail_items} work "
                             f"items, the launch has {work_items(spec, B)}")
        return (plan.workgroups, 1, 1), (spec.workgroup_size, 1, 1)
    if plan is not None:
        raise ValueError("plan: only a split_tail spec takes a tail split plan")
    if spec.persistent:
        return (persistent_workgroups(spec, B, workgroups), 1, 1), (spec.workgroup_size, 1, 1)
    if workgroups is not None:
        raise ValueError("workgroups: only a persistent spec takes a grid size")
    q_blocks = -(-spec.seq_len // spec.block_m)
    if spec.pair_causal:        # blocks x and q_blocks-1-x share a workgroup
        q_blocks = -(-q_blocks // 2)
    grid = (q_blocks, spec.num_heads, B) if spec.grid_order == "qb_major" else (spec.num_heads, q_blocks, B)
    return grid, (spec.workgroup_size, 1, 1)


def softmax_scale(sm_scale, head_dim: int) -> float:
    """``sm_scale`` as the kernel takes it (None: 1/sqrt(head_dim)); not a finite number: an error."""
    if sm_scale is not None and (isinstance(sm_scale, bool) or not isinstance(sm_scale, (int, float))
                                 or not math.isfinite(sm_scale)):
        raise ValueError(f"sm_scale: must be a finite number or None, got {sm_scale!r}")
    return 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)


def kernel_args(spec: DensePrefillSpec, q, k, v, o, seq_lens, sm_scale: float | None = None,
                workgroups: int | None = None, plan: TailSplit | None = None,
                partials: tuple | None = None) -> list:
    """Ordered kernel arguments for contiguous torch tensors (q/o [B, S, H, D], k/v
    [B, S, H_kv, D]; layout bhsd: [B, H, S, D] and [B, H_kv, S, D]), seq_lens int32 [B] with
    0 <= L_b <= S; ``sm_scale`` defaults to 1/sqrt(D).
    A persistent spec adds B and its grid size (``workgroups`` as ``launch_geometry`` took it);
    a split_tail spec its ``plan`` (default ``tail_split``; one covering fewer than the launch's
    work items runs only the first ones: a sample launch, as the benchmarks profile) and the
    workspace ``partials`` (``split_workspace``'s)."""
    import torch
    S, D = spec.seq_len, spec.head_dim
    if spec.layout == "thd":
        return _thd_args(spec, q, k, v, o, seq_lens, sm_scale, workgroups)
    for name, t, heads in (("q", q, spec.num_heads), ("k", k, spec.num_kv_heads),
                           ("v", v, spec.num_kv_heads), ("o", o, spec.num_heads)):
        check_tensor(name, t, dtype=spec.dtype, dims=DIMS[spec.layout])
        want = (S, heads, D) if spec.layout == "bshd" else (heads, S, D)
        if tuple(t.shape[1:]) != want:
            raise ValueError(f"{name}: shape {tuple(t.shape)} is not [B, {', '.join(map(str, want))}] "
                             f"({spec.layout}: the spec's {'S, heads, D' if spec.layout == 'bshd' else 'heads, S, D'})")
        if t.shape[0] != q.shape[0]:
            raise ValueError(f"{name}: batch {t.shape[0]} differs from q's {q.shape[0]}")
    B = q.shape[0]
    if not isinstance(seq_lens, torch.Tensor) or seq_lens.dtype != torch.int32 or tuple(seq_lens.shape) != (B,):
        raise ValueError(f"seq_lens: must be an int32 tensor of shape [{B}], got "
                         f"{getattr(seq_lens, 'dtype', type(seq_lens).__name__)} {tuple(getattr(seq_lens, 'shape', ()))}")
    if B and not bool(((seq_lens >= 0) & (seq_lens <= S)).all()):
        raise ValueError(f"seq_lens: every length must be in [0, {S}], got {seq_lens.tolist()}")
    check_problem(spec, B=B)
    check_device({"q": q, "k": k, "v": v, "o": o, "seq_lens": seq_lens})
    scale = softmax_scale(sm_scale, D)
    if spec.persistent:
        return [q, k, v, o, seq_lens, scale, B, persistent_workgroups(spec, B, workgroups)]
    if workgroups is not None:
        raise ValueError("workgroups: only a persistent spec takes a grid size")
    if spec.split_tail:
        plan = tail_split(spec, B) if plan is None else plan
        if not isinstance(plan, TailSplit) or plan.full_items + plan.tail_items > work_items(spec, B) \
                or min(plan.full_items, plan.tail_items) < 0 or plan.chunks < 1:
            raise ValueError(f"plan: {plan!r} is not a TailSplit of at most the launch's "
                             f"{work_items(spec, B)} work items")
        want = split_workspace(spec, plan, device="meta")
        if partials is None or len(partials) != len(PARTIALS):
            raise ValueError(f"partials: a split_tail launch takes the workspace ({', '.join(PARTIALS)}) "
                             "of split_workspace(spec, plan)")
        for name, t, w in zip(PARTIALS, partials, want):
            if not isinstance(t, torch.Tensor) or t.dtype != w.dtype or t.shape != w.shape \
                    or not t.is_contiguous():
                raise ValueError(f"{name}: must be a contiguous {w.dtype} tensor of shape "
                                 f"{tuple(w.shape)} (split_workspace), got "
                                 f"{getattr(t, 'dtype', type(t).__name__)} {tuple(getattr(t, 'shape', ()))}")
        check_device({"q": q, **dict(zip(PARTIALS, partials))})
        return [q, k, v, o, seq_lens, scale, plan.full_items, plan.chunks,
                split_rows(spec, plan), *partials]
    if plan is not None or partials is not None:
        raise ValueError("plan / partials: only a split_tail spec takes a tail split")
    return [q, k, v, o, seq_lens, scale]


def _thd_args(spec, q, k, v, o, cu_seqlens, sm_scale, workgroups) -> list:
    """layout thd: ``cu_seqlens`` is (cu_seqlens_q, cu_seqlens_k), int32 [B + 1] each, from 0,
    non-decreasing, ending at the tensors' token counts; each query length <= S (the spec's
    longest, the grid's query blocks); a sequence with queries has keys, and causal (bottom-right)
    at least as many keys as queries."""
    import torch
    D = spec.head_dim
    if workgroups is not None:
        raise ValueError("workgroups: only a persistent spec takes a grid size")
    if not (isinstance(cu_seqlens, (tuple, list)) and len(cu_seqlens) == 2):
        raise ValueError("cu_seqlens: layout thd takes (cu_seqlens_q, cu_seqlens_k)")
    cu_q, cu_k = cu_seqlens
    for name, t, heads in (("q", q, spec.num_heads), ("k", k, spec.num_kv_heads),
                           ("v", v, spec.num_kv_heads), ("o", o, spec.num_heads)):
        check_tensor(name, t, dtype=spec.dtype, dims=DIMS["thd"])
        if tuple(t.shape[1:]) != (heads, D):
            raise ValueError(f"{name}: shape {tuple(t.shape)} is not [T, {heads}, {D}] (thd: the "
                             "spec's heads, D)")
    if o.shape != q.shape or v.shape != k.shape:
        raise ValueError(f"o / v: shapes {tuple(o.shape)} / {tuple(v.shape)} differ from q's "
                         f"{tuple(q.shape)} / k's {tuple(k.shape)}")
    for name, cu, total in (("cu_seqlens_q", cu_q, q.shape[0]), ("cu_seqlens_k", cu_k, k.shape[0])):
        if not isinstance(cu, torch.Tensor) or cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 2:
            raise ValueError(f"{name}: must be an int32 tensor of shape [B + 1], got "
                             f"{getattr(cu, 'dtype', type(cu).__name__)} {tuple(getattr(cu, 'shape', ()))}")
        c = cu.cpu().tolist()
        if c[0] != 0 or any(b < a for a, b in zip(c, c[1:])) or c[-1] != total:
            raise ValueError(f"{name}: must start at 0, never decrease and end at the tensor's "
                             f"{total} tokens, got {c}")
    if cu_q.numel() != cu_k.numel():
        raise ValueError(f"cu_seqlens_k: {cu_k.numel() - 1} sequences, cu_seqlens_q has {cu_q.numel() - 1}")
    lq = (cu_q[1:] - cu_q[:-1]).tolist()
    lk = (cu_k[1:] - cu_k[:-1]).tolist()
    for b, (nq, nk) in enumerate(zip(lq, lk)):
        if nq > spec.seq_len:
            raise ValueError(f"cu_seqlens_q: sequence {b} has {nq} queries, more than the spec's "
                             f"seq_len {spec.seq_len} (the longest)")
        if nq and not nk:
            raise ValueError(f"cu_seqlens_k: sequence {b} has {nq} queries and no keys")
        if spec.causal and nk < nq:
            raise ValueError(f"cu_seqlens_k: sequence {b} has {nk} keys for {nq} queries; causal "
                             "(bottom-right) needs at least as many keys as queries")
    for what, total, heads in (("q/o", q.shape[0], spec.num_heads), ("k/v", k.shape[0], spec.num_kv_heads)):
        check_i32_value("T", max(total * heads * D - 1, 0), f"the last {what} element index T * heads * D - 1")
    B = len(lq)
    check_grid_extent("B", B, axis="z")
    check_device({"q": q, "k": k, "v": v, "o": o, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k})
    scale = softmax_scale(sm_scale, D)
    return [q, k, v, o, cu_q, cu_k, scale]


def build(spec: DensePrefillSpec) -> dsl.Kernel:
    k = dsl.Kernel(spec.kernel_name, target=spec.target, workgroup_size=spec.workgroup_size)
    q_ptr = k.arg_ptr("q", spec.dtype, readonly=True)
    k_ptr = k.arg_ptr("k", spec.dtype, readonly=True)
    v_ptr = k.arg_ptr("v", spec.dtype, readonly=True)
    o_ptr = k.arg_ptr("o", spec.dtype)
    if spec.layout == "thd":        # each sequence's first row and length, queries and keys
        lens_ptr = (k.arg_ptr("cu_seqlens_q", "i32", readonly=True),
                    k.arg_ptr("cu_seqlens_k", "i32", readonly=True))
    else:
        lens_ptr = k.arg_ptr("seq_lens", "i32", readonly=True)
    sm_scale = k.arg_f32("sm_scale")
    if spec.persistent:     # B (runtime) and the grid's size, for the work-item walk
        batches, workgroups = k.arg_i32("batch"), k.arg_i32("num_workgroups")
    if spec.split_tail:     # the plan (TailSplit) and the split items' partials (f32 workspace)
        full_items, chunks = k.arg_i32("full_items"), k.arg_i32("chunks")
        workspace_rows = k.arg_i32("split_rows")
        partials = tuple(k.arg_ptr(name, dsl.f32) for name in PARTIALS[:3]) + (
            k.arg_ptr(PARTIALS[3], dsl.i32),)

    S, D, H = spec.seq_len, spec.head_dim, spec.num_heads
    mma = k.mfma(spec.atom, spec.dtype)
    k.thread_id(0)          # read first, as it always was (the default grid's IR is unchanged)

    k_tile = k.lds("k_tile", (spec.block_n, D), spec.dtype, pad=spec.lds_pad)
    vt_tile = k.lds("vt_tile", (D, spec.block_n), spec.dtype, pad=spec.lds_pad)
    ticket = k.lds("split_ticket", (1,), "i32") if spec.split_tail else None

    def work(head, batch, q_block_of, piece=None):
        _work_item(k, spec, mma, (k_tile, vt_tile), (q_ptr, k_ptr, v_ptr, o_ptr, lens_ptr),
                   sm_scale, head, batch, q_block_of, piece)

    if spec.split_tail:
        # a 1-D grid: workgroups below full_items run work item id whole (the dispatch order of
        # the 3-D grid); the rest are pieces: piece p runs key range p % chunks of tail item
        # full_items + p // chunks (ALGORITHM.md §15), the last to finish merging them
        q_blocks = -(-S // spec.block_m)
        units = -(-q_blocks // 2) if spec.pair_causal else q_blocks
        wg = k.block_id(0)
        is_piece = wg >= full_items
        p = select(is_piece, wg - full_items, 0)
        tail = p // chunks
        x, head, batch = _item_of(spec, select(is_piece, full_items + tail, wg), units)

        chunk = p - tail * chunks
        chunk_rows = chunk * workspace_rows

        def piece_of(which):
            block = tail * (2 if spec.pair_causal else 1) + which
            return Piece(is_piece, chunk, select(is_piece, chunks, 1), block,
                         chunk_rows + block * spec.block_m, workspace_rows, partials, ticket)
        if spec.pair_causal:
            _paired_blocks(k, q_blocks, x, lambda q_block_of, which:
                           work(head, batch, q_block_of, piece_of(which)))
        else:
            work(head, batch, lambda: x, piece_of(0))
    elif spec.persistent:
        # a fixed grid of workgroups, each walking work items w = id, id + grid, ... (B is a
        # runtime value: total = B * query blocks * H); w decodes in grid_order's axis order
        q_blocks = -(-S // spec.block_m)
        wg = k.block_id(0)
        items = (batches * (q_blocks * H) - wg + workgroups - 1) // workgroups
        with k.for_range(0, items) as walk:
            q_block, head, batch = _item_of(spec, wg + walk.index * workgroups, q_blocks)
            work(head, batch, lambda: q_block)
    else:
        q_axis, head_axis = (0, 1) if spec.grid_order == "qb_major" else (1, 0)
        head, batch = k.block_id(head_axis), k.block_id(2)
        if spec.pair_causal:
            _paired_blocks(k, -(-S // spec.block_m), k.block_id(q_axis),
                           lambda q_block_of, which: work(head, batch, q_block_of))
        else:
            work(head, batch, lambda: k.block_id(q_axis))
    return k


def _item_of(spec, w, units):
    """Work item ``w``'s (unit, head, batch), ``units`` a head's query blocks (or block pairs),
    in grid_order's axis order: qb_major w = (batch * H + head) * units + unit; hkv_major w =
    (batch * units + unit) * H + head (a KV group's heads are neighbours)."""
    H = spec.num_heads
    inner, middle = (units, H) if spec.grid_order == "qb_major" else (H, units)
    rest = udiv_const(w, inner)
    batch = udiv_const(rest, middle)
    fast, slow = w - rest * inner, rest - batch * middle
    unit, head = (fast, slow) if spec.grid_order == "qb_major" else (slow, fast)
    return unit, head, batch


def _paired_blocks(k, q_blocks: int, x, body):
    """AITER's head/tail pairing: block x runs x + 1 causal tiles, its partner q_blocks - 1 - x
    runs q_blocks - x, so a pair runs q_blocks + 1 in all; with an odd count the middle block is
    its own partner and runs once. ``body(q_block_of, which)`` once per block (one loop body,
    not two copies); which: 0 for x, 1 for its partner."""
    step = (q_blocks - 1) - 2 * x        # partner - x
    with k.for_range(0, 1 + minimum(step, 1)) as pair:
        body(lambda: x + pair.index * step, pair.index)


class Piece(NamedTuple):
    """split_tail: which part of a query block's keys a workgroup runs, and where it writes."""
    is_piece: object        # i1: a piece (partials) or a whole work item (the output)
    chunk: object           # which of ``chunks`` equal runs of the block's key tiles
    chunks: object          # 1 for a whole work item
    block: object           # the block's index among the split blocks (its ticket)
    first_row: object       # the block's first row in its chunk's workspace (chunk-major)
    rows: object            # the workspace's rows a chunk (split_rows)
    partials: tuple         # partial_o, partial_max, partial_sum, split_tickets (PARTIALS)
    ticket: object          # one i32 of LDS: the workgroup's place among the block's pieces


def _work_item(k, spec, mma, tiles, ptrs, sm_scale, head, batch, q_block_of, piece=None):
    """One (query block, head, batch) work item: the tile loop and the output of ``block_m``
    queries. ``q_block_of`` gives the query block's index (called where the default grid has
    always read its workgroup id, so that grid's IR is unchanged). ``piece`` (split_tail): the
    key range this workgroup runs and, for a piece, where its partials go."""
    k_tile, vt_tile = tiles
    q_ptr, k_ptr, v_ptr, o_ptr, lens_ptr = ptrs
    S, D, H, HKV = spec.seq_len, spec.head_dim, spec.num_heads, spec.num_kv_heads
    # a row of one head: every H * D elements (bshd, thd) or D (bhsd, a head's rows contiguous)
    q_ld, kv_ld = (D, D) if spec.layout == "bhsd" else (H * D, HKV * D)
    am, an, ak = mma.atom.m, mma.atom.n, mma.atom.k
    warp_q = spec.block_m // spec.num_warps
    q_frags, kv_frags, d_frags = warp_q // an, spec.block_n // am, D // am
    threads = spec.workgroup_size
    tid = k.thread_id(0)
    kv_head = head // spec.group if spec.group > 1 else head
    if spec.layout == "thd":
        cu_q, cu_k = lens_ptr
        q_first, kv_first = cu_q.load(batch), cu_k.load(batch)
        length, kv_length = cu_q.load(batch + 1) - q_first, cu_k.load(batch + 1) - kv_first
        # causal, bottom-right: query i sees keys <= i + (L_k - L_q)
        diagonal = kv_length - length
    else:
        length = kv_length = lens_ptr.load(batch)
        diagonal = 0
    block_q0 = q_block_of() * spec.block_m

    with k.if_(block_q0 < length):          # query tiles wholly in the padding do nothing
            # each (batch, head) slice as a buffer ending at row L_b: padded rows read 0
            def slice_buffer(ptr, h, ld, heads, rows, first=None):
                if spec.layout == "thd":
                    start = first * ld + h * D
                elif spec.layout == "bshd":
                    start = batch * (S * ld) + h * D
                else:
                    start = batch * (heads * S * D) + h * (S * D)
                return ptr.offset(start).buffer((rows - 1) * ld + D)
            q_first_row = q_first if spec.layout == "thd" else None
            kv_first_row = kv_first if spec.layout == "thd" else None
            q_buf = slice_buffer(q_ptr, head, q_ld, H, length, q_first_row)
            k_buf, v_buf = (slice_buffer(k_ptr, kv_head, kv_ld, HKV, kv_length, kv_first_row),
                            slice_buffer(v_ptr, kv_head, kv_ld, HKV, kv_length, kv_first_row))

            warp_q0 = block_q0 + k.wave_id() * warp_q
            q_cols = [warp_q0 + t * an for t in range(q_frags)]
            qk_scale = sm_scale * LOG2E
            q_ops = [[load_fragment_global(q_buf, mma.B, (d0, q_cols[t]), q_ld, transposed=True)
                      for t in range(q_frags)] for d0 in range(0, D, ak)]

            # prefetch: each thread's share of a K / V tile, in registers (rows past L_b read 0)
            per_row = D // STAGING_VECTOR
            vectors = range(0, spec.block_n * per_row, threads)

            def v_place(i):
                """(key, first head-dim element) of V vector i: by rows (16-byte vectors along a
                row, a row's vectors on neighbouring lanes) or, vt_by_key, down the keys (a
                wave's lanes on consecutive keys of one 8-column strip, so each V^T element
                write of a 32-lane phase covers 16 consecutive dwords: no bank conflicts)."""
                if spec.vt_by_key:
                    return i % spec.block_n, (i // spec.block_n) * STAGING_VECTOR
                return i // per_row, (i % per_row) * STAGING_VECTOR

            def load_tile(buf, kv0, place):
                out = []
                for first in vectors:
                    r, c = place(tid + first if first else tid)
                    out.append(buf.load((kv0 + r) * kv_ld + c, width=STAGING_VECTOR))
                return out

            def load_kv(kv0):
                return (load_tile(k_buf, kv0, lambda i: (i // per_row, (i % per_row) * STAGING_VECTOR))
                        + load_tile(v_buf, kv0, v_place))

            def store_v(staged_v):
                for n, first in enumerate(vectors):
                    i = tid + first if first else tid
                    r, c = v_place(i)
                    for j, e in enumerate(list(staged_v[n])):
                        vt_tile.store((c + j, r), e)

            def store_kv(staged):
                if spec.partial_vmcnt:
                    return store_kv_in_load_order(staged)
                if spec.vt_by_key:
                    for n, first in enumerate(vectors):
                        i = tid + first if first else tid
                        k_tile.store((i // per_row, (i % per_row) * STAGING_VECTOR), staged[n])
                    return store_v(staged[len(vectors):])
                for n, first in enumerate(vectors):
                    i = tid + first if first else tid
                    r, c = i // per_row, (i % per_row) * STAGING_VECTOR
                    k_tile.store((r, c), staged[n])
                    for j, e in enumerate(list(staged[len(vectors) + n])):
                        vt_tile.store((c + j, r), e)

            def store_kv_in_load_order(staged):
                """Every K vector, then every V one: the loads' issue order, so each LDS write
                waits (vmcnt, in order) only for its own load, not for later ones."""
                for n, first in enumerate(vectors):
                    i = tid + first if first else tid
                    k_tile.store((i // per_row, (i % per_row) * STAGING_VECTOR), staged[n])
                store_v(staged[len(vectors):])

            def kv_tile(kv0, m, l, o, masked: bool, staged=None):
                """One KV tile folded into (m, l, o); ``masked`` tiles apply the length / causal mask.
                With prefetch, ``staged`` holds this tile's K/V registers; returns the next tile's."""
                if spec.prefetch:
                    store_kv(staged)
                    k.barrier()
                    # in flight during this tile's math (2 ahead: and the next tile's)
                    staged = load_kv(kv0 + spec.prefetch_distance * spec.block_n)
                    if spec.pin_prefetch:
                        # LLVM's scheduler may sink the loads to the loop's end (less register
                        # pressure) where nothing covers their round trip; nothing crosses this
                        k.sched_barrier(0)
                else:
                    copy_tile_to_lds(k_buf, k_tile, (kv0, 0), kv_ld, thread_index=tid, threads=threads,
                                     vector=STAGING_VECTOR)
                    if spec.vt_by_key:
                        store_v(load_tile(v_buf, kv0, v_place))
                    else:
                        copy_tile_to_lds(v_buf, vt_tile, (kv0, 0), kv_ld, thread_index=tid, threads=threads,
                                         vector=STAGING_VECTOR, transpose=True)
                    k.barrier()
                scores = transposed_scores(mma, k_tile, q_ops, kv_frags)
                probs = [[None] * q_frags for _ in range(kv_frags)]
                for t in range(q_frags):
                    tile = []
                    for i in range(kv_frags):
                        scaled = scores[i][t] * qk_scale
                        if masked:
                            keys, queries = scores[i][t].coords(origin=(kv0 + i * am, q_cols[t]))
                            valid = keys < kv_length
                            if spec.causal:
                                valid = valid & (keys <= (queries + diagonal if spec.layout == "thd"
                                                          else queries))
                            scaled = scaled.where(valid, -math.inf)
                        tile.append(scaled)
                    m[t], l[t], p_t, alpha = online_softmax_update(m[t], l[t], tile)
                    for i in range(kv_frags):
                        # no NaN select in any mode: a NaN in P came from a NaN score, which
                        # already made the row's l NaN (it sums the unrounded P), and O / l with it
                        probs[i][t] = p_t[i].to(spec.dtype, rounding=spec.rounding, nan_check=False)
                    rescale(o, t, alpha)
                if spec.pv_setprio:
                    k.s_setprio(1)
                for i in range(kv_frags):
                    for sub in range(0, am, ak):
                        p_ops = [transposed_pv_operand(mma, probs[i][t], sub) for t in range(q_frags)]
                        for j in range(d_frags):
                            v_op = transposed_v_operand(mma, vt_tile, j * am, i * am + sub)
                            for t in range(q_frags):
                                o[t * d_frags + j] = mma(v_op, p_ops[t], o[t * d_frags + j])
                if spec.pv_setprio:
                    k.s_setprio(0)
                k.barrier()     # the next tile overwrites K and V^T
                return staged

            def rescale(o, t, alpha):
                """O^T of query fragment t times alpha; with lazy_rescale only when some lane's
                alpha is below 1 (a running max moved), a wave-uniform branch."""
                frags = o[t * d_frags:(t + 1) * d_frags]
                if spec.lazy_rescale:
                    moved = ballot(alpha.value < 1.0) != 0
                    with k.if_(moved, carry=frags) as br:
                        alpha_o = alpha.broadcast_to(mma.C)
                        br.yield_(*[f * alpha_o for f in frags])
                    frags = list(br.results)
                else:
                    alpha_o = alpha.broadcast_to(mma.C)
                    frags = [f * alpha_o for f in frags]
                o[t * d_frags:(t + 1) * d_frags] = frags

            n_state = 2 * q_frags + q_frags * d_frags

            def run_tiles(lo, hi, carry, masked: bool):
                if spec.prefetch_distance == 2:
                    return run_tile_pairs(lo, hi, carry, masked)
                with k.for_range(lo, hi, spec.block_n, carry=carry) as loop:
                    m = list(loop.carry[:q_frags])
                    l = list(loop.carry[q_frags:2 * q_frags])
                    o = list(loop.carry[2 * q_frags:n_state])      # [t * d_frags + j]
                    staged = kv_tile(loop.index, m, l, o, masked, list(loop.carry[n_state:]))
                    loop.yield_(*m, *l, *o, *(staged if spec.prefetch else ()))
                return list(loop.results)

            def run_tile_pairs(lo, hi, carry, masked: bool):
                """Two tiles an iteration, each with its own register slot (A: even tiles of
                the iteration, B: odd), reloaded 2 tiles ahead: no slot rotates, so no copy of
                an in-flight load (a copy would wait for it) -- each store waits only for its
                own slot's loads. An odd last tile runs from A; the slots then swap once."""
                half = (len(carry) - n_state) // 2
                # [lo, hi) holds ceil((hi - lo) / block_n) tiles (the last may be partial)
                tiles = (hi - lo + (spec.block_n - 1)) // spec.block_n
                pairs_end = lo + (tiles // 2) * (2 * spec.block_n)
                with k.for_range(lo, pairs_end, 2 * spec.block_n, carry=carry) as loop:
                    m = list(loop.carry[:q_frags])
                    l = list(loop.carry[q_frags:2 * q_frags])
                    o = list(loop.carry[2 * q_frags:n_state])
                    slot_a = kv_tile(loop.index, m, l, o, masked, list(loop.carry[n_state:n_state + half]))
                    slot_b = kv_tile(loop.index + spec.block_n, m, l, o, masked,
                                     list(loop.carry[n_state + half:]))
                    loop.yield_(*m, *l, *o, *slot_a, *slot_b)
                with k.if_(pairs_end < hi, carry=list(loop.results)) as last:
                    state = list(loop.results)
                    m = state[:q_frags]
                    l = state[q_frags:2 * q_frags]
                    o = state[2 * q_frags:n_state]
                    slot_a = kv_tile(pairs_end, m, l, o, masked, state[n_state:n_state + half])
                    last.yield_(*m, *l, *o, *state[n_state + half:], *slot_a)   # B holds the next tile
                return list(last.results)

            m_init = AxisVector.full(k, mma.C, ROW, dsl.f32, -math.inf)     # one entry per query column
            l_init = AxisVector.full(k, mma.C, ROW, dsl.f32, 0.0)
            carry = [m_init] * q_frags + [l_init] * q_frags + [mma.zeros()] * (q_frags * d_frags)
            def key_range():
                if spec.causal and spec.layout == "thd":
                    # whole tiles every query of the block sees (keys <= block_q0 + L_k - L_q)
                    # need no mask; the diagonal tiles up to min(L_k, the block's last query's) do
                    return (((block_q0 + diagonal + 1) // spec.block_n) * spec.block_n,
                            minimum(kv_length, block_q0 + spec.block_m + diagonal))
                if spec.causal:
                    # tiles below the workgroup's first query need no mask (block_m is a multiple
                    # of block_n and block_q0 < L_b); the diagonal tiles up to min(L_b, block end) do
                    return block_q0, minimum(length, block_q0 + spec.block_m)
                return (kv_length // spec.block_n) * spec.block_n, kv_length

            if piece is None:
                kv_lo = 0
            else:
                # chunk c of the block's n key tiles: tiles [c n / chunks, (c + 1) n / chunks)
                unmasked_end, kv_end = key_range()
                n_tiles = (kv_end + (spec.block_n - 1)) // spec.block_n
                kv_lo = (piece.chunk * n_tiles) // piece.chunks * spec.block_n
                kv_hi = minimum(((piece.chunk + 1) * n_tiles) // piece.chunks * spec.block_n, kv_end)
                kv_mid = minimum(maximum(unmasked_end, kv_lo), kv_hi)
            if spec.prefetch:
                # the first tiles (both loops continue one chain of loads)
                for ahead in range(spec.prefetch_distance):
                    carry += load_kv(kv_lo + ahead * spec.block_n)
            if piece is None:
                unmasked_end, kv_end = key_range()
                carry = run_tiles(0, unmasked_end, carry, masked=False)
                carry = run_tiles(unmasked_end, kv_end, carry, masked=True)
            else:
                carry = run_tiles(kv_lo, kv_mid, carry, masked=False)
                carry = run_tiles(kv_mid, kv_hi, carry, masked=True)

            m_final = carry[:q_frags]
            l_final = carry[q_frags:2 * q_frags]
            o_final = carry[2 * q_frags:]

            def store_output(l_final=l_final, o_final=o_final):
                # the output's descriptor is made here, not live in SGPRs through the tile loops
                o_buf = slice_buffer(o_ptr, head, q_ld, H, length, q_first_row)
                for t in range(q_frags):
                    inv_l = l_final[t].map(rcp).broadcast_to(mma.C)
                    for j in range(d_frags):
                        out = (o_final[t * d_frags + j] * inv_l).to(spec.dtype, rounding=spec.rounding,
                                                                    quiet_nans=True)
                        store_fragment_global(o_buf, out, (j * am, q_cols[t]), q_ld,
                                              bounds=(None, length), transposed=True)

            def store_partials():
                """This piece's unnormalised O, running max m and sum l (log2 domain, §5) for
                its block's rows: chunk c's workspace rows first_row .. + block_m (O: D wide, as
                the output's rows but f32)."""
                part_o, part_m, part_l, _ = piece.partials
                # row q of the sequence at first_row + q - block_q0: the stores' addresses are
                # the output's (q * D + d, made per block), not a lane-only offset LLVM would
                # hoist to the kernel's entry and hold (spilled) through every tile loop
                base = piece.first_row - block_q0
                o_ws = part_o.offset(base * D).buffer((block_q0 + spec.block_m) * D)
                for t in range(q_frags):
                    for j in range(d_frags):
                        store_fragment_global(o_ws, o_final[t * d_frags + j], (j * am, q_cols[t]), D,
                                              bounds=(None, length), transposed=True)
                    for ptr, value in ((part_m, m_final[t]), (part_l, l_final[t])):
                        store_axis(ptr.offset(base).buffer(block_q0 + spec.block_m), value,
                                   q_cols[t], bound=length)

            def merged_partials():
                """(l, O^T) of this block's chunks merged (the §5 merge), each wave for its own
                query columns, every chunk read back from the workspace in chunk order (keeping
                this piece's own in registers through the loop, or the next chunk's loads in
                flight, spills VGPRs in the causal kernel)."""
                part_o, part_m, part_l, _ = piece.partials
                m_axis = m_final[0].axis
                carry = ([AxisVector.full(k, mma.C, m_axis, dsl.f32, -math.inf)] * q_frags
                         + [AxisVector.full(k, mma.C, m_axis, dsl.f32, 0.0)] * q_frags
                         + [mma.zeros()] * (q_frags * d_frags))
                with k.for_range(0, piece.chunks, carry=carry) as merge:
                    m = list(merge.carry[:q_frags])
                    l = list(merge.carry[q_frags:2 * q_frags])
                    o = list(merge.carry[2 * q_frags:])
                    # chunk c's row q: c * rows + first_row - own chunk * rows - block_q0 + q
                    base = merge.index * piece.rows + piece.first_row - piece.chunk * piece.rows - block_q0
                    o_ws = part_o.offset(base * D).buffer((block_q0 + spec.block_m) * D)
                    for t in range(q_frags):
                        m_c, l_c = (load_axis(ptr.offset(base).buffer(block_q0 + spec.block_m),
                                              mma.C, m_axis, q_cols[t])
                                    for ptr in (part_m, part_l))
                        m_new = m[t].maximum(m_c)
                        top = m_new.map(finite_base)
                        a = (m[t] - top).map(lambda x: exp2(x, fast=True))
                        b = (m_c - top).map(lambda x: exp2(x, fast=True))
                        m[t], l[t] = m_new, l[t] * a + l_c * b
                        a_o, b_o = a.broadcast_to(mma.C), b.broadcast_to(mma.C)
                        for j in range(d_frags):
                            o_c = load_fragment_global(o_ws, mma.C, (j * am, q_cols[t]), D, transposed=True)
                            o[t * d_frags + j] = o[t * d_frags + j] * a_o + o_c * b_o
                    merge.yield_(*m, *l, *o)
                state = list(merge.results)
                return state[q_frags:2 * q_frags], state[2 * q_frags:]

            def finish_piece():
                """Partials out; the block's last piece to finish (a ticket from a global
                counter, after every wave released its stores) merges them into the output and
                resets the counter for the next launch."""
                tickets = piece.partials[3].offset(0).buffer(piece.block + 1)
                store_partials()
                k.fence("release", "agent")
                k.barrier()
                with k.if_(tid == 0):
                    piece.ticket.store(0, tickets.atomic_add(piece.block, 1))
                k.barrier()
                last = readfirstlane(piece.ticket.load(0)) == piece.chunks - 1
                with k.if_(last):
                    k.fence("acquire", "agent")
                    store_output(*merged_partials())
                    with k.if_(tid == 0):
                        tickets.store(piece.block, k.const(0, dsl.i32))

            if piece is None:
                store_output()
            else:
                branch = k.if_else(piece.is_piece)
                with branch.then_():
                    finish_piece()
                with branch.else_():
                    store_output()
