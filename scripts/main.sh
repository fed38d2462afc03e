#!/usr/bin/env bash
# The main job: set up, then run the unified-attention parity harness on the gfx942 emulator over
# a representative set (the `default` scenario group scaled for a CPU: a few minutes on 2 cores).
# Arguments replace the defaults: `bash scripts/main.sh --scenario fmha --quick`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
if [ $# -eq 0 ]; then
  set -- --quick --scenario default
fi
exec "$ROOT/.venv/bin/python" examples/parity_unified_attention.py "$@"
