#!/usr/bin/env bash
# The main job: set up, then build every shipped kernel variant and print its resource report.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
exec "$ROOT/.venv/bin/rocke" report "$@"
