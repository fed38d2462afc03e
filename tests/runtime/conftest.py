"""Fixtures for the runtime tests: the stand-in libamdhip64.so (built once per session with the
system C compiler) and a few compiled sample kernels."""
from __future__ import annotations

import os

import pytest

from rocke import runtime
from rocke.kernels.common import attention_calls
from rocke.kernels.registry import all_variants
from tests.hip_stub import standin as standin_module


@pytest.fixture(scope="session")
def _standin_library(tmp_path_factory):
    previous = os.environ.get("ROCM_PATH")
    stand_in = standin_module.load(tmp_path_factory.mktemp("rocm"))
    yield stand_in
    if previous is None:
        os.environ.pop("ROCM_PATH", None)
    else:
        os.environ["ROCM_PATH"] = previous


@pytest.fixture
def standin(_standin_library, monkeypatch):
    """The stand-in HIP runtime, reporting one gfx942 for this test only (no device otherwise, so
    other tests in the process keep choosing the emulator)."""
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    _standin_library.reset(active=True)
    runtime.reset_devices()
    yield _standin_library
    # graphs cached by the attention entry point hold this stand-in's handles: close them while
    # they are still valid, or the next test's clear() destroys handles the reset forgot
    attention_calls.forget_calls()
    attention_calls.WORKSPACES.clear()
    _standin_library.reset(active=False)
    runtime.reset_devices()


@pytest.fixture(scope="session")
def vector_add():
    variant = all_variants()["vector_add/f32_v4"]
    return variant, variant.compile()


@pytest.fixture(scope="session")
def flash_attention():
    variant = all_variants()["flash_attention/f16_d64_causal"]
    return variant, variant.compile()
