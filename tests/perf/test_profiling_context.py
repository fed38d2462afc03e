"""rocke.runtime.profiling(): launches inside the block (direct and graph replays) carry exact
counters; launches outside it do not."""
import torch

from rocke.kernels.registry import get_variant
from rocke.kernels.samples import vector_add
from rocke.runtime import Graph, launch, profiling


def _setup(n=512):
    v = get_variant("vector_add/f32_v4")
    a, b, c = torch.ones(n), torch.ones(n), torch.zeros(n)
    grid, block = vector_add.launch_geometry(v.spec, n=n)
    return v.compile(), grid, block, vector_add.kernel_args(v.spec, a, b, c)


def test_profiling_block_turns_counters_on_for_direct_launches_and_replays():
    ck, grid, block, args = _setup()
    assert launch(ck, grid, block, args, device="emu").profile is None
    with profiling():
        report = launch(ck, grid, block, args, device="emu")
    assert report.profile.global_write_bytes == 512 * 4
    graph = Graph()
    with graph.capture():
        launch(ck, grid, block, args, device="emu")
    assert graph.replay()[0].profile is None
    with profiling():
        (replayed,) = graph.replay()
    assert replayed.profile.global_read_bytes == 2 * 512 * 4
    assert launch(ck, grid, block, args, device="emu").profile is None   # the block has ended
