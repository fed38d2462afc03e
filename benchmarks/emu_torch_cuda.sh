#!/usr/bin/env bash
# The emulator's torch backend on a CUDA GPU: the CUDA bit-identity tests (numpy vs torch), then
# benchmarks/emu.py's throughput on numpy (CPU) and torch (CUDA) with a bit check of each output.
# Emulator wall times, not GPU kernel times. Run from the repository root on a machine with a
# CUDA GPU and torch, e.g. through the device tool:  bash benchmarks/emu_torch_cuda.sh "$OUT"
set -o pipefail
out=${1:-.}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/emu/test_backend.py \
    tests/emu/test_torch_backend.py -k cuda 2>&1 | tee "$out/emu_torch_cuda_tests.log" | tail -30
timeout 420 python3 benchmarks/emu.py --repeats 2 --backend numpy torch --device cuda 2>&1 \
    | tee "$out/emu_torch_cuda_bench.log"
# the flash-attention fixture widened to 16384 waves (one pool), without the race checker
timeout 120 python3 benchmarks/emu.py --repeats 2 --workloads flash_attention --backend torch \
    --device cuda --flash-batch-heads 256 --no-check 2>&1 | tee "$out/emu_torch_cuda_wide.log"
