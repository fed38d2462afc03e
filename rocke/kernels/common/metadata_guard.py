"""The attention metadata guard: the content checks of ``cu_seqlens_q``, ``seqused_k`` and
``block_table`` that the host does on the emulator, done on the device for GPU tensors (reading
them on the host would synchronise every call and break graph capture).

One work-item per sequence checks, in this order: ``cu_seqlens_q`` starts at 0, does not
decrease, ends at ``total_q``; ``seqused_k`` lies in ``[0, table width x block size]``; the
query is not longer than the keys (with the ``causal`` argument set: the host sets it for every
call, non-causal ones too, whose query positions need it as well); the lengths are within the caller's
``max_seqlen_q`` / ``max_seqlen_k``; every page id the sequence uses lies in
``[0, num_blocks)``. A violation is claimed with a compare-and-swap on the device's error record
(``rocke.runtime.device_checks``): the first claim wins and writes its details, later ones (this
call's or later calls') leave it alone until the host reads and resets it. The guard itself
reads the metadata through buffer resources sized by their shapes, so lying contents never
make it read outside them. Target-free: the builder uses no target fact.
"""
from __future__ import annotations

from dataclasses import dataclass

from rocke import dsl
from rocke.kernels.common.checks import check_int_range, check_multiple
from rocke.runtime import device_checks

I32_MAX = 2 ** 31 - 1

CU_START, CU_DECREASING, CU_END, KV_RANGE, Q_AFTER_KV, MAX_Q, MAX_K, PAGE = range(101, 109)

MESSAGES = {
    CU_START: lambda s, i, v, lo, hi: f"cu_seqlens_q: must start at 0, got {v}",
    CU_DECREASING: lambda s, i, v, lo, hi: (f"cu_seqlens_q: not monotone: entry {i} ({v}) is "
                                            f"below entry {i - 1} ({lo})"),
    CU_END: lambda s, i, v, lo, hi: (f"cu_seqlens_q: must end at total_q = {hi} (q's rows), got "
                                     f"{v}"),
    KV_RANGE: lambda s, i, v, lo, hi: (f"seqused_k: sequence {s} has {v} KV tokens, outside "
                                       f"[0, {hi}] (its block table row's capacity)"),
    Q_AFTER_KV: lambda s, i, v, lo, hi: (f"seqused_k: attention needs query_len <= kv_len, "
                                         f"but sequence {s} has query_len {v} > kv_len {hi}"),
    MAX_Q: lambda s, i, v, lo, hi: (f"max_seqlen_q: {hi} is below sequence {s}'s query length "
                                    f"{v}"),
    MAX_K: lambda s, i, v, lo, hi: (f"max_seqlen_k: {hi} is below sequence {s}'s KV length {v}"),
    PAGE: lambda s, i, v, lo, hi: (f"block_table: sequence {s} uses block index {v} at column "
                                   f"{i}, outside the cache's [0, {hi}) pages"),
}
device_checks.register_codes(MESSAGES)


@dataclass(frozen=True)
class MetadataGuardSpec:
    threads: int = 64           # work-items per workgroup (one per sequence)
    target: str = "gfx942"      # the GPU's processor (the guard runs on every target rocke has)

    def __post_init__(self):
        from rocke.arch import TARGETS
        if self.target not in TARGETS:
            raise ValueError(f"target: must be one of {sorted(TARGETS)}, got {self.target!r}")
        check_int_range("threads", self.threads, dsl.WAVE_SIZE, 1024)
        check_multiple("threads", self.threads, dsl.WAVE_SIZE, because="a workgroup is whole waves")

    @property
    def kernel_name(self) -> str:
        return f"attention_metadata_guard_t{self.threads}"


SPEC = MetadataGuardSpec()


def spec_for(device_arch: str) -> MetadataGuardSpec:
    """The guard built for the processor of a device's target id ('gfx950:sramecc+:xnack-')."""
    target = device_arch.split(":", 1)[0]
    return SPEC if target == SPEC.target else MetadataGuardSpec(target=target)


# a shipped variant (rocke.kernels.registry): golden-pinned and in the prebuilt bundle, so the
# GPU path's first call neither builds its IR nor links it
VARIANTS = {"t64": SPEC}
GOLDEN_PERTURBATION = ("threads", {64: 128})     # see rocke.kernels.registry

ARGS = ("cu_seqlens_q", "seqused_k", "block_table", "record", "num_seqs", "total_q", "num_blocks",
        "block_size", "table_width", "table_stride", "causal", "max_seqlen_q", "max_seqlen_k")


def build(spec: MetadataGuardSpec) -> dsl.Kernel:
    k = dsl.Kernel(spec.kernel_name, workgroup_size=spec.threads, target=spec.target)
    cu = k.arg_ptr("cu_seqlens_q", dsl.i32, readonly=True)
    used = k.arg_ptr("seqused_k", dsl.i32, readonly=True)
    table = k.arg_ptr("block_table", dsl.i32, readonly=True, strided=True)   # row stride: an argument
    record = k.arg_ptr("record", dsl.i32)
    (num_seqs, total_q, num_blocks, block_size, width, stride, causal, max_q,
     max_k) = (k.arg_i32(name) for name in ARGS[4:])
    s = k.block_id(0) * spec.threads + k.thread_id(0)

    def report(bad, code, index, value, lo, hi):
        with k.if_(bad):
            with k.if_(record.atomic_cas(0, 0, code) == 0):     # the first claim writes
                for slot, x in enumerate((s, index, value, lo, hi), start=1):
                    record.store(slot, x)

    with k.if_(s < num_seqs):
        cu_buf = cu.buffer(num_seqs + 1)
        start, end = cu_buf.load(s), cu_buf.load(s + 1)
        report((s == 0) & (start != 0), CU_START, 0, start, 0, 0)
        report(end < start, CU_DECREASING, s + 1, end, start, 0)
        report((s == num_seqs - 1) & (end != total_q), CU_END, num_seqs, end, total_q, total_q)
        kv = used.buffer(num_seqs).load(s)
        capacity = width * block_size
        kv_ok = (kv >= 0) & (kv <= capacity)
        report(~kv_ok, KV_RANGE, s, kv, 0, capacity)
        q_len = end - start
        report(kv_ok & (causal != 0) & (q_len > kv), Q_AFTER_KV, s, q_len, 0, kv)
        report(q_len > max_q, MAX_Q, s, q_len, 0, max_q)
        report(kv > max_k, MAX_K, s, kv, 0, max_k)
        rows = table.buffer((num_seqs - 1) * stride + width)
        with k.for_range(0, dsl.select(kv_ok, kv, 0), block_size,
                         carry=[k.const(0, dsl.i32)]) as pages:
            column = pages.carry[0]
            page = rows.load(s * stride + column)
            report((page < 0) | (page >= num_blocks), PAGE, column, page, 0, num_blocks)
            pages.yield_(column + 1)
    return k


def launch_geometry(spec: MetadataGuardSpec, num_seqs: int):
    return (-(-num_seqs // spec.threads), 1, 1), (spec.threads, 1, 1)


def kernel_args(cu_seqlens_q, seqused_k, block_table, record, *, total_q: int, num_blocks: int,
                block_size: int, causal: bool, max_seqlen_q: int, max_seqlen_k: int) -> list:
    """The guard's arguments (shapes only: nothing is read). ``record``: the device's error
    record (``Device.error_record()``). The query-not-longer-than-the-keys rule holds for
    non-causal calls too (``check_contents``'s): the kernel's ``causal`` flag is always set."""
    num_seqs, width = block_table.shape
    del causal
    return [cu_seqlens_q, seqused_k, block_table, record, num_seqs, total_q, num_blocks,
            block_size, width, block_table.stride(0), 1, min(max_seqlen_q, I32_MAX),
            min(max_seqlen_k, I32_MAX)]
