"""Workgroup pools in forked worker processes (ROCKE_EMU_WORKERS, rocke/emu/parallel.py): the
same bytes, counters and errors as the serial emulator, serial where workgroups may communicate.

Launches here are small, so each test lowers the work threshold that keeps small launches in
one process (launch.PARALLEL_MIN_WORK) and checks `report.workers` to know it went parallel.
"""
import importlib

import llvmlite.binding as llvm
import numpy as np
import pytest
import torch

import rocke.emu as emu
from rocke import env
from rocke.emu import parallel
from rocke.emu.errors import MemoryFault

from .test_triton_kernels import cdiv, generator, launch_fixture, load_fixture

launch_module = importlib.import_module("rocke.emu.launch")

# every workgroup's first lane adds one to buf[id] and stores it at buf[id + 1]: a workgroup
# reads what the one before it wrote
CHAIN = """
target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
define amdgpu_kernel void @chain(ptr addrspace(1) %buf) {
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %work, label %done
work:
  %p = getelementptr i32, ptr addrspace(1) %buf, i32 %wg
  %v = load i32, ptr addrspace(1) %p
  %v1 = add i32 %v, 1
  %slot = add i32 %wg, 1
  %q = getelementptr i32, ptr addrspace(1) %buf, i32 %slot
  store i32 %v1, ptr addrspace(1) %q
  br label %done
done:
  ret void
}
"""

# every workgroup's first lane stores its id at out[0] (later workgroups overwrite earlier ones)
# and at out[1 + id]
LAST_WRITER = """
target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
define amdgpu_kernel void @last_writer(ptr addrspace(1) %out) {
  %wg = call i32 @llvm.amdgcn.workgroup.id.x()
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %write, label %done
write:
  store i32 %wg, ptr addrspace(1) %out
  %slot = add i32 %wg, 1
  %p = getelementptr i32, ptr addrspace(1) %out, i32 %slot
  store i32 %wg, ptr addrspace(1) %p
  br label %done
done:
  ret void
}
"""


def compile_ir(text):
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    machine = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu="gfx942")
    return machine.emit_assembly(llvm.parse_assembly(text))


@pytest.fixture
def any_size(monkeypatch):
    """Let launches of any size go parallel."""
    monkeypatch.setattr(launch_module, "PARALLEL_MIN_WORK", 0)
    return monkeypatch


def axpy_args(n, padded):
    rng = generator(11)
    x, y = torch.randn(padded, generator=rng), torch.randn(padded, generator=rng)
    return x, y, torch.full((padded,), 7.0)


def run_axpy(monkeypatch, workers, n, x, y, out):
    monkeypatch.setenv("ROCKE_EMU_WORKERS", str(workers))
    return launch_fixture("axpy_f32", (cdiv(n, 1024), 1, 1), x_ptr=x, y_ptr=y, out_ptr=out,
                          alpha=0.75, n_elements=n)


def test_axpy_three_workers_bit_identical_with_serial_counters(any_size):
    # 300 workgroups of 4 waves: three pools of at most 128 workgroups, one share each
    n = 299 * 1024 + 500
    x, y, out = axpy_args(n, 300 * 1024)
    serial = run_axpy(any_size, 1, n, x, y, out)
    expected = out.clone()
    out.fill_(7.0)
    spread = run_axpy(any_size, 3, n, x, y, out)
    assert serial.workers == 1 and spread.workers == 3
    assert torch.equal(out.view(torch.int32), expected.view(torch.int32))
    assert torch.all(out[n:] == 7.0)
    torch.testing.assert_close(out[:n], 0.75 * x[:n] + y[:n], atol=1e-6, rtol=1e-5)
    assert spread.instructions == serial.instructions
    assert spread.lane_instructions == serial.lane_instructions
    assert spread.batches == serial.batches    # same pools, so the same scheduler picks
    assert spread.reruns == 0   # no workgroup reads another's output
    assert len(spread.share_cpu_s) == 3 and all(s > 0 for s in spread.share_cpu_s)
    assert serial.share_cpu_s == ()


def test_single_pool_gemm_split_over_two_workers(any_size):
    # one pool of 4 workgroups becomes two pools of 2: same bytes and issue counts
    m = n = 128
    k = 64
    rng = generator(12)
    a = torch.randn(m, k, generator=rng).half()
    b = torch.randn(k, n, generator=rng).half()
    results = {}
    for workers in (1, 2):
        any_size.setenv("ROCKE_EMU_WORKERS", str(workers))
        c = torch.full((m, n), 3.0, dtype=torch.float16)
        report = launch_fixture("matmul_f16_mfma32", (cdiv(m, 64), cdiv(n, 64), 1), a_ptr=a,
                                b_ptr=b, c_ptr=c, M=m, N=n, K=k, stride_am=k, stride_bk=n,
                                stride_cm=n)
        results[workers] = (c, report)
    (c1, r1), (c2, r2) = results[1], results[2]
    assert r1.workers == 1 and r2.workers == 2
    assert torch.equal(c1.view(torch.int16), c2.view(torch.int16))
    torch.testing.assert_close(c2.float(), a.float() @ b.float(), atol=1e-2, rtol=5e-3)
    assert r2.instructions == r1.instructions and r2.lane_instructions == r1.lane_instructions


def test_later_workgroups_win_as_in_serial_order(any_size):
    asm = compile_ir(LAST_WRITER)
    groups = 1100   # one wave each: pools of 512, 512 and 76 workgroups, one share each
    outs = {}
    for workers in (1, 3):
        any_size.setenv("ROCKE_EMU_WORKERS", str(workers))
        out = torch.full((groups + 1,), -1, dtype=torch.int32)
        report = emu.launch(asm, "last_writer", (groups,), (64,), [out])
        assert report.workers == workers
        outs[workers] = out
    assert torch.equal(outs[3], outs[1])
    assert outs[3][0] == groups - 1
    assert torch.equal(outs[3][1:], torch.arange(groups, dtype=torch.int32))


def test_a_share_that_reads_an_earlier_shares_stores_is_rerun_serially(any_size):
    # 1100 one-wave workgroups: pools (and shares) of 512, 512 and 76. A pool's waves load
    # together before they store, so in the serial order only the first workgroup of a pool
    # sees its predecessor's store: buf[513] and buf[1025] become 2, every other slot 1. A
    # child forked before the first share ran would read 0 there and store 1.
    asm = compile_ir(CHAIN)
    groups = 1100
    expected = torch.ones(groups + 1, dtype=torch.int32)
    expected[0] = 0
    expected[513] = expected[1025] = 2
    reports = {}
    for workers in (1, 3):
        any_size.setenv("ROCKE_EMU_WORKERS", str(workers))
        buf = torch.zeros(groups + 1, dtype=torch.int32)
        reports[workers] = emu.launch(asm, "chain", (groups,), (64,), [buf])
        assert torch.equal(buf, expected), f"{workers} workers"
    assert reports[1].reruns == 0
    assert reports[3].workers == 3 and reports[3].reruns == 2   # shares 1 and 2 ran again
    assert reports[3].instructions == reports[1].instructions
    assert reports[3].lane_instructions == reports[1].lane_instructions


def test_reads_of_written_bytes_are_found_and_read_only_regions_not_tracked():
    from rocke.emu.memory import GlobalMemory
    data = np.arange(64, dtype=np.uint8)
    constant = np.arange(64, dtype=np.uint8)
    child = GlobalMemory()
    child.add(data.ctypes.data, 64, "data", True, data)
    child.add(constant.ctypes.data, 64, "constant", False, constant)
    child.track_reads()
    child.load(np.array([data.ctypes.data + 16], np.uint64), 4)
    child.load(np.array([constant.ctypes.data], np.uint64), 8)
    read = child.read_bytes()
    assert [(index, low, high) for index, low, high, _ in read] == \
        [(sorted(child.regions, key=lambda r: r.start).index(
            next(r for r in child.regions if r.name == "data")), 16, 20)]
    parent = GlobalMemory()
    parent.add(data.ctypes.data, 64, "data", True, data)
    parent.add(constant.ctypes.data, 64, "constant", False, constant)
    parent.track_writes()
    parent.store(np.array([data.ctypes.data + 20], np.uint64), np.zeros((1, 4), np.uint8))
    assert not parent.read_any_written(read)       # bytes 20-23 stored, 16-19 read
    parent.store(np.array([data.ctypes.data + 18], np.uint64), np.zeros((1, 2), np.uint8))
    assert parent.read_any_written(read)


def test_fault_in_a_worker_share_raises_the_serial_error_and_rolls_back(any_size):
    # the tensors hold 299.5 workgroups of elements but n_elements asks for 300: only the
    # last workgroup (in the third share, a child process) faults
    n = 299 * 1024 + 512
    x, y, out = axpy_args(n, n)
    x0, y0 = x.clone(), y.clone()
    messages = {}
    for workers in (1, 3):
        with pytest.raises(MemoryFault) as caught:
            run_axpy(any_size, workers, 300 * 1024, x, y, out)
        messages[workers] = str(caught.value)
        assert torch.all(out == 7.0), "a failed launch left bytes written"
        assert torch.equal(x, x0) and torch.equal(y, y0)
    assert messages[3] == messages[1]
    assert "workgroup (299, 0, 0)" in messages[3]


def test_global_atomics_run_serially_and_right(any_size):
    any_size.setenv("ROCKE_EMU_WORKERS", "2")
    n_rows, n_cols = 150, 50   # 10 workgroups add into the same 50 floats
    x = torch.randn(n_rows, n_cols, generator=generator(13))
    out = torch.zeros(n_cols)
    report = launch_fixture("column_sum_atomic_f32", (cdiv(n_rows, 16), 1, 1), x_ptr=x,
                            out_ptr=out, n_rows=n_rows, n_cols=n_cols, row_stride=n_cols)
    assert report.workers == 1
    torch.testing.assert_close(out, x.sum(dim=0), atol=1e-4, rtol=1e-5)


def test_serial_reasons_name_the_instruction():
    from rocke.emu.launch import _program
    from rocke.emu.program import decode_kernel

    def reason(name):
        info, asm = load_fixture(name)
        program, _ = _program(asm)
        return parallel.serial_reason(
            decode_kernel(program, program.kernels[info["kernel_symbol"]]).code)

    assert reason("histogram_atomic_i32").startswith("global atomic `global_atomic_add")
    assert reason("spin_lock").startswith("global atomic")
    assert reason("atomics_mix_i32").startswith("cross-workgroup fence `buffer_wbl2 sc1`")
    assert reason("softmax_rows_f32") is None and reason("matmul_f16_mfma32") is None


def test_small_launches_and_profiles_stay_in_one_process(monkeypatch):
    monkeypatch.setenv("ROCKE_EMU_WORKERS", "2")
    n = 4 * 1024
    x, y, out = axpy_args(n, n)
    report = launch_fixture("axpy_f32", (4, 1, 1), x_ptr=x, y_ptr=y, out_ptr=out, alpha=0.75,
                            n_elements=n)
    assert report.workers == 1   # below PARALLEL_MIN_WORK
    monkeypatch.setattr(launch_module, "PARALLEL_MIN_WORK", 0)
    info, asm = load_fixture("axpy_f32")
    report = emu.launch(asm, info["kernel_symbol"], (4,), (256,), [x, y, out, 0.75, n, None,
                                                                   None], profile=True)
    assert report.workers == 1 and report.profile is not None


def test_workers_lever(monkeypatch):
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("ROCKE_EMU_WORKERS", bad)
        with pytest.raises(ValueError, match="ROCKE_EMU_WORKERS"):
            env.emu_workers()
    monkeypatch.delenv("ROCKE_EMU_WORKERS")
    monkeypatch.setattr(env.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert env.emu_workers() == 3              # unset: every usable core
    monkeypatch.setattr(env.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert env.emu_workers() == env.EMU_WORKERS_CAP
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert env.emu_workers() == 1              # the suite is spread over the cores already
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    monkeypatch.setenv("ROCKE_EMU_WORKERS", "5")
    assert env.emu_workers() == 5
    monkeypatch.setenv("ROCKE_EMU_WORKERS", "auto")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert env.emu_workers() == 1
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert 1 <= env.emu_workers() <= env.EMU_WORKERS_CAP


def test_written_bytes_round_trip_only_what_was_stored():
    from rocke.emu.memory import GlobalMemory
    source = np.arange(64, dtype=np.uint8)
    target = np.zeros(64, np.uint8)
    memory = GlobalMemory()
    memory.add(source.ctypes.data, 64, "buffer", True, source)
    memory.track_writes()
    addresses = np.array([source.ctypes.data + 8, source.ctypes.data + 40], np.uint64)
    memory.store(addresses, np.full((2, 4), 200, np.uint8))
    written = memory.written_bytes()
    other = GlobalMemory()
    other.add(target.ctypes.data, 64, "buffer", True, target)
    other.apply_written(written)
    expected = np.zeros(64, np.uint8)
    expected[8:12] = expected[40:44] = 200
    assert np.array_equal(target, expected)


def test_huge_grid_over_workers_lists_nothing_and_times_out_as_in_serial(any_size):
    # 2**38 workgroups cut into shares: neither pools nor shares may be materialized
    import time
    any_size.setenv("ROCKE_EMU_WORKERS", "2")
    x, y, out = axpy_args(64, 64)
    info, asm = load_fixture("axpy_f32")
    start = time.perf_counter()
    with pytest.raises(emu.LaunchTimeout, match="workgroups not started"):
        emu.launch(asm, info["kernel_symbol"], (2 ** 22 - 1, 2 ** 16), (256,),
                   [x, y, out, 0.75, 0, None, None], timeout_s=0.3)
    assert time.perf_counter() - start < 20
    assert torch.all(out == 7.0)


def test_a_worker_that_dies_is_an_emulator_error():
    import os
    from rocke.emu.memory import GlobalMemory

    def run_share(share):
        if share[0]:          # the child's share: die without a result
            os._exit(3)
        return [1] * 7, 1, 1

    with pytest.raises(emu.EmulatorError, match="ended without a result"):
        parallel.run_shares(run_share, [range(0, 1), range(1, 2)], GlobalMemory())
