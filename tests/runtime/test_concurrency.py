"""A device's launches and graph replays behave like work on one stream: from any number of
threads they are serialised and every one of them is applied (none of them lost)."""
from __future__ import annotations

import threading

import torch

from rocke import runtime
from rocke.compiler import compile_ir
from rocke.runtime import Graph
from tests.doubling_kernel import doubling_kernel

N = 64
THREADS = 4
ROUNDS = 6


def _doubler():
    k = doubling_kernel("double_in_place")
    return compile_ir(k.ir(), name=k.name, workgroup_size=64)


def _in_threads(fn, count):
    errors = []

    def body():
        try:
            fn()
        except BaseException as e:       # surfaced below: a thread's failure fails the test
            errors.append(e)
    threads = [threading.Thread(target=body) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_replays_of_one_graph_from_several_threads_all_apply():
    ck = _doubler()
    x = torch.ones(N)
    g = Graph(device="emu")
    with g.capture():
        runtime.launch(ck, 1, 64, [x, N], device="emu")
    for round_ in range(ROUNDS):
        x.fill_(1.0)
        _in_threads(g.replay, THREADS)
        assert torch.equal(x, torch.full((N,), 2.0 ** THREADS)), \
            f"round {round_}: {x[0].item()} instead of {2.0 ** THREADS}: a replay was lost"


def test_plain_launches_from_several_threads_all_apply():
    ck = _doubler()
    x = torch.ones(N)
    for round_ in range(ROUNDS):
        x.fill_(1.0)
        _in_threads(lambda: runtime.launch(ck, 1, 64, [x, N], device="emu"), THREADS)
        assert torch.equal(x, torch.full((N,), 2.0 ** THREADS)), \
            f"round {round_}: {x[0].item()} instead of {2.0 ** THREADS}: a launch was lost"


def test_hip_launches_and_replays_from_several_threads_all_apply(standin):
    ck = _doubler()
    standin.register(ck)
    dev = runtime.get_device("hip")
    buf = dev.alloc(4 * N)
    g = Graph(device="hip")
    with g.capture():
        runtime.launch(ck, 1, 64, [buf, N], device="hip")
    for round_ in range(ROUNDS):
        buf.copy_from(torch.ones(N))
        _in_threads(lambda: runtime.launch(ck, 1, 64, [buf, N], device="hip"), THREADS)
        _in_threads(lambda: g.replay(synchronize=True), THREADS)
        got = buf.copy_to(torch.empty(N))
        assert standin.errors == []
        assert torch.equal(got, torch.full((N,), 4.0 ** THREADS)), \
            f"round {round_}: {got[0].item()} instead of {4.0 ** THREADS}"
    g.close()
