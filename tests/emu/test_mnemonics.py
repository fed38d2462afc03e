"""Every opcode the emulator decodes is greppable in rocke/emu by its full mnemonic
(`grep -rw v_add_f32 rocke/emu`), although the tables build most names from parts: the literal
tables in the sources, plus rocke/emu/mnemonics.txt for the generated ones, which must be current."""
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EMU = ROOT / "rocke" / "emu"
TOOL = ROOT / "tools" / "emu_opcode_support.py"


@pytest.fixture(scope="module")
def support():
    spec = importlib.util.spec_from_file_location("emu_opcode_support", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def decoded(support):
    """{target: opcodes whose LLVM sample instruction the emulator decodes for that target}."""
    return {t: {name for _, name, sample in support.samples(t) if support.decodes(sample, t) is None}
            for t in support.TARGETS}


def _words_in_emu_sources() -> set[str]:
    return {w for p in EMU.rglob("*") if p.suffix in (".py", ".txt")
            for w in re.findall(r"[a-z0-9_]+", p.read_text())}


def test_every_decoded_mnemonic_appears_literally_in_rocke_emu(decoded):
    words = _words_in_emu_sources()
    absent = sorted(set().union(*decoded.values()) - words)
    assert not absent, f"{len(absent)} decoded opcodes not spelled out in rocke/emu: {absent[:20]}"


def test_the_mnemonic_list_is_current(support, decoded):
    """Fails when an opcode starts or stops decoding without `tools/emu_opcode_support.py
    --write-mnemonics`; the counts are the tool's own (decodes / LLVM's opcodes, per target)."""
    listed = {}
    for line in support.MNEMONICS.read_text().splitlines():
        if line and not line.startswith("#"):
            name, targets = line.split("\t")
            for t in targets.split():
                listed.setdefault(t, set()).add(name)
    for target in support.TARGETS:
        assert listed.get(target, set()) == decoded[target], (
            target, sorted(decoded[target] ^ listed.get(target, set()))[:20])
    assert support.MNEMONICS.read_text() == support.mnemonics_text()


def test_an_undecoded_opcode_is_not_in_the_list(support, decoded):
    """The list is what decodes, not LLVM's whole table: an opcode the emulator refuses for both
    targets (a DS GWS op, say) is absent from it."""
    refused = {name for t in support.TARGETS for _, name, _ in support.samples(t)} \
        - set().union(*decoded.values())
    assert refused, "every LLVM opcode decodes? the probe is broken"
    listed = {line.split("\t")[0] for line in support.MNEMONICS.read_text().splitlines()
              if line and not line.startswith("#")}
    assert not refused & listed
