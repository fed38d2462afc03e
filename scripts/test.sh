#!/usr/bin/env bash
# The whole test suite: set up, then run pytest (two workers; the slow tier included; tests
# marked with one xdist_group share a worker, and so their module's fixtures).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest -n 2 --dist loadgroup -q "$@"
