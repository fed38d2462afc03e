"""rocke's vLLM attention backend (rocke/vllm_backend.py, `--attention-backend ROCKE`).

Without vLLM: the `vllm.general_plugins` entry point is declared, vLLM is no dependency, rocke
never imports the backend module, and rocke/vllm_backend.py fits vLLM 0.33's backend interface
(tools/vllm_backend_contract.py against tests/fixtures/vllm_backend_contract_0.33.json, both
sides read with `ast`): every method rocke overrides exists in vLLM's classes with the same
kind and parameters, every attribute it sets is vLLM's, every abstract method is defined.

With vLLM 0.33's Triton backend importable (skipped otherwise, naming the failed import): the
entry point registers ROCKE in vLLM's registry, `--attention-backend ROCKE` parses, vLLM's ROCm
selector picks ROCKE when asked and refuses, with vLLM's own reasons, what rocke does not run;
the builder and implementation are rocke's, and the implementation's forward runs rocke's kernels
(on the emulator, CPU tensors) on vLLM's cache layout and metadata."""
from __future__ import annotations

import ast
import importlib.metadata
import itertools
import json
import math
import sys
import tomllib
import types
from pathlib import Path

import pytest
import torch

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = json.loads((ROOT / "tests" / "fixtures" / "vllm_backend_contract_0.33.json").read_text())
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
GROUP = "vllm.general_plugins"


def _tool():
    return load_script("tools/vllm_backend_contract.py")


# ---- without vLLM -----------------------------------------------------------------------------

def test_the_entry_point_is_declared_and_vllm_is_only_an_extra():
    assert PYPROJECT["project"]["entry-points"][GROUP] == {"rocke": "rocke.vllm_backend:register"}
    # vLLM is neither a dependency nor an extra (its numba pin cannot resolve with rocke's
    # llvmlite: scripts/test_vllm.sh installs it first, then rocke with numba 0.68.1)
    declared = PYPROJECT["project"]["dependencies"] + [
        d for extra in PYPROJECT["project"]["optional-dependencies"].values() for d in extra]
    assert not any(d.split("=")[0].split(">")[0].split("<")[0].strip() == "vllm" for d in declared)
    tree = ast.parse((ROOT / "rocke" / "vllm_backend.py").read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == "register" for n in tree.body)


def test_no_rocke_module_imports_the_backend():
    """rocke stays importable without vLLM: only vLLM's plugin loader imports the backend."""
    offenders = []
    for path in sorted((ROOT / "rocke").rglob("*.py")):
        if path.name == "vllm_backend.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] \
                if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            if any(n.startswith(("rocke.vllm_backend", "vllm.")) or n == "vllm" for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_the_backend_fits_vllm_033s_interface():
    tool = _tool()
    assert SNAPSHOT["vllm_version"] == "0.33.0"
    rocke = tool.rocke_side()
    assert sorted(rocke) == sorted(tool.CHAINS)
    assert tool.differences(SNAPSHOT, rocke) == []
    # what is checked is what rocke overrides: the kernel call and the declarations
    assert set(rocke["RockeAttentionImpl"]["methods"]) == {"__init__", "forward"}
    assert {"get_name", "get_impl_cls", "get_builder_cls", "supports_head_size",
            "supports_attn_type", "supports_non_causal", "supports_compute_capability",
            "supported_kv_cache_layouts"} <= set(rocke["RockeAttentionBackend"]["methods"])


def test_the_check_names_what_no_longer_fits():
    tool = _tool()
    rocke = tool.rocke_side()
    theirs = json.loads(json.dumps(SNAPSHOT))
    classes = theirs["classes"]
    # vLLM renames a forward parameter, makes a new abstract method, drops an attribute
    forward = classes["TritonAttentionImpl"]["methods"]["forward"]["parameters"]
    next(p for p in forward if p["name"] == "output_scale")["name"] = "out_scale"
    classes["AttentionBackend"]["methods"]["get_kv_cache_shape"] = dict(
        kind="staticmethod", abstract=True, parameters=[])
    classes["TritonAttentionMetadataBuilder"]["attributes"].remove("_cudagraph_support")
    classes["AttentionMetadataBuilder"]["attributes"].remove("_cudagraph_support")
    # rocke misspells a declaration and makes a classmethod static
    ours = json.loads(json.dumps(rocke))
    backend = ours["RockeAttentionBackend"]["methods"]
    backend["supports_sinks"] = backend["supports_rswa"]
    backend["supports_rswa"] = dict(backend["supports_rswa"], kind="staticmethod")
    found = tool.differences(theirs, ours)
    assert any(l.startswith("RockeAttentionImpl.forward(") and "out_scale" in l for l in found)
    assert "RockeAttentionBackend: AttentionBackend.get_kv_cache_shape is abstract and neither " \
           "TritonAttentionBackend nor rocke defines it" in found
    assert any(l.startswith("RockeAttentionMetadataBuilder._cudagraph_support:") for l in found)
    assert any(l.startswith("RockeAttentionBackend.supports_sinks: no vLLM class") for l in found)
    assert "RockeAttentionBackend.supports_rswa: a staticmethod, but " \
           "TritonAttentionBackend.supports_rswa is a classmethod" in found
    assert len(found) == 5, found


def test_the_tool_reads_a_source_tree(tmp_path):
    tool = _tool()
    base = tmp_path / "vllm" / "v1" / "attention"
    (base / "backends").mkdir(parents=True)
    (base / "backend.py").write_text(
        "from abc import ABC, abstractmethod\n"
        "class AttentionBackend(ABC):\n    supported_dtypes = []\n"
        "    @staticmethod\n    @abstractmethod\n    def get_name(): ...\n"
        "    @classmethod\n    def supports_head_size(cls, head_size: int) -> bool: ...\n"
        "class AttentionImplBase(ABC):\n    def process_weights_after_loading(self, dt): ...\n"
        "class AttentionImpl(AttentionImplBase):\n    @abstractmethod\n"
        "    def forward(self, layer, query, output, output_scale=None): ...\n"
        "class AttentionMetadataBuilder(ABC):\n    _cudagraph_support: int = 0\n"
        "    @abstractmethod\n    def build(self, common_prefix_len, m, fast_build=False): ...\n")
    (base / "backends" / "triton_attn.py").write_text(
        "class TritonAttentionBackend(AttentionBackend):\n"
        "    @staticmethod\n    def get_name() -> str: return 'T'\n"
        "class TritonAttentionImpl(AttentionImpl):\n"
        "    def forward(self, layer, query, output, output_scale=None): ...\n"
        "class TritonAttentionMetadataBuilder(AttentionMetadataBuilder):\n"
        "    def build(self, common_prefix_len, m, fast_build=False): ...\n")
    got = tool.extract(tmp_path)
    c = got["classes"]
    assert c["AttentionBackend"]["methods"]["get_name"] == dict(kind="staticmethod",
                                                               abstract=True, parameters=[])
    assert c["AttentionBackend"]["methods"]["supports_head_size"]["kind"] == "classmethod"
    assert c["TritonAttentionImpl"]["bases"] == ["AttentionImpl"]
    assert c["AttentionMetadataBuilder"]["attributes"] == ["_cudagraph_support"]
    assert [p["default"] for p in c["TritonAttentionImpl"]["methods"]["forward"]["parameters"]] \
        == [None, None, None, None, "None"]
    found = tool.differences(got, tool.rocke_side())
    # rocke's declarations that this small tree lacks are named, one line each
    assert "RockeAttentionBackend.supports_non_causal: no vLLM class it inherits from " \
           "(TritonAttentionBackend, AttentionBackend) defines supports_non_causal, so vLLM " \
           "never calls it" in found
    assert "RockeAttentionImpl.forward(self, layer, query, key, value, kv_cache, attn_metadata, " \
           "output, output_scale=None, output_block_scale=None) differs from " \
           "TritonAttentionImpl.forward(self, layer, query, output, output_scale=None)" in found


# ---- with vLLM --------------------------------------------------------------------------------

def _import_vllm_backend():
    try:
        import vllm.v1.attention.backends.triton_attn  # noqa: F401
    except Exception as e:          # ImportError, or a dependency failing as it loads
        pytest.skip(f"vLLM 0.33's Triton backend does not import here ({type(e).__name__}: "
                    f"{e}); scripts/test_vllm.sh runs these tests")
    import rocke.vllm_backend
    return rocke.vllm_backend


@pytest.fixture(name="backend", scope="module")
def _backend():
    return _import_vllm_backend()


def _entry_point():
    value = PYPROJECT["project"]["entry-points"][GROUP]["rocke"]
    return importlib.metadata.EntryPoint(name="rocke", value=value, group=GROUP)


def test_the_entry_point_registers_rocke_in_vllms_registry(backend):
    from vllm.config.attention import AttentionConfig
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    register = _entry_point().load()            # what vLLM's plugin loader does with it
    assert register is backend.register
    register()
    register()                                  # vLLM calls it in each process: idempotent
    member = AttentionBackendEnum["ROCKE"]
    assert member.get_path() == "rocke.vllm_backend.RockeAttentionBackend"
    assert member.get_class() is backend.RockeAttentionBackend
    assert backend.RockeAttentionBackend.get_name() == "ROCKE"
    assert AttentionConfig(backend="ROCKE").backend is member      # --attention-backend ROCKE


def test_vllms_plugin_loader_finds_the_installed_entry_point(backend):
    from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_plugins_by_group
    assert DEFAULT_PLUGINS_GROUP == GROUP
    if not any(ep.value == "rocke.vllm_backend:register"
               for ep in importlib.metadata.entry_points(group=GROUP)):
        pytest.skip("rocke's installed metadata predates the entry point: `pip install -e .` "
                    "writes it")
    assert load_plugins_by_group(GROUP)["rocke"] is backend.register


@pytest.fixture(name="rocm")
def _rocm(backend, monkeypatch):
    """vLLM's ROCm platform class, importable on a machine without amdsmi: its module asks
    amdsmi for the GPU's gfx name once, on import; here a stand-in answers gfx942."""
    if "vllm.platforms.rocm" not in sys.modules:
        smi = types.ModuleType("amdsmi")
        smi.AmdSmiException = type("AmdSmiException", (Exception,), {})
        smi.AmdSmiMemoryType = types.SimpleNamespace(VRAM=0)
        smi.amdsmi_get_processor_handles = lambda: [0]
        smi.amdsmi_get_gpu_asic_info = lambda handle: {"target_graphics_version": "gfx942"}
        for name in ("amdsmi_init", "amdsmi_shut_down", "amdsmi_get_gpu_device_uuid",
                     "amdsmi_get_gpu_memory_total", "amdsmi_topo_get_link_type",
                     "amdsmi_topo_get_numa_node_number"):
            setattr(smi, name, lambda *args, **kwargs: None)
        monkeypatch.setitem(sys.modules, "amdsmi", smi)
    from vllm.platforms.interface import DeviceCapability
    from vllm.platforms.rocm import RocmPlatform
    backend.register()
    monkeypatch.setattr(RocmPlatform, "get_device_capability",
                        classmethod(lambda cls, device_id=0: DeviceCapability(9, 4)))
    return RocmPlatform


def _selector(**changes):
    from vllm.v1.attention.selector import AttentionSelectorConfig
    base = AttentionSelectorConfig(head_size=128, dtype=torch.bfloat16, kv_cache_dtype="auto",
                                   block_size=16)
    return base._replace(**changes)


ACCEPTED = [dict(), dict(head_size=64, dtype=torch.float16, block_size=128),
            dict(head_size=256, kv_cache_dtype="fp8", has_sink=True, has_sliding_window=True),
            dict(kv_cache_dtype="fp8_e4m3", use_mm_prefix=True, use_batch_invariant=True),
            dict(kv_cache_dtype="bfloat16", block_size=544),
            dict(kv_cache_dtype="int8_per_token_head"), dict(kv_cache_dtype="fp8_per_token_head"),
            dict(kv_cache_dtype="int4_per_token_head"),
            dict(use_non_causal=True), dict(use_rswa=True),
            dict(head_size=96), dict(head_size=192), dict(head_size=32), dict(head_size=512)]
REFUSED = [
    (dict(head_size=100), "head_size not supported"),
    (dict(head_size=520), "head_size not supported"),
    (dict(head_size=36), "head_size not supported"),
    (dict(dtype=torch.float32), "dtype not supported"),
    (dict(kv_cache_dtype="fp8_e5m2"), "kv_cache_dtype not supported"),
    (dict(kv_cache_dtype="float16"), "kv_cache_dtype float16 differs from the model's"),
    (dict(block_size=8), "block_size not supported"),
    (dict(attn_type="encoder_only"), "attention type encoder_only not supported"),
    (dict(attn_type="encoder"), "attention type encoder not supported"),
    (dict(attn_type="encoder_decoder"), "attention type encoder_decoder not supported"),
    (dict(use_mla=True), "MLA not supported"),
]


@pytest.mark.parametrize("changes", ACCEPTED)
def test_vllms_rocm_selection_picks_rocke_when_asked(rocm, changes):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    assert rocm.get_attn_backend_cls(AttentionBackendEnum["ROCKE"], _selector(**changes)) == \
        "rocke.vllm_backend.RockeAttentionBackend"


@pytest.mark.parametrize("changes,reason", REFUSED)
def test_vllms_rocm_selection_refuses_what_rocke_does_not_run(rocm, changes, reason):
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    with pytest.raises(ValueError, match=r"Selected backend AttentionBackendEnum.ROCKE is not "
                                         r"valid for this configuration\. Reason: \[.*" + reason):
        rocm.get_attn_backend_cls(AttentionBackendEnum["ROCKE"], _selector(**changes))


def test_the_refusals_are_rockes_not_the_triton_backends(rocm):
    """The same selector takes vLLM's Triton backend for what rocke refuses (the narrowing is
    rocke's declaration)."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    for changes in (dict(head_size=100), dict(dtype=torch.float32), dict(head_size=520),
                    dict(kv_cache_dtype="fp8_e5m2"), dict(attn_type="encoder_only")):
        assert rocm.get_attn_backend_cls(AttentionBackendEnum.TRITON_ATTN,
                                         _selector(**changes)).endswith("TritonAttentionBackend")


@pytest.mark.parametrize("capability,ok", [((9, 4), True), ((9, 5), True), ((9, 0), False),
                                           ((11, 0), False), ((9, 6), False)])
def test_compute_capabilities_are_rockes_targets(backend, capability, ok):
    from vllm.platforms.interface import DeviceCapability
    reasons = backend.RockeAttentionBackend.validate_configuration(
        device_capability=DeviceCapability(*capability), **_selector()._asdict())
    assert reasons == ([] if ok else ["compute capability not supported"])


def test_the_declarations_are_rockes_capabilities(backend):
    from rocke.kernels.gfx942.attention_dispatch import CAPABILITIES
    from rocke.vllm import SUPPORTED_KV_QUANT_MODES
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
    from vllm.v1.kv_cache_interface import get_kv_quant_mode
    from vllm.v1.kv_cache_layout import KVCacheLayout
    cls = backend.RockeAttentionBackend
    # the kernels' head sizes and every multiple of 8 below the largest (run padded)
    assert [h for h in range(1, 513) if cls.supports_head_size(h)] == \
        [h for h in range(8, max(CAPABILITIES.head_sizes) + 1, 8)] == \
        cls.get_supported_head_sizes()
    assert cls.get_supported_kernel_block_sizes() == list(CAPABILITIES.block_sizes)
    assert cls.supported_dtypes == [torch.float16, torch.bfloat16]
    # every cache dtype declared is one the Triton backend's layout handles and whose
    # quantization mode rocke.vllm runs
    for dtype in cls.supported_kv_cache_dtypes:
        assert dtype in TritonAttentionBackend.supported_kv_cache_dtypes
        assert get_kv_quant_mode(dtype).name in SUPPORTED_KV_QUANT_MODES, dtype
    assert cls.supported_kv_cache_layouts() == (KVCacheLayout.LBNHC,)
    assert (cls.supports_sink(), cls.supports_alibi_sqrt(), cls.supports_sliding_window(),
            cls.supports_mm_prefix(), cls.supports_batch_invariance()) == (True,) * 5
    assert cls.supports_rswa() is True and cls.supports_non_causal() is True
    assert (cls.is_mla(), cls.is_sparse(), cls.supports_per_head_quant_scales()) == (False,) * 3
    assert cls.forward_includes_kv_cache_update is False     # vLLM writes the cache first


def test_the_builder_and_the_implementation_are_rockes(backend):
    from vllm.v1.attention.backend import AttentionCGSupport
    from vllm.v1.attention.backends.triton_attn import (TritonAttentionImpl,
                                                        TritonAttentionMetadataBuilder)
    cls = backend.RockeAttentionBackend
    builder, impl = cls.get_builder_cls(), cls.get_impl_cls()
    assert builder is backend.RockeAttentionMetadataBuilder
    assert issubclass(builder, TritonAttentionMetadataBuilder)
    assert builder.get_cudagraph_support(None, None) is AttentionCGSupport.ALWAYS
    assert impl is backend.RockeAttentionImpl and issubclass(impl, TritonAttentionImpl)
    assert impl.forward is not TritonAttentionImpl.forward
    assert impl.do_kv_cache_update is TritonAttentionImpl.do_kv_cache_update
    made = impl(8, 128, 0.1, 2, None, None, "auto")
    assert made.supports_quant_query_input is False         # rocke takes fp16/bf16 queries
    with pytest.raises(NotImplementedError, match="GQA group of 512 query heads"):
        impl(512, 128, 0.1, 1, None, None, "auto")


# vLLM's cache for one layer in the NHD layout: memory [num_blocks, block_size, Hk, 2 * D], handed
# to the implementation as the logical [num_blocks, Hk, block_size, 2 * D] view
HQ, HK, D, BS, NUM_BLOCKS = 4, 2, 64, 16, 12


def _forward_case(q_lens, kv_lens, kv_cache_dtype="auto", seed=0):
    from vllm.v1.attention.backends.triton_attn import TritonAttentionMetadata
    gen = torch.Generator().manual_seed(seed)
    memory = (torch.rand(NUM_BLOCKS, BS, HK, 2 * D, generator=gen) - 0.5).to(torch.float16)
    if kv_cache_dtype == "fp8":
        memory = (4 * memory.float()).to(torch.float8_e4m3fnuz).view(torch.uint8)
    pages = [-(-n // BS) for n in kv_lens]
    order = torch.randperm(NUM_BLOCKS, generator=gen).tolist()
    table = torch.zeros(len(kv_lens), max(pages), dtype=torch.int32)
    for s, (start, n) in enumerate(zip(itertools.accumulate([0] + pages), pages)):
        table[s, :n] = torch.tensor(order[start:start + n], dtype=torch.int32)
    total = sum(q_lens)
    segments, rows = 16, 64
    metadata = TritonAttentionMetadata(
        num_actual_tokens=total, max_query_len=max(q_lens),
        query_start_loc=torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32),
        max_seq_len=max(kv_lens), seq_lens=torch.tensor(kv_lens, dtype=torch.int32),
        block_table=table, slot_mapping=torch.zeros(total, dtype=torch.int64),
        seq_threshold_3D=8, num_par_softmax_segments=segments,
        softmax_segm_output=torch.full((rows, HQ, segments, D), math.nan),
        softmax_segm_max=torch.full((rows, HQ, segments), math.nan),
        softmax_segm_expsum=torch.full((rows, HQ, segments), math.nan), causal=True)
    q = (torch.rand(total + 3, HQ, D, generator=gen) - 0.5).to(torch.float16)  # 3 padding rows
    return q, memory.permute(0, 2, 1, 3), metadata


@pytest.mark.parametrize("q_lens,kv_lens,kv_cache_dtype,path", [
    ((1, 1, 1), (40, 23, 70), "auto", "3d"),          # decode
    ((4, 4), (40, 23), "auto", "3d"),                 # a speculative verify step
    ((12, 5), (40, 23), "auto", "2d"),                # prefill
    ((1, 1), (40, 23), "fp8", "3d"),                  # an fp8 cache, a per-tensor scale
])
def test_forward_runs_rockes_kernels_on_vllms_cache_and_metadata(backend, monkeypatch, q_lens,
                                                                 kv_lens, kv_cache_dtype, path):
    from rocke import vllm as rocke_vllm
    from rocke.kernels.common.attention_reference import ref_paged_attn
    from rocke.kernels.common.tolerances import attention_atol
    calls = []
    run = rocke_vllm.unified_attention
    monkeypatch.setattr(rocke_vllm, "unified_attention",
                        lambda **kw: calls.append(kw) or run(**kw))
    q, kv_cache, metadata = _forward_case(q_lens, kv_lens, kv_cache_dtype)
    impl = backend.RockeAttentionImpl(HQ, D, 1 / math.sqrt(D), HK, None, None, kv_cache_dtype)
    impl.fp8_dtype = torch.float8_e4m3fnuz      # vLLM's ROCm platform's fp8 on gfx942
    scale = 0.25 if kv_cache_dtype == "fp8" else 1.0
    layer = types.SimpleNamespace(_k_scale=torch.tensor(scale), _v_scale=torch.tensor(scale))
    out = torch.full_like(q, 7.0)
    assert impl.forward(layer, q, None, None, kv_cache, metadata, out) is out
    assert len(calls) == 1 and calls[0]["kv_quant_mode"].name == \
        ("FP8_PER_TENSOR" if kv_cache_dtype == "fp8" else "NONE")
    tokens = sum(q_lens)
    k, v = kv_cache.transpose(1, 2).split(D, dim=-1)
    descale = {}
    if kv_cache_dtype == "fp8":
        k, v = k.view(torch.float8_e4m3fnuz), v.view(torch.float8_e4m3fnuz)
        descale = dict(k_descale=torch.tensor(scale), v_descale=torch.tensor(scale))
    ref = ref_paged_attn(q[:tokens], k, v, metadata.query_start_loc, metadata.seq_lens,
                         metadata.block_table, 1 / math.sqrt(D), **descale)
    atol = attention_atol("f16", "fp8_e4m3fnuz" if kv_cache_dtype == "fp8" else None)
    assert (out[:tokens].float() - ref).abs().max().item() <= atol
    assert (out[tokens:] == 7.0).all()                       # padding rows untouched
    ran_3d = not metadata.softmax_segm_max[:tokens].isnan().all().item()
    assert ran_3d == (path == "3d")


def test_forward_in_vllms_profiling_run_writes_zeros(backend):
    impl = backend.RockeAttentionImpl(HQ, D, 0.125, HK, None, None, "auto")
    out = torch.full((5, HQ, D), 7.0)
    assert impl.forward(None, out, None, None, None, None, out).eq(0).all()


@pytest.mark.parametrize("q_lens,kv_lens", [((1, 1), (40, 23)), ((9, 5), (40, 23))])
def test_forward_reads_vllms_inline_int8_per_token_head_cache(backend, q_lens, kv_lens):
    """int8_per_token_head: vLLM's cache rows hold [K | K scale | V | V scale]; the Triton
    backend's own views (its scale caches set before the call) go to rocke's kernels."""
    from rocke.kernels.common.attention_reference import ref_paged_attn
    from rocke.kernels.common.tolerances import attention_atol
    _, _, metadata = _forward_case(q_lens, kv_lens)
    gen = torch.Generator().manual_seed(3)
    memory = torch.randint(-100, 100, (NUM_BLOCKS, BS, HK, 2 * (D + 4)), generator=gen,
                           dtype=torch.int8)
    kv_cache = memory.permute(0, 2, 1, 3)                    # vLLM's logical view
    impl = backend.RockeAttentionImpl(HQ, D, 1 / math.sqrt(D), HK, None, None,
                                      "int8_per_token_head")
    impl._ensure_scale_caches(kv_cache)
    for view in (impl._k_scale_cache, impl._v_scale_cache):  # strided fp32 views of the rows
        assert not view.is_contiguous()
        view.copy_((torch.rand(view.shape, generator=gen) + 0.5) / 100)
    tokens = sum(q_lens)
    q = (torch.rand(tokens, HQ, D, generator=gen) - 0.5).to(torch.float16)
    out = torch.full_like(q, 7.0)
    layer = types.SimpleNamespace(_k_scale=torch.tensor(1.0), _v_scale=torch.tensor(1.0))
    impl.forward(layer, q, None, None, kv_cache, metadata, out)
    k, v = kv_cache.transpose(1, 2).split(D + 4, dim=-1)
    ref = ref_paged_attn(q, k[..., :D], v[..., :D], metadata.query_start_loc, metadata.seq_lens,
                         metadata.block_table, 1 / math.sqrt(D),
                         k_scale_cache=impl._k_scale_cache, v_scale_cache=impl._v_scale_cache)
    assert (out.float() - ref).abs().max().item() <= attention_atol("f16")
