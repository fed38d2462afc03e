"""Forward progress: a wave spinning on memory that another resident wave releases must not
starve that wave (real hardware guarantees progress between resident waves). Kernels are LLVM
IR compiled for gfx942; without a fair scheduler each of these launches never ends."""
import numpy as np
import pytest
import torch

import rocke.emu as emu
from tests.emu.test_engine import compile_ir

# One lane per wave takes a spin lock (atomic compare-and-swap), then increments a counter with
# a plain load and store, appends its wave number to a log, and releases the lock: the counter
# ends exact and the log holds every wave once only if the lock excluded the others.
SPIN_LOCK = """
define amdgpu_kernel void @spin_lock(ptr addrspace(1) %lock, ptr addrspace(1) %counter,
                                     ptr addrspace(1) %log) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %lane = and i32 %tid, 63
  %leader = icmp eq i32 %lane, 0
  br i1 %leader, label %spin, label %done
spin:
  %got = cmpxchg ptr addrspace(1) %lock, i32 0, i32 1 acquire monotonic
  %ok = extractvalue { i32, i1 } %got, 1
  br i1 %ok, label %critical, label %spin
critical:
  %old = load volatile i32, ptr addrspace(1) %counter
  %new = add i32 %old, 1
  store volatile i32 %new, ptr addrspace(1) %counter
  %wave_in_wg = lshr i32 %tid, 6
  %wg4 = shl i32 %wg, 2
  %wave = add i32 %wg4, %wave_in_wg
  %slot = getelementptr i32, ptr addrspace(1) %log, i32 %old
  store volatile i32 %wave, ptr addrspace(1) %slot
  store atomic i32 0, ptr addrspace(1) %lock release, align 4
  br label %done
done:
  ret void
}
"""

# Workgroup k waits until workgroup k + 1 has published its value (the last one starts the
# chain), then publishes its own = the next one's + k: a chain across every workgroup of the
# launch, run backwards against the scheduler's preferred order.
SEMAPHORE_CHAIN = """
define amdgpu_kernel void @chain(ptr addrspace(1) %flags, ptr addrspace(1) %values, i32 %last) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %leader, label %done
leader:
  %is_last = icmp eq i32 %wg, %last
  br i1 %is_last, label %publish, label %wait
wait:
  %next = add i32 %wg, 1
  %pflag = getelementptr i32, ptr addrspace(1) %flags, i32 %next
  %flag = load atomic i32, ptr addrspace(1) %pflag acquire, align 4
  %ready = icmp ne i32 %flag, 0
  br i1 %ready, label %read, label %wait
read:
  %pnext = getelementptr i32, ptr addrspace(1) %values, i32 %next
  %nv = load i32, ptr addrspace(1) %pnext
  br label %publish
publish:
  %base = phi i32 [ 0, %leader ], [ %nv, %read ]
  %mine = add i32 %base, %wg
  %pmine = getelementptr i32, ptr addrspace(1) %values, i32 %wg
  store i32 %mine, ptr addrspace(1) %pmine
  %pown = getelementptr i32, ptr addrspace(1) %flags, i32 %wg
  store atomic i32 1, ptr addrspace(1) %pown release, align 4
  br label %done
done:
  ret void
}
"""


def test_contended_spin_lock_completes_with_mutual_exclusion():
    asm = compile_ir(SPIN_LOCK)
    assert "global_atomic_cmpswap" in asm
    workgroups, waves = 8, 4 * 8
    lock = torch.zeros(1, dtype=torch.int32)
    counter = torch.zeros(1, dtype=torch.int32)
    log = torch.full((waves,), -1, dtype=torch.int32)
    emu.launch(asm, "spin_lock", workgroups, 256, [lock, counter, log])
    assert counter.item() == waves and lock.item() == 0
    assert sorted(log.tolist()) == list(range(waves))


def test_cross_workgroup_semaphore_chain_completes():
    asm = compile_ir(SEMAPHORE_CHAIN)
    workgroups = 16
    flags = torch.zeros(workgroups, dtype=torch.int32)
    values = torch.full((workgroups,), -1, dtype=torch.int32)
    emu.launch(asm, "chain", workgroups, 128, [flags, values, workgroups - 1])
    expected = np.cumsum(np.arange(workgroups)[::-1])[::-1]   # values[k] = k + ... + last
    assert values.tolist() == expected.tolist()
    assert flags.tolist() == [1] * workgroups


def test_waiting_for_a_workgroup_beyond_the_resident_pool_names_it(monkeypatch):
    """The emulator keeps MAX_POOL_WAVES waves resident; a chain reaching past them cannot end
    (as on hardware when the waited-for workgroup is not resident): the watchdog says why."""
    import importlib
    monkeypatch.setattr(importlib.import_module("rocke.emu.launch"), "MAX_POOL_WAVES", 8)
    asm = compile_ir(SEMAPHORE_CHAIN)
    flags = torch.zeros(6, dtype=torch.int32)
    values = torch.full((6,), -1, dtype=torch.int32)
    with pytest.raises(emu.LaunchTimeout) as info:
        emu.launch(asm, "chain", 6, 128, [flags, values, 5], timeout_s=0.3)
    message = str(info.value)
    assert "2 workgroups of the launch had not started" in message
    assert "keeps 4 workgroups resident" in message
    assert flags.tolist() == [0] * 6 and values.tolist() == [-1] * 6
