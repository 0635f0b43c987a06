"""What a user types: the notebook's settings (RunConfig, ModelConfig, the presets) and
the command lines of tools.train and tools.seed_spread.

A setting, a flag or a path that cannot work is refused with one `error:` line that
names it and says what to do, exit status 2, before the work it would spoil: the
settings and the results file (--out) before any data is read, the checkpoint folder
and the data's own limits after the data is prepared but before anything is trained or
removed. Any other error ends in one line too (exit status 1), with the traceback only
when AT_TRACEBACK=1 asks for it. The run folder itself (lock, resume, damage, a full
disk) is tests/test_run_folder.py's; Multi30k's folder, tests/test_download.py's.
"""

import dataclasses
import errno
import json
import math
import os
import re
import sys
import tempfile
import types
from pathlib import Path

import pytest

from atkit import config, files, launch, runtime
from atkit.settings import ConfigError, free_on_resume, unread
from conftest import (
    CLI_TINY,
    COPY,
    NO_DATA,
    NO_TRAINING,
    ROOT,
    copy_args,
    copy_cfg,
    error_line,
    forbid,
    lazy,
    refused,
    run_program,
)
from tools import errors, seed_spread
from tools import train as cli

torch = lazy("torch")
resume = lazy("atkit.resume")
corpus = lazy("atkit.data")

# ---------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "change, words",
    [
        ({"n_train": -5}, ["n_train", "-5", ">= 1"]),
        ({"n_train": 0}, ["n_train", ">= 1"]),
        ({"n_eval": -1}, ["n_eval", "-1"]),
        ({"steps": 0}, ["steps", ">= 1"]),
        ({"steps": -3}, ["steps"]),
        ({"eval_every": 0}, ["eval_every"]),
        ({"cooldown": 1.5}, ["cooldown", "<= 1"]),
        ({"seed": 2**40}, ["seed", "<="]),
        ({"factor": -1.0}, ["factor", "> 0"]),
        ({"factor": float("nan")}, ["factor", "nan"]),
        ({"factor": float("inf")}, ["factor", "finite"]),
        ({"factor": 1e300}, ["factor=1e+300", "at most 1e+15"]),  # float32 overflows
        ({"weight_decay": 1e300}, ["weight_decay", "at most 1e+15"]),
        ({"P_drop": 1.5}, ["P_drop", "1.5", "< 1"]),
        ({"eps_ls": 1.0}, ["eps_ls", "< 1"]),
        ({"norm": "bogus"}, ["norm", "bogus", "post", "pre"]),
        ({"tie": "both"}, ["tie", "both"]),
        ({"decode_tokens": 0}, ["decode_tokens"]),
        ({"model": None}, ["model settings by name"]),
        ({"src_lang": "fr"}, ["src_lang", "fr", "de", "en"]),
        ({"vocab": "chars"}, ["vocab", "chars"]),
        ({"precision": "fp8"}, ["precision", "fp8"]),
        ({"max_tokens": 0}, ["max_tokens"]),
        ({"max_sent_len": 2}, ["max_sent_len"]),
        ({"warmup": 0}, ["warmup"]),
        ({"seed": -1}, ["seed"]),
        ({"bpe_size": 3}, ["bpe_size"]),
        ({"h": 0}, ["h"]),
        ({"d_model": 30, "h": 4}, ["d_model", "h=4"]),
        ({"epoch": 3}, ["unknown", "epoch"]),
        ({"dmodel": 64}, ["unknown", "dmodel"]),
    ],
)
def test_bad_values_are_rejected_when_the_config_is_made(lib, change, words):
    import pipeline as pl

    with pytest.raises(ConfigError) as err:
        pl.run_config("ci", **change)
    for word in words:
        assert word in str(err.value), (word, str(err.value))


@pytest.mark.parametrize(
    "change, field",
    [
        ({"d_model": "64"}, "d_model"),
        ({"N": True}, "N"),
        ({"P_drop": "0.1"}, "P_drop"),
        ({"keep": True}, "keep"),
        ({"steps": 2.0}, "steps"),
        ({"fast": "yes"}, "fast"),
        ({"n_train": "all"}, "n_train"),
    ],
)
def test_wrong_types_are_type_errors_naming_the_field(lib, change, field):
    import pipeline as pl

    with pytest.raises(TypeError, match=field) as err:
        pl.run_config("ci", **change)
    assert isinstance(err.value, ConfigError), "one ConfigError family for all"
    assert type(change[field]).__name__ in str(err.value)


def test_a_config_is_frozen_and_changes_by_updated(lib):
    import pipeline as pl

    cfg = pl.run_config("ci", d_model=32, h=2)
    assert cfg.model.d_model == 32
    with pytest.raises(AttributeError):
        cfg.steps = 5
    assert cfg.updated(steps=5).steps == 5 and cfg.steps != 5
    with pytest.raises(ConfigError, match="steps"):
        cfg.updated(steps=0)


def test_every_preset_is_one_whole_record(lib):
    """One record per name in atkit.config.PRESETS, the one list that AT_PRESET and
    every --preset accept, holding all a preset decides: a record missing a part or
    a setting out of bounds fails here (or when atkit.config loads), not an hour into
    a run. The notebook's PRESETS is that dict."""
    import pipeline as pl

    assert lib.PRESETS is config.PRESETS
    assert config.preset_names() == tuple(config.PRESETS)
    for name, preset in config.PRESETS.items():
        assert isinstance(preset, config.Preset), name
        assert isinstance(preset.recipe, config.RecipeConfig), name
        assert preset.about and isinstance(preset.one_thread, bool), name
        cfg = pl.run_config(name)
        assert isinstance(cfg, lib.RunConfig), name
        assert isinstance(cfg.model, lib.ModelConfig), name
        assert config.settings_table(name).startswith(f"preset {name} ("), name
        assert lib.expected_time(name, "part3")
    assert [n for n, p in config.PRESETS.items() if p.publishes] == [config.publisher()]
    with pytest.raises(ConfigError, match="preset"):
        pl.run_config("tpu")
    with pytest.raises(ConfigError, match="RunConfig.steps=0"):
        config.Preset("x", {}, {"steps": 0}, config.RecipeConfig())
    with pytest.raises(ConfigError, match="unknown RunConfig setting"):
        config.Preset("x", {}, {"epochs": 3}, config.RecipeConfig())


def program_parsers() -> dict:
    """{program: its argument parser}, for every program of tools/ whose parser has
    a --preset: each parser is caught when the program parses `--help`."""
    import argparse
    import importlib

    from tools import startup

    class Caught(Exception):
        pass

    def catch(self, args=None, namespace=None):
        caught.append(self)
        raise Caught

    found = {}
    for name in startup.tools():
        caught = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(argparse.ArgumentParser, "parse_args", catch)
            try:
                importlib.import_module(name).main(["--help"])
            except (Caught, SystemExit):
                pass
        for parser in caught:
            if any("--preset" in a.option_strings for a in parser._actions):
                found[name] = parser
    return found


def preset_choices(parser) -> tuple:
    (action,) = [a for a in parser._actions if "--preset" in a.option_strings]
    return tuple(action.choices)


PRESET_PROGRAMS = {
    "tools.train",
    "tools.seed_spread",
    "tools.bench",
    "tools.precision_check",
    "tools.export_model",
}


def test_every_programs_preset_choice_is_the_one_list(monkeypatch):
    """Each program's --preset offers the names of atkit.config.PRESETS, from
    config.add_preset_option, and no program spells a preset list of its own: a
    preset added to the record alone is a choice of every program (here "ci2"), of
    AT_PRESET, and has a thread rule."""
    parsers = program_parsers()
    assert set(parsers) == PRESET_PROGRAMS
    for name, parser in parsers.items():
        assert preset_choices(parser) == config.preset_names(), name
    own_list = re.compile(r"add_argument\(\s*[\"']--preset")
    for path in (ROOT / "tools").glob("*.py"):
        assert not own_list.search(path.read_text(encoding="utf-8")), path.name
    twin = dataclasses.replace(config.PRESETS["ci"], about="a twin", one_thread=False)
    monkeypatch.setitem(config.PRESETS, "ci2", twin)
    for name, parser in program_parsers().items():
        assert "ci2" in preset_choices(parser), name
    assert runtime.choose_preset({"AT_PRESET": "ci2"}) == "ci2"
    assert runtime.torch_threads("ci2") == runtime.cores_available()


def test_threads_rule_is_fixed_by_the_preset():
    assert runtime.torch_threads("ci") == 1
    assert runtime.torch_threads("cpu", processes=2) >= 1
    assert runtime.torch_threads("cpu") >= runtime.torch_threads("cpu", processes=2)
    with pytest.raises(ValueError, match="preset"):
        runtime.torch_threads("tpu")
    ci = config.PRESETS["ci"]
    assert ci.one_thread and not config.PRESETS["cpu"].one_thread


def test_settings_declare_what_a_resume_may_change_and_what_a_run_reads(lib):
    """The fields say it themselves (setting(..., resumable=, read_if=)): steps may
    change on resume only without a cool-down; resume_every, compile and
    decode_tokens change no number; a word-level run never reads bpe_size, a BPE run
    never reads min_freq."""
    import pipeline as pl

    words = pl.run_config("ci", cooldown=0.0).to_dict()
    bpe = pl.run_config("ci", vocab="bpe", tie="all", cooldown=0.3).to_dict()
    always = {"resume_every", "compile", "decode_tokens"}
    assert free_on_resume(lib.RunConfig, words) == always | {"steps", "bpe_size"}
    assert free_on_resume(lib.RunConfig, bpe) == always | {"min_freq"}
    assert unread(lib.RunConfig, words) == {"bpe_size"}
    assert unread(lib.RunConfig, bpe) == {"min_freq"}


def test_the_copy_task_honours_tie_and_refuses_what_it_has_not(lib):
    """The copy task has one vocabulary, so every `tie` is possible and is applied;
    vocab and src_lang have no meaning there and are refused."""
    import pipeline as pl

    counts = {}
    for tie in ("none", "tgt", "all"):
        cfg = copy_cfg(lib, tie=tie)
        data = lib.copy_task_data(cfg)
        model = pl.run.build(cfg, data, "cpu")
        counts[tie] = sum(p.numel() for p in model[0].parameters())
    assert counts["none"] > counts["tgt"] > counts["all"]
    for change in ({"vocab": "bpe"}, {"src_lang": "en"}):
        with pytest.raises(ConfigError, match="copy task"):
            lib.copy_task_data(copy_cfg(lib, **change))


# ------------------------------------------ tools.train: a run and its results


@pytest.mark.data
def test_the_program_trains_scores_and_writes_its_results(lib, tmp_path, capsys):
    out = tmp_path / "results.json"
    args = ["--preset", "ci", "--ckpt-dir", str(tmp_path), "--out", str(out)]
    args += ["--search", "beam", "--search-set", "beam_size=2"]
    for setting in ("n_train=48", "n_eval=8", "steps=4", "eval_every=4"):
        args += ["--set", setting]
    status, printed, _ = run_program([*args, "--set", "d_model=32"], capsys)
    assert status == 0
    results = json.loads(out.read_text())
    assert f"-> {out}" in printed
    assert results["preset"] == "ci" and results["config"]["n_train"] == 48
    assert results["config"]["model"]["d_model"] == 32
    assert results["steps"] > 0 and results["train_time_s"] > 0
    assert results["tokens_per_s_per_process"] > 0 and results["best_step"] == 4
    assert 0 <= results["bleu_test_2016_flickr"] <= 100
    assert results["search"] == "beam(beam_size=2, alpha=0.6)"
    assert "tok:13a" in results["sacrebleu_signature"]
    assert (tmp_path / "last.pt").exists() and (tmp_path / "step000004.pt").exists()


def test_odd_but_usable_paths_work(lib, tmp_path, monkeypatch, capsys):
    """Spaces, non-ASCII letters, ~, a symbolic link to the results file, and the
    results inside the checkpoint folder: the run trains and writes where it should
    (a symbolic link keeps pointing at the results)."""
    home = tmp_path / "mein Zuhause ü"
    monkeypatch.setenv("HOME", str(home))
    target = tmp_path / "Ergebnisse ö" / "r 1.json"
    target.parent.mkdir()
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    argv = ["--task", "copy", "--preset", "ci"]
    for setting in ("n_train=100", "steps=2", "eval_every=2", "N=1", "d_model=16"):
        argv += ["--set", setting]
    tilde = ["--ckpt-dir", "~/Läufe 1", "--out", str(link)]
    assert run_program([*argv, *tilde], capsys)[0] == 0
    assert (home / "Läufe 1" / "last.pt").is_file()
    assert link.is_symlink() and json.loads(target.read_text())["steps"] == 2
    inside = home / "Läufe 1" / "results.json"
    ckpt = ["--ckpt-dir", str(home / "Läufe 1"), "--out", str(inside)]
    assert run_program([*argv, *ckpt], capsys)[0] == 0
    assert json.loads(inside.read_text())["steps"] == 2


def test_two_runs_never_share_a_results_file(lib, tmp_path, monkeypatch, capsys):
    """issue 56: the results say whose they are (ckpt_dir); a second run into
    another folder with the same --out is refused before it trains, and one that
    finds --out taken when it ends (the other run finished first) writes beside its
    checkpoints and says so, exit 2. Without --out, a run given --ckpt-dir writes
    results.json there (not the one results/<preset>-<task>.json of every run)."""
    monkeypatch.chdir(tmp_path)
    settings = {**COPY, "steps": 2, "eval_every": 2}
    out = tmp_path / "r.json"
    assert run_program(copy_args(tmp_path / "a", settings, out=out), capsys)[0] == 0
    first = out.read_bytes()
    assert json.loads(first)["ckpt_dir"] == os.path.realpath(tmp_path / "a")
    forbid(lib, monkeypatch, *NO_DATA)
    message = refused(copy_args(tmp_path / "b", settings, out=out), capsys)
    assert f"holds the results of the run in {tmp_path / 'a'}" in message, message
    assert out.read_bytes() == first and not (tmp_path / "b").exists()
    # the race: both started before either wrote; the second to end loses nothing
    results = {**json.loads(first), "ckpt_dir": str(tmp_path / "b"), "steps": 7}
    assert cli.write_results(results, out, tmp_path / "b") == 2
    (kept,) = (tmp_path / "b").glob("results-*.json")
    assert json.loads(kept.read_text())["steps"] == 7 and out.read_bytes() == first
    line = error_line(capsys.readouterr().err)
    assert "now holds the results of the run in" in line and str(kept) in line, line
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    argv = copy_args(tmp_path / "c", settings)
    del argv[argv.index("--out") : argv.index("--out") + 2]
    assert run_program(argv, capsys)[0] == 0
    assert json.loads((tmp_path / "c" / "results.json").read_text())["steps"] == 2
    assert not (tmp_path / "results").exists()


def test_the_default_checkpoint_folder_honours_at_checkpoints(
    lib, tmp_path, monkeypatch, capsys
):
    """Without --ckpt-dir a run trains into $AT_CHECKPOINTS/<preset>/<task> (a
    Google Drive folder on Colab), as the notebook does, not into ./checkpoints."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AT_CHECKPOINTS", str(tmp_path / "drive"))
    argv = copy_args("unused", {**COPY, "steps": 2, "eval_every": 2})
    at = argv.index("--ckpt-dir")
    del argv[at : at + 2]
    at = argv.index("--out")
    del argv[at : at + 2]
    status, _, err = run_program(argv, capsys)
    assert status == 0, err[-2000:]
    assert (tmp_path / "drive" / "ci" / "copy" / "last.pt").is_file()
    assert not (tmp_path / "checkpoints").exists()
    assert json.loads((tmp_path / "results" / "ci-copy.json").read_text())["steps"] == 2


def test_at_checkpoints_and_at_preset_are_checked(tmp_path, monkeypatch, capsys):
    """A bad $AT_CHECKPOINTS is refused where it is used (no --ckpt-dir), naming the
    variable; a bad $AT_PRESET likewise."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    for value, words in (
        (tmp_path / "file", "is a file, not a folder"),
        (tmp_path / "link", "symbolic link"),
    ):
        with pytest.raises(NotADirectoryError, match=words) as err:
            runtime.checkpoint_root("ci", {"AT_CHECKPOINTS": str(value)})
        assert "AT_CHECKPOINTS" in str(err.value)
        monkeypatch.setenv("AT_CHECKPOINTS", str(value))
        message = refused(["--preset", "ci", "--out", str(tmp_path / "r.json")], capsys)
        assert "AT_CHECKPOINTS" in message and words in message
        given = ["--ckpt-dir", str(tmp_path / "run"), "--out", str(tmp_path / "r.json")]
        cli.check_args(cli.make_parser().parse_args(given), "ci")  # not used: fine
    good = runtime.checkpoint_root("ci", {"AT_CHECKPOINTS": str(tmp_path / "new")})
    assert good == tmp_path / "new" / "ci" and not good.exists()
    monkeypatch.delenv("AT_CHECKPOINTS")
    monkeypatch.setenv("AT_PRESET", "tpu")
    message = refused(["--ckpt-dir", str(tmp_path / "run")], capsys)
    assert "AT_PRESET='tpu'" in message


# ------------------------------- tools.train: refused before any data is read

ON_PROC = Path("/proc/self").is_dir()
LONG = "a" * 300  # over the 255 bytes a file name may have on Linux file systems
TOO_LONG = os.strerror(errno.ENAMETOOLONG)


def _fifo(t: Path) -> Path:
    os.mkfifo(t / "fifo")
    return t / "fifo"


def _no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize(
    "make_args, words",
    [
        # settings: the notebook's own checks, named as --set gave them
        (lambda t: ["--set", "P_drop=1.5"], ["P_drop=1.5", "< 1"]),
        (lambda t: ["--set", "P_drop=inf"], ["P_drop=inf", ">= 0 and < 1"]),
        (lambda t: ["--set", "P_drop=nan"], ["P_drop=nan", ">= 0 and < 1"]),
        (lambda t: ["--set", "P_drop=-inf"], ["P_drop=-inf", ">= 0 and < 1"]),
        (lambda t: ["--set", "max_tokens=inf"], ["max_tokens=inf", "an integer"]),
        (lambda t: ["--set", "P_drop="], ["P_drop=''", "number", "not str"]),
        (lambda t: ["--set", "seed=10**30"], ["seed", "not str"]),
        (lambda t: ["--set", f"seed={10**30}"], ["seed", "at most"]),
        (lambda t: ["--set", "seed=4294967296"], ["seed", "<="]),
        (lambda t: ["--set", "factor=1e300"], ["factor=1e+300", "at most"]),
        (lambda t: ["--set", "model=None"], ["model settings by name"]),
        (lambda t: ["--set", "epochs=3"], ["unknown", "epochs"]),
        (lambda t: ["--set", "steps=3", "--set", "steps=4"], ["'steps'", "more than"]),
        (lambda t: ["--set", "nonsense"], ["--set", "expected key=value"]),
        # flags and the environment
        (lambda t: ["--timeout-s", "0"], ["--timeout-s", "> 0"]),
        (lambda t: ["--timeout-s", "inf"], ["--timeout-s", "> 0"]),
        (
            lambda t: ["--search-set", "beam_size=2"],
            ["search greedy has no option(s) ['beam_size']", "options: none"],
        ),
        (
            lambda t: ["--search", "beam", "--search-set", "width=2"],
            ["no option(s) ['width']", "options: ['beam_size', 'alpha']"],
        ),
        (
            lambda t: ["--search", "beam", "--search-set", "beam_size=100000"],
            ["beam_size=100000", "<= 256"],
        ),
        (lambda t: ["--search", "beam", "--search-set", "alpha=nan"], ["alpha=nan"]),
        (
            lambda t: ["--search", "sample", "--search-set", "temperature=0"],
            ["temperature=0", ">= 0.05"],
        ),
        (
            lambda t: ["--search", "beam"] + ["--search-set", "alpha=1"] * 2,
            ["--search-set ['alpha']", "more than once"],
        ),
        (lambda t: ["--search-set", "alpha"], ["--search-set", "expected key=value"]),
        (lambda t: ["--search", "bogus"], ["--search", "invalid choice"]),
        (lambda t: ["--ckpt-dir", ""], ["--ckpt-dir", "empty path"]),
        # the results file: checked, and probed with a real file
        pytest.param(
            lambda t: ["--out", "/proc/x.json"],
            ["--out /proc", "cannot be written", "give a folder"],
            marks=pytest.mark.skipif(not ON_PROC, reason="no /proc here"),
        ),
        (lambda t: ["--out", str(t)], ["--out", "is a folder"]),
        (lambda t: ["--out", str(t / f"{LONG}.json")], ["--out", TOO_LONG]),
        # a name that fits, but the temporary file written beside it does not
        (
            lambda t: ["--out", str(t / f"{LONG[:245]}.json")],
            ["--out", "cannot be written", TOO_LONG],
        ),
        (lambda t: ["--out", str(_fifo(t))], ["--out", "not a regular file"]),
        (lambda t: ["--out", f"{t}/results/"], ["--out", "slash", "file name"]),
        (lambda t: ["--out", str(t / "run")], ["--out", "checkpoint folder"]),
        (
            lambda t: ["--ckpt-dir", str(t / "run" / "a"), "--out", str(t / "run")],
            ["--out", "checkpoint folder"],
        ),
        (lambda t: ["--out", str(t / "run" / "last.pt")], ["--out", "replace"]),
        (lambda t: ["--out", str(t / "run" / "prev.pt")], ["--out", "replace"]),
        (lambda t: ["--out", str(t / "run" / "step000002.pt")], ["--out", "replace"]),
        (lambda t: ["--out", str(t / "run" / ".lock")], ["--out", "replace"]),
    ],
)
def test_refused_before_any_data(lib, tmp_path, monkeypatch, capsys, make_args, words):
    forbid(lib, monkeypatch, *NO_DATA)
    args = copy_args(tmp_path / "run", {}, out=tmp_path / "r.json")
    message = refused([*args, *make_args(tmp_path)], capsys)
    for word in words:
        assert word in message, (word, message)
    assert not (tmp_path / "r.json").exists()
    assert not (tmp_path / "run").exists(), "the checkpoint folder was made"
    if (tmp_path / "fifo").exists():
        assert not (tmp_path / "fifo").is_file(), "the FIFO was replaced"


def test_set_values_are_python_literals_and_inf_nan_are_numbers():
    """--set reads a Python literal, else a string; inf, -inf and nan are floats, so
    that a setting refuses them as numbers out of range, not as text."""
    for text, value in (
        ("steps=5", 5),
        ("P_drop=0.1", 0.1),
        ("vocab='bpe'", "bpe"),
        ("vocab=bpe", "bpe"),
        ("model=None", None),
        ("seed=10**30", "10**30"),  # not a literal: text, refused as a string
        ("P_drop=", ""),
    ):
        assert cli.parse_setting(text) == (text.split("=")[0], value), text
    for text in ("P_drop=inf", "P_drop=-inf", "P_drop=Infinity"):
        key, value = cli.parse_setting(text)
        assert isinstance(value, float) and math.isinf(value), text
    assert math.isnan(cli.parse_setting("P_drop=nan")[1])


@pytest.mark.parametrize(
    "env, words",
    [
        ({"WORLD_SIZE": "2"}, ["LOCAL_RANK", "torchrun"]),
        ({"cuda": False}, ["--device cuda", "no CUDA device"]),
    ],
)
def test_the_device_and_torchrun_are_checked_before_any_data(
    lib, tmp_path, monkeypatch, capsys, env, words
):
    forbid(lib, monkeypatch, *NO_DATA)
    args = copy_args(tmp_path / "run", {})
    if "cuda" in env:
        _no_cuda(monkeypatch)
        args += ["--device", "cuda"]
    else:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        # under torchrun the program leaves by os._exit: here, by SystemExit
        monkeypatch.setattr(launch, "worker_exit", lambda status: sys.exit(status))
    message = refused(args, capsys)
    for word in words:
        assert word in message, (word, message)


def test_the_results_folder_is_probed_with_a_real_file(
    lib, tmp_path, monkeypatch, capsys
):
    """A folder that passes the permission checks but takes no new file (/proc, a
    read-only or full file system) is found before training by making a file in it,
    named as the results' temporary file will be, and deleting it."""
    out_dir, made, real = tmp_path / "results", [], tempfile.mkstemp

    def mkstemp(suffix=None, prefix=None, dir=None, text=False):
        made.append((Path(dir), prefix))
        if Path(dir) == out_dir:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(suffix, prefix, dir, text)

    monkeypatch.setattr(files.tempfile, "mkstemp", mkstemp)
    forbid(lib, monkeypatch, *NO_DATA)
    args = copy_args(tmp_path / "run", {}, out=out_dir / "r.json")
    message = refused(args, capsys)
    assert f"--out {out_dir / 'r.json'} cannot be written" in message, message
    assert os.strerror(errno.EROFS) in message, message
    assert made == [(out_dir, ".r.json.")], made


# ----------------- tools.train: refused after the data, before training or removing


def _self_link(t: Path) -> Path:
    (t / "loop").symlink_to(t / "loop")
    return t / "loop"


def _dangling(t: Path) -> Path:
    (t / "link").symlink_to(t / "nowhere")
    return t / "link"


def _lock_folder(t: Path) -> Path:
    (t / "run" / ".lock").mkdir(parents=True)
    return t / "run"


def _last_pt_folder(t: Path) -> Path:
    """A run folder whose last.pt is a folder, beside a checkpoint of its run."""
    (t / "run" / "last.pt").mkdir(parents=True)
    (t / "run" / "step000004.pt").write_bytes(b"a snapshot")
    return t / "run"


def _file(t: Path) -> Path:
    (t / "file").write_text("x")
    return t / "file"


@pytest.mark.parametrize(
    "make_args, words",
    [
        # the checkpoint folder: the notebook's train() checks it, one place for all
        pytest.param(
            lambda t: ["--ckpt-dir", "/proc/x"],
            ["/proc/x", "cannot", "give a folder"],
            marks=pytest.mark.skipif(not ON_PROC, reason="no /proc here"),
        ),
        (lambda t: ["--ckpt-dir", str(_self_link(t))], ["loop", "symbolic link"]),
        (lambda t: ["--ckpt-dir", str(_dangling(t))], ["link", "nowhere"]),
        (lambda t: ["--ckpt-dir", str(t / LONG)], ["--ckpt-dir", TOO_LONG]),
        (lambda t: ["--ckpt-dir", str(_file(t))], ["file", "give a folder"]),
        (lambda t: ["--ckpt-dir", str(_lock_folder(t))], ["lock", "give a folder"]),
        (
            lambda t: ["--ckpt-dir", str(_last_pt_folder(t)), "--fresh"],
            ["last.pt is a folder", "move it out of the way"],
        ),
        (lambda t: ["--max-steps", "0"], ["max_steps", ">= 1"]),
        # the copy task's own data
        (lambda t: ["--task", "copy", "--set", "vocab='bpe'"], ["copy task", "vocab"]),
        (lambda t: ["--task", "copy", "--set", "src_lang='en'"], ["copy", "src_lang"]),
        # what only the data can tell (issue 47): no sentence fits; sentencepiece
        # cannot learn that many (or that few) pieces from this text
        (lambda t: ["--set", "max_sent_len=3"], ["max_sent_len=3", "no training"]),
        (
            lambda t: ["--set", "vocab=bpe", "--set", "bpe_size=5"],
            ["bpe_size=5", "choose another bpe_size"],
        ),
        (
            lambda t: ["--set", "vocab=bpe", "--set", "bpe_size=1000000"],
            ["bpe_size=1000000", "choose another bpe_size"],
        ),
        # settings that pass their own checks but not the run's (issue 56): padding
        # beyond the positional encoding; a model larger than this machine's memory
        (
            lambda t: ["--set", "pad_multiple=1000"],
            ["pad_multiple=1000", "ModelConfig.max_len=256", "at most"],
        ),
        (
            lambda t: ["--set", "d_model=1000000"],
            ["d_model=1000000", "GiB", "more than", "give smaller sizes"],
        ),
    ],
)
def test_refused_before_training_or_removing(
    lib, tmp_path, monkeypatch, capsys, make_args, words, on_toy_corpus
):
    """Refused with one message before any step or removal; what only the data can
    tell, the made-up sentences tell as Multi30k would."""
    forbid(lib, monkeypatch, *NO_TRAINING)
    base = ["--ckpt-dir", str(tmp_path / "run"), "--out", str(tmp_path / "r.json")]
    extra = make_args(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    message = refused([*CLI_TINY, *base, *extra], capsys)
    for word in words:
        assert word in message, (word, message)
    assert not (tmp_path / "r.json").exists()
    if "--fresh" in extra:  # nothing deleted
        assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_token_budget_below_the_longest_sentence_is_refused(
    lib, tmp_path, monkeypatch, capsys, on_toy_corpus
):
    """The budget against the longest pair of the data (here the made-up one)."""
    import pipeline as pl

    cfg = pl.run_config("ci", n_train=100)
    pairs = pl.prepare_data(cfg).train
    longest = max(max(len(s), len(t) - 1) for s, t in pairs)  # t: decoder in/out
    forbid(lib, monkeypatch, *NO_TRAINING)
    base = ["--ckpt-dir", str(tmp_path / "run"), "--out", str(tmp_path / "r.json")]
    for budget in (1, longest - 1):
        message = refused([*CLI_TINY, *base, "--set", f"max_tokens={budget}"], capsys)
        for word in (f"max_tokens={budget}", f"{longest} ids", f">= {longest}"):
            assert word in message, (word, message)
    corpus.check_token_budget(cfg.updated(max_tokens=longest), pairs)  # fits exactly
    padded = -(-longest // 8) * 8
    padded_cfg = cfg.updated(max_tokens=longest, pad_multiple=8)
    with pytest.raises(ConfigError, match=f"{padded} ids.*pad_multiple=8"):
        corpus.check_token_budget(padded_cfg, pairs)
    assert not (tmp_path / "r.json").exists()


# ------------------------------------------- tools.train: any other error, one line


def test_an_unexpected_error_ends_in_one_line(lib, tmp_path, monkeypatch, capsys):
    """A bug (here: the notebook's train() dividing by zero) ends in one `error:`
    line naming the exception, exit status 1; AT_TRACEBACK=1 adds the traceback."""

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero in a test")

    import pipeline

    monkeypatch.setattr(pipeline, "train", broken)
    args = copy_args(tmp_path / "run", {})
    message = refused(args, capsys, status=1)
    assert message.startswith("ZeroDivisionError: division by zero in a test")
    assert "AT_TRACEBACK=1" in message
    monkeypatch.setenv("AT_TRACEBACK", "1")
    status, _, err = run_program(args, capsys)
    assert status == 1
    assert "Traceback (most recent call last)" in err and "in broken" in err
    assert err.rstrip().splitlines()[-1].startswith("python -m tools.train: error:")


CPU_ALLOC = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
    "allocate memory: you tried to allocate 4000000000000 bytes. Error code 12 "
    "(Cannot allocate memory)"
)
GPU_ALLOC = "CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total ..."


def test_every_error_kind_has_its_status_and_advice():
    """errors.advice: refusals (exit 2) keep their message; a full disk is named as
    such wherever it happens, also inside another error's message (torch's zip
    writer); the system's bare words get a hint; anything else is a bug (exit 1)."""
    cases = [
        (errors.UsageError("--out x: give a file"), 2, "--out x: give a file"),
        (OSError(errno.ENOSPC, "No space left on device"), 2, "the disk is full"),
        (RuntimeError("write failed: No space left on device"), 2, "disk is full"),
        (PermissionError(13, "Permission denied"), 2, "give a path you may write"),
        (FileNotFoundError(2, "No such file"), 2, "check the path"),
        (MemoryError(), 1, "out of memory"),
        (KeyError("x"), 1, "unexpected"),
        # PyTorch's failures to allocate are out of memory too (issue 56)
        (RuntimeError(CPU_ALLOC), 1, "out of memory (PyTorch tried to allocate 3,72"),
        (torch.OutOfMemoryError(GPU_ALLOC), 1, "out of memory (PyTorch tried to"),
        (resume.NonFiniteLossError("the loss is nan; lower factor"), 2, "lower factor"),
    ]
    for err, status, words in cases:
        message, code = errors.advice(err)
        assert code == status and words in message, (err, message)
        if "unexpected" not in words:
            assert "unexpected" not in message, message
    full = files.DiskFullError(errno.ENOSPC, "the disk is full: last.pt ...")
    assert errors.advice(full) == ("the disk is full: last.pt ...", 2)


# ---------------------------------------------------- tools.seed_spread's flags


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--seeds", "1"], "at least two different seeds"),
        (["--seeds", "0", "0"], "at least two different seeds"),
        (["--seeds", "-1", "2"], ">= 0"),
        (["--seeds", "x"], "--seeds"),
        (["--preset", "tpu"], "--preset"),
    ],
)
def test_seed_spread_validates_its_flags(capsys, argv, words):
    with pytest.raises(SystemExit) as err:
        seed_spread.main(argv)
    assert err.value.code == 2 and words in capsys.readouterr().err


def test_seed_spread_checks_every_seed_before_training(
    lib, tmp_path, monkeypatch, capsys
):
    """issue 56: seed 2**40 is refused before seed 0 trains."""
    forbid(lib, monkeypatch, *NO_DATA)
    argv = ["--preset", "ci", "--seeds", "0", str(2**40), "--out", str(tmp_path / "s")]
    status = errors.run_main(lambda: seed_spread.main(argv), "seeds")
    err = capsys.readouterr().err
    assert status == 2 and err.count("error:") == 1, err
    assert f"--seeds {2**40}" in err and "seed" in err and "<=" in err, err


def test_seed_spread_checks_its_summary_file_before_training(
    lib, tmp_path, monkeypatch, capsys
):
    forbid(lib, monkeypatch, *NO_DATA)
    with pytest.raises(SystemExit):
        seed_spread.main(["--preset", "ci", "--out", str(tmp_path)])
    assert "is a folder" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "spread.json"
    status = errors.run_main(
        lambda: seed_spread.main(["--preset", "ci", "--out", str(out)]), "seeds"
    )
    assert status == 2
    assert "a file, not a folder" in capsys.readouterr().err


# -------------------------------------------------------- tools.bench's flags


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--steps", "0"], "--steps"),
        (["--rounds", "-1"], "--rounds"),
        (["--batches", "x"], "--batches"),
        (["--threads", "0"], "--threads"),
        (["--paths", "bogus"], "--paths"),
        (["--paths", "fast,fast"], "--paths"),
        (["--set", "P_drop=1.5"], "P_drop"),
    ],
)
def test_bench_validates_its_flags(lib, capsys, argv, words):
    from tools import bench

    with pytest.raises((SystemExit, ConfigError)) as err:
        bench.parse_args(lib, argv)
    if err.type is SystemExit:
        assert err.value.code == 2 and words in capsys.readouterr().err
    else:
        assert words in str(err.value)


# ------------------------------------------------ the Setup cell: runtime's switches


def test_at_pretrained_is_1_0_or_unset():
    assert runtime.pretrained({}) is False
    assert runtime.pretrained({"AT_PRETRAINED": "0"}) is False
    assert runtime.pretrained({"AT_PRETRAINED": " 1 "}) is True
    with pytest.raises(ValueError) as err:
        runtime.pretrained({"AT_PRETRAINED": "yes"})
    assert str(err.value).startswith("AT_PRETRAINED='yes': use 1 (load the committed")


def test_the_pretrained_switch_skips_the_cells_that_train(monkeypatch, capsys):
    """use_pretrained in an IPython shell (a stand-in: its list of input
    transformers): on, a cell whose first line is `# needs training` becomes one
    printed line; off, it runs again; outside IPython it only returns the flag."""
    other = lambda lines: lines  # noqa: E731  (a transformer of someone else's)
    shell = types.SimpleNamespace(input_transformers_cleanup=[other])
    ipython = types.SimpleNamespace(get_ipython=lambda: shell)
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    hooks = shell.input_transformers_cleanup
    assert runtime.use_pretrained(True) is True
    assert runtime.use_pretrained(True) is True
    assert len(hooks) == 2 and hooks[0] is other, "added once, others kept"
    cell = ["# needs training\n", "train()\n"]
    (line,) = hooks[1](cell)
    exec(line)  # noqa: S102 (the line the cell becomes)
    assert capsys.readouterr().out.startswith(
        "skipped: PRETRAINED is on (AT_PRETRAINED=1), and this cell trains"
    )
    assert hooks[1](["x = 1\n"]) == ["x = 1\n"] and hooks[1]([]) == []
    assert runtime.use_pretrained(False) is False and hooks == [other]
    monkeypatch.setenv("AT_PRETRAINED", "1")
    assert runtime.use_pretrained() is True and len(hooks) == 2
    monkeypatch.setitem(sys.modules, "IPython", None)  # not installed: a script
    assert runtime.use_pretrained(False) is False and len(hooks) == 2


@pytest.mark.parametrize(
    "capability, expected",
    [
        ((7, 5), ("fp16", "sm75 has no native bfloat16: float16 + GradScaler")),
        ((8, 0), ("bf16", "the GPU computes bfloat16 natively (sm80)")),
        ((9, 0), ("bf16", "the GPU computes bfloat16 natively (sm90)")),
    ],
)
def test_auto_precision_on_a_gpu_follows_its_capability(
    monkeypatch, capability, expected
):
    asked = []

    def capability_of(device):
        asked.append(device)
        return capability

    monkeypatch.setattr("torch.cuda.get_device_capability", capability_of)
    assert runtime.auto_precision("cuda:1") == expected
    assert asked == [torch.device("cuda", 1)]


def test_the_setup_cells_line_and_the_facts_the_readme_reads(monkeypatch):
    from tools import readme_results

    monkeypatch.setenv("AT_PRESET", "ci")
    rt = runtime.setup()
    assert (rt.preset, rt.device, rt.threads) == ("ci", torch.device("cpu"), 1)
    version = sys.modules["torch"].__version__.split("+")[0]  # loaded by setup()
    machine = f"{runtime.cores_available()} CPU core(s)"
    monkeypatch.setattr(runtime, "TORCH_WAS_LOADED", False)
    assert str(rt) == f"preset ci · cpu ({machine}) · torch {version}"
    bundle = rt._repr_mimebundle_()
    assert bundle == {
        "text/plain": str(rt),
        runtime.RUN_MIME: {
            "preset": "ci",
            "device": "cpu",
            "machine": machine,
            "torch": version,
            "cpu": runtime.cpu_name(),  # what decides a CPU run's time
            "precision": runtime.auto_precision("cpu")[0],
        },
    }
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    shown = new_output("display_data", data=bundle)
    nb = new_notebook(cells=[new_code_cell("1"), new_code_cell("rt", outputs=[shown])])
    assert readme_results.run_preset(nb) == "ci"
    monkeypatch.setattr(runtime, "TORCH_WAS_LOADED", True)
    assert str(rt).endswith(" (set too late: torch was loaded first; restart)")
    monkeypatch.setattr("torch.cuda.get_device_name", lambda device: "NVIDIA H100")
    gpu = runtime.Runtime("gpu", torch.device("cuda", 0), 8)
    assert gpu.machine() == "NVIDIA H100"


def test_an_earlier_notebooks_retired_model_settings_read_as_todays(lib):
    """Checkpoints and exported models of earlier versions hold model settings this
    notebook no longer has (P_drop_attn, P_drop_ff, attn_impl); at the values under
    which they changed nothing, a checkpoint reads as today's config; another value
    stays, and rebuilding refuses it."""
    import copy

    import pipeline as pl
    from atkit import checkpoints, settings

    today = pl.run_config("ci").to_dict()
    old = copy.deepcopy(today)
    old["model"].update(P_drop_attn=0.0, P_drop_ff=0.0, attn_impl="sdpa")
    state = {"format": checkpoints.CHECKPOINT_FORMAT, "config": old, "model": {}}
    assert checkpoints.check_format(state, "old.pt")["config"] == today
    assert pl.config_from_dict(state["config"]) == pl.run_config("ci")
    other = copy.deepcopy(today)
    other["model"]["P_drop_attn"] = 0.3  # it did change what the run computed
    assert settings.current_config(other)["model"]["P_drop_attn"] == 0.3
    with pytest.raises((TypeError, ValueError), match="P_drop_attn"):
        pl.config_from_dict(other)
