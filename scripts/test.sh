#!/usr/bin/env bash
# The whole test suite: set up, then run pytest (two workers; the slow tier included).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest -n 2 -q "$@"
