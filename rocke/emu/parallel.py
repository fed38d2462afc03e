"""Running one launch's workgroup pools in forked worker processes.

Workgroups of a launch are independent except through global memory, and a kernel whose
workgroups do not communicate gives the same bytes whichever process runs which workgroup. So a
launch's pools are cut into contiguous shares: the parent runs the first share itself, in place;
each other share runs in a forked child that sees the arguments as they were at the fork
(copy-on-write), marks every global byte it stores (GlobalMemory.track_writes) and sends back
those bytes' final values with its counters. The parent then applies the children's bytes in
share order, so where two shares wrote one byte the later workgroup wins, as in the serial
order. The first failure in share order (fault, trap, checker finding, timeout) is the error
the serial run would have raised: it is re-raised with the same type and message (its
`__cause__` chain stays in the child), and launch()'s rollback restores every argument.

A share sees memory as it was at the fork, while in the serial order it would see the stores of
every earlier share. So each child also marks the bytes of writable regions it loads
(GlobalMemory.track_reads), and the parent marks what its own share and the applied children
stored (track_writes). A child that read a byte some earlier share stored (a workgroup reading
another's output: the hardware gives no order there, the serial emulator does) is not used: it
and every later share are run again, in the parent, one after another, on the memory the earlier
shares left, which is exactly the serial run. So the bytes, counters and errors never depend on
the number of workers; only the wall time does (and `report.batches`, with narrower pools).

Kernels that may communicate between workgroups run serially (`serial_reason`): any global,
buffer or flat atomic, the agent/system-scope cache maintenance of an acquire or release
(`buffer_inv`, `buffer_wbl2`: LLVM's gfx942 memory model emits them for cross-workgroup
synchronisation), and any memory access with `sc1` (system-coherent, what volatile and
agent-scope accesses get). A workgroup that reads another workgroup's plain stores without any
of these is a data race on the hardware (workgroups have no mutual order), so the parallel run
may give a different one of the outcomes the hardware allows than the serial emulator.
"""
from __future__ import annotations

import os
import pickle
import signal
import time
from typing import NamedTuple

from .errors import EmulatorError
from .memory import GlobalMemory

_COMMUNICATING_PREFIXES = ("global_atomic_", "buffer_atomic_", "flat_atomic_")
_FENCES = ("buffer_inv", "buffer_wbl2")
_MEMORY_PREFIXES = ("global_", "buffer_", "flat_")


def serial_reason(code) -> str | None:
    """Why a decoded program must run its workgroups in one process, or None."""
    for d in code:
        if d is None:
            continue
        mnemonic = d.instr.mnemonic
        if mnemonic.startswith(_COMMUNICATING_PREFIXES):
            return f"global atomic `{d.instr.text}`"
        if mnemonic in _FENCES:
            return f"cross-workgroup fence `{d.instr.text}`"
        if mnemonic.startswith(_MEMORY_PREFIXES) and "sc1" in d.instr.modifiers:
            return f"system-coherent access `{d.instr.text}`"
    return None


class SharesRun(NamedTuple):
    counts: list
    lane_instructions: int
    batches: int
    rerun_from: int | None    # the first share run again in this process (None: none was)
    # CPU seconds of each process that ran shares, this one first (children: from the fork to
    # their result; a wall-time estimate on idle cores is the largest of them)
    share_cpu_s: tuple


def run_shares(run_share, shares: list, memory: GlobalMemory) -> SharesRun:
    """Run `run_share(share) -> (counts, lane_instructions, batches)` for every share, the first
    in this process and the others in forked children; returns the summed counters."""
    children = []
    rerun_from = None
    child_cpu = []
    start_cpu = time.process_time()
    try:
        for share in shares[1:]:
            children.append(_fork(run_share, share, memory))
        memory.track_writes()
        counts, lanes, batches = run_share(shares[0])
        for position, (pid, fd) in enumerate(children, 1):
            result = _receive(pid, fd)
            if memory.read_any_written(result[-1]):
                rerun_from = position   # it read bytes an earlier share stored: serial from here
                break
            if result[0] == "error":
                raise result[1]
            _, child_counts, child_lanes, child_batches, written, cpu, _ = result
            child_cpu.append(cpu)
            memory.apply_written(written)
            counts = [a + b for a, b in zip(counts, child_counts)]
            lanes += child_lanes
            batches += child_batches
        if rerun_from is not None:
            for pid, fd in children[rerun_from - 1:]:   # their results are not wanted
                _reap(pid, fd)
            del children[rerun_from - 1:]
            for share in shares[rerun_from:]:
                more_counts, more_lanes, more_batches = run_share(share)
                counts = [a + b for a, b in zip(counts, more_counts)]
                lanes += more_lanes
                batches += more_batches
        return SharesRun(counts, lanes, batches, rerun_from,
                         (time.process_time() - start_cpu,) + tuple(child_cpu))
    finally:
        memory.written = None
        for pid, fd in children:
            _reap(pid, fd)


def _fork(run_share, share, memory):
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_fd)
        return pid, read_fd
    # the child: never returns into the caller's stack (no atexit, no test-runner teardown)
    status = 1
    try:
        os.close(read_fd)
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)   # the parent handles Ctrl-C, kills us
        except ValueError:   # not the interpreter's main thread
            pass
        memory.track_reads()
        try:
            memory.track_writes()
            counts, lanes, batches = run_share(share)
            result = ("ok", counts, lanes, batches, memory.written_bytes(),
                      time.process_time(), memory.read_bytes())
        except BaseException as err:   # noqa: BLE001 - every failure goes back to the parent
            # what it read decides whether the error is the serial run's (see run_shares)
            result = ("error", _portable(err), memory.read_bytes())
        with os.fdopen(write_fd, "wb") as out:
            pickle.dump(result, out, protocol=pickle.HIGHEST_PROTOCOL)
        status = 0
    finally:
        os._exit(status)


def _portable(err: BaseException) -> BaseException:
    """`err` if it survives pickling unchanged, else an EmulatorError with its text."""
    try:
        copy = pickle.loads(pickle.dumps(err))
        if type(copy) is type(err) and str(copy) == str(err):
            return err
    except Exception:   # noqa: BLE001 - unpicklable exception arguments
        pass
    return EmulatorError(f"{type(err).__name__}: {err}")


def _receive(pid: int, fd: int):
    try:
        with os.fdopen(os.dup(fd), "rb") as stream:
            return pickle.load(stream)
    except (EOFError, pickle.UnpicklingError) as err:
        raise EmulatorError(f"emulator worker process {pid} ended without a result "
                            f"({type(err).__name__}); the launch was rolled back") from None


def _reap(pid: int, fd: int):
    try:
        os.close(fd)
    except OSError:
        pass
    try:   # a child that already sent its result is exiting anyway
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def shares_of(starts: range, workers: int) -> list[range]:
    """Pool starts cut into at most `workers` contiguous shares, as even as can be (ranges: a
    huge grid's pools are never listed)."""
    bounds = [len(starts) * i // workers for i in range(workers + 1)]
    return [starts[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
