"""The attention entry point's call cache (its hit path: no validation, planning or packing):
every change a full validation would treat differently misses it -- another shape, stride, dtype
or device at the same address, storage moved, a lever or a number changed, metadata contents
changed on the emulator -- and the result follows the change (or the change is refused, where
the full validation refuses it). A miss is seen as a call of ``describe_problem`` (run on a miss
only)."""
from __future__ import annotations

import math
import os

import pytest
import torch

from rocke import env
from rocke.kernels.common import attention_unified as au
from rocke.kernels.common.attention_reference import ref_paged_attn
from rocke.kernels.common.tolerances import attention_atol
from rocke.runtime import Graph, GraphError
from tests.kernels.test_attention_2d import make_problem

D, BLOCK, GROUP, HK = 64, 16, 2, 1
Q_LENS, KV_LENS = [1, 3], [40, 23]


@pytest.fixture(autouse=True, params=["native", "python"])
def key_reader(request):
    """Every test runs with the native tensor key (rocke/runtime/tensor_key.cpp, built by the
    set-up) and with torch's Python getters (ROCKE_NATIVE_KEY=off): the same decisions."""
    from rocke.kernels.common import attention_calls
    from rocke.runtime import tensor_key
    saved = os.environ.get("ROCKE_NATIVE_KEY")
    os.environ["ROCKE_NATIVE_KEY"] = "auto" if request.param == "native" else "off"
    try:
        loaded = tensor_key.native(reload=True)
        attention_calls.forget_calls()
        assert (loaded is not None) == (request.param == "native"), (
            "the native tensor key is not built: run `python -m rocke.runtime.tensor_key "
            "--build` (the set-up does)")
        yield request.param
    finally:
        if saved is None:
            os.environ.pop("ROCKE_NATIVE_KEY", None)
        else:
            os.environ["ROCKE_NATIVE_KEY"] = saved
        tensor_key.native(reload=True)
        attention_calls.forget_calls()


@pytest.fixture
def misses(monkeypatch):
    """The number of calls that missed the cache so far (a list: one item per miss)."""
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    seen = []
    real = au.describe_problem

    def describe(*args, **kwargs):
        seen.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(au, "describe_problem", describe)
    return seen


def _problem(seed=0, dtype="f16"):
    q, k, v, table, cu, seqused = make_problem(dtype, D, BLOCK, GROUP, Q_LENS, KV_LENS,
                                               num_kv_heads=HK, seed=seed)
    return dict(q=q, k=k, v=v, out=torch.zeros_like(q), cu_seqlens_q=cu,
                max_seqlen_q=max(Q_LENS), seqused_k=seqused, max_seqlen_k=max(KV_LENS),
                softmax_scale=1 / math.sqrt(D), causal=True, window_size=(-1, -1),
                block_table=table, softcap=0.0, q_descale=None, k_descale=None, v_descale=None)


def _run(a, **kw):
    a["out"].fill_(7.0)                     # a call that ran nothing leaves this behind
    return au.run_unified_attention_torch(**a, **kw)


def _check(a, dtype="f16"):
    want = ref_paged_attn(a["q"], a["k"], a["v"], a["cu_seqlens_q"], a["seqused_k"],
                          a["block_table"], float(a["softmax_scale"]), causal=True)
    err = (a["out"].float() - want).abs().max().item()
    assert err <= attention_atol(dtype), f"max abs error {err}"


def _hit_twice(a, misses, **kw):
    """Call twice: a miss, then a hit (the state every mutation below starts from)."""
    _run(a, **kw)
    before = len(misses)
    record = _run(a, **kw)
    assert len(misses) == before, "the repeated call should hit the cache"
    _check(a)
    return record


def test_a_repeated_call_hits_and_follows_new_contents(misses):
    """On the emulator a hit re-packs its launches from the call's own tensors (the entry holds
    none) and never replays a graph: graph replay saves a GPU's launch overhead only."""
    a = _problem()
    record = _hit_twice(a, misses)
    assert record.plan.graph_replay and not record.replayed
    g = torch.Generator().manual_seed(3)
    a["q"].copy_(torch.rand(a["q"].shape, generator=g) - 0.5)
    a["seqused_k"][0] = 17                   # valid new lengths: the content check runs again
    a["max_seqlen_k"] = 40
    record = _run(a)
    assert not record.replayed and len(misses) == 1
    _check(a)


def test_a_shape_change_at_the_same_address_misses(misses):
    a = _problem()
    pages = a["k"].shape[0]
    spare = torch.zeros(2, *a["k"].shape[1:], dtype=a["k"].dtype)
    big_k, big_v = torch.cat([a["k"], spare]), torch.cat([a["v"], spare])
    a["k"], a["v"] = big_k, big_v
    _hit_twice(a, misses)
    a["k"], a["v"] = big_k[:pages], big_v[:pages]           # same addresses, fewer pages
    _run(a)
    assert len(misses) == 2
    _check(a)
    last = int(a["block_table"][a["block_table"] < 2 ** 30].max())
    a["k"], a["v"] = big_k[:last], big_v[:last]             # a used page now outside the cache
    with pytest.raises(ValueError, match="block_table: sequence .* outside the cache"):
        _run(a)


def test_a_stride_change_at_the_same_address_misses_and_the_result_follows(misses):
    a = _problem()
    q = a["q"]
    wide = torch.zeros(q.shape[0], q.shape[1], 2 * D, dtype=q.dtype)
    a["q"] = wide.view(-1)[:q.numel()].view(q.shape)       # contiguous, at wide's address
    a["q"].copy_(q)
    _hit_twice(a, misses)
    a["q"] = wide[..., :D]                                  # same address, padded rows
    a["q"].copy_(q.flip(0))
    assert a["q"].data_ptr() == wide.data_ptr()
    _run(a)
    assert len(misses) == 2
    _check(a)


def test_a_dtype_change_at_the_same_address_misses_and_the_result_follows(misses):
    a = _problem()
    _hit_twice(a, misses)
    fresh = _problem(seed=9, dtype="bf16")
    for name in ("q", "k", "v", "out"):
        view = a[name].view(torch.bfloat16)                 # same address, shape and strides
        view.copy_(fresh[name])
        a[name] = view
    _run(a)
    assert len(misses) == 2 and a["out"].dtype == torch.bfloat16
    _check(a, "bf16")


def test_moved_storage_misses_and_the_result_follows(misses):
    a = _problem()
    _hit_twice(a, misses)
    a["q"].set_((torch.rand(a["q"].shape) - 0.5).to(a["q"].dtype).untyped_storage(), 0,
                a["q"].shape)                               # the same object, elsewhere
    _run(a)
    assert len(misses) == 2
    _check(a)
    a["k"].data = a["k"].clone()                            # .data: no version bump
    _run(a)
    assert len(misses) == 3
    _check(a)


def test_a_data_swap_to_another_view_of_the_same_memory_misses(misses):
    """``.data = `` gives the same object another shape at the same address without bumping its
    version counter: the key reads shapes, so it still misses."""
    a = _problem()
    _hit_twice(a, misses)
    used = int(a["block_table"][a["block_table"] < 2 ** 30].max()) + 1
    version = a["k"]._version
    a["k"].data = a["k"].data[:used - 1]
    assert a["k"]._version == version
    with pytest.raises(ValueError, match="differs from k's"):   # k, v shapes disagree
        _run(a)


@pytest.mark.parametrize("lever, value", [("HIPDNN_GFX942_NUM_WARPS", "2"),
                                          ("ROCKE_BATCH_INVARIANT", "1"),
                                          ("HIPDNN_GFX942_2D_GRAPH", "0")])
def test_a_lever_change_misses(misses, monkeypatch, lever, value):
    a = _problem()
    first = _hit_twice(a, misses)
    monkeypatch.setenv(lever, value)
    record = _run(a)
    assert len(misses) == 2
    _check(a)
    if lever == "HIPDNN_GFX942_2D_GRAPH":
        assert first.plan.graph_replay and not record.plan.graph_replay


def test_an_unknown_lever_appearing_after_a_hit_is_refused(misses, monkeypatch):
    a = _problem()
    _hit_twice(a, misses)
    monkeypatch.setenv("HIPDNN_GFX942_NO_SUCH_LEVER", "1")
    with pytest.raises(ValueError, match="HIPDNN_GFX942_NO_SUCH_LEVER: not a gfx942 attention"):
        _run(a)
    monkeypatch.setenv("HIPDNN_GFX942_NUM_WARPS", "3")      # a bad value of a known lever
    monkeypatch.delenv("HIPDNN_GFX942_NO_SUCH_LEVER")
    with pytest.raises(ValueError, match="HIPDNN_GFX942_NUM_WARPS"):
        _run(a)


@pytest.mark.parametrize("name, value, error", [
    ("window_size", (-1.0, -1), "window_size: must be a pair of ints"),   # == (-1, -1)
    ("max_seqlen_k", 39, "max_seqlen_k: 39 is below the batch's longest length 40"),
    ("max_seqlen_k", 40.0, "max_seqlen_k"),                               # == 40
    ("causal", 1, "causal"),                                              # == True
])
def test_a_number_the_validation_refuses_is_refused_after_a_hit(misses, name, value, error):
    a = _problem()
    _hit_twice(a, misses)
    a[name] = value
    with pytest.raises((ValueError, TypeError), match=error):
        _run(a)


def test_a_keyword_number_of_another_type_is_refused_after_a_hit(misses):
    """``batch_invariant=0`` equals the cached ``False`` but is not a bool: validated, refused."""
    a = _problem()
    _hit_twice(a, misses, batch_invariant=False)
    with pytest.raises(ValueError, match="batch_invariant: must be None or a bool, got 0"):
        _run(a, batch_invariant=0)


def test_a_new_softmax_scale_is_followed(misses):
    a = _problem()
    _hit_twice(a, misses)
    a["softmax_scale"] = 0.5
    _run(a)
    assert len(misses) == 2
    _check(a)


def test_a_tensor_as_a_number_is_refused_after_a_hit(misses):
    """A 0-d tensor equal to the cached float scale is not the same key (the key holds types)."""
    a = _problem()
    _hit_twice(a, misses)
    a["softmax_scale"] = torch.tensor(a["softmax_scale"])
    with pytest.raises(ValueError, match="softmax_scale: must be a finite positive float"):
        _run(a)


def test_a_number_of_another_immutable_type_is_validated_and_not_cached(misses):
    import numpy as np
    a = _problem()
    a["softmax_scale"] = np.float64(0.5)                    # a float subclass: accepted
    _run(a)
    _run(a)
    assert len(misses) == 2
    _check(a)


def test_changed_metadata_contents_are_checked_on_a_hit(misses):
    a = _problem()
    _hit_twice(a, misses)
    a["block_table"][0, 0] = 10 ** 6
    with pytest.raises(ValueError, match=r"block_table: sequence 0 uses block index 1000000"):
        _run(a)
    a["block_table"][0, 0] = a["block_table"][0, 1]          # valid again: runs, and follows
    _run(a)
    _check(a)
    a["cu_seqlens_q"][1] = 5                                 # not monotone
    with pytest.raises(ValueError, match="cu_seqlens_q: not monotone"):
        _run(a)
    a["cu_seqlens_q"][1] = 1
    a["seqused_k"][1] = 2                                    # causal: query longer than its keys
    with pytest.raises(ValueError, match="seqused_k: attention needs query_len <= kv_len"):
        _run(a)
    assert len(misses) == 1


def test_new_lengths_over_an_unchanged_table_are_checked(misses):
    """A decode step's new lengths over a block table wholly inside the cache (its scan is
    skipped while its bytes are unchanged) are still checked and followed."""
    a = _problem()
    table = a["block_table"]
    table[table >= 2 ** 30] = 0                              # every entry inside the cache
    _hit_twice(a, misses)
    a["seqused_k"][0] = 33
    _run(a)
    _check(a)
    a["seqused_k"][1] = 2                                    # causal: query longer than its keys
    with pytest.raises(ValueError, match="seqused_k: attention needs query_len <= kv_len"):
        _run(a)
    a["seqused_k"][1] = 23
    a["seqused_k"][0] = 10 ** 4                              # beyond its row's pages
    with pytest.raises(ValueError, match="seqused_k: sequence 0 has 10000 KV tokens, beyond"):
        _run(a)
    a["seqused_k"][0] = 40
    table[1, -1] = table.shape[0] * 100                      # an unused entry outside the cache
    _run(a)                                                  # allowed (not used): runs, follows
    _check(a)
    assert len(misses) == 1


def test_contents_written_behind_torch_s_back_are_checked(misses):
    """The content check compares bytes, not version counters: a write through a numpy view
    (no version bump) is seen."""
    a = _problem()
    _hit_twice(a, misses)
    version = a["block_table"]._version
    a["block_table"].numpy()[1, 0] = -7
    assert a["block_table"]._version == version
    with pytest.raises(ValueError, match="block_table: sequence 1 uses block index -7"):
        _run(a)


def test_the_device_at_the_same_address_is_part_of_the_key(misses):
    """A tensor that says it lives elsewhere (another device) at the same address misses."""
    class Elsewhere(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl

        @property
        def device(self):
            return torch.device("meta")
    a = _problem()
    _hit_twice(a, misses)
    a["out"] = a["out"].as_subclass(Elsewhere)
    with pytest.raises(ValueError, match="out"):
        _run(a)


def test_a_tensor_class_overriding_data_ptr_is_never_cached(misses):
    class Shifted(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl

        def data_ptr(self):
            return torch.Tensor.data_ptr(self)
    a = _problem()
    a["q"] = a["q"].as_subclass(Shifted)
    _run(a)
    _run(a)
    assert len(misses) == 2
    _check(a)


@pytest.mark.parametrize("path", ["2d", "3d"])
def test_vllms_adapter_hits_the_cache_and_follows_new_contents(misses, path):
    """rocke.vllm.unified_attention (vLLM's contract: kv_quant_mode NONE, passed on as "none")
    is cached like the entry point; on the 3D contract with the caller's workspaces too."""
    from rocke.vllm import unified_attention
    a = _problem()
    a["cu_seqlens_q"] = torch.arange(3, dtype=torch.int32)        # decode: one query each
    a["q"], a["out"], a["max_seqlen_q"] = a["q"][:2], a["out"][:2], 1
    extra = {} if path == "2d" else dict(
        seq_threshold_3D=4, num_par_softmax_segments=3,
        softmax_segm_output=torch.full((4, a["q"].shape[1], 3, D), math.nan),
        softmax_segm_max=torch.full((4, a["q"].shape[1], 3), math.nan),
        softmax_segm_expsum=torch.full((4, a["q"].shape[1], 3), math.nan))
    for _ in range(2):
        a["out"].fill_(7.0)
        unified_attention(**a, **extra)
    assert len(misses) == 1, "the repeated vLLM call should hit the cache"
    _check(a)
    a["seqused_k"][0] = 17                                        # new contents are followed
    a["out"].fill_(7.0)
    unified_attention(**a, **extra)
    assert len(misses) == 1
    _check(a)


def _vllm_decode(segments=3, rows=4):
    a = _problem()
    a["cu_seqlens_q"] = torch.arange(3, dtype=torch.int32)        # decode: one query each
    a["q"], a["out"], a["max_seqlen_q"] = a["q"][:2], a["out"][:2], 1
    h = a["q"].shape[1]
    return a, dict(seq_threshold_3D=4, num_par_softmax_segments=segments,
                   softmax_segm_output=torch.full((rows, h, segments, D), math.nan),
                   softmax_segm_max=torch.full((rows, h, segments), math.nan),
                   softmax_segm_expsum=torch.full((rows, h, segments), math.nan))


@pytest.fixture
def adapter_work(monkeypatch):
    """What rocke.vllm's adapter does per call: its checks and its 2D/3D rule (each call of
    one recorded by name), and the entry-point calls it makes (their backend=)."""
    from rocke import vllm
    done = []
    for name in ("_check_feature_parameters", "_refuse_unimplemented", "_check_3d_numbers",
                 "uses_3d", "batch_invariant"):
        real = getattr(vllm, name)
        monkeypatch.setattr(vllm, name, lambda *a, _real=real, _name=name, **k:
                            done.append(_name) or _real(*a, **k))
    entry = au.run_unified_attention_torch

    def entry_point(*args, backend="auto", **kwargs):
        done.append(f"entry point {backend}")
        return entry(*args, backend=backend, **kwargs)
    monkeypatch.setattr(au, "run_unified_attention_torch", entry_point)
    return done


@pytest.mark.parametrize("path", ["2d", "3d"])
def test_vllms_adapter_hit_runs_none_of_its_checks_again(misses, adapter_work, path):
    """A repeated call through rocke.vllm is looked up by the adapter's own key before any of
    its checks or its 2D/3D rule: a hit calls neither them nor the entry point."""
    from rocke.vllm import unified_attention
    a, extra = _vllm_decode()
    if path == "2d":
        extra = {}
    a["out"].fill_(7.0)
    unified_attention(**a, **extra)
    assert f"entry point {path}" in adapter_work and "uses_3d" in adapter_work
    adapter_work.clear()
    a["out"].fill_(7.0)
    unified_attention(**a, **extra)
    assert adapter_work == [] and len(misses) == 1
    _check(a)


@pytest.mark.parametrize("change, path", [
    (dict(seq_threshold_3D=1), "2d"),           # 2 q blocks over a threshold of 1
    (dict(num_par_softmax_segments=2), None),   # workspaces made for 3 segments: refused
    ("VLLM_BATCH_INVARIANT", "2d"),             # vLLM's batch-invariant mode: never 3D
])
def test_what_the_adapter_decides_by_misses_its_key(misses, adapter_work, monkeypatch, change,
                                                     path):
    """Each input of the adapter's 2D/3D rule is in its key: a call that differs in one misses,
    is decided again and runs the path vLLM's rule gives, correctly."""
    from rocke.vllm import unified_attention
    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    a, extra = _vllm_decode()
    for _ in range(2):
        unified_attention(**a, **extra)
    adapter_work.clear()
    if change == "VLLM_BATCH_INVARIANT":
        monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    else:
        extra.update(change)
    a["out"].fill_(7.0)
    if path is None:
        with pytest.raises(ValueError, match="softmax_segm_output: shape must be"):
            unified_attention(**a, **extra)
        assert len(misses) == 2
        return
    unified_attention(**a, **extra)
    assert f"entry point {path}" in adapter_work and len(misses) == 2
    _check(a)


def test_vllms_own_none_member_hits_once_seen(misses, adapter_work):
    """vLLM passes its own KVQuantMode.NONE, not rocke's: the adapter's key accepts it once it
    has read it as NONE."""
    import enum
    from rocke.vllm import unified_attention

    class ForeignMode(enum.IntEnum):        # another KVQuantMode class, as vLLM's is
        NONE = 0
        FP8_PER_TENSOR = 1
    a, extra = _vllm_decode()
    for _ in range(2):
        unified_attention(**a, **extra, kv_quant_mode=ForeignMode.NONE)
    assert len(misses) == 1
    with pytest.raises(ValueError, match="FP8_PER_TENSOR needs fp8 caches"):
        unified_attention(**a, **extra, kv_quant_mode=ForeignMode.FP8_PER_TENSOR)


def _decode_with_workspaces(segments=3):
    a = _problem()
    a["cu_seqlens_q"] = torch.arange(3, dtype=torch.int32)        # decode: one query each
    a["q"], a["out"], a["max_seqlen_q"] = a["q"][:2], a["out"][:2], 1
    h = a["q"].shape[1]
    workspaces = (torch.full((4, h, segments, D), math.nan), torch.full((4, h, segments), math.nan),
                  torch.full((4, h, segments), math.nan))
    return a, dict(backend="3d", segm_workspaces=workspaces, num_segments=segments)


def _column_major(shape) -> tuple:
    strides, step = [], 1
    for n in shape:
        strides.append(step)
        step *= n
    return tuple(strides)


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_caller_workspace_s_metadata_change_at_the_same_address_misses(misses, which):
    """The caller's 3D workspaces are keyed like the call's tensors: the same address with
    another dtype, shape or strides misses (and is validated: refused, or run correctly)."""
    a, kw = _decode_with_workspaces()
    _hit_twice(a, misses, **kw)
    ws = list(kw["segm_workspaces"])
    base = ws[which]
    for changed in (base.view(torch.int32),                               # dtype
                    base[:2],                                             # shape
                    base.as_strided(base.shape, _column_major(base.shape))):     # strides
        assert changed.data_ptr() == base.data_ptr()
        ws[which] = changed
        before = len(misses)
        try:
            _run(a, **dict(kw, segm_workspaces=tuple(ws)))
        except ValueError:
            pass
        assert len(misses) == before + 1, f"{changed.dtype} {tuple(changed.shape)} hit the cache"
    ws[which] = base
    _run(a, **dict(kw, segm_workspaces=tuple(ws)))
    _check(a)


def test_one_tensor_as_the_workspaces_is_named(misses):
    a, kw = _decode_with_workspaces()
    kw["segm_workspaces"] = kw["segm_workspaces"][0]
    with pytest.raises(ValueError, match="segm_workspaces: must be"):
        _run(a, **kw)


def test_a_workspace_class_overriding_data_ptr_is_never_cached(misses):
    class Shifted(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl

        def data_ptr(self):
            return torch.Tensor.data_ptr(self)
    a, kw = _decode_with_workspaces()
    kw["segm_workspaces"] = (kw["segm_workspaces"][0].as_subclass(Shifted),
                             *kw["segm_workspaces"][1:])
    _run(a, **kw)
    _run(a, **kw)
    assert len(misses) == 2
    _check(a)


# ---- the pieces ----------------------------------------------------------------------------

def test_state_reader_follows_set_edit_and_unset(monkeypatch):
    monkeypatch.delenv("ROCKE_BATCH_INVARIANT", raising=False)
    monkeypatch.delenv("ROCKE_CHECK_METADATA", raising=False)
    read = env.state_reader(("ROCKE_BATCH_INVARIANT", "ROCKE_CHECK_METADATA"))
    unset = read()
    assert unset == (len(os.environ),)
    monkeypatch.setenv("ROCKE_BATCH_INVARIANT", "1")
    one = read()
    assert one[0] == unset[0] + 1 and one[1:] in ((b"1", None), ("1", None))
    monkeypatch.setenv("ROCKE_BATCH_INVARIANT", "0")
    zero = read()
    monkeypatch.setenv("ROCKE_CHECK_METADATA", "0")
    both = read()
    monkeypatch.delenv("ROCKE_BATCH_INVARIANT")
    other = read()                  # the same count as `one`, the other variable set
    assert len({unset, one, zero, both, other}) == 5 and other[0] == one[0]
    monkeypatch.setenv("SOME_OTHER_VARIABLE_FOR_THE_COUNT", "x")
    assert read()[0] == other[0] + 1
    monkeypatch.delenv("ROCKE_CHECK_METADATA")
    assert read() == (unset[0] + 1,)        # none named set again: the count alone


def test_env_get_reads_what_os_environ_get_reads(monkeypatch):
    name = "ROCKE_TEST_ENV_GET"
    monkeypatch.delenv(name, raising=False)
    assert env.get(name) is None
    for value in ("1", "", "0", "ümlaut \udcff"):          # set, edited, a surrogate-escaped byte
        monkeypatch.setenv(name, value)
        assert env.get(name) == os.environ.get(name) == value
    monkeypatch.delenv(name)
    assert env.get(name) is None
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "2")
    assert env.vllm_batch_invariant() is True


def test_an_emulator_graph_checks_every_argument_of_every_launch(vector_add):
    """The replay's one-pass address check: an argument shared by two launches, or seen only in
    the second, moving is still refused, naming that launch."""
    from rocke import runtime
    _variant, ck = vector_add
    n = 512
    a, b, c, d = (torch.randn(n) for _ in range(4))
    g = Graph(device="emu")
    with g.capture():
        runtime.launch(ck, 2, 256, [a, b, c, n], device="emu")
        runtime.launch(ck, 2, 256, [c, b, d, n], device="emu")
    g.replay()
    torch.testing.assert_close(d, a + 2 * b, rtol=0, atol=1e-5)
    d.set_(torch.zeros(n).untyped_storage())
    with pytest.raises(GraphError, match="storage moved since the capture"):
        g.replay()


def test_no_cache_keeps_a_caller_tensor_alive():
    """vLLM's grid in one process grew by every case's caches: the call cache and the graph cache
    held the callers' tensors. Now a cached emulator call re-packs from each call's tensors and
    holds none: once the caller drops them, they are gone (the memory with them)."""
    import gc
    import weakref
    a = _problem()
    for _ in range(3):
        _run(a)                                   # a miss, then hits
    alive = [weakref.ref(a[name]) for name in ("q", "k", "v", "out", "block_table")]
    del a
    gc.collect()
    assert [r() is None for r in alive] == [True] * len(alive)


def test_a_hit_after_the_tensors_died_runs_on_the_new_ones_at_their_addresses(misses):
    """A new tensor at a dead one's address with the same layout is the same call for the
    kernels (the key's hit): it runs on the new tensor's contents, not the dead one's."""
    a = _problem()
    backing = torch.empty(a["q"].numel(), dtype=a["q"].dtype)
    backing.copy_(a["q"].reshape(-1))
    a["q"] = backing.view(a["q"].shape)
    _hit_twice(a, misses)
    shape = a["q"].shape
    del a["q"]                                          # the caller's q object dies
    g = torch.Generator().manual_seed(9)
    backing.copy_(torch.rand(backing.shape, generator=g).to(backing.dtype) - 0.5)
    a["q"] = backing.view(shape)                        # another object, the same address
    a["out"].fill_(7.0)
    record = _run(a)
    assert len(misses) == 1 and len(record.reports) == len(record.plan.specs)
    _check(a)


def test_the_least_recently_used_call_is_evicted_never_the_new_one(misses, monkeypatch):
    """With the cache full, a new call is admitted and the least recently used one goes (a new
    entry that evicted itself froze the cache on its first calls)."""
    from rocke.kernels.common import attention_calls
    attention_calls.forget_calls()
    monkeypatch.setattr(attention_calls, "CALL_CACHE_SIZE", 2)
    a, b, c = _problem(seed=1), _problem(seed=2), _problem(seed=3)
    for call in (a, b, a, c):          # a used again after b: b is the least recently used
        _run(call)
    assert len(misses) == 3
    _run(c)
    _run(a)
    assert len(misses) == 3, "the newest (c) and the recently used (a) must hit"
    _run(b)
    assert len(misses) == 4, "b was evicted"
    attention_calls.forget_calls()
