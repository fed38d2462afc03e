"""The attention metadata guard on the GPU path, beneath the stand-in libamdhip64 (its launches
run on the emulator): lying ``cu_seqlens_q`` / ``seqused_k`` / ``block_table`` contents are
found on the device -- nothing is read on the host during the call -- and reported by
``rocke.runtime.check_errors()``, the device's ``synchronize()``, a graph replay's
synchronisation, or right after the call with ``ROCKE_CHECK_METADATA=sync``."""
from __future__ import annotations

import re

import pytest
import torch

from rocke import runtime
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common import metadata_guard
from rocke.runtime import DeviceCheckError, hip_device
from rocke.kernels.common.attention_calls import CAPTURE_AFTER
from tests.runtime.test_attention_gpu_path import (_on_gpu, _problem, _register,  # noqa: F401
                                                   rocm_torch)

FOUND = " (found on the device by a check kernel)"


@pytest.fixture(autouse=True)
def guard_on(monkeypatch):
    """The guard is opt-in (ROCKE_CHECK_METADATA=device); these tests are about it."""
    monkeypatch.setenv("ROCKE_CHECK_METADATA", "device")


def _lies(a):
    """(what is changed, the exact error) per kind of lie, on _problem([1, 3], [40, 23])'s
    metadata: 2 sequences, q rows 4, block size 16, table 2 x 4 columns."""
    num_blocks = a["k"].shape[0]
    width = a["block_table"].shape[1]
    return {
        "cu_start": (("cu_seqlens_q", 0, 1), "cu_seqlens_q: must start at 0, got 1"),
        "cu_not_monotone": (("cu_seqlens_q", 1, 5),
                            "cu_seqlens_q: not monotone: entry 2 (4) is below entry 1 (5)"),
        "cu_end": (("cu_seqlens_q", 2, 3), "cu_seqlens_q: must end at total_q = 4 (q's rows), got 3"),
        "kv_negative": (("seqused_k", 1, -2), f"seqused_k: sequence 1 has -2 KV tokens, outside "
                                              f"[0, {width * 16}] (its block table row's capacity)"),
        "kv_past_table": (("seqused_k", 0, width * 16 + 1),
                          f"seqused_k: sequence 0 has {width * 16 + 1} KV tokens, outside "
                          f"[0, {width * 16}] (its block table row's capacity)"),
        "q_after_kv": (("seqused_k", 1, 2), "seqused_k: attention needs query_len <= "
                                            "kv_len, but sequence 1 has query_len 3 > kv_len 2"),
        "page_negative": (("block_table", (1, 1), -7), "block_table: sequence 1 uses block index -7 "
                                                        f"at column 1, outside the cache's [0, "
                                                        f"{num_blocks}) pages"),
        "page_past_cache": (("block_table", (0, 2), num_blocks),
                            f"block_table: sequence 0 uses block index {num_blocks} at column 2, "
                            f"outside the cache's [0, {num_blocks}) pages"),
    }


LIES = list(_lies(_problem([1, 3], [40, 23])))


def _lie(standin, a, lie):
    g = _on_gpu(standin, a)
    (name, index, value), expected = _lies(a)[lie]
    torch.Tensor.as_subclass(g[name], torch.Tensor)[index] = value
    return g, expected


@pytest.mark.parametrize("lie", LIES)
def test_lying_metadata_is_reported_by_check_errors_naming_it(rocm_torch, lie):
    a = _problem([1, 3], [40, 23])
    _register(rocm_torch, a, "2d")
    g, expected = _lie(rocm_torch, a, lie)
    au.run_unified_attention_torch(**g, backend="2d")     # metadata tensors refuse host reads
    with pytest.raises(DeviceCheckError, match="^" + re.escape(expected + FOUND) + "$"):
        runtime.check_errors()
    runtime.check_errors()                                 # read and reset: reported once


def test_the_first_violation_wins_until_the_host_looks(rocm_torch):
    a = _problem([1, 3], [40, 23])
    _register(rocm_torch, a, "2d")
    g, first = _lie(rocm_torch, a, "page_negative")
    au.run_unified_attention_torch(**g, backend="2d")
    h, _ = _lie(rocm_torch, a, "cu_start")
    au.run_unified_attention_torch(**h, backend="2d")      # a later call's violation is kept out
    with pytest.raises(DeviceCheckError, match=re.escape(first)):
        runtime.get_device("hip").synchronize()           # rocke's own synchronisation point
    runtime.check_errors()


def test_check_metadata_sync_raises_right_after_the_call(rocm_torch, monkeypatch):
    monkeypatch.setenv("ROCKE_CHECK_METADATA", "sync")
    a = _problem([1, 3], [40, 23])
    _register(rocm_torch, a, "2d")
    g, expected = _lie(rocm_torch, a, "kv_negative")
    with pytest.raises(DeviceCheckError, match=re.escape(expected)):
        au.run_unified_attention_torch(**g, backend="2d")
    with pytest.raises(DeviceCheckError, match=re.escape(expected)):
        au.run_unified_attention_torch(**g, backend="2d")   # the cached call checks too
    au.run_unified_attention_torch(**_on_gpu(rocm_torch, a), backend="2d")   # honest: no error


def test_check_metadata_off_launches_no_guard(rocm_torch, monkeypatch):
    monkeypatch.setenv("ROCKE_CHECK_METADATA", "off")
    a = _problem([1, 3], [40, 23])
    _register(rocm_torch, a, "2d")
    g, _ = _lie(rocm_torch, a, "page_past_cache")
    before = len(rocm_torch.executed)
    record = au.run_unified_attention_torch(**g, backend="2d")
    assert len(rocm_torch.executed) - before == len(record.plan.specs)
    runtime.check_errors()            # nothing checked, nothing recorded (and nothing faulted)
    monkeypatch.setenv("ROCKE_CHECK_METADATA", "everything")
    with pytest.raises(ValueError, match="ROCKE_CHECK_METADATA must be one of device, sync, off, "
                                         "got 'everything'"):
        au.run_unified_attention_torch(**g, backend="2d")


def test_a_captured_guard_checks_the_metadata_of_each_replay(rocm_torch, monkeypatch):
    """The guard is one more launch of the captured graph: each replay checks the metadata as
    it is then; the replay's synchronisation reports a violation."""
    from rocke.vllm import unified_attention
    from tests.runtime.test_attention_gpu_path import _vllm_decode_args
    monkeypatch.setattr(hip_device, "torch_rocm", lambda: False)   # HIP stream capture
    a, g, extra = _vllm_decode_args(rocm_torch)
    graph = runtime.Graph(device="hip")
    with graph.capture():
        unified_attention(**g, **extra)
    graph.replay(synchronize=True)                      # honest: nothing to report
    table = torch.Tensor.as_subclass(g["block_table"], torch.Tensor)
    table[1, 0] = -1
    with pytest.raises(DeviceCheckError, match=re.escape(
            "block_table: sequence 1 uses block index -1 at column 0, outside the cache's [0, "
            f"{a['k'].shape[0]}) pages" + FOUND)):
        graph.replay(synchronize=True)
    graph.close()


def test_check_errors_refuses_inside_a_capture(rocm_torch, monkeypatch):
    monkeypatch.setattr(hip_device, "torch_rocm", lambda: False)
    device = runtime.get_device("hip")
    graph = runtime.Graph(device=device)
    with pytest.raises(ValueError, match="check_errors\\(\\) reads the device: call it outside a "
                                         "graph capture"):
        with graph.capture():
            runtime.check_errors(device)


@pytest.mark.parametrize("lie", LIES)
def test_the_guard_kernel_on_the_emulator(lie, monkeypatch):
    """The kernel by itself on the emulator with host tensors and the emulator's record."""
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    a = _problem([1, 3], [40, 23])
    (name, index, value), expected = _lies(a)[lie]
    a[name][index] = value
    device = runtime.get_device("emu")
    grid, block = metadata_guard.launch_geometry(metadata_guard.SPEC, 2)
    runtime.launch(au.compiled(metadata_guard.SPEC), grid, block, metadata_guard.kernel_args(
        a["cu_seqlens_q"], a["seqused_k"], a["block_table"], device.error_record(), total_q=4,
        num_blocks=a["k"].shape[0], block_size=16, causal=True, max_seqlen_q=3, max_seqlen_k=1000),
        device=device)
    with pytest.raises(DeviceCheckError, match="^" + re.escape(expected + FOUND) + "$"):
        runtime.check_errors("emu")
    assert device.error_record().tolist() == [0] * 8


def test_the_max_seqlen_arguments_are_checked_on_the_device(rocm_torch):
    a = _problem([1, 3], [40, 23])
    _register(rocm_torch, a, "2d")
    g = _on_gpu(rocm_torch, a)
    au.run_unified_attention_torch(**dict(g, max_seqlen_k=39), backend="2d")
    with pytest.raises(DeviceCheckError, match=re.escape(
            "max_seqlen_k: 39 is below sequence 0's KV length 40" + FOUND)):
        runtime.check_errors()


def test_the_entry_points_own_graph_replays_the_guard(rocm_torch, monkeypatch):
    """With graph replay recommended, the entry point captures guard + kernels once and each
    later call replays them: a lie written between calls is found by the replayed guard."""
    from rocke.vllm import unified_attention
    from tests.runtime.test_attention_gpu_path import _vllm_decode_args
    monkeypatch.setattr(hip_device, "torch_rocm", lambda: False)   # HIP stream capture
    monkeypatch.delenv("HIPDNN_GFX942_3D_GRAPH")
    a, g, extra = _vllm_decode_args(rocm_torch)
    for _ in range(CAPTURE_AFTER):                      # eager, eager, then captured
        unified_attention(**g, **extra)
    assert len(au.GRAPHS) == 1
    ran = len(rocm_torch.executed)
    unified_attention(**g, **extra)                     # replays
    assert len(rocm_torch.executed) == ran + 3
    runtime.check_errors()
    # the last sequence 2 pages past its row: the kernels' table reads stay inside the table
    capacity = a["block_table"].shape[1] * 16
    torch.Tensor.as_subclass(g["seqused_k"], torch.Tensor)[1] = capacity + 32
    unified_attention(**g, **extra)
    with pytest.raises(DeviceCheckError, match=re.escape(
            f"seqused_k: sequence 1 has {capacity + 32} KV tokens, outside [0, {capacity}] (its "
            "block table row's capacity)" + FOUND)):
        runtime.check_errors()
