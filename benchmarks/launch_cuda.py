"""Host cost of a cached attention call on real GPU tensors: the realistic decode sequence of
benchmarks/launch.py (--layers layers, each its own KV cache and q/out, vLLM's 3D arguments on
persistent buffers) through rocke.vllm.unified_attention, on an NVIDIA GPU's CUDA tensors --
real torch.Tensor reads, torch's real current-stream and capture-flag reads. There is no AMD GPU:
the launches go to tests/gpu/recorder.py's device, whose replay is a CUDA graph launch through
CuPy (HIP's would be hipGraphLaunch); so each figure holds that launch too. Printed per call:
median and best over --repeats passes (CPU time), with the native tensor key and without it
(ROCKE_NATIVE_KEY=off), and the key's tensor reads alone on vLLM's twelve tensors.

    python benchmarks/launch_cuda.py     # needs CUDA torch, CuPy, and a compile cache with the
                                         # kernels (python -m tests.gpu.scenarios --prepare DIR)
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=20)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available() or torch.version.hip:
        print("needs an NVIDIA CUDA GPU", file=sys.stderr)
        return 2
    import pytest
    from rocke.kernels.common import attention_calls
    from rocke.runtime import tensor_key
    from rocke.vllm import unified_attention
    from tests.gpu import recorder, scenarios
    patch = pytest.MonkeyPatch()
    device = recorder.RecorderDevice(torch.cuda.current_device())
    recorder.install(patch, device)
    models = [scenarios.Model("cuda", seed=i) for i in range(a.layers)]
    batch = 4
    calls = [m.decode_args(batch) for m in models]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{torch.cuda.get_device_name()}; torch {torch.__version__}; {a.layers} layers x "
          f"{a.steps} decode steps, batch {batch}, vLLM's 3D arguments; CPU time per call")
    print(f"{'part':34s} {'median us':>10s} {'best us':>10s}")
    for native in ("auto", "off"):
        os.environ["ROCKE_NATIVE_KEY"] = native
        tensor_key.native(reload=True)
        attention_calls.forget_calls()
        for _ in range(attention_calls.CAPTURE_AFTER + 1):       # captured, then replayed
            for args in calls:
                unified_attention(**args)
        torch.cuda.synchronize()
        passes = []
        for _ in range(a.repeats):
            t0 = time.process_time()
            for _ in range(a.steps):
                for args in calls:
                    unified_attention(**args)
            passes.append((time.process_time() - t0) / (a.steps * len(calls)))
            torch.cuda.synchronize()
        label = "decode hit via rocke.vllm, " + ("native key" if native == "auto" and
                                                 tensor_key.native() else "torch getters")
        print(f"{label:34s} {statistics.median(passes) * 1e6:10.2f} {min(passes) * 1e6:10.2f}")
    os.environ.pop("ROCKE_NATIVE_KEY", None)
    native = tensor_key.native(reload=True)
    args = calls[0]
    tensors = (args["q"], args["k"], args["v"], args["out"], args["cu_seqlens_q"],
               args["seqused_k"], args["block_table"], args["k_descale"], args["v_descale"],
               args["softmax_segm_output"], args["softmax_segm_max"], args["softmax_segm_expsum"])

    def getters():
        return tuple((type(t), t.data_ptr(), t.shape, t.dtype, t.get_device(), t.stride())
                     for t in tensors)
    rows = [("reads of 12 tensors, torch getters", getters)]
    if native is not None:
        rows.insert(0, ("reads of 12 tensors, native key", lambda: native(tensors)))
    for label, fn in rows:
        runs = []
        for _ in range(a.repeats):
            t0 = time.process_time()
            for _ in range(2000):
                fn()
            runs.append((time.process_time() - t0) / 2000)
        print(f"{label:34s} {statistics.median(runs) * 1e6:10.2f} {min(runs) * 1e6:10.2f}")
    patch.undo()
    return 0


if __name__ == "__main__":
    sys.exit(main())
