"""The MI300X time model on counts worked out by hand, and its cost table against the MFMA
catalog (two independent readings of the same CDNA3 facts)."""
import dataclasses

import numpy as np
import pytest

from rocke.arch.costs import MI300X, MI355X, costs_for
from rocke.arch.mfma import MFMA_CATALOG
from rocke.emu.profile import LaunchProfile
from rocke.perf import LABEL, matrix_ceiling_us, model_time

CLOCK = MI300X.clock_hz
LOADED = 2.1e9 * 708 / 1307.4     # AMD's MAF: 708 of 1307.4 BF16 TFLOPS, read as clock
LAUNCH_US = MI300X.launch_overhead_s * 1e6


@pytest.mark.parametrize("key", sorted(k for k, a in MFMA_CATALOG.items() if "gfx942" in a.targets))
def test_mfma_cycles_agree_with_the_catalog(key):
    """LLVM's gfx942 scheduling model (rocke.arch.costs) and the catalog's peak-rate passes, for
    every atom gfx942 has (the model is of an MI300X; gfx950-only atoms have no gfx942 timing)."""
    atom = MFMA_CATALOG[key]
    assert MI300X.mfma_cycles(atom.mnemonic) == atom.cycles


def test_effective_clock_follows_the_matrix_load():
    """Boost clock with idle matrix pipes, AMD's max-achievable-FLOPs clock when saturated
    (2.1 GHz x 708 / 1307.4 = 1.1372 GHz), linear between, clamped outside 0..1."""
    assert MI300X.effective_clock_hz(0.0) == pytest.approx(2.1e9)
    assert MI300X.effective_clock_hz(1.0) == pytest.approx(1.13722e9, rel=1e-4)
    assert MI300X.effective_clock_hz(0.5) == pytest.approx((2.1e9 + 1.13722e9) / 2, rel=1e-4)
    assert MI300X.effective_clock_hz(1.7) == MI300X.effective_clock_hz(1.0)
    assert MI300X.effective_clock_hz(-1.0) == MI300X.effective_clock_hz(0.0)


def test_serial_cycles():
    """One issue slot at least; a VALU its passes; an MFMA its matrix-pipe time."""
    assert MI300X.serial_cycles("s_add_u32", "salu") == 4
    assert MI300X.serial_cycles("v_add_f32_e32", "valu") == 4
    assert MI300X.serial_cycles("v_exp_f32_e32", "valu") == 16
    assert MI300X.serial_cycles("v_mfma_f32_32x32x8_bf16", "mfma") == 32
    assert MI300X.serial_cycles("v_mfma_f32_16x16x16_f16", "mfma") == 16
    assert MI300X.serial_cycles("buffer_load_dword", "vmem") == 4


def test_valu_passes():
    assert MI300X.valu_passes("v_add_f32_e32") == 1
    assert MI300X.valu_passes("v_exp_f32_e32") == 4       # transcendental: quarter rate
    with pytest.raises(ValueError, match="MFMA"):
        MI300X.mfma_passes("v_add_f32")


def _profile(workgroups, buckets, classes, per_wg, *, lds_bytes=65536, unique=(0, 0),
             trips=None):
    issues = np.tile(np.array(per_wg, np.int64), (workgroups, 1))
    counted = np.zeros(0, np.int64) if trips is None else np.full(workgroups, trips, np.int64)
    return LaunchProfile(
        "synthetic", (workgroups, 1, 1), (256, 1, 1), workgroups, 4,
        {"vgprs": 64, "agprs": 0, "sgprs": 32, "lds_bytes": lds_bytes}, [], {}, {}, {},
        unique_read_bytes=unique[0], unique_write_bytes=unique[1], buckets=tuple(buckets),
        bucket_classes=tuple(classes), wg_issues=issues,
        wg_lds_cycles=np.zeros(workgroups, np.int64),
        wg_global_bytes=np.zeros(workgroups, np.int64), wg_vm_round_trips=counted)


@pytest.mark.parametrize("workgroups, rounds", [(304, 1), (608, 2), (609, 3)])
def test_mfma_bound_rounds_and_tail(workgroups, rounds):
    """64 KiB of LDS: one workgroup per CU. 1000 v_mfma_f32_32x32x8_f16 per workgroup (32
    cycles each) over 4 waves on 4 SIMDs: 8000 cycles a workgroup, one round per 304."""
    p = _profile(workgroups, ["v_mfma_f32_32x32x8_f16"], ["mfma"], [1000])
    m = model_time(p)
    assert m.occupancy["workgroups_per_cu"] == 1
    # the matrix pipes are busy workgroups x 32000 cycles over 1216 SIMDs x (rounds x 8000)
    # cycles: 1.0 for 304 and 608 workgroups, 609 / 912 for 609 (the tail round is a third full)
    busy = workgroups * 32000 / 1216 / (rounds * 8000)
    assert busy == pytest.approx({304: 1.0, 608: 1.0, 609: 609 / 912}[workgroups])
    clock = CLOCK - busy * (CLOCK - LOADED)
    assert m.occupancy["clock_ghz"] == pytest.approx(clock / 1e9, abs=1e-3)
    assert m.us == pytest.approx(rounds * 8000 / clock * 1e6 + LAUNCH_US)
    assert m.binding.startswith("compute") and m.label == LABEL == "modelled MI300X time"
    # the speed-of-light bound spreads the work evenly: 1000 * 32 cycles per workgroup
    assert m.bound_us == pytest.approx(workgroups * 32000 / (304 * 4) / CLOCK * 1e6 + LAUNCH_US)


def test_dram_bound_time_is_footprint_over_achievable_bandwidth():
    """4 GiB over 304 resident workgroups with no round trip on their path: the whole footprint
    queues at the achievable bandwidth (the DRAM queue), after the path's 4 VALU issues of 4
    cycles over 4 waves (4 cycles)."""
    p = _profile(304, ["v_add_f32_e32"], ["valu"], [4], unique=(3 << 30, 1 << 30))
    m = model_time(p)
    assert m.binding == "dram"
    assert m.us == pytest.approx((4 << 30) / MI300X.hbm_achievable_bytes_s * 1e6
                                 + 4 / CLOCK * 1e6 + LAUNCH_US)
    assert m.bound_us == pytest.approx((4 << 30) / MI300X.hbm_peak_bytes_s * 1e6 + LAUNCH_US)


def test_sampled_profile_repeats_over_the_full_grid():
    p = _profile(304, ["v_mfma_f32_32x32x8_f16"], ["mfma"], [1000])
    full = model_time(p, grid=(304 * 5, 1, 1))
    assert full.workgroups == 304 * 5
    assert full.us == pytest.approx(5 * 8000 / LOADED * 1e6 + LAUNCH_US)   # pipes saturated
    with pytest.raises(ValueError, match="fewer workgroups"):
        model_time(p, grid=(10, 1, 1))


LATENCY = MI300X.memory_latency_cycles
WAITING = (["v_add_f32_e32", "s_waitcnt vmcnt"], ["valu", "s_waitcnt"])


@pytest.mark.parametrize("lds_bytes, per_cu", [(65536, 1), (16384, 4)])
def test_latency_is_hidden_by_resident_workgroups(lds_bytes, per_cu):
    """Per workgroup, 4 waves of 100 v_add_f32 and 10 vmcnt waits each: one wave's path is
    (400 + 40) issues x 4 cycles / 4 waves + 10 round trips = 440 + 10 L cycles; its CU demand
    400 VALU cycles per SIMD. With 1 workgroup per CU (64 KiB LDS) 304 workgroups take one path;
    with 4 per CU (16 KiB) 4 x 304 take the same time: 4 x 400 < path, the latency is hidden
    across the resident workgroups (throughput per CU = max(path / 4, demand))."""
    p = _profile(304 * per_cu, *WAITING, [400, 40], lds_bytes=lds_bytes)
    m = model_time(p)
    assert m.occupancy["workgroups_per_cu"] == per_cu
    assert m.us == pytest.approx((440 + 10 * LATENCY) / CLOCK * 1e6 + LAUNCH_US)
    assert m.binding == "compute (latency)"


def test_enough_resident_work_turns_latency_into_throughput():
    """As above with 4 workgroups per CU but 10000 v_add_f32 a wave: demand 4 x 10000 x 4 =
    160000 cycles a round exceeds the path (40000 + 40 + 20000): VALU-bound."""
    p = _profile(304 * 4, *WAITING, [40000, 40], lds_bytes=16384)
    m = model_time(p)
    assert m.us == pytest.approx(4 * 40000 / CLOCK * 1e6 + LAUNCH_US)
    assert m.binding == "compute (valu)"


def test_replayed_stalls_replace_round_trips():
    """A profile whose timeline replay found 1200 stall cycles per workgroup at the model's
    latency (and others at other latencies) charges those, not its 4 counted round trips."""
    p = _profile(304, *WAITING, [400, 40], trips=4)
    p.vm_latencies = (1000, 2000, 4000)
    p.wg_vm_stall = np.tile(np.array([0.0, 1200.0, 9000.0]), (304, 1))
    assert model_time(p).us == pytest.approx((440 + 1200 / 4) / CLOCK * 1e6 + LAUNCH_US)
    # a latency the replay did not cover falls back to the counted round trips
    from dataclasses import replace
    other = replace(MI300X, memory_latency_cycles=3000)
    assert model_time(p, costs=other).us == pytest.approx((440 + 3000) / CLOCK * 1e6 + LAUNCH_US)


def test_counted_round_trips_replace_the_wait_count():
    """The profiler's round trips (1 a wave here: a cascade of 10 waits on loads issued
    together) set the latency on the path, not the 10 waits."""
    p = _profile(304, *WAITING, [400, 40], trips=4)
    assert model_time(p).us == pytest.approx((440 + LATENCY) / CLOCK * 1e6 + LAUNCH_US)


BW = 4.073e12       # [BW] achievable HBM bandwidth (rocke.arch.costs)


def test_dram_queue_is_littles_law():
    """304 resident workgroups waiting on 1 MB each: 304 MB through 4.073 TB/s = 74.6 us."""
    from rocke.perf.model import dram_queue_seconds
    assert dram_queue_seconds(304, 1e6) == pytest.approx(304e6 / BW)


def test_dram_queue_within_the_round_trip_changes_nothing():
    """304 workgroups, one counted round trip a wave (path 440 + L cycles), 1 MiB of footprint in
    all: 1 MiB / 4.073 TB/s = 0.257 us = 540 cycles < L = 2000: the round trip covers it."""
    p = _profile(304, *WAITING, [400, 40], trips=4, unique=(1 << 20, 0))
    assert model_time(p).us == pytest.approx((440 + LATENCY) / CLOCK * 1e6 + LAUNCH_US)


@pytest.mark.parametrize("workgroups, rounds", [(304, 1), (608, 2)])
def test_dram_queue_beyond_the_round_trip_is_added(workgroups, rounds):
    """As above with 64 MiB per round of 304 resident workgroups (one per CU, 64 KiB LDS): each
    workgroup's share waits 64 MiB / 4.073 TB/s = 16.48 us (Little's law over the resident
    workgroups), of which the path already waits one round trip (L cycles): a workgroup lasts
    440 cycles + 16.48 us; two rounds twice that. No MFMA: boost clock."""
    footprint = rounds * (64 << 20)
    p = _profile(workgroups, *WAITING, [400, 40], trips=4, unique=(footprint, 0))
    m = model_time(p)
    queue_s = (64 << 20) / BW
    assert m.us == pytest.approx(rounds * (440 / CLOCK + queue_s) * 1e6 + LAUNCH_US)
    assert m.parts_us["dram_queue_per_workgroup"] == pytest.approx(queue_s * 1e6 - LATENCY / CLOCK * 1e6)
    assert m.binding == "dram"


def test_dram_queue_and_clock_are_solved_together():
    """304 workgroups of 1000 v_mfma_f32_32x32x8_f16 (8000 cycles, pipes saturated alone) and a
    footprint of 10 us x 4.073 TB/s that the 304 resident workgroups share (a 10 us queue, no
    round trip on the path to cover any of it): the clock
    c solves c = 2.1 GHz - busy x (2.1 GHz - MAF clock) with busy = 8000 / (8000 + 10 us x c);
    solved here by bisection, independently of the model's fixed-point steps."""
    queue_s = 10e-6
    footprint = int(queue_s * BW)           # 304 resident workgroups share it
    p = _profile(304, ["v_mfma_f32_32x32x8_f16"], ["mfma"], [1000], unique=(footprint, 0))
    lo, hi = LOADED, CLOCK
    for _ in range(100):
        c = (lo + hi) / 2
        busy = 8000 / (8000 + queue_s * c)
        if CLOCK - busy * (CLOCK - LOADED) > c:
            lo = c
        else:
            hi = c
    m = model_time(p)
    assert m.occupancy["clock_ghz"] == pytest.approx(c / 1e9, abs=2e-3)
    assert m.us == pytest.approx((8000 / c + queue_s) * 1e6 + LAUNCH_US, rel=2e-3)


def test_workgroup_shares_follow_the_requested_bytes():
    """80 bytes of footprint over workgroups requesting 0 / 10 / 30 bytes: 0 / 20 / 60; none
    counted (a hand-built profile): equal shares."""
    from rocke.perf.model import workgroup_shares
    assert workgroup_shares(np.array([0.0, 10.0, 30.0]), 80).tolist() == [0.0, 20.0, 60.0]
    assert workgroup_shares(np.zeros(4), 80).tolist() == [20.0] * 4


def test_shared_bytes_is_fair_sharing():
    """Shares 1, 3, 3, 0 through one pipe shared fairly: the 1 is done after 1 + 1 + 1 + 0 = 3
    bytes, each 3 after 1 + 3 + 3 + 0 = 7, the empty one at once."""
    from rocke.perf.model import shared_bytes
    assert shared_bytes(np.array([1.0, 3.0, 3.0, 0.0])).tolist() == [3.0, 7.0, 7.0, 0.0]
    assert shared_bytes(np.full(5, 2.0)).tolist() == [10.0] * 5


def test_a_workgroup_that_loads_nothing_waits_on_no_queue():
    """304 workgroups, 64 MiB of footprint, all requested by workgroup 0 (the others request
    nothing): only it waits (64 MiB / 4.073 TB/s beyond its round trip); the rest keep their
    path of 440 + L cycles."""
    p = _profile(304, *WAITING, [400, 40], trips=4, unique=(64 << 20, 0))
    p.wg_global_bytes = np.zeros(304, np.int64)
    p.wg_global_bytes[0] = 1 << 20
    m = model_time(p)
    queue_s = (64 << 20) / BW
    assert m.us == pytest.approx((440 / CLOCK + queue_s) * 1e6 + LAUNCH_US)
    p.wg_global_bytes[:] = 0          # none counted: equal shares, the same total for each
    assert model_time(p).us == pytest.approx((440 / CLOCK + queue_s) * 1e6 + LAUNCH_US)


# ---- the MI355X record (gfx950): the same model over CDNA4's facts ----

def test_peak_f16_rate_from_the_pass_table_is_the_data_sheets():
    """The pass table, the CU count and the boost clock reproduce each data sheet's dense f16
    peak: MI300X 1307.4 TFLOPS (16x16x16 in 4 passes, 304 CUs, 2.1 GHz), MI355X 2516.6 (the
    wide-K 16x16x32 in 4 passes, LLVM's gfx950 model; 256 CUs, 2.4 GHz)."""
    assert MI300X.peak_dense_f16_flops == pytest.approx(1307.4e12, rel=1e-4)
    assert MI355X.peak_dense_f16_flops == pytest.approx(2516.6e12, rel=1e-4)
    assert MI355X.mfma_passes("v_mfma_f32_16x16x32_bf16") == 4
    assert MI355X.mfma_passes("v_mfma_f32_32x32x16_f16") == 8


@pytest.mark.parametrize("key", sorted(k for k, a in MFMA_CATALOG.items()
                                        if "gfx950" in a.targets and "x128" not in k
                                        and "32x32x64" not in k))
def test_mi355x_mfma_cycles_agree_with_the_catalog(key):
    """LLVM's gfx950 model (the MI355X record) and the catalog's passes from MI355X's data-sheet
    peaks, for gfx950's atoms; not the f8f6f4 ones, which LLVM charges at the fp4 rate (a
    flagged assumption in rocke/arch/costs.py)."""
    atom = MFMA_CATALOG[key]
    assert MI355X.mfma_cycles(atom.mnemonic) == atom.cycles


def test_costs_for_names_each_target():
    assert costs_for("gfx942") is MI300X and costs_for("gfx950:sramecc+:xnack-") is MI355X
    assert MI355X.label == "modelled MI355X time"
    with pytest.raises(ValueError, match="no time model for target 'gfx90a'"):
        costs_for("gfx90a")


def test_mi355x_mfma_bound_launch_uses_its_cus_and_clock():
    """As test_mfma_bound_rounds_and_tail on MI355X: 160 KiB of LDS holds one workgroup per CU
    there too (160 KiB requested). 512 workgroups of 8000 cycles on 256 CUs: two rounds at the
    saturated clock 2.4 GHz x 1421.77 / 2516.6; the label says MI355X."""
    p = _profile(512, ["v_mfma_f32_32x32x8_f16"], ["mfma"], [1000], lds_bytes=160 * 1024)
    m = model_time(p, costs=MI355X)
    assert m.occupancy["workgroups_per_cu"] == 1
    assert m.us == pytest.approx(2 * 8000 / (2.4e9 * 1421.77 / 2516.6) * 1e6 + LAUNCH_US)
    assert m.label == "modelled MI355X time"


def test_mi355x_serves_lds_phases_at_twice_the_rate():
    """An LDS-bound launch: 304 workgroups of 4 waves, 1000 LDS phase cycles each (as the profiler
    counts them, 128 B a clock) and one DS issue a wave. MI300X (64 KiB: one workgroup a CU) takes
    1000 cycles at 2.1 GHz; MI355X serves the same bytes at 256 B a clock, 500 cycles, but its
    256 CUs hold the 304 workgroups two to a CU (160 KiB of LDS), which share the LDS pipe:
    2 x 500 cycles at 2.4 GHz."""
    p = _profile(304, ["ds_read_b128"], ["ds"], [4])
    p.wg_lds_cycles = np.full(304, 1000, np.int64)
    assert model_time(p).us == pytest.approx(1000 / CLOCK * 1e6 + LAUNCH_US)
    m = model_time(p, costs=MI355X)
    assert m.us == pytest.approx(2 * 500 / 2.4e9 * 1e6 + LAUNCH_US)
    assert m.binding == "compute (lds)"


def test_order_picks_each_dispatched_workgroups_sample():
    """A launch of two kinds of workgroup (a split launch's whole items and pieces): sample 0
    runs 1000 MFMAs (8000 cycles), sample 1 half of that. 300 whole then 8 halves end with the
    first round (the 4 free CUs take two halves each); 8 halves first leave 4 whole ones for a
    second round that starts when a half ends (4000 + 8000 cycles). The matrix load, and so the
    clock, counts each dispatched workgroup's own MFMAs."""
    p = _profile(2, ["v_mfma_f32_32x32x8_f16"], ["mfma"], [1000])
    p.wg_issues[1] = 500
    mfma = 300 * 32000 + 8 * 16000
    for order, end in (([0] * 300 + [1] * 8, 8000), ([1] * 8 + [0] * 300, 12000)):
        m = model_time(p, grid=(308, 1, 1), order=order)
        busy = mfma / 1216 / end
        assert m.occupancy["matrix_busy"] == pytest.approx(busy, abs=1e-3)
        clock = CLOCK - busy * (CLOCK - LOADED)
        assert m.us == pytest.approx(end / clock * 1e6 + LAUNCH_US)
    with pytest.raises(ValueError, match="order"):
        model_time(p, grid=(308, 1, 1), order=[0] * 307)
    with pytest.raises(ValueError, match="order"):
        model_time(p, grid=(3, 1, 1), order=[0, 1, 2])


def test_max_matrix_flops_is_the_clock_rules_best():
    """busy x clock(busy) grows up to busy 1 on both targets (loaded clock above half the
    boost), so the most the rule allows is the peak at the loaded clock: MI300X 1307.4 x 708 /
    1307.4 = 708 TFLOPS (AMD's MAF), MI355X 2516.6 x 1421.77 / 2516.6. A rule whose loaded
    clock is below half the boost peaks inside: boost 2 GHz, loaded 0.5 GHz -> best busy 2/3,
    clock 1 GHz, rate 2/3 x 1 / 2 = 1/3 of the peak (busy 1: 0.25 of it)."""
    assert MI300X.max_matrix_flops == pytest.approx(708e12, rel=1e-4)
    assert MI355X.max_matrix_flops == pytest.approx(1421.77e12, rel=1e-4)
    steep = dataclasses.replace(MI300X, clock_hz=2e9, loaded_clock_hz=0.5e9)
    assert steep.max_matrix_flops == pytest.approx(steep.peak_dense_f16_flops / 3, rel=1e-9)


@pytest.mark.parametrize("workgroups", [1, 304, 609, 3040])
def test_no_launch_beats_the_matrix_ceiling(workgroups):
    """matrix_ceiling_us bounds model_time from below: pure MFMA launches of 1 to 3040
    workgroups (8192 FLOP a v_mfma_f32_32x32x8_f16, 1000 a workgroup) are never faster; the
    saturated whole rounds (3040 = 10 x 304) reach it to the fixed point's precision."""
    p = _profile(workgroups, ["v_mfma_f32_32x32x8_f16"], ["mfma"], [1000])
    flops = workgroups * 1000 * 2 * 32 * 32 * 8
    m = model_time(p)
    ceiling = matrix_ceiling_us(flops)
    assert ceiling == pytest.approx(flops / 708e12 * 1e6 + LAUNCH_US, rel=1e-4)
    assert m.us >= ceiling * (1 - 1e-9)
    if workgroups == 3040:
        assert m.us == pytest.approx(ceiling, rel=1e-6)
    with pytest.raises(ValueError, match="flops"):
        matrix_ceiling_us(-1.0)


def test_weighted_shared_bytes():
    """Shares 1 and 3 standing for 10 and 2 resident workgroups: the 1 is done after 10 x 1 +
    2 x 1 = 12 bytes, the 3 after 10 x 1 + 2 x 3 = 16; unit weights are the unweighted sum."""
    from rocke.perf.model import shared_bytes
    assert shared_bytes(np.array([1.0, 3.0]), np.array([10.0, 2.0])).tolist() == [12.0, 16.0]
    shares = np.array([1.0, 3.0, 3.0, 0.0])
    assert shared_bytes(shares, np.ones(4)).tolist() == shared_bytes(shares).tolist()


def test_order_weighs_the_dram_queue_by_the_launch_mix():
    """One round of 304 workgroups: 300 of sample 0 (requesting 3 byte units each) and 4 of
    sample 1 (1 unit), footprint F = 64 MiB. Shares: 3F / 904 and F / 904. A sample-0
    workgroup's last byte comes after 300 x 3F / 904 + 4 x F / 904 = F, as if every resident
    workgroup were the one it is (F / 4.073 TB/s beyond its round trip). Weighing the two
    samples half and half instead would give it 152 x 4F / 904 = 0.67 F."""
    footprint = 64 << 20
    p = _profile(2, *WAITING, [400, 40], trips=4)
    p.wg_global_bytes = np.array([3, 1], np.int64)
    m = model_time(p, grid=(304, 1, 1), order=[0] * 300 + [1] * 4, footprint=footprint)
    assert m.us == pytest.approx((440 / CLOCK + footprint / BW) * 1e6 + LAUNCH_US)
    # an order that repeats the samples in turn is the default's sampling
    p.wg_global_bytes = np.array([1, 1], np.int64)
    turns = model_time(p, grid=(304, 1, 1), order=[0, 1] * 152, footprint=footprint)
    assert turns.us == pytest.approx(model_time(p, grid=(304, 1, 1), footprint=footprint).us,
                                     rel=1e-12)
