#!/usr/bin/env bash
# The whole test suite: set up, then run pytest (two workers; the slow tier included; each test
# file runs on one worker, so a module's fixtures are built once; pytest-xdist 3.8's loadgroup
# does not group under pytest 9).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# no prebuilt bundle (setup.sh): the suite builds its own; a bundle already there is still used
prebuild_bundle=0
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest -n 2 --dist loadfile -q "$@"
