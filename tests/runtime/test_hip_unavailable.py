"""Issue 19: when hip-python cannot open the HIP runtime, the error reads as text; hip-python
formats the library name and the loader's reason as bytes (``'b'libamdhip64.so''``)."""
from __future__ import annotations

import pytest

from rocke import runtime
from rocke.runtime.hip_device import HipUnavailable

# what hip-python 7.2 raises on a machine without libamdhip64.so (seen on this host)
HIP_PYTHON_DLOPEN_ERROR = ("failed to dlopen 'b'libamdhip64.so'': b'libamdhip64.so: cannot open "
                           "shared object file: No such file or directory'")


def test_an_unloadable_hip_runtime_is_named_in_plain_text(monkeypatch):
    from hip import hip                         # hip-python: installed for the HIP path

    def unloadable(*args):
        raise RuntimeError(HIP_PYTHON_DLOPEN_ERROR)
    monkeypatch.setattr(hip, "hipGetDevice", unloadable)
    monkeypatch.delenv("ROCKE_DEVICE", raising=False)
    runtime.reset_devices()
    try:
        with pytest.raises(HipUnavailable) as exc:
            runtime.get_device("hip")
    finally:
        runtime.reset_devices()
    assert str(exc.value) == (
        "hipGetDevice: the HIP runtime could not be loaded (failed to dlopen 'libamdhip64.so': "
        "libamdhip64.so: cannot open shared object file: No such file or directory)")
