"""rocke.tasks, the engine behind ``--ray``: the choice refused up front (Ray missing, a bad or
silent address), and on a local two-worker Ray cluster: results equal to the serial run's, a
worker killed mid-run (its task run again by Ray), a task's own exception raised here.
Ray is a test dependency (pyproject's test extra), so these run in CI."""
import json
import os
import socket
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from rocke import cli, tasks


# ---------------------------------------------------------------- the choice, before any work

def test_the_serial_path_is_the_default_and_ray_is_not_imported(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)        # importing it would fail
    assert tasks.choose(None) == tasks.Engine("serial", 1)
    assert tasks.choose(None, 3) == tasks.Engine("processes", 3)
    assert [r for _, r in tasks.run(abs, [-1, 2, -3], tasks.choose(None))] == [1, 2, 3]
    assert sorted(tasks.run(abs, [-1, 2, -3], tasks.choose(None, 2))) == [(0, 1), (1, 2), (2, 3)]
    seen = []       # results back in the items' order, each once every earlier one came
    assert list(tasks.ordered([(2, "c"), (0, "a"), (1, "b")], lambda *d: seen.append(d))) == \
        ["a", "b", "c"] and seen == [(1, 2, "c"), (2, 0, "a"), (3, 1, "b")]
    with pytest.raises(ValueError, match="missing index 0"):
        list(tasks.ordered([(1, "b")]))


def test_ray_missing_or_a_bad_address_is_refused_naming_the_fix(monkeypatch, tmp_path):
    from rocke.kernels.gfx942 import attention_reachable as reach
    monkeypatch.setattr(reach, "reachable_specs", lambda target="gfx942": pytest.fail("worked"))
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(tasks.EngineError, match=r"^Ray is not installed: pip install 'rocke\[cluster\]'$"):
        tasks.choose("")
    result = CliRunner().invoke(cli.main, ["report", "--reachable", "--ray"])
    assert result.exit_code == 2 and "Ray is not installed: pip install 'rocke[cluster]'" in \
        result.output
    monkeypatch.delitem(sys.modules, "ray")
    for bad in ("not an address", "host:port", "gemm/f16_128x128x32"):
        result = CliRunner().invoke(cli.main, ["report", "--reachable", "--ray", bad])
        assert result.exit_code == 2 and "--ray: want HOST:PORT" in result.output, bad
    result = CliRunner().invoke(cli.main, ["report", "--reachable", "--ray", "10.0.0.1:6379",
                                           "--jobs", "2"])
    assert result.exit_code == 2 and "--jobs sizes a local Ray cluster" in result.output
    result = CliRunner().invoke(cli.main, ["report", "--ray"])
    assert result.exit_code == 2 and "go with --reachable" in result.output


def test_an_address_that_does_not_answer_is_an_error_not_a_hang(monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("ROCKE_RAY_TIMEOUT_S", "2")
    with socket.socket() as s:              # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    engine = tasks.choose("")
    assert engine.address == f"127.0.0.1:{port}"
    t0 = time.monotonic()
    with pytest.raises(tasks.EngineError, match=f"the Ray cluster at 127.0.0.1:{port} does not "
                                                "answer"):
        list(tasks.run(abs, [1], engine))
    assert time.monotonic() - t0 < 10


# ---------------------------------------------------------------- a local two-worker cluster

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray cluster of two CPUs (two workers), its workers' result store a fresh
    directory (workers read ROCKE_RESULTS_DIR from the environment they start with)."""
    ray = pytest.importorskip("ray")
    store = tmp_path_factory.mktemp("worker-store")
    old = os.environ.get("ROCKE_RESULTS_DIR")
    os.environ["ROCKE_RESULTS_DIR"] = str(store)
    try:
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
        yield store
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("ROCKE_RESULTS_DIR", None)
        else:
            os.environ["ROCKE_RESULTS_DIR"] = old


def _square_but_die_once(item):
    """x*x; the task for 3 kills its own worker process the first time (a marker file says it
    did), as a machine lost mid-task would."""
    x, marker = item
    if x == 3 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    if x == -1:
        raise ValueError("the task's own error")
    return x * x


def _by_value():
    from ray import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])   # workers cannot import tests


def test_a_killed_workers_task_is_run_again_and_a_tasks_error_is_raised(cluster, tmp_path):
    _by_value()
    marker = str(tmp_path / "died")
    got = dict(tasks.run(_square_but_die_once, [(x, marker) for x in range(6)],
                         tasks.Engine("ray")))
    assert os.path.exists(marker)                    # a worker did die, mid-task
    assert got == {i: i * i for i in range(6)}
    with pytest.raises(ValueError, match="the task's own error"):
        list(tasks.run(_square_but_die_once, [(-1, marker)], tasks.Engine("ray")))


def _kill_a_busy_worker(stop, killed):
    """Poll for a Ray worker executing a task (its process title is ray::_call) and SIGKILL
    it, once."""
    import signal
    while not stop.is_set() and not killed:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    title = f.read()
            except OSError:
                continue
            if title.startswith(b"ray::_call"):
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    continue
                killed.append(int(pid))
                return
        time.sleep(0.005)


def test_report_reachable_on_ray_equals_the_serial_run_with_a_worker_killed(cluster, tmp_path,
                                                                            monkeypatch):
    """Sixteen real specs (reduce_segments, the smallest kernels) through `rocke report
    --reachable`: serially, then on the two-worker cluster while a worker busy with a spec is
    killed. The same summary line and JSON report (less the timing, the engine and the store
    count); every spec computed by the workers (their store was empty), none twice-stored."""
    import dataclasses
    from rocke.kernels.gfx942 import attention_reachable as reach
    from rocke.kernels.gfx942 import reduce_segments as rs
    variants = [v for v in rs.VARIANTS.values() if v.head_size != 128]     # d64 and d256 (time)
    specs = {s.kernel_name: s for v in variants                    # each also with fp8 output
             for s in (v, dataclasses.replace(v, out_dtype=reach.fp8_out()))}
    assert len(specs) == 2 * len(variants) == 16
    monkeypatch.setattr(reach, "reachable_specs", lambda target="gfx942": dict(specs))
    monkeypatch.setenv("ROCKE_RESULTS_DIR", str(tmp_path / "serial-store"))
    runs = {}
    for how, extra in (("serial", []), ("ray", ["--ray"])):
        stop, killed = threading.Event(), []
        poller = threading.Thread(target=_kill_a_busy_worker, args=(stop, killed), daemon=True)
        if how == "ray":
            poller.start()
        out = tmp_path / f"{how}.json"
        result = CliRunner().invoke(cli.main, ["report", "--reachable", "--json", str(out),
                                               *extra])
        stop.set()
        assert result.exit_code == 0, result.output
        runs[how] = (result.output.strip().splitlines()[-1], json.loads(out.read_text()), killed)
    (line, serial, _), (ray_line, on_ray, killed) = runs["serial"], runs["ray"]
    assert killed, "no worker was caught mid-task: the kill did not happen"
    assert ray_line == line == ("reachable attention specs: 16 (16 ReduceSegments); 0 spill "
                                "(0 spills); 0 launch spilling after the fallback")
    volatile = ("seconds", "engine", "from_store")
    assert {k: v for k, v in on_ray.items() if k not in volatile} == \
        {k: v for k, v in serial.items() if k not in volatile}
    assert serial["from_store"] == on_ray["from_store"] == 0
    assert on_ray["engine"].startswith("local Ray cluster") and serial["engine"] == "serial"
    entries = sorted(p.name for p in cluster.rglob("*.json"))
    # each spec's compile (by its IR) and its report (by the spec under this code)
    assert len(entries) == 32 and entries == sorted(p.name for p in
                                                    (tmp_path / "serial-store").rglob("*.json"))
    from rocke.compiler.results import ResultStore
    store = ResultStore(cluster)                     # every entry whole (written atomically)
    assert all(store.get(name[:-5]) is not None for name in entries) and store.corrupt == 0


def test_aot_build_reachable_on_ray_equals_serial_and_is_served_by_spec(cluster, tmp_path,
                                                                        monkeypatch):
    """`rocke aot build --reachable --match` of two real specs, serially and on the cluster:
    the same bundle (entries and files); each entry served by spec with no IR build, to this
    rocke only (another source fingerprint: not served); size and first use reported."""
    from rocke.compiler import DEFAULT_TARGET, prebuilt, toolchain
    from rocke.kernels.gfx942 import attention_reachable as reach
    from rocke.kernels.gfx942 import reduce_segments as rs
    specs = {s.kernel_name: s for s in rs.VARIANTS.values()}
    monkeypatch.setattr(reach, "reachable_specs", lambda target="gfx942": dict(specs))
    bundles = {}
    for how, extra in (("serial", ["--jobs", "1"]), ("ray", ["--ray"])):
        out = tmp_path / how
        result = CliRunner().invoke(cli.main, ["aot", "build", "--reachable", "--match",
                                               "^reduce_segments_f16_d(64|128)_v4$", "--out",
                                               str(out), *extra])
        assert result.exit_code == 0, result.output
        assert "prebuilt 2 variants" in result.output and "MiB; first use of" in result.output
        bundles[how] = json.loads((out / "index.json").read_text())["entries"]
    assert bundles["ray"] == bundles["serial"] and len(bundles["ray"]) == 2
    for entry in bundles["ray"].values():
        for suffix in (".hsaco", ".o", ".s"):
            assert (tmp_path / "ray" / (entry["file"] + suffix)).read_bytes() == \
                (tmp_path / "serial" / (entry["file"] + suffix)).read_bytes()
    spec = specs["reduce_segments_f16_d64_v4"]
    monkeypatch.setattr(rs, "build", lambda spec: pytest.fail("the IR was built"))
    served = prebuilt.lookup_spec(spec, {}, DEFAULT_TARGET, root=tmp_path / "ray")
    assert served is not None and served.name == spec.kernel_name and served.prebuilt
    monkeypatch.setattr(toolchain, "source_fingerprint", lambda: "0" * 64)
    assert prebuilt.lookup_spec(spec, {}, DEFAULT_TARGET, root=tmp_path / "ray") is None
    bad = CliRunner().invoke(cli.main, ["aot", "build", "--reachable"])
    assert bad.exit_code == 2 and "--reachable wants --out" in bad.output


def test_a_harness_grid_on_ray_prints_and_reports_the_serial_runs_results(cluster, tmp_path,
                                                                          monkeypatch, capsys):
    """examples/parity_unified_attention.py's tiny grid with --ray on the two-worker cluster:
    its tasks (the harness modules shipped by value: workers cannot import examples/) answer
    the serial run's tables, summary line and JSON report (less the times)."""
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "examples")
    monkeypatch.syspath_prepend(examples)
    import parity_unified_attention
    from tests.examples.test_harnesses import GRIDS, grid_runs, printed_results, untimed
    monkeypatch.setenv("ROCKE_DEVICE", "emu")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    runs = grid_runs(parity_unified_attention, GRIDS["parity_unified_attention"],
                     {"serial": [], "ray": ["--ray"]}, tmp_path, capsys)
    (out, _, report), (ray_out, ray_err, ray_report) = runs["serial"], runs["ray"]
    assert printed_results(ray_out) == printed_results(out)
    assert untimed(ray_report) == untimed(report) and report["summary"]["PASS"] == 6
    assert "shapes run as tasks on local Ray cluster" in ray_err


def test_dispatch_sweep_on_ray_equals_the_serial_run(cluster, tmp_path, capsys, monkeypatch):
    """benchmarks/dispatch_sweep.py's two tiny decode problems (fp16 d64, 8/2 heads, 1 and 4
    sequences x 512 keys), serially and with --ray (one task a problem on the two-worker
    cluster, which models them from scratch): the printed table and summary and the written
    JSON are the serial run's byte for byte."""
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[1])
    monkeypatch.syspath_prepend(root)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))   # engine_of adds root
    # the serial run models without the result store, the workers into the cluster's fresh one:
    # both compute (neither is answered by the other's stored times)
    monkeypatch.setenv("ROCKE_RESULTS_DIR", "off")
    from benchmarks import dispatch_sweep as sweep
    argv = ["--dtypes", "f16", "--head-sizes", "64", "--heads", "8/2", "--kv", "512", "--kinds",
            "decode", "--batches", "1", "4", "--segments", "2"]
    runs = {}
    for how, extra in (("serial", []), ("ray", ["--ray"])):
        assert sweep.main([*argv, "--json", str(tmp_path / f"{how}.json"), *extra]) == 0
        captured = capsys.readouterr()
        runs[how] = (captured.out, (tmp_path / f"{how}.json").read_bytes(), captured.err)
    assert "(serial)" in runs["serial"][2] and "(local Ray cluster" in runs["ray"][2]
    assert "decode [1x512]x4 h8/2 f16 d64: dispatcher" in runs["serial"][0]
    assert runs["ray"][:2] == runs["serial"][:2]
