"""Straight-line stretches of a kernel replayed as CUDA graphs (the torch backend on a GPU).

Why: on a GPU the torch backend's time is host time. Each emulated instruction issues 10-30
torch operations at ~10-20 us of Python and launch overhead each, whatever the batch's width,
so a launch of 16,384 waves runs no faster per instruction than one of 4,096. A captured CUDA
graph replays a whole stretch of instructions in one launch.

A stretch starts at any pc and runs to just before the next branch target, control
instruction or instruction that is neither kind of step below. Its steps, in program order:
- device steps: VALU closures without DPP and without a lane-mask, EXEC or scalar
  destination, and the MFMAs. They touch only the VGPR tensor; what they read from the host
  (an SGPR column, a lane mask in an SGPR pair, EXEC when some lanes are off) is asked of the
  pool through `sgpr_on_device`, `sgpr64_on_device`, `mask_on_device` and `tmask`;
- host steps: the scalar instructions (SALU, SMEM, waits, no-ops), which run on the host.
A host step never reads what a device step writes (VGPRs) and a device step writes no host
state, so running every host step first, in order, and then the device steps gives the
order's results, provided each device step sees the host values of its own position: the host
pass records them into staging tensors, and the device steps read the staging tensors.

A stretch's first sighting (per start pc and batch) runs step by step as usual, recording
which host values each device step asks for. Later sightings take the host pass, fill the
staging tensors, and replay the graph captured for the stretch's EXEC pattern (which device
steps had every lane on), capturing it the first time. Capture refuses anything that would
read the device or copy from the host (`CaptureRefused`); such a stretch runs its device steps
eagerly from the staging tensors from then on. On the CPU there are no graphs: tests run the
same host pass and staging with the device steps eager (`capture=False`), so CI covers
everything but the capture itself.

Tests on the CPU can also stand in for capture and replay (`SIMULATE_CAPTURE`): a stretch's
"capture" runs its device steps once in capture mode (so whatever a real capture refuses is
refused alike) and notes every tensor they read that they did not make; each "replay" runs
them again and must read only those same tensors. A replayed graph reads fixed addresses: a
tensor it reads that is not the one its capture read (say, one made afresh by a later pool,
while the captured one is freed) is a silent wrong result on a GPU, and `StaleGraphInput` here.
"""
from __future__ import annotations

import numpy as np

from .errors import LdsFault
from .machine import LDS_GRANULE
from .operands import EXEC_LO

MIN_DEVICE_STEPS = 4      # a shorter stretch is not worth its host pass and replay
SGPR_COLUMNS = 128        # staging capacity of one pool: SGPR columns ...
MASK_SLOTS = 64           # ... and lane masks (EXEC per device step, and mask operands)
LDS_STEPS = 256           # DS steps of a kernel with an out-of-bounds flag each


# Tests only: on the CPU, stand in for graph capture and replay (see the module docstring)
SIMULATE_CAPTURE = False


class CaptureRefused(Exception):
    """A device step did something a graph cannot hold (a host read, a copy from the host)."""


class StaleGraphInput(AssertionError):
    """A simulated replay read a tensor its capture did not: on a GPU, the graph would read
    the captured tensor's memory instead (see the module docstring)."""


def _torch_module():
    import torch
    return torch


def _tensors(value):
    torch = _torch_module()
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _read_audit():
    """A torch function mode noting the storages of every tensor an op reads that no op under
    it made (`reads`: data pointer -> storage, which keeps it alive: no later tensor can take
    its address and pass for it). A tensor made from host data is refused, as a capture on a
    GPU refuses its copy from the host."""
    torch = _torch_module()
    from torch.overrides import TorchFunctionMode
    from_host = {torch.tensor, torch.as_tensor, torch.from_numpy}

    class ReadAudit(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.made, self.reads = set(), {}

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in from_host:
                raise CaptureRefused(f"a device step makes a tensor from host data "
                                     f"(torch.{func.__name__})")
            kwargs = kwargs or {}
            for tensor in _tensors((args, kwargs)):
                storage = tensor.untyped_storage()
                pointer = storage.data_ptr()
                if pointer and pointer not in self.made:
                    self.reads.setdefault(pointer, storage)
            result = func(*args, **kwargs)
            for tensor in _tensors(result):
                pointer = tensor.untyped_storage().data_ptr()
                if pointer not in self.reads:
                    self.made.add(pointer)
            return result
    return ReadAudit()


def stretch_ends(code, is_target, device_step, host_step) -> np.ndarray:
    """Per pc, the end (exclusive) of the stretch starting there, or -1 when none starts there
    (fewer than MIN_DEVICE_STEPS device steps before the stretch would end)."""
    n = len(code)
    ends = np.full(n + 1, -1, np.int64)
    stop, devices = n, 0            # the stretch through p+1 while walking down
    for p in range(n - 1, -1, -1):
        if not (device_step[p] or host_step[p]):
            stop, devices = p, 0
            continue
        if p + 1 < n and (p + 1 == stop or is_target[p + 1]):
            stop, devices = p + 1, 0
        devices += int(device_step[p])
        if devices >= MIN_DEVICE_STEPS:
            ends[p] = stop
    return ends


def mask_cuts(code, device_step, host_step, is_target, sgpr_operands) -> np.ndarray:
    """Per pc, whether a stretch must end before it: a device step that writes a lane mask
    (`run.mask_write`: an SGPR pair) keeps it on the device until the stretch ends, so within
    the stretch only later device steps may read that pair, and only as a lane mask (served
    the kept mask). A host step naming any of its SGPRs, a scalar read of one, a read or
    write of a pair that only overlaps it, starts a new stretch. `sgpr_operands(d)`: the SGPRs
    `d` names (None: unknown, so any)."""
    n = len(code)
    cuts = np.zeros(len(is_target), bool)
    written, pairs = set(), set()   # SGPRs / pairs of the mask writes since the last cut
    for p in range(n):
        if not (device_step[p] or host_step[p]) or is_target[p]:
            written, pairs = set(), set()
            if not (device_step[p] or host_step[p]):
                continue
        if not written and not (device_step[p] and getattr(code[p].run, "mask_write", None)
                                is not None):
            continue
        run = code[p].run
        write = getattr(run, "mask_write", None) if device_step[p] else None
        if host_step[p]:
            named = sgpr_operands(code[p])
            clash = named is None or bool(named & written)
        else:
            reads = getattr(run, "scalar_reads", None)
            if reads is None:         # a device step of another kind: any SGPR it names
                reads = sgpr_operands(code[p])
            clash = reads is None or bool(reads & written) or any(
                q not in pairs and {q, q + 1} & written
                for q in getattr(run, "mask_reads", ()))
            if write is not None and write not in pairs and {write, write + 1} & written:
                clash = True
        if clash:
            cuts[p] = True
            written, pairs = set(), set()
        if write is not None:
            pairs.add(write)
            written |= {write, write + 1}
    return cuts


class _Plan:
    """What the device steps of one stretch read from the host, learned at its first sighting:
    per device step a list of ("sgpr", index) / ("mask", index), and their staging slots."""

    def __init__(self, device_positions, exec_versions):
        self.inputs = {k: [] for k in device_positions}
        self.exec_versions = exec_versions   # step -> EXEC version (host steps that write EXEC)
        self.columns = self.masks = 0
        self.slots = {}            # (step, entry number) -> staging slot
        self.exec_slot = {}        # step -> mask slot for its EXEC (one per EXEC version)

    def allocate(self) -> bool:
        version_slot = {}
        for step, entries in self.inputs.items():
            version = self.exec_versions[step]
            if version not in version_slot:
                version_slot[version] = self.masks
                self.masks += 1
            self.exec_slot[step] = version_slot[version]
            for i, (kind, _) in enumerate(entries):
                if kind == "sgpr":
                    self.slots[step, i] = self.columns
                    self.columns += 1
                else:
                    self.slots[step, i] = self.masks
                    self.masks += 1
        return self.columns <= SGPR_COLUMNS and self.masks <= MASK_SLOTS


class _StandInGraph:
    """SIMULATE_CAPTURE's graph: the storages its capture read, kept alive."""

    def __init__(self, reads):
        self.reads = reads


class StretchRunner:
    """Runs the stretches of one TorchPool (see the module docstring).

    Device steps after a stretch's first sighting run over every wave of the pool, whatever
    the batch: the waves outside the batch have their lanes off in the staged EXEC, so their
    registers are untouched. That keeps one graph per stretch and EXEC pattern for every batch
    (a loop whose batch shrinks every iteration, as a causal mask makes it, replays the same
    graphs), at the price of device work on waves that sit elsewhere."""

    def __init__(self, pool, ends, device_step, capture: bool):
        self.pool, self.ends, self.device_step, self.capture = pool, ends, device_step, capture
        self.simulate = not capture and SIMULATE_CAPTURE
        torch = pool.torch
        self.waves = pool.num_waves
        self.every_wave = slice(0, self.waves)
        self.plans: dict = {}       # start pc -> _Plan, or None when it needs too many slots
        self.graphs: dict = {}      # (start pc, EXEC pattern) -> graph, or None: refused
        self.columns = torch.zeros((SGPR_COLUMNS, self.waves), dtype=torch.int32,
                                   device=pool.device)
        self.masks = torch.zeros((MASK_SLOTS, self.waves), dtype=torch.int64, device=pool.device)
        pool.unpack_lanes(self.masks[0])   # makes the lane bits before any capture
        self.all_on = torch.ones((self.waves, 64), dtype=torch.bool, device=pool.device)
        # LDS: each wave's workgroup base, and per DS step a flag of an out-of-bounds lane
        # (a replayed graph cannot stop at the fault; the flags are read after the replay)
        self.lds_base = pool.to_device((pool.wg_of * pool.lds_stride).astype(np.int64))[:, None]
        self.lds_sink = pool.tl.numel() - LDS_GRANULE   # TorchPool's sink
        self.lds_faults = torch.zeros(LDS_STEPS, dtype=torch.bool, device=pool.device)
        self.lds_steps: dict = {}   # pc -> flag index
        self.lds_eager: dict = {}   # id(instruction) -> (instruction, flag index): eager DS
        self._unpacked: dict = {}   # slot -> its lanes unpacked, within one run of a stretch
        # SGPR pair -> the lane mask (waves, 64) a device step of the running stretch wrote
        # (mask_cuts); the pool's pending masks once the stretch ends. `graph_masks`: a
        # captured graph's own (its replays write them)
        self.kept_masks: dict = {}
        self.graph_masks: dict = {}
        self.lds_unchecked = False  # a graph with DS steps replayed since the flags were read
        self.mode = None            # None | "discover" | "staged" | "capture"
        self.plan = self.step = None
        self.cursor = 0
        self.exec_of: dict = {}
        self.replays = self.captures = self.staged_runs = 0
        self.refusals: list = []    # why captures were refused (for profiling)
        self._stream = None

    def serve(self, pool):
        """Serve a later pool of the same kernel and shape, whose tensors are this pool's (the
        graphs captured so far replay on them)."""
        assert pool.num_waves == self.waves and pool.tv is not None
        self.pool = pool
        self.lds_base.copy_(pool.to_device((pool.wg_of * pool.lds_stride).astype(np.int64))[:, None])
        self.mode = self.plan = self.step = None

    # ---- the pool's hooks (TorchPool asks these while a mode is on)
    def record(self, kind, index):
        """Discover mode: note a host input of the current device step."""
        self.plan.inputs[self.step].append((kind, index))

    def keep_mask(self, index, lanes) -> bool:
        """A device step wrote lane mask `lanes` to SGPR pair `index`: kept for the stretch's
        later steps; True when the runner holds it (staged, capture), False when the pool
        defers it as usual (discover: the steps run eagerly on the batch; a host step's mask,
        as a mask SALU's in discover mode, is the pool's alone)."""
        if self.step is None or not self.device_step[self.step]:
            return False
        self.kept_masks[index] = lanes
        return self.mode != "discover"

    def _publish_masks(self, sel, masks):
        """The stretch's last mask of each pair to the pool, for the batch's rows: a copy, as
        a replayed graph's mask is its memory, which its next replay (maybe for another
        batch, before the pool reads this one) overwrites."""
        if not masks:
            return
        P = self.pool
        rows = P.tsel(sel)
        for index, lanes in masks.items():
            P.defer_mask(sel, index, lanes[rows].clone())

    def _lanes(self, slot):
        """Device bool (waves, 64) of the 64-bit lane mask staged in `slot`, unpacked once per
        run of the stretch (a slot holds one EXEC version for all its steps, or one mask)."""
        lanes = self._unpacked.get(slot)
        if lanes is None:
            lanes = self._unpacked[slot] = self.pool.unpack_lanes(self.masks[slot])
        return lanes

    def staged(self, kind, index):
        """Staged / capture mode: the staged value of the current step's next host input."""
        i = self.cursor
        self.cursor += 1
        entries = self.plan.inputs[self.step]
        if i >= len(entries) or entries[i] != (kind, index):
            raise CaptureRefused(f"device step {self.step} asked for {kind} {index} out of the "
                                 "order its first run recorded")
        slot = self.plan.slots[self.step, i]
        return self.columns[slot][:, None] if kind == "sgpr" else self._lanes(slot)

    def staged_exec(self):
        """Staged / capture mode: (EXEC as a device bool (waves, 64), all on, lanes)."""
        full, lanes = self.exec_of[self.step]
        return (self.all_on if full else self._lanes(self.plan.exec_slot[self.step])), full, lanes

    def lds_index(self, ins, addr, nbytes, tmask):
        """Staged / capture mode: device flat LDS byte index (waves, 64) of a DS step, lanes
        that are off or out of bounds at the sink; an out-of-bounds lane is raised at once when
        staged, and flagged for after the replay when captured."""
        outside = (addr + nbytes > self.pool.lds_bytes) & tmask
        if self.mode == "staged":
            if bool(outside.any()):
                pool = self.pool
                raise pool.lds_bounds_fault(ins, self.every_wave, pool.host(outside),
                                            pool.host(addr), nbytes)
        else:
            flag = self.lds_steps.get(self.step)
            if flag is None:
                flag = self.lds_steps[self.step] = self._new_flag()
            if flag >= LDS_STEPS:
                raise CaptureRefused("too many DS steps to flag")
            self.lds_faults[flag:flag + 1] |= outside.any().view(1)
        return self.pool.torch.where(tmask & ~outside, self.lds_base + addr, self.lds_sink)

    def _new_flag(self) -> int:
        return len(self.lds_steps) + len(self.lds_eager)

    @property
    def defers_lds_checks(self) -> bool:
        """Whether DS instructions run outside stretches flag out-of-bounds lanes for later
        (`lds_flag`) rather than reading the device: on a GPU (and its stand-in), where that
        read is a sync per instruction."""
        return self.capture or self.simulate

    def lds_flag(self, ins, addr, nbytes, tmask):
        """A DS instruction run eagerly on the GPU: bool (n, 64) of its out-of-bounds active
        lanes, flagged on the device for `check_lds_faults` (None when out of flags: the caller
        reads the device instead)."""
        entry = self.lds_eager.get(id(ins))
        if entry is None:
            entry = self.lds_eager[id(ins)] = (ins, self._new_flag())
        flag = entry[1]
        if flag >= LDS_STEPS:
            return None
        outside = (addr + nbytes > self.pool.lds_bytes) & tmask
        self.lds_faults[flag:flag + 1] |= outside.any().view(1)
        self.lds_unchecked = True
        return outside

    def check_lds_faults(self):
        """Raise the fault of a replayed DS step that flagged an out-of-bounds lane. Called
        where the pool reads the device anyway (a sync: before any host decision that the bad
        lane's data could have steered) and when the pool's run ends."""
        if not self.lds_unchecked:
            return
        self.lds_unchecked = False
        P, code = self.pool, self.pool.kernel.code
        flags = self.lds_faults.cpu().numpy()
        if not flags.any():
            return
        flagged = set(np.flatnonzero(flags).tolist())
        flagged_ins = [(flag, code[q].instr) for q, flag in self.lds_steps.items()] + \
            [(flag, ins) for ins, flag in self.lds_eager.values()]
        for flag, ins in sorted(flagged_ins, key=lambda entry: entry[0]):
            if flag in flagged:
                raise LdsFault(f"LDS out of bounds in {P.where(ins)}: some lane's access "
                               f"falls outside the workgroup's {P.lds_bytes} bytes of LDS "
                               "(static + dynamic); found by a flag the GPU checks after the "
                               "fact (a CUDA-graph replay, or a DS instruction that does not "
                               "stop for a bounds check), which cannot stop at the lane: "
                               "ROCKE_EMU_STRETCHES=0 names the wave, lane and address")

    # ---- running a stretch
    def run(self, p, sel, n) -> int:
        """Run the stretch starting at `p` for the batch `sel`; returns its end."""
        end = int(self.ends[p])
        if p not in self.plans:
            code, version, versions = self.pool.kernel.code, 0, {}
            for q in range(p, end):
                if self.device_step[q]:
                    versions[q] = version
                elif code[q].writes_exec:
                    version += 1
            self.plans[p] = plan = _Plan(list(versions), versions)
            self.plan, self.mode = plan, "discover"
            try:
                self._run_eagerly(p, end, sel, n)
            finally:
                self.mode = self.plan = self.step = None
                self.kept_masks = {}      # the steps deferred their masks to the pool
            if not plan.allocate():
                self.plans[p] = None
            return end
        plan = self.plans[p]
        if plan is None:
            self._run_eagerly(p, end, sel, n)
            return end
        self.plan = plan
        try:
            pattern = self._host_pass(p, end, sel, n)
            masks = self._device_steps(p, end, (p, pattern))
        finally:
            self.mode = self.plan = self.step = None
            self.kept_masks = {}
        self._publish_masks(sel, masks)
        return end

    def _run_eagerly(self, p, end, sel, n):
        """Step by step, as the scheduler runs instructions."""
        P = self.pool
        code = P.kernel.code
        for q in range(p, end):
            d = code[q]
            P.begin_step(d, n)
            self.step = q
            P.lane_instructions += d.run(P, sel, n)
            if d.writes_exec:
                P.exec_changed()

    def _host_pass(self, p, end, sel, n):
        """Host steps run; each device step's EXEC and host inputs are staged (the batch's
        rows; every other wave's EXEC is off). Returns the EXEC pattern."""
        P, plan = self.pool, self.plan
        code = P.kernel.code
        whole = n == self.waves
        # zeroed where the batch leaves rows out (their EXEC must be off); with every wave in
        # the batch each row a step reads is written below (a 1.4 MB memset a pass saved, at
        # 65,536 waves)
        staged_columns, columns = (P.staging_buffer((plan.columns, self.waves), np.int32,
                                                    zero=not whole)
                                   if plan.columns else (None, None))
        staged_masks, masks = (P.staging_buffer((plan.masks, self.waves), np.int64,
                                                zero=not whole)
                               if plan.masks else (None, None))
        pending, exec_staged = [], set()
        exec_by_version = {}       # a host step that writes EXEC starts a new version
        self.exec_of = {}
        for q in range(p, end):
            d = code[q]
            P.begin_step(d, n)
            if not self.device_step[q]:
                P.lane_instructions += d.run(P, sel, n)
                if d.writes_exec:
                    P.exec_changed()
                continue
            version = plan.exec_versions[q]
            state = exec_by_version.get(version)
            if state is None:
                state = exec_by_version[version] = P.exec_summary(sel)
            full, lanes = state
            P.lane_instructions += lanes
            full = full and whole
            self.exec_of[q] = (full, lanes)
            slot = plan.exec_slot[q]
            if not full and slot not in exec_staged:   # once per EXEC version
                masks[slot, sel] = P.host_sgpr_pair(sel, EXEC_LO)
                exec_staged.add(slot)
            for i, (kind, index) in enumerate(plan.inputs[q]):
                slot = plan.slots[q, i]
                if kind == "sgpr":
                    columns[slot, sel] = P.host_sgpr_column(sel, index)
                    continue
                on_device = P.pending_mask(sel, index)
                if on_device is not None:
                    pending.append((slot, on_device))
                else:
                    masks[slot, sel] = P.host_sgpr_pair(sel, index)
        if plan.columns:
            P.upload(self.columns[:plan.columns], staged_columns)
        if plan.masks:
            P.upload(self.masks[:plan.masks], staged_masks)
        for slot, lanes_on in pending:    # a compare's mask still on the device: pack it
            self.masks[slot][P.tsel(sel)] = P.pack_lanes(lanes_on)
        return tuple(full for full, _ in self.exec_of.values())

    def _device_steps(self, p, end, key):
        graph = self.graphs.get(key, False)
        replayed = False
        if graph is False and self.simulate:   # the stand-in capture runs the steps once
            graph = self._simulated_capture(p, end, key)
            replayed = graph is not None
        elif graph is False and self.capture:
            graph = self._capture(p, end, key)
        if graph:
            if self.simulate and not replayed:
                self._simulated_replay(p, end, graph)
            elif not self.simulate:
                graph.replay()
            self.replays += 1
            if not self.lds_unchecked and any(q in self.lds_steps for q in range(p, end)):
                self.lds_unchecked = True
            # a replay writes the masks its capture made; a stand-in replay makes new ones
            return dict(self.kept_masks) if self.simulate else self.graph_masks.get(key, {})
        self._run_staged(p, end, "staged")     # no graphs here (the CPU), or refused
        self.staged_runs += 1
        return dict(self.kept_masks)

    def _run_staged(self, p, end, mode):
        P, code = self.pool, self.pool.kernel.code
        self.mode = mode
        self.kept_masks = {}
        self._unpacked = {}    # what a graph captured here reads of it, it also computes
        try:
            for q in range(p, end):
                if self.device_step[q]:
                    self.step, self.cursor = q, 0
                    code[q].run(P, self.every_wave, self.waves)
        finally:
            self.mode = "staged" if mode == "capture" else mode
            self._unpacked = {}

    def _simulated_capture(self, p, end, key):
        """SIMULATE_CAPTURE: the device steps run once in capture mode, noting what they read;
        a refusal puts back what the steps before it wrote (a real capture runs nothing)."""
        P = self.pool
        saved = P.tv.clone(), P.tl.clone(), self.lds_faults.clone()
        audit = _read_audit()
        try:
            with audit:
                self._run_staged(p, end, "capture")
        except CaptureRefused as err:
            for tensor, copy in zip((P.tv, P.tl, self.lds_faults), saved):
                tensor.copy_(copy)
            self.graphs[key] = None
            self.refusals.append(f"pc {p}: {type(err).__name__}: {err}")
            return None
        self.graphs[key] = graph = _StandInGraph(audit.reads)
        self.captures += 1
        return graph

    def _simulated_replay(self, p, end, graph):
        audit = _read_audit()
        with audit:
            self._run_staged(p, end, "capture")
        stale = set(audit.reads) - set(graph.reads)
        if stale:
            raise StaleGraphInput(
                f"the stretch at pc {p} of {self.pool.kernel.source.name} read, on a replay, "
                f"{len(stale)} tensor(s) its capture did not: a CUDA graph would read the "
                "captured tensors' memory instead (freed, or since written by something else)")

    def _capture(self, p, end, key):
        torch = self.pool.torch
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream()
        self._stream.wait_stream(current)
        try:
            with torch.cuda.stream(self._stream):
                graph.capture_begin()
                try:
                    self._run_staged(p, end, "capture")
                finally:
                    graph.capture_end()
        except (CaptureRefused, RuntimeError) as err:
            current.wait_stream(self._stream)
            self.graphs[key] = None
            self.refusals.append(f"pc {p}: {type(err).__name__}: {err}")
            return None
        current.wait_stream(self._stream)
        self.graphs[key] = graph
        self.graph_masks[key] = dict(self.kept_masks)   # the graph's memory: its replays fill it
        self.captures += 1
        return graph
