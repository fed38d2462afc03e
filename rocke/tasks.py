"""Many independent tasks -- one per spec or problem -- run serially, in forked processes, or on
a Ray cluster, their results streamed back as they finish (``run``).

The engine is chosen once (``choose``), before any work, so a bad choice is an error up front:
``--ray`` with Ray not installed says how to install it (``pip install 'rocke[cluster]'``), an
address that is not one is refused, and an address that does not answer within
ROCKE_RAY_TIMEOUT_S is an error, never a hang. Without ``--ray`` the serial path (or ``--jobs``
forked processes) is the default and Ray is never imported.

On Ray each item is one task (one CPU). A task whose worker process dies (killed, out of memory,
its node lost) is run again by Ray, up to ``max_retries`` times; an exception the task raises
is not retried (it is the task's answer) and is raised here. Nothing is written by this module:
a task's result reaches the caller only once the task finished, so a dead worker leaves nothing
half-written (what a task stores itself, it stores atomically: rocke.compiler.results).

With no address Ray starts its own local cluster of ``jobs`` CPUs (default: this machine's)
and shuts it down afterwards; ``--ray ADDRESS`` or Ray's RAY_ADDRESS connects to a running one
(``ray start --head`` on one machine, ``ray start --address HEAD:6379`` on the others; rocke,
the same version, installed on every node).
"""
from __future__ import annotations

import os
import re
import socket
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from . import env

INSTALL_HINT = "pip install 'rocke[cluster]'"
LOCAL = "local"              # --ray local: a local cluster even where RAY_ADDRESS is set


class EngineError(ValueError):
    """The engine cannot be used as asked (Ray missing, a bad or unreachable address)."""


class TaskFailed(RuntimeError):
    """A task could not be completed: its worker died more often than it may be retried."""


@dataclass(frozen=True)
class Engine:
    """How ``run`` runs tasks: ``kind`` serial | processes | ray; ``jobs``: processes, or a
    local Ray cluster's CPUs (None: this machine's); ``address``: a Ray cluster's (None: a
    local cluster)."""
    kind: str
    jobs: int | None = None
    address: str | None = None

    def describe(self) -> str:
        if self.kind == "serial":
            return "serial"
        if self.kind == "processes":
            return f"{self.jobs} processes"
        return f"Ray cluster at {self.address}" if self.address else \
            f"local Ray cluster ({self.jobs or os.cpu_count()} CPUs)"


_ADDRESS = re.compile(r"^(ray://)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def _ray_module():
    try:
        import ray
    except ImportError:
        raise EngineError(f"Ray is not installed: {INSTALL_HINT}") from None
    return ray


def choose(ray: str | None, jobs: int | None = None) -> Engine:
    """The engine for a command's ``--ray`` and ``--jobs``: ``ray`` None -- serial, or ``jobs``
    forked processes; ``""`` (``--ray`` alone) -- RAY_ADDRESS's cluster, else a local one;
    ``"local"`` -- a local cluster; ``"auto"`` -- the cluster ``ray start`` runs on this
    machine; else a cluster's ``HOST:PORT`` (or ``ray://HOST:PORT``). Raises EngineError before
    any work when Ray is not installed or the address is not one."""
    if ray is None:
        return Engine("processes", jobs) if jobs and jobs > 1 else Engine("serial", 1)
    address = ray.strip() or (env.ray_address() or LOCAL)
    if address != LOCAL and address != "auto" and not _ADDRESS.match(address):
        raise EngineError(f"--ray: want HOST:PORT, ray://HOST:PORT, auto or local (or no "
                          f"value: RAY_ADDRESS, else a local cluster), got {address!r}")
    if address != LOCAL and jobs is not None:
        raise EngineError(f"--jobs sizes a local Ray cluster; the cluster at {address} has "
                          "its own CPUs")
    _ray_module()
    return Engine("ray", jobs, None if address == LOCAL else address)


def add_arguments(parser, unit: str = "task") -> None:
    """``--jobs N`` and ``--ray [ADDRESS]`` on an argparse ``parser`` (the benchmarks' and the
    harnesses' one wording); ``from_arguments`` turns them into an Engine. ``unit``: what one
    task is (a problem, a shape, a row)."""
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help=f"run in N forked processes, one task a {unit} (default: serially, "
                             "here); with --ray and no address: the local Ray cluster's CPUs "
                             "(default: this machine's)")
    parser.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                        help=f"one task a {unit} on a Ray cluster ({INSTALL_HINT}): --ray alone "
                             "connects to RAY_ADDRESS, else starts a local cluster; --ray "
                             "HOST:PORT (or ray://...) a running one; --ray local a local one")


def from_arguments(jobs: int | None, ray: str | None) -> Engine:
    """``choose`` for ``add_arguments``' values, also refusing ``--jobs`` below 1 (EngineError,
    before any work)."""
    if jobs is not None and jobs < 1:
        raise EngineError(f"--jobs must be at least 1, got {jobs}")
    return choose(ray, jobs)


def _reachable(address: str, timeout: float) -> None:
    """Raise EngineError unless ``HOST:PORT`` accepts a TCP connection within ``timeout``
    (ray.init itself waits minutes for an address that does not answer)."""
    m = _ADDRESS.match(address)
    if m is None:           # auto: Ray finds the local cluster's address file, or says none
        return
    host, port = m.group(2).strip("[]"), int(m.group(3))
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        raise EngineError(f"the Ray cluster at {address} does not answer ({e.strerror or e}; "
                          f"waited up to {timeout:g} s, ROCKE_RAY_TIMEOUT_S): start it with "
                          "`ray start --head`, or drop --ray to run here") from None


def _connect(engine: Engine) -> bool:
    """Connect to (or start) the engine's Ray cluster; True when this call started it."""
    ray = _ray_module()
    if ray.is_initialized():
        return False
    if engine.address:
        _reachable(engine.address, env.ray_timeout_s())
        try:
            ray.init(address=engine.address, log_to_driver=True, configure_logging=False)
        except (ConnectionError, RuntimeError) as e:
            raise EngineError(f"cannot connect to the Ray cluster at {engine.address}: "
                              f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    else:
        ray.init(address="local", num_cpus=engine.jobs or os.cpu_count(),
                 include_dashboard=False, configure_logging=False)
    return True


def _call(fn, item):
    return fn(item)


def _bar(total: int, label: str | None):
    """A tqdm progress bar on stderr when it is a terminal (else None: callers print lines)."""
    if label is None or not sys.stderr.isatty():
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=label, unit="task", file=sys.stderr, dynamic_ncols=True)


def run(fn: Callable, items: Iterable, engine: Engine, *, progress: str | None = None,
        max_retries: int = 3) -> Iterator[tuple[int, object]]:
    """``(index, fn(item))`` for every item, as each finishes (in order when serial; in order
    of completion otherwise). ``fn`` must be a module-level function (it is sent to forked
    processes or Ray workers by reference). ``progress``: a progress bar's label (shown when
    stderr is a terminal). An exception ``fn`` raises is raised here; a Ray task whose worker
    died more than ``max_retries`` times raises TaskFailed."""
    items = list(items)
    bar = _bar(len(items), progress)
    try:
        if engine.kind == "serial":
            results = ((i, fn(item)) for i, item in enumerate(items))
        elif engine.kind == "processes":
            results = _processes(fn, items, engine.jobs)
        elif engine.kind == "ray":
            results = _ray_run(fn, items, engine, max_retries)
        else:
            raise ValueError(f"unknown engine kind {engine.kind!r}")
        for pair in results:
            if bar is not None:
                bar.update(1)
            yield pair
    finally:
        if bar is not None:
            bar.close()


def ordered(pairs: Iterable[tuple[int, object]], done: Callable | None = None) -> Iterator:
    """The results of ``run``'s ``(index, result)`` pairs in index order, each as soon as every
    earlier one has come (so a command's output is the serial run's whatever the engine);
    ``done(count, index, result)`` is called on each pair as it arrives (progress)."""
    held: dict = {}
    following = 0
    for count, (i, result) in enumerate(pairs, 1):
        if done is not None:
            done(count, i, result)
        held[i] = result
        while following in held:
            yield held.pop(following)
            following += 1
    if held:
        raise ValueError(f"tasks.ordered: results {sorted(held)} came without those before "
                         f"them (missing index {following})")


def run_in_order(fn: Callable, items: Iterable, engine: Engine, label: str,
                 describe: Callable = lambda result: "") -> Iterator:
    """``fn``'s results over ``items`` in the items' order (``run`` then ``ordered``): each as
    soon as every earlier one is done, so what a caller prints or writes is the serial run's
    byte for byte whatever the engine. Progress on stderr: a bar where it is a terminal, else a
    line per finished task (``label: k/n done, T s (engine)`` + ``describe(result)``)."""
    import time
    items = list(items)
    t0 = time.monotonic()
    bar = sys.stderr.isatty()

    def done(count, i, result):
        if not bar:
            print(f"{label}: {count}/{len(items)} done, {time.monotonic() - t0:.0f} s "
                  f"({engine.describe()}){describe(result)}", file=sys.stderr, flush=True)
    return ordered(run(fn, items, engine, progress=label if bar else None), done)


def _indexed(pair):
    fn, i, item = pair
    return i, fn(item)


def _forked_worker() -> None:
    """A forked worker runs torch's ops on one thread (its share of the CPUs): the parent's
    OpenMP team (GNU libgomp) does not survive the fork, and a worker's first parallel op would
    wait for the team's threads forever once the parent had run one."""
    torch = sys.modules.get("torch")       # not imported by the parent: nothing inherited
    if torch is not None:
        torch.set_num_threads(1)


def _processes(fn, items, jobs: int):
    import multiprocessing
    with multiprocessing.get_context("fork").Pool(jobs, initializer=_forked_worker) as pool:
        yield from pool.imap_unordered(_indexed, [(fn, i, item) for i, item in
                                                  enumerate(items)], chunksize=1)


def _ray_run(fn, items, engine: Engine, max_retries: int):
    ray = _ray_module()
    started = _connect(engine)
    try:
        from ray.exceptions import RayTaskError, WorkerCrashedError
        remote = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(_call)
        window = max(8, 4 * int(ray.cluster_resources().get("CPU", 1)))
        fn_ref = ray.put(fn)
        pending: dict = {}
        todo = iter(enumerate(items))

        def submit():
            for i, item in todo:
                pending[remote.remote(fn_ref, item)] = i
                if len(pending) >= window:
                    return
        submit()
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except RayTaskError as e:          # the task raised: its own exception here
                    cause = e.as_instanceof_cause()
                    raise getattr(cause, "cause", None) or cause from None
                except WorkerCrashedError as e:
                    raise TaskFailed(f"task {i} failed: its worker died {max_retries + 1} "
                                     f"times ({str(e).splitlines()[0]})") from None
                submit()
                yield i, result
    finally:
        if started:
            ray.shutdown()
