#!/usr/bin/env bash
# Idempotent set-up: a project virtualenv with rocke installed editable, plus LLVM tools that know
# gfx942 (ld.lld, llvm-objdump, llvm-readelf; Debian's llvm-19 and lld-19 when none is found).
# Sourced by scripts/main.sh and scripts/test.sh; safe to run on a fresh Debian machine as root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"

stamp="$VENV/.rocke-installed"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
  echo "[setup] installing rocke and its dependencies" >&2
  "$VENV/bin/pip" install -q --upgrade pip >&2 || true
  # torch 2.13.0 (CPU build) first, so the range in pyproject.toml never pulls a multi-GB GPU build.
  "$VENV/bin/pip" install -q "torch==2.13.0" >&2
  "$VENV/bin/pip" install -q -e "$ROOT[test]" >&2
  touch "$stamp"
fi

# Debian's LLVM 19 tools: ld.lld links code objects, llvm-objdump lets the emulator take linked
# code objects (their metadata note is read in Python). A tool counts only if it is new enough to know gfx942 (rocke.llvm_tools
# asks each one its version), so an older LLVM already on the machine (Debian's llvm-14 is a common
# dependency) does not stop the install.
rocke_llvm_tools() { PYTHONPATH="$ROOT" "$VENV/bin/python" -m rocke.llvm_tools "$@"; }
need="$(rocke_llvm_tools --missing-packages)"
if [ -n "$need" ]; then
  echo "[setup] installing Debian's $need" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >&2
  # shellcheck disable=SC2086  # $need is a space-separated package list
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >&2
  if [ -n "$(rocke_llvm_tools --missing-packages)" ]; then
    echo "[setup] LLVM tools still missing after the install:" >&2
    rocke_llvm_tools >&2
    exit 1
  fi
fi

# A shared LLVM library of LLVM 20+ (Debian's libllvm22, the library alone) lets the emulator take
# gfx950 code objects: rocke.llvm_disasm decodes them with LLVM's disassembler and verifies the
# listing by re-assembly (LLVM 19's llvm-objdump predates gfx950). A newer llvm-objdump is not
# installed: it would displace LLVM 19's for gfx942.
need="$(PYTHONPATH="$ROOT" "$VENV/bin/python" -m rocke.llvm_disasm --missing-packages)"
if [ -n "$need" ]; then
  echo "[setup] installing Debian's $need" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq >&2
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $need >&2 \
    || echo "[setup] $need not installed: gfx950 code objects cannot be disassembled" >&2
fi

# rocke's native tensor key (rocke/runtime/tensor_key.cpp): the call cache reads a call's tensors
# in one C++ pass (about 0.25 us for ten, against 4 us through torch's getters). Built for the
# installed torch and Python; another torch, Python or source needs a new build, which this does.
if ! PYTHONPATH="$ROOT" "$VENV/bin/python" -m rocke.runtime.tensor_key --check >/dev/null 2>&1; then
  if ! command -v "${CXX:-c++}" >/dev/null 2>&1; then
    echo "[setup] installing Debian's g++ (the native tensor key is C++)" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq g++ >&2
  fi
  echo "[setup] building rocke's native tensor key" >&2
  PYTHONPATH="$ROOT" "$VENV/bin/python" -m rocke.runtime.tensor_key --build --quiet >&2 \
    || echo "[setup] native tensor key not built (see above): the call cache reads tensors through torch's getters" >&2
fi

# Prebuilt code objects for the shipped variants (`rocke aot build`): their first use then needs
# no IR build, no link and no ld.lld. Rebuilt when missing or older than the golden IR table; a
# variant whose IR left the golden table is refused (reported, set-up goes on without it).
# scripts/test.sh sets prebuild_bundle=0: the tests build and check bundles of their own, and the
# suite uses about a third of the shipped variants, so it compiles those instead of all of them.
if [ "${prebuild_bundle:-1}" != 0 ]; then
  bundle="$ROOT/rocke/prebuilt/gfx942/index.json"
  golden="$(PYTHONPATH="$ROOT" "$VENV/bin/python" -c 'from rocke.kernels.golden import GOLDEN_PATH; print(GOLDEN_PATH)')"
  # also when an entry predates the spec keys that lookups check (such entries serve by IR only)
  stale_index="$("$VENV/bin/python" -c 'import json, sys
try: e = json.load(open(sys.argv[1]))["entries"]
except Exception: e = {}
print(int(not all(isinstance(x, dict) and "spec_key" in x for x in e.values())))' "$bundle" 2>/dev/null || echo 1)"
  if [ ! -f "$bundle" ] || [ "$golden" -nt "$bundle" ] || [ "$stale_index" = 1 ]; then
    echo "[setup] prebuilding the shipped variants' code objects (rocke aot build)" >&2
    "$VENV/bin/rocke" aot build --quiet >&2 || echo "[setup] rocke aot build did not bundle every variant (see above)" >&2
  fi
fi
