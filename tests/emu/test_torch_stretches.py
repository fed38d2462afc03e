"""Straight-line stretches on the torch backend's device copies (rocke/emu/torch_graphs.py).

On the CPU the stretches run their host pass and staging with the device steps eager (the
CUDA graph capture itself needs a GPU; those cases skip without one). The bit-identity of whole
kernels through stretches is also covered by test_torch_backend's cpu-copies devices."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rocke.emu as emu  # noqa: E402
from rocke import env  # noqa: E402
from rocke.emu import torch_exec, torch_graphs  # noqa: E402
from tests.emu import test_triton_kernels as T  # noqa: E402
from tests.emu.test_engine import DYNAMIC_LDS, compile_ir  # noqa: E402
from tests.emu.test_torch_backend import backend_env  # noqa: E402

CUDA_ONLY = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU (CI has none)")


def test_stretch_ends_stop_at_targets_and_other_instructions():
    # pcs: 0-5 device/host steps, 6 neither (a branch, say), 7-11 device steps;
    # a branch target at 3
    device = np.array([1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1], bool)
    host = np.array([0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0], bool)
    target = np.zeros(13, bool)
    target[3] = True
    ends = torch_graphs.stretch_ends([None] * 12, target, device, host)
    # from 0 the stretch stops before the target 3: 2 device steps, too few (MIN 4)
    assert torch_graphs.MIN_DEVICE_STEPS == 4
    assert ends[:3].tolist() == [-1, -1, -1]
    assert ends[3] == -1                    # 3, 4, 5: three device steps
    assert ends[6] == -1                    # not a step
    assert ends[7:9].tolist() == [12, 12]   # 7-11: five, then four device steps
    assert ends[9:12].tolist() == [-1, -1, -1]


def _step(**attributes):
    """A decoded instruction stand-in for mask_cuts: its closure's attributes."""
    from types import SimpleNamespace
    return SimpleNamespace(run=SimpleNamespace(**attributes))


VCC = 106


def _mask_cuts(code, device, named=None):
    """mask_cuts over `code` (device steps where `device`, host steps elsewhere); `named`:
    pc -> the SGPRs a step names (empty for the rest)."""
    device = np.array(device, bool)
    named = named or {}
    index = {id(d): q for q, d in enumerate(code)}
    return torch_graphs.mask_cuts(code, device, ~device, np.zeros(len(code) + 1, bool),
                                  lambda d: named.get(index[id(d)], frozenset()))


def test_mask_cuts_keep_a_compare_and_its_mask_readers_in_one_stretch():
    """A compare's mask (VCC) kept on the device serves the stretch's later mask reads; a
    host step that names VCC, a scalar read of it, a write of a pair overlapping it, each start
    a new stretch (the host pass runs before the device steps, and the mask reaches the pool
    only when the stretch ends)."""
    cmp_vcc = _step(mask_write=VCC, mask_reads=frozenset(), scalar_reads=frozenset())
    cndmask = _step(mask_write=None, mask_reads=frozenset({VCC}), scalar_reads=frozenset())
    plain = _step(mask_write=None, mask_reads=frozenset(), scalar_reads=frozenset())
    scalar_vcc = _step(mask_write=None, mask_reads=frozenset(), scalar_reads=frozenset({VCC}))
    overlap = _step(mask_write=VCC + 1, mask_reads=frozenset(), scalar_reads=frozenset())
    host = _step()
    # cmp, cndmask, plain, host naming s6 (not VCC), cmp again (same pair), cndmask: no cut
    cuts = _mask_cuts([cmp_vcc, cndmask, plain, host, cmp_vcc, cndmask], [1, 1, 1, 0, 1, 1],
                      {3: frozenset({6, 7})})
    assert not cuts.any()
    # a host step naming VCC's high half after the compare: cut before it
    cuts = _mask_cuts([cmp_vcc, cndmask, host, cndmask], [1, 1, 0, 1], {2: frozenset({VCC + 1})})
    assert cuts.tolist() == [False, False, True, False, False]
    # a host step that names VCC before any compare: no cut (the host pass stages it)
    assert not _mask_cuts([host, cmp_vcc, cndmask], [0, 1, 1], {0: frozenset({VCC})}).any()
    # a scalar read of VCC, an overlapping pair's write, an unknown host step: cut
    assert _mask_cuts([cmp_vcc, scalar_vcc], [1, 1]).tolist() == [False, True, False]
    assert _mask_cuts([cmp_vcc, overlap], [1, 1]).tolist() == [False, True, False]
    unknown = _mask_cuts([cmp_vcc, plain, host], [1, 1, 0])
    assert not unknown.any()      # names nothing
    code = [cmp_vcc, plain, host]
    cuts = torch_graphs.mask_cuts(code, np.array([1, 1, 0], bool), np.array([0, 0, 1], bool),
                                  np.zeros(4, bool), lambda d: None)
    assert cuts.tolist() == [False, False, True, False]


def _stretch_runners(monkeypatch):
    runners = []
    real = torch_graphs.StretchRunner.__init__

    def init(self, *args, **kw):
        real(self, *args, **kw)
        runners.append(self)
    monkeypatch.setattr(torch_graphs.StretchRunner, "__init__", init)
    return runners


def _flash_run(check):
    case = next(c for c in T.FLASH_CASES if c[0] == "flash_attn_fwd_d128_causal")
    T.test_flash_attention_fwd(*case) if check else _no_check(T.test_flash_attention_fwd, case)


def _no_check(test, case):
    real = emu.launch

    def launch(*args, **kw):
        kw["check"] = False
        return real(*args, **kw)
    emu.launch, saved = launch, emu.launch
    try:
        test(*case)
    finally:
        emu.launch = saved


@pytest.mark.parametrize("check", [True, False], ids=["checked", "unchecked"])
def test_flash_attention_runs_through_stretches(monkeypatch, check):
    """The causal flash kernel's loop shrinks its batch every iteration: its stretches still run
    staged (every wave, the batch's EXEC) after their first sighting, DS steps too when the
    race checker is off, and the kernel's own test (against an fp32 reference) passes."""
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", True)
    runners = _stretch_runners(monkeypatch)
    with backend_env("torch", "cpu"):
        _flash_run(check)
    assert runners, "no stretch runner was made"
    staged = sum(r.staged_runs for r in runners)
    assert staged > 0 and all(r.replays == 0 for r in runners)   # no graphs on the CPU
    ds_steps = sum(len(r.lds_steps) for r in runners)
    assert sum(r.device_step.sum() for r in runners) > 0
    kernel = runners[0].pool.kernel
    lds_access = [q for q, d in enumerate(kernel.code) if d is not None and
                  d.instr.mnemonic.startswith(("ds_read", "ds_write"))]
    assert lds_access
    assert any(runners[0].device_step[q] for q in lds_access) == (not check)
    assert ds_steps == 0       # flags are for captured graphs only
    # the causal mask's compares and the epilogue's division (v_div_scale writes VCC) keep
    # their lane masks on the device, inside stretches
    mask_writers = [q for q, d in enumerate(kernel.code) if d is not None and
                    getattr(d.run, "mask_write", None) is not None]
    names = {kernel.code[q].instr.mnemonic.split("_e")[0] for q in mask_writers}
    assert {"v_div_scale_f32", "v_cmp_gt_i32"} <= names, names
    assert all(runners[0].device_step[q] for q in mask_writers)
    assert any(runners[0].ends[q] > q for q in mask_writers)


def test_a_later_launch_reuses_the_pool_arrays_and_stretches(monkeypatch):
    """The second launch of the same kernel and shape takes the first's device arrays and
    stretch runner (graphs, on a GPU), re-uploading its registers and zeroing its LDS; its output
    is checked against the fp32 reference by the kernel's own test both times."""
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", True)
    monkeypatch.setattr(torch_exec, "_KEPT_POOLS", {})
    runners = _stretch_runners(monkeypatch)
    with backend_env("torch", "cpu"):
        _flash_run(False)
        made, staged = len(runners), sum(r.staged_runs for r in runners)
        _flash_run(False)
    assert made >= 1 and len(runners) == made, "the second launch made its own runner"
    assert sum(r.staged_runs for r in runners) > staged
    assert all(r.pool is not None for r in runners)


def test_device_copies_start_from_numpys_initial_registers(monkeypatch):
    """Device copies keep only v0 (the work-item ids) on the host and zero the rest of the
    VGPR file on the device, a reused pool's too: at the scheduler's start the device file is
    numpy's initial VGPR file, bit for bit, on the first launch and on a second that takes the
    first's dirty arrays."""
    from rocke.emu import machine
    monkeypatch.setattr(torch_exec, "_KEPT_POOLS", {})
    seen = []
    real = machine.Pool.run

    def run(self):
        tv = getattr(self, "tv", None)
        seen.append(tv.clone().numpy() if tv is not None else self.vgpr.view(np.int32).copy())
        return real(self, *())
    monkeypatch.setattr(machine.Pool, "run", run)
    with backend_env("numpy"):
        _flash_run(False)
    want = seen[:]
    assert want and want[0][:, 0].any() and want[0].shape[1] > 1
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", True)
    for _ in range(2):
        seen.clear()
        with backend_env("torch", "cpu"):
            _flash_run(False)
        assert len(seen) == len(want)
        for got, expected in zip(seen, want):
            assert np.array_equal(got, expected)


def _stand_in_capture(monkeypatch):
    """The CUDA code path on the CPU with captures stood in for (torch_graphs.SIMULATE_CAPTURE),
    and no pools kept from earlier tests."""
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", True)
    monkeypatch.setattr(torch_graphs, "SIMULATE_CAPTURE", True)
    monkeypatch.setattr(torch_exec, "_KEPT_POOLS", {})
    return _stretch_runners(monkeypatch)


def test_stand_in_captures_replay_across_pools_on_the_cpu(monkeypatch):
    """With captures stood in for, the flash kernel's stretches are captured (nothing refused,
    as on the H200), replayed, and replayed again by a second launch's pool; both outputs pass
    the kernel's own test."""
    runners = _stand_in_capture(monkeypatch)
    with backend_env("torch", "cpu"):
        _flash_run(False)
        first = sum(r.replays for r in runners)
        _flash_run(False)
    assert len(runners) == 1 and runners[0].captures > 0
    assert not runners[0].refusals, runners[0].refusals[:3]
    assert first > 0 and runners[0].replays > first


def test_stand_in_capture_finds_a_graph_input_owned_by_a_pool(monkeypatch):
    """The defect of 3a48d86: the lane bits that unpack staged masks belonged to the pool, so
    the second launch's replays would read the first pool's freed tensor on a GPU. The stand-in
    capture names it on the CPU."""
    runners = _stand_in_capture(monkeypatch)

    def lane_bits_of_the_pool(pool):
        if not hasattr(pool, "own_lane_bits"):
            pool.own_lane_bits = torch.arange(64, dtype=torch.int64, device=pool.device)
        return pool.own_lane_bits
    monkeypatch.setattr(torch_exec.TorchPool, "_lane_bits", lane_bits_of_the_pool)
    with backend_env("torch", "cpu"):
        _flash_run(False)
        with pytest.raises(emu.EmulatorError, match="StaleGraphInput: the stretch at pc .* "
                                                    "its capture did not"):
            _flash_run(False)
    assert runners and runners[0].replays > 0


def test_stand_in_capture_refuses_a_tensor_made_from_host_data(monkeypatch):
    """A device step that makes a tensor from host data (a copy a CUDA capture refuses, as the
    first form of the v_perm table did) is refused on the CPU too, and the stretch then runs
    staged with the same results."""
    runners = _stand_in_capture(monkeypatch)
    monkeypatch.setattr(torch_exec, "device_constant", lambda name, device, make: make())
    with backend_env("torch", "cpu"):
        _flash_run(False)
    refusals = [text for r in runners for text in r.refusals]
    assert any("makes a tensor from host data (torch.tensor)" in text for text in refusals), \
        refusals[:3]
    assert sum(r.staged_runs for r in runners) > 0


def test_stretches_off_lever(monkeypatch):
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", True)
    runners = _stretch_runners(monkeypatch)
    monkeypatch.setenv("ROCKE_EMU_STRETCHES", "0")
    with backend_env("torch", "cpu"):
        _flash_run(False)
    assert runners == []
    monkeypatch.setenv("ROCKE_EMU_STRETCHES", "yes")
    with pytest.raises(ValueError, match="ROCKE_EMU_STRETCHES must be 0 or 1"):
        env.emu_stretches()


LDS_LOOP = """
@dyn = external addrspace(3) global [0 x i32], align 16
define amdgpu_kernel void @ldsloop(ptr addrspace(1) %out, i32 %stride) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%next, %loop]
  %acc = phi i32 [0, %entry], [%sum, %loop]
  %step = mul i32 %i, %stride
  %slot = add i32 %tid, %step
  %p = getelementptr i32, ptr addrspace(3) @dyn, i32 %slot
  %seed = mul i32 %acc, 7
  store i32 %seed, ptr addrspace(3) %p
  %v = load volatile i32, ptr addrspace(3) %p
  %x = xor i32 %v, %i
  %y = mul i32 %x, 3
  %z = add i32 %y, %tid
  %sum = add i32 %acc, %z
  %next = add i32 %i, 1
  %more = icmp ult i32 %next, 4
  br i1 %more, label %loop, label %exit
exit:
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %tid
  store i32 %sum, ptr addrspace(1) %po
  ret void
}
"""


@pytest.fixture(scope="module")
def lds_loop():
    return compile_ir(LDS_LOOP)


def _lds_loop_fault(asm, backend, stride):
    out = torch.zeros(64, dtype=torch.int32)
    with backend_env(*backend), pytest.raises(emu.LdsFault) as info:
        emu.launch(asm, "ldsloop", 1, 64, [out, stride], shared_mem=64 * 3 * 4, check=False)
    return str(info.value)


def test_lds_out_of_bounds_in_a_staged_stretch_is_numpys_fault(monkeypatch, lds_loop):
    """Iteration 3 of the loop stores past the 768 bytes of LDS: the stretch that holds the DS
    steps runs staged from its second sighting and names the same lane as numpy."""
    out = torch.zeros(64, dtype=torch.int32)
    emu.launch(lds_loop, "ldsloop", 1, 64, [out, 40], shared_mem=64 * 3 * 4, check=False)
    want = out.clone()   # in bounds: numpy's result
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", True)
    runners = _stretch_runners(monkeypatch)
    with backend_env("torch", "cpu"):
        out.zero_()
        emu.launch(lds_loop, "ldsloop", 1, 64, [out, 40], shared_mem=64 * 3 * 4, check=False)
    assert torch.equal(out, want), "torch's stretches differ from numpy"
    assert runners and runners[-1].staged_runs > 0, "the loop never ran a staged stretch"
    expected = _lds_loop_fault(lds_loop, ("numpy", "cpu"), 64)
    assert "lane 0" in expected and "768 bytes" in expected, expected
    assert _lds_loop_fault(lds_loop, ("torch", "cpu"), 64) == expected


@CUDA_ONLY
def test_flash_attention_replays_graphs_on_cuda(monkeypatch):
    runners = _stretch_runners(monkeypatch)
    with backend_env("torch", "cuda"):
        _flash_run(False)
    assert sum(r.replays for r in runners) > 0 and sum(r.captures for r in runners) > 0
    assert not any(r.refusals for r in runners), [r.refusals[:3] for r in runners]


@CUDA_ONLY
def test_graphs_replayed_by_a_later_pool_read_nothing_the_first_pool_freed(monkeypatch):
    """A later launch of the same kernel and shape replays the graphs the first one captured,
    after the first pool is gone: what those graphs read (the lane bits that unpack staged
    masks, the tables of ops) must outlive it. The first pool's freed device memory is filled
    with junk before the second launch; the kernel's own test checks both outputs."""
    import gc
    monkeypatch.setattr(torch_exec, "_KEPT_POOLS", {})
    runners = _stretch_runners(monkeypatch)
    with backend_env("torch", "cuda"):
        _flash_run(False)
        captured = sum(r.captures for r in runners)
        gc.collect()
        junk = [torch.full((64,), -1, dtype=torch.int64, device="cuda") for _ in range(4096)]
        _flash_run(False)
    del junk
    assert captured > 0 and sum(r.replays for r in runners) > 0
    assert len(runners) == 1, "the second launch made its own runner: no graph was replayed"


@CUDA_ONLY
def test_lds_out_of_bounds_in_a_replayed_graph_is_named(lds_loop):
    """A graph cannot stop at the faulting lane: the DS step's flag names the instruction."""
    out = torch.zeros(64, dtype=torch.int32, device="cuda")
    with backend_env("torch", "cuda"), pytest.raises(emu.LdsFault) as info:
        emu.launch(lds_loop, "ldsloop", 1, 64, [out, 64], shared_mem=64 * 3 * 4, check=False)
    message = str(info.value)
    assert "ds_write" in message and "768 bytes" in message, message


def test_lds_out_of_bounds_outside_a_stretch_is_flagged_without_a_read(monkeypatch):
    """A DS instruction that runs on its own (no loop: never replayed) on the GPU's path flags
    its out-of-bounds lanes on the device instead of reading them back (a sync each); the
    launch still fails, naming the instruction, and leaves the output untouched. In bounds,
    the bits are numpy's."""
    asm = compile_ir(DYNAMIC_LDS)   # lane i stores and loads LDS word i * stride
    want = torch.zeros(64, dtype=torch.int32)
    emu.launch(asm, "dynlds", 1, 64, [want, 1], shared_mem=256, check=False)
    monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", True)
    monkeypatch.setattr(torch_graphs, "SIMULATE_CAPTURE", True)
    runners = _stretch_runners(monkeypatch)
    out = torch.zeros(64, dtype=torch.int32)
    with backend_env("torch", "cpu"):
        emu.launch(asm, "dynlds", 1, 64, [out, 1], shared_mem=256, check=False)
        assert torch.equal(out, want)
        out.fill_(-1)
        with pytest.raises(emu.LdsFault) as info:
            emu.launch(asm, "dynlds", 1, 64, [out, 8], shared_mem=256, check=False)
    message = str(info.value)
    assert "ds_write" in message and "256 bytes" in message and "after the fact" in message, \
        message
    assert any(r.lds_eager for r in runners), "the DS instruction was not flagged on the device"
    assert torch.equal(out, torch.full((64,), -1, dtype=torch.int32))


SAME_ADDRESS_STORE = """
define amdgpu_kernel void @same(ptr addrspace(1) %out, ptr addrspace(1) %all) {
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  store i32 %tid, ptr addrspace(1) %out
  %p = getelementptr i32, ptr addrspace(1) %all, i32 %tid
  store i32 %tid, ptr addrspace(1) %p
  ret void
}
"""


def test_global_stores_on_the_device_keep_numpys_order(monkeypatch):
    """Every lane storing to one address (the host path: the last lane wins) and every lane to
    its own (the device path) give numpy's bytes on the GPU's memory path."""
    asm = compile_ir(SAME_ADDRESS_STORE)
    outs, taken = {}, []
    real = torch_exec._global_store_on_device

    def store_on_device(*args):
        taken.append(real(*args))
        return taken[-1]
    monkeypatch.setattr(torch_exec, "_global_store_on_device", store_on_device)
    for backend in (("numpy", "cpu"), ("torch", "cpu")):
        monkeypatch.setattr(torch_exec, "SEPARATE_CPU_COPIES", backend[0] == "torch")
        out, every = torch.full((4,), -1, dtype=torch.int32), torch.zeros(256, dtype=torch.int32)
        with backend_env(*backend):
            emu.launch(asm, "same", 1, 256, [out, every])
        outs[backend[0]] = (out, every)
    assert torch.equal(outs["torch"][0], outs["numpy"][0]) and outs["numpy"][0][0] == 255
    assert torch.equal(outs["torch"][1], torch.arange(256, dtype=torch.int32))
    assert taken == [False, True]    # one batch of 4 waves: the shared address left to the host
