"""One kernarg packing: the emulator runs exactly the bytes `prepare_launch` packed -- the bytes
HIP receives through hipModuleLaunchKernel's `extra` -- and a graph replay, on either device,
replays those bytes."""
from __future__ import annotations

import dataclasses
import struct

import torch

from rocke import runtime
from rocke.runtime import Graph

N = 256


def _views_of(standin, buffers):
    """CPU tensors over the stand-in's hipMalloc'd memory: the same addresses on both devices."""
    return [torch.from_numpy(standin.allocations[b.data_ptr()][0]).view(torch.float32)
            for b in buffers]


def test_the_emulator_runs_the_prepared_bytes_not_a_repacking(vector_add):
    _variant, ck = vector_add
    a, b, c = torch.ones(N), torch.ones(N), torch.zeros(N)
    prepared = runtime.prepare_launch(ck, 1, 256, [a, b, c, N])
    n_arg = next(arg for arg in ck.info.args if arg.name == "n")
    edited = bytearray(prepared.kernarg)          # the element count, rewritten to 8 ...
    edited[n_arg.offset:n_arg.offset + 4] = struct.pack("<i", 8)
    report = runtime.get_device("emu").execute(dataclasses.replace(prepared, kernarg=bytes(edited)))
    assert report.kernarg == bytes(edited)
    assert c[:8].eq(2).all() and not c[8:].any()  # ... is what the kernel saw


def test_emu_and_hip_run_the_same_bytes_directly_and_in_graphs(standin, vector_add):
    _variant, ck = vector_add
    standin.register(ck)
    dev = runtime.get_device("hip")
    buffers = [dev.alloc(4 * N) for _ in range(3)]
    a, b, c = _views_of(standin, buffers)
    a.copy_(torch.arange(N, dtype=torch.float32))
    b.fill_(1.0)
    prepared = runtime.prepare_launch(ck, 1, 256, [a, b, c, N])

    emu_report = runtime.launch(ck, 1, 256, [a, b, c, N], device="emu")
    runtime.launch(ck, 1, 256, [*buffers, N], device="hip")
    seen = standin.executed[-1]
    assert standin.errors == []
    assert emu_report.kernarg == prepared.kernarg      # what the emulator device ran
    assert seen.kernarg == prepared.kernarg            # what crossed hip-python
    assert seen.ran == prepared.kernarg                # what the stand-in's emulator ran

    g_emu, g_hip = Graph(device="emu"), Graph(device="hip")
    with g_emu.capture():
        runtime.launch(ck, 1, 256, [a, b, c, N], device="emu")
    with g_hip.capture():
        runtime.launch(ck, 1, 256, [*buffers, N], device="hip")
    (replayed,) = g_emu.replay()
    g_hip.replay(synchronize=True)
    assert replayed.kernarg == prepared.kernarg
    assert standin.executed[-1].kernarg == standin.executed[-1].ran == prepared.kernarg
    assert torch.equal(c, torch.arange(N, dtype=torch.float32) + 1)
    g_hip.close()
