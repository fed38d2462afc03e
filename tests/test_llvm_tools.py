"""Which LLVM tools rocke takes: only those new enough to know gfx942 (LLVM 17+). An older LLVM
first on PATH (Debian's llvm-14 is a common dependency) is skipped, or named in the error with
the version needed; it is never run on a gfx942 code object."""
import os
import shutil
import stat
from pathlib import Path

import pytest

from rocke import llvm_tools
from rocke.compiler import ToolchainError, find_linker
from rocke.emu.codeobject import CodeObjectError, code_object_assembly, find_llvm_tool

CODE_OBJECT = Path(__file__).resolve().parent / "fixtures" / "hip" / "kernels.co"
LLVM14 = "Debian LLVM version 14.0.6\n  Optimized build.\n"
LLVM19 = "Debian LLVM version 19.1.7\n  Optimized build.\n"
LLD14 = "Debian LLD 14.0.6 (compatible with GNU linkers)\n"
LLD19 = "Debian LLD 19.1.7 (compatible with GNU linkers)\n"


def fake(directory: Path, name: str, version_text: str) -> str:
    """A tool that reports `version_text` for --version and, like LLVM 14's llvm-objdump on a
    gfx942 object, fails on anything else (so using it shows up as an error)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n"
                    f'if [ "$1" = --version ]; then printf %s "{version_text}"; exit 0; fi\n'
                    "echo \"error: unable to get target for 'unknown--'\" >&2; exit 1\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


@pytest.fixture
def search(tmp_path, monkeypatch):
    """Confine the search to PATH directories the test makes (returned as a list to fill, first
    first) and to install trees under tmp_path/lib/llvm-<N>/bin."""
    dirs = [tmp_path / "path_a", tmp_path / "path_b"]
    for d in dirs:
        d.mkdir()
    monkeypatch.setenv("PATH", os.pathsep.join(map(str, dirs)))
    monkeypatch.delenv("ROCM_PATH", raising=False)
    monkeypatch.delenv("ROCKE_LD_LLD", raising=False)
    monkeypatch.setattr(llvm_tools, "INSTALL_DIR_PATTERNS",
                        (str(tmp_path / "lib" / "llvm-*" / "bin"),))
    find_linker.cache_clear()
    yield dirs + [tmp_path / "lib"]
    find_linker.cache_clear()


def test_an_old_tool_alone_is_named_with_the_version_needed(search, monkeypatch):
    old = fake(search[0], "llvm-objdump", LLVM14)
    with pytest.raises(CodeObjectError) as err:
        find_llvm_tool("llvm-objdump")
    message = str(err.value)
    assert f"skipped {old} (LLVM 14.0)" in message
    assert "LLVM 17 or newer, which gfx942 needs" in message
    assert "apt-get install llvm-19" in message
    # the code object path, with no shared LLVM library either, refuses before running anything
    from rocke import llvm_disasm

    def no_library(processor):
        raise llvm_disasm.NoLibraryError("none")
    monkeypatch.setattr(llvm_disasm, "find_library", no_library)
    with pytest.raises(CodeObjectError, match="LLVM 17 or newer"):
        code_object_assembly(CODE_OBJECT)


@pytest.mark.parametrize("name", ["llvm-objdump", "llvm-readelf"])
def test_an_old_tool_first_on_path_is_skipped_for_a_newer_one(search, name):
    fake(search[0], name, LLVM14)
    newer = fake(search[1], name, LLVM19)
    assert find_llvm_tool(name) == newer


def test_the_version_is_asked_not_read_from_the_name(search):
    fake(search[0], "llvm-objdump-19", LLVM14)
    with pytest.raises(CodeObjectError, match=r"llvm-objdump-19 \(LLVM 14\.0\)"):
        find_llvm_tool("llvm-objdump")


def test_a_tool_that_reports_no_version_is_skipped_and_said_so(search):
    fake(search[0], "llvm-readelf", "GNU readelf (GNU Binutils) 2.40\n")
    with pytest.raises(CodeObjectError, match="no LLVM version reported"):
        find_llvm_tool("llvm-readelf")


def test_a_tool_too_slow_to_answer_is_named_so_and_asked_again_later(search, monkeypatch):
    """A tool that does not answer --version in time is skipped with that reason (not "no
    version"), and the miss is not remembered: once it answers, it is taken."""
    slow = search[0] / "slow"
    slow.touch()
    path = fake(search[0], "llvm-readelf-19", LLVM19)
    sleep = shutil.which("sleep", path=os.defpath)     # PATH holds only the test's directories
    text = Path(path).read_text().replace("#!/bin/sh\n",
                                          f"#!/bin/sh\n[ -e {slow} ] && {sleep} 5\n")
    Path(path).write_text(text)
    monkeypatch.setattr(llvm_tools, "VERSION_TIMEOUT_S", 0.2)
    with pytest.raises(CodeObjectError, match=r"llvm-readelf-19 \(no answer to --version within "
                                              r"0\.2 s\)"):
        find_llvm_tool("llvm-readelf")
    slow.unlink()
    assert find_llvm_tool("llvm-readelf") == path


def test_versioned_names_come_first_newest_first_then_install_trees_newest_first(search):
    path_a, path_b, lib = search
    fake(path_a, "llvm-objdump", LLVM19)                     # plain name: last resort
    fake(path_a, "llvm-objdump-18", "LLVM version 18.1.0\n")
    newest = fake(path_b, "llvm-objdump-20", "LLVM version 20.1.2\n")
    fake(lib / "llvm-21" / "bin", "llvm-objdump", "LLVM version 21.1.0\n")
    assert find_llvm_tool("llvm-objdump") == newest
    for p in (newest, str(path_a / "llvm-objdump-18")):
        os.remove(p)
    fake(lib / "llvm-9" / "bin", "llvm-objdump", "LLVM version 9.0.1\n")
    # by release number (21 after 9 as text), not as text
    assert find_llvm_tool("llvm-objdump") == str(lib / "llvm-21" / "bin" / "llvm-objdump")


def test_the_linker_skips_an_old_lld_or_names_it(search):
    old = fake(search[0], "ld.lld", LLD14)
    with pytest.raises(ToolchainError) as err:
        find_linker()
    assert f"skipped {old} (LLVM 14.0)" in str(err.value)
    assert "apt-get install lld-19" in str(err.value)
    find_linker.cache_clear()
    newer = fake(search[1], "ld.lld-19", LLD19)
    assert find_linker() == newer


def test_setup_is_told_which_packages_are_missing(search):
    fake(search[0], "llvm-objdump", LLVM14)
    fake(search[0], "llvm-readelf", LLVM14)
    fake(search[0], "ld.lld", LLD14)
    assert llvm_tools.missing_packages() == ["llvm-19", "lld-19"]
    fake(search[1], "llvm-objdump-19", LLVM19)
    fake(search[1], "llvm-readelf-19", LLVM19)
    assert llvm_tools.missing_packages() == ["lld-19"]
    fake(search[1], "ld.lld-19", LLD19)
    assert llvm_tools.missing_packages() == []


REAL_LLVM14 = Path("/usr/lib/llvm-14/bin")


@pytest.mark.skipif(not (REAL_LLVM14 / "llvm-objdump").is_file(),
                    reason="needs Debian's llvm-14 installed (the fake-tool tests cover the rule)")
def test_real_llvm14_first_on_path_is_not_used_for_code_objects(monkeypatch):
    """The reported machine: Debian's llvm-14 tools first on PATH. Its llvm-objdump has no gfx942
    and its llvm-readelf prints a metadata note YAML cannot load; neither may be picked."""
    monkeypatch.setenv("PATH", f"{REAL_LLVM14}{os.pathsep}{os.environ.get('PATH', '')}")
    for name in ("llvm-objdump", "llvm-readelf"):
        try:
            chosen = find_llvm_tool(name)
        except CodeObjectError as err:                 # no newer LLVM here: named, not used
            assert f"{REAL_LLVM14 / name} (LLVM 14." in str(err)
            continue
        assert llvm_tools.tool_version(chosen)[0] >= 17
        assert not os.path.realpath(chosen).startswith(str(REAL_LLVM14))
    try:
        text = code_object_assembly(CODE_OBJECT)
    except CodeObjectError as err:
        assert "LLVM 17 or newer" in str(err)
    else:
        assert ".amdhsa_kernel" in text and "amdhsa.kernels" in text
