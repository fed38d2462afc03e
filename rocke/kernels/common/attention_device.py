"""Where a unified-attention call runs: the device kind and target follow the call's tensors."""
from __future__ import annotations

import sys

from rocke.kernels.common.attention_problem import is_tensor


def launch_device_kind(q) -> str:
    """Where a call on ``q``'s device runs: "emu" (rocke's emulator) for CPU tensors, "hip" for a
    ROCm torch GPU's (torch's ``cuda`` device type with ``torch.version.hip`` set);
    ``ROCKE_DEVICE`` overrides. Anything else is refused naming what is supported."""
    import torch
    from rocke import env
    kind = q.device.type
    if kind == "cpu":
        found = "emu"
    elif kind == "cuda" and getattr(torch.version, "hip", None):
        found = "hip"
    elif kind == "cuda" and emulated_on_cuda():
        found = "emu"
    else:
        why = ("this torch is an NVIDIA CUDA build (torch.version.hip is None); rocke's kernels "
               "are AMD gfx942 code") if kind == "cuda" else f"rocke cannot run on {kind} tensors"
        raise ValueError(f"q: on {q.device}: {why}. Supported: CPU tensors (rocke's emulator) "
                         "or GPU tensors of a ROCm torch (HIP)")
    override = env.device()
    if override == "emu" and found == "hip":
        raise ValueError(f"ROCKE_DEVICE=emu, but q is on {q.device}: the emulator runs on CPU "
                         "tensors")
    return override or found


def emulated_on_cuda() -> bool:
    """Whether NVIDIA CUDA tensors run on the emulator, on the GPU (ROCKE_EMU_BACKEND=torch
    ROCKE_EMU_DEVICE=cuda): the tensors are its global memory; the metadata is checked on the
    host, as for CPU tensors."""
    from rocke import env
    return env.emu_backend() == "torch" and env.emu_device() == "cuda"


def launch_target(q) -> str | None:
    """The processor whose kernels a call on ``q`` takes: its device's (the emulator's target,
    ``ROCKE_DEVICE=emu:gfx950`` -> gfx950; a HIP GPU's architecture). None (the default target)
    where ``q`` is not yet a usable tensor: ``describe_problem`` names what is wrong with it."""
    if not is_tensor(q):
        return None
    try:
        kind = launch_device_kind(q)
    except ValueError:
        return None
    from rocke.runtime import get_device
    return get_device(kind).arch.split(":", 1)[0]


def launch_device(q, kind: str):
    """The rocke Device a call on ``q`` runs on: a GPU call's is the GPU its tensors live on
    (``q.device.index``), whatever torch's current device is; the emulator otherwise."""
    from rocke.runtime import get_device
    index = getattr(q.device, "index", None)
    if kind == "hip" and index is not None:
        return get_device(f"hip:{index}")
    return get_device(kind)


def compute_units(device, target: str | None) -> int | None:
    """The CUs the dispatcher fills for a call on ``device``: the GPU's own count when it is the
    target's processor, else None (the target's count, from rocke.arch: the emulator runs the
    target's code, so the host's GPU never changes a plan)."""
    count = getattr(device, "compute_units", None)
    if count is None or target is None or device.arch.split(":", 1)[0] != target:
        return None
    return count


def caller_is_capturing() -> bool:
    """A rocke.runtime.Graph / HIP stream capture on the default device, or torch's."""
    try:
        from rocke.runtime import is_capturing
        if is_capturing():
            return True
    except Exception:       # no usable device: nobody is capturing on it
        pass
    # a torch capture needs a torch already imported: planning ahead of time (`rocke list`'s
    # shipped variants) does not import it (2 s) just to learn that nobody captures
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:
        return False
