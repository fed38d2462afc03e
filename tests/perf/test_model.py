"""The MI300X time model on counts worked out by hand, and its cost table against the MFMA
catalog (two independent readings of the same CDNA3 facts)."""
import numpy as np
import pytest

from rocke.arch.costs import MI300X
from rocke.arch.mfma import MFMA_CATALOG
from rocke.emu.profile import LaunchProfile
from rocke.perf import LABEL, model_time

CLOCK = MI300X.clock_hz
LAUNCH_US = MI300X.launch_overhead_s * 1e6


@pytest.mark.parametrize("key", sorted(MFMA_CATALOG))
def test_mfma_cycles_agree_with_the_catalog(key):
    """LLVM's gfx942 scheduling model (rocke.arch.costs) and the catalog's peak-rate passes."""
    atom = MFMA_CATALOG[key]
    assert MI300X.mfma_cycles(atom.mnemonic) == atom.cycles


def test_valu_passes():
    assert MI300X.valu_passes("v_add_f32_e32") == 1
    assert MI300X.valu_passes("v_exp_f32_e32") == 4       # transcendental: quarter rate
    with pytest.raises(ValueError, match="MFMA"):
        MI300X.mfma_passes("v_add_f32")


def _profile(workgroups, buckets, classes, per_wg, *, lds_bytes=65536, unique=(0, 0)):
    issues = np.tile(np.array(per_wg, np.int64), (workgroups, 1))
    return LaunchProfile(
        "synthetic", (workgroups, 1, 1), (256, 1, 1), workgroups, 4,
        {"vgprs": 64, "agprs": 0, "sgprs": 32, "lds_bytes": lds_bytes}, [], {}, {}, {},
        unique_read_bytes=unique[0], unique_write_bytes=unique[1], buckets=tuple(buckets),
        bucket_classes=tuple(classes), wg_issues=issues,
        wg_lds_cycles=np.zeros(workgroups, np.int64),
        wg_global_bytes=np.zeros(workgroups, np.int64))


@pytest.mark.parametrize("workgroups, rounds", [(304, 1), (608, 2), (609, 3)])
def test_mfma_bound_rounds_and_tail(workgroups, rounds):
    """64 KiB of LDS: one workgroup per CU. 1000 v_mfma_f32_32x32x8_f16 per workgroup (32
    cycles each) over 4 waves on 4 SIMDs: 8000 cycles a workgroup, one round per 304."""
    p = _profile(workgroups, ["v_mfma_f32_32x32x8_f16"], ["mfma"], [1000])
    m = model_time(p)
    assert m.occupancy["workgroups_per_cu"] == 1
    assert m.us == pytest.approx(rounds * 8000 / CLOCK * 1e6 + LAUNCH_US)
    assert m.binding.startswith("compute") and m.label == LABEL == "modelled MI300X time"
    # the speed-of-light bound spreads the work evenly: 1000 * 32 cycles per workgroup
    assert m.bound_us == pytest.approx(workgroups * 32000 / (304 * 4) / CLOCK * 1e6 + LAUNCH_US)


def test_dram_bound_time_is_footprint_over_achievable_bandwidth():
    p = _profile(304, ["v_add_f32_e32"], ["valu"], [4], unique=(3 << 30, 1 << 30))
    m = model_time(p)
    assert m.binding == "dram"
    assert m.us == pytest.approx((4 << 30) / MI300X.hbm_achievable_bytes_s * 1e6 + LAUNCH_US)
    assert m.bound_us == pytest.approx((4 << 30) / MI300X.hbm_peak_bytes_s * 1e6 + LAUNCH_US)


def test_sampled_profile_repeats_over_the_full_grid():
    p = _profile(304, ["v_mfma_f32_32x32x8_f16"], ["mfma"], [1000])
    full = model_time(p, grid=(304 * 5, 1, 1))
    assert full.workgroups == 304 * 5
    assert full.us == pytest.approx(5 * 8000 / CLOCK * 1e6 + LAUNCH_US)
    with pytest.raises(ValueError, match="fewer workgroups"):
        model_time(p, grid=(10, 1, 1))
