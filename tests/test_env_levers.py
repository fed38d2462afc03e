"""Every ROCKE_* lever is declared in one table (rocke.env.LEVERS) with what it accepts and the
check of a value; a bad value of any lever is refused at the first lever read -- naming the
variable, the value and what it accepts -- even where the run never uses that lever (it used to
be read, and so checked, only on the path that used it: ROCKE_CHECK_METADATA=paranoid on a CPU
call and ROCKE_EMU_STRETCHES=2 on the numpy backend were silently ignored)."""
import re

import pytest
from click.testing import CliRunner

from rocke import env
from rocke.cli import main as cli

# values no lever should take for another: switch words, numbers, a made-up mode, an unexpanded
# home directory (no shell expands ~ in a unit file or a container's ENV)
GARBAGE = ("paranoid", "2", "-1", "1.5", "yes", "~/garbage", " 1")


@pytest.fixture(autouse=True)
def _no_levers(monkeypatch):
    for name in env.LEVERS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("name", sorted(env.LEVERS))
def test_every_lever_in_the_table_refuses_garbage_naming_variable_value_and_accepted(
        name, monkeypatch):
    """A lever added to the table without a real check fails here."""
    lever = env.LEVERS[name]
    assert isinstance(lever, env.Lever) and lever.accepts and callable(lever.check)
    refused = []
    for value in GARBAGE:
        monkeypatch.setenv(name, value)
        error = lever.check(name, value)
        if error is None:
            env.check_all()             # accepted by its row: accepted by the table
            continue
        refused.append(value)
        assert name in error and repr(value) in error and lever.accepts in error, error
        with pytest.raises(ValueError) as caught:
            env.check_all()
        assert str(caught.value) == error
        with pytest.raises(ValueError, match="^" + re.escape(error)):
            env.raw("ROCKE_DEVICE")     # any lever read refuses it
    assert refused, f"{name} accepts every one of {GARBAGE}"


def test_every_lever_reads_its_default_and_a_good_value(monkeypatch, tmp_path):
    good = {"ROCKE_CACHE_DIR": str(tmp_path / "cache"), "ROCKE_LD_LLD": str(tmp_path / "no-ld"),
            "ROCKE_LIBLLVM": str(tmp_path / "libLLVM.so.20"), "ROCKE_LINKER": "comgr",
            "ROCKE_DEVICE": "emu:gfx950", "ROCKE_EMU_TIMEOUT_S": "2.5",
            "ROCKE_EMU_WORKERS": "1", "ROCKE_EMU_BACKEND": "torch", "ROCKE_EMU_DEVICE": "cpu",
            "ROCKE_EMU_RACE_CHECK": "0", "ROCKE_EMU_INIT_CHECK": "0",
            "ROCKE_EMU_STRETCHES": "0", "ROCKE_EMU_CUDA_KERNELS": "0",
            "ROCKE_FAMILIES": "mine=my_pkg.kernels, other=x", "ROCKE_CHECK_METADATA": "sync",
            "ROCKE_BATCH_INVARIANT": "1", "ROCKE_PREBUILT": "off",
            "ROCKE_WRITE_PEER_FIXTURES": "1", "ROCKE_NATIVE_KEY": "off",
            "ROCKE_RESULTS_DIR": "off", "ROCKE_RAY_TIMEOUT_S": "5",
            "ROCKE_VLLM_WHEEL": str(tmp_path / "vllm-0.33.0.whl")}
    assert set(good) >= set(env.LEVERS), "a new lever: add a good value here"
    assert env.results_dir() == env.cache_dir() / "results" and env.ray_timeout_s() == 30.0
    defaults = (env.linker(), env.device(), env.emu_target(), env.emu_timeout_s(),
                env.emu_backend(), env.emu_device(), env.emu_race_check(), env.emu_init_check(),
                env.emu_stretches(), env.emu_cuda_kernels(), env.families(),
                env.check_metadata(), env.batch_invariant(), env.prebuilt_dir(),
                env.write_peer_fixtures(), env.native_key())
    assert defaults == ("ld.lld", None, "gfx942", 600.0, "numpy", "cpu", True, True, True, True,
                        [], "off", False, None, False, "auto")
    for name, value in good.items():
        monkeypatch.setenv(name, value)
    env.check_all()
    assert (env.linker(), env.device(), env.emu_target(), env.emu_timeout_s(), env.emu_workers(),
            env.emu_backend(), env.emu_race_check(), env.emu_init_check(), env.emu_stretches(),
            env.emu_cuda_kernels(), env.families(), env.check_metadata(), env.batch_invariant(),
            env.prebuilt_dir(), env.write_peer_fixtures(), env.linker_override(),
            env.native_key()) == (
        "comgr", "emu", "gfx950", 2.5, 1, "torch", False, False, False, False,
        [("mine", "my_pkg.kernels"), ("other", "x")], "sync", True, "off", True,
        good["ROCKE_LD_LLD"], "off")
    assert str(env.cache_dir()) == good["ROCKE_CACHE_DIR"]
    assert env.vllm_wheel() == good["ROCKE_VLLM_WHEEL"]
    assert env.results_dir() is None and env.ray_timeout_s() == 5.0
    monkeypatch.setenv("ROCKE_RESULTS_DIR", str(tmp_path / "store"))
    assert env.results_dir() == tmp_path / "store"


def test_a_path_lever_refuses_what_names_no_path_it_means(monkeypatch, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    cases = [("ROCKE_PREBUILT", str(a_file), "(a file)"),
             ("ROCKE_PREBUILT", "0", "to turn it off, write off"),
             ("ROCKE_CACHE_DIR", "off", "a switch word, not a path"),
             ("ROCKE_LD_LLD", "~/bin/ld.lld", "'~' is not expanded"),
             ("ROCKE_LIBLLVM", "/usr/lib/libLLVM.so\n", "control characters")]
    for name, value, why in cases:
        monkeypatch.setenv(name, value)
        with pytest.raises(ValueError, match=re.escape(why)):
            env.check_all()
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "off").mkdir()          # a directory that is really called that: a path
    monkeypatch.setenv("ROCKE_CACHE_DIR", "off")
    env.check_all()


def test_several_bad_levers_are_named_together(monkeypatch):
    monkeypatch.setenv("ROCKE_CHECK_METADATA", "paranoid")
    monkeypatch.setenv("ROCKE_EMU_STRETCHES", "2")
    with pytest.raises(ValueError) as caught:
        env.device()
    assert str(caught.value) == ("ROCKE_EMU_STRETCHES must be 0 or 1, got '2'; "
                                 "ROCKE_CHECK_METADATA must be one of device, sync, off, "
                                 "got 'paranoid'")


@pytest.mark.parametrize("name, value, words", [
    ("ROCKE_CHECK_METADATA", "paranoid",
     "ROCKE_CHECK_METADATA must be one of device, sync, off, got 'paranoid'"),
    ("ROCKE_EMU_STRETCHES", "2", "ROCKE_EMU_STRETCHES must be 0 or 1, got '2'"),
])
def test_a_lever_the_run_never_uses_is_still_refused(name, value, words, monkeypatch):
    """An emulator launch on the numpy backend (no stretches, no GPU metadata guard): the bad
    value is an error before anything is launched, in the library and in the CLI (exit 2)."""
    import torch
    from rocke.kernels.registry import get_variant
    from rocke.runtime import launch
    from rocke.kernels.samples import vector_add as mod
    v = get_variant("vector_add/f32_v4")
    a, b, c = torch.ones(256), torch.ones(256), torch.zeros(256)
    grid, block = mod.launch_geometry(v.spec, n=256)
    compiled, args = v.compile(), mod.kernel_args(v.spec, a, b, c)
    launch(compiled, grid, block, args, device="emu")        # runs, without the lever
    assert torch.equal(c, torch.full((256,), 2.0))
    c.zero_()
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=words):
        launch(compiled, grid, block, args, device="emu")
    assert torch.equal(c, torch.zeros(256))
    r = CliRunner().invoke(cli, ["profile", "vector_add/f32_v4", "--shape", "n=256"],
                           env={name: value})
    assert r.exit_code == 2 and r.output == f"Error: {words}\n", r.output


def test_result_levers_are_levers():
    """rocke.env.RESULT_LEVERS (what a task run elsewhere takes from the driver) names only
    levers of the table, each once."""
    assert len(set(env.RESULT_LEVERS)) == len(env.RESULT_LEVERS)
    assert set(env.RESULT_LEVERS) <= set(env.LEVERS)


def test_a_misspelt_lever_is_warned_about_once_with_the_closest_name(monkeypatch):
    monkeypatch.setattr(env, "_warned_unknown", set())
    monkeypatch.setattr(env, "_checked_state", [None])
    monkeypatch.delenv("ROCKE_EMU_BACKEND", raising=False)
    monkeypatch.setenv("ROCKE_EMU_BACKEN", "torch")
    with pytest.warns(RuntimeWarning, match="ROCKE_EMU_BACKEN is set but is not a rocke lever.*"
                                            "did you mean ROCKE_EMU_BACKEND"):
        env.check_all()
    assert env.emu_backend() == "numpy"             # it changed nothing
    monkeypatch.setattr(env, "_checked_state", [None])
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.check_all()                                 # once a process: no second warning
