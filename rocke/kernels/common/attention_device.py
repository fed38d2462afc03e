"""Where a unified-attention call runs: the device kind and target follow the call's tensors."""
from __future__ import annotations

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
