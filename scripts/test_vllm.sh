#!/usr/bin/env bash
# rocke's tests against vLLM 0.33 itself (its backend registry, selector, metadata builder and
# forward; CI has no vLLM and skips them), in their own environment build/vllm-env, made the way
# the README tells a vLLM user to install rocke: vLLM first, then rocke with numba 0.68.1
# (vLLM 0.33 pins numba 0.65, which reads llvmlite 0.47; rocke needs llvmlite >= 0.50, LLVM 22's
# AMDGPU target, and numba 0.68.1 is the release that reads it). Downloads vLLM and its CUDA
# torch (several GB) on the first run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENV="$ROOT/build/vllm-env"
if [ ! -x "$ENV/bin/python" ] || ! "$ENV/bin/python" -c "import vllm, rocke" 2>/dev/null; then
  echo "[test_vllm] building $ENV (vLLM 0.33.0, then rocke)" >&2
  python3 -m venv "$ENV"
  "$ENV/bin/pip" install -q "vllm==0.33.0"
  "$ENV/bin/pip" install -q -e "$ROOT[test]" "numba==0.68.1"
fi
cd "$ROOT"
exec "$ENV/bin/python" -m pytest -q -p no:cacheprovider tests/kernels/test_vllm_backend.py \
  tests/kernels/test_vllm_recorded_calls.py "$@"
