"""The HIPDNN_GFX942_* levers: parsed in one module, validated, mapped to spec fields, echoed."""
from dataclasses import dataclass

import pytest

from rocke.kernels.common import knobs as kn


def test_defaults_when_unset():
    k = kn.read_knobs({})
    assert k == kn.AttentionKnobs() and k.is_default()
    assert (k.flash_geometry, k.flash_num_warps) == ("wide4", 4)
    assert k.kv_cache_policy is None and k.graph_2d and k.graph_3d


@pytest.mark.parametrize("value, geometry, warps", [("4", "wide4", 4), ("2", "wide2", 2), ("0", "L4", 1)])
def test_flash_wide_selects_geometry(value, geometry, warps):
    k = kn.read_knobs({"HIPDNN_GFX942_FLASH_WIDE": value})
    assert (k.flash_geometry, k.flash_num_warps) == (geometry, warps)


def test_num_warps_overrides_flash_width():
    k = kn.read_knobs({"HIPDNN_GFX942_FLASH_WIDE": "0", "HIPDNN_GFX942_NUM_WARPS": "2"})
    assert k.flash_num_warps == 2


def test_every_code_lever_parses():
    env = {"HIPDNN_GFX942_WAVES_PER_EU": "3", "HIPDNN_GFX942_IGLP": "1",
           "HIPDNN_GFX942_KV_CACHE_POLICY": "normal", "HIPDNN_GFX942_Q_DIRECT": "true",
           "HIPDNN_GFX942_GLOBAL_LOAD_LDS_K": "on", "HIPDNN_GFX942_Q_MAJOR_GRID": "1",
           "HIPDNN_GFX942_CFV_STORE": "1", "HIPDNN_GFX942_2D_GRAPH": "0", "HIPDNN_GFX942_3D_GRAPH": "off"}
    k = kn.read_knobs(env)
    assert (k.waves_per_eu, k.iglp, k.kv_cache_policy, k.q_direct, k.global_load_lds_k,
            k.q_major_grid, k.cfv_store, k.graph_2d, k.graph_3d) == \
        (3, True, "normal", True, True, True, True, False, False)


@pytest.mark.parametrize("var, value, words", [
    ("FLASH_WIDE", "8", "must be one of 0, 2, 4"),
    ("FLASH_WIDE", "wide", "must be one of 0, 2, 4"),
    ("NUM_WARPS", "3", "must be one of 1, 2, 4, 8"),
    ("WAVES_PER_EU", "9", "must be one of 1, 2"),
    ("IGLP", "maybe", "must be 0 or 1"),
    ("KV_CACHE_POLICY", "random", "must be one of stream, normal"),
    ("Q_MAJOR_GRID", "2", "must be 0 or 1"),
    ("3D_GRAPH", "yes please", "must be 0 or 1"),
])
def test_bad_values_name_the_variable(var, value, words):
    with pytest.raises(ValueError, match=f"HIPDNN_GFX942_{var}: {words}"):
        kn.read_knobs({f"HIPDNN_GFX942_{var}": value})


def test_unknown_lever_is_an_error():
    with pytest.raises(ValueError, match="HIPDNN_GFX942_FLASH_WIDTH: not a gfx942 attention lever"):
        kn.read_knobs({"HIPDNN_GFX942_FLASH_WIDTH": "4"})


@pytest.mark.parametrize("var, value, instead", [
    ("CFV", "1", "HIPDNN_GFX942_CFV_STORE=1"),
    ("K_SLICED_RING", "1", "use_k_single_buffer"),
    ("K_LDSSEQ", "1", "HIPDNN_GFX942_GLOBAL_LOAD_LDS_K=1"),
    ("CFV_STORE_SPLIT", "0", "HIPDNN_GFX942_CFV_STORE=0"),
    ("CFV_CK_VLDS", "0", "HIPDNN_GFX942_CFV_STORE=0"),
])
def test_ck_internal_levers_are_rejected_with_what_rocke_does(var, value, instead):
    with pytest.raises(ValueError, match=f"HIPDNN_GFX942_{var}={value} is not supported") as e:
        kn.read_knobs({f"HIPDNN_GFX942_{var}": value})
    assert instead in str(e.value)


def test_ck_internal_levers_at_rockes_behaviour_are_accepted():
    env = {"HIPDNN_GFX942_CFV": "0", "HIPDNN_GFX942_K_SLICED_RING": "0", "HIPDNN_GFX942_K_LDSSEQ": "0",
           "HIPDNN_GFX942_CFV_STORE_SPLIT": "1", "HIPDNN_GFX942_CFV_CK_VLDS": "1"}
    assert kn.read_knobs(env).is_default()


@dataclass(frozen=True)
class _Spec:
    dtype: str = "f16"
    waves_per_eu: int = 0
    iglp: bool = False
    kv_cache_policy: str = "normal"
    q_direct: bool = False
    global_load_lds_k: bool = False
    q_major_grid: bool = False
    cfv_store: bool = False


def test_spec_overrides_map_every_lever():
    # unset levers: no occupancy hint, the kernel's own cache policy (shipped variants' default)
    assert kn.spec_overrides(kn.read_knobs({}), _Spec) == {
        "waves_per_eu": 0, "iglp": False, "q_direct": False,
        "global_load_lds_k": False, "q_major_grid": False, "cfv_store": False}
    assert kn.spec_overrides(kn.read_knobs({"HIPDNN_GFX942_KV_CACHE_POLICY": "stream"}),
                             _Spec)["kv_cache_policy"] == "stream"
    k = kn.read_knobs({"HIPDNN_GFX942_IGLP": "1", "HIPDNN_GFX942_WAVES_PER_EU": "2",
                       "HIPDNN_GFX942_CFV_STORE": "1", "HIPDNN_GFX942_KV_CACHE_POLICY": "normal",
                       "HIPDNN_GFX942_Q_DIRECT": "1", "HIPDNN_GFX942_GLOBAL_LOAD_LDS_K": "1",
                       "HIPDNN_GFX942_Q_MAJOR_GRID": "1"})
    assert kn.spec_overrides(k, _Spec) == {
        "waves_per_eu": 2, "iglp": True, "kv_cache_policy": "normal", "q_direct": True,
        "global_load_lds_k": True, "q_major_grid": True, "cfv_store": True}
    _Spec(**kn.spec_overrides(k, _Spec))        # every override is a real field


def test_a_lever_the_kernel_lacks_is_an_error_not_dropped():
    @dataclass(frozen=True)
    class Bare:
        dtype: str = "f16"
    with pytest.raises(ValueError, match="HIPDNN_GFX942_Q_DIRECT: Bare has no field 'q_direct'"):
        kn.spec_overrides(kn.read_knobs({"HIPDNN_GFX942_Q_DIRECT": "1"}), Bare)


def test_describe_lists_every_lever_with_value_and_origin():
    text = kn.describe(environ={"HIPDNN_GFX942_FLASH_WIDE": "0"})
    for lever in kn.LEVERS:
        assert f"HIPDNN_GFX942_{lever}=" in text
    assert "HIPDNN_GFX942_FLASH_WIDE=0 (L4, num_warps 1) [set]" in text
    assert "HIPDNN_GFX942_IGLP=0 [default]" in text


def test_current_knobs_sees_a_lever_set_while_another_variable_goes(monkeypatch):
    """The per-call cache must not key on the environment's size alone: setting a lever and
    unsetting another variable in the same step keeps the count and once went unseen."""
    from rocke.kernels.common import knobs as knobs_mod
    monkeypatch.delenv("HIPDNN_GFX942_FLASH_WIDE", raising=False)
    monkeypatch.setenv("ROCKE_TEST_UNRELATED", "1")
    before = knobs_mod.current_knobs()
    monkeypatch.setenv("HIPDNN_GFX942_FLASH_WIDE", "2")
    monkeypatch.delenv("ROCKE_TEST_UNRELATED")
    after = knobs_mod.current_knobs()
    assert after.flash_wide == 2 and after != before
