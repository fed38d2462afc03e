"""The smallest useful kernel, shared by the runtime tests: x[i] *= factor over n floats, one
lane per element (64-lane workgroups), bounds by a buffer of n elements."""
from rocke.dsl import Kernel, f32


def doubling_kernel(name: str, target: str = "gfx942", factor: float = 2.0) -> Kernel:
    k = Kernel(name, workgroup_size=64, target=target)
    x = k.arg_ptr("x", f32)
    n = k.arg_i32("n")
    i = k.block_id(0) * 64 + k.thread_id(0)
    buf = x.buffer(n)
    buf.store(i, buf.load(i) * factor)
    return k
