"""Bad input never trains, deletes or saves garbage: each entry point rejects what it
cannot serve with an error that names the setting or file, before any data is read or
any file is removed, and a run that goes wrong keeps the last good checkpoint."""

import errno
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from atkit import files, launch, resume, runtime
from tools import train as cli
from conftest import quiet

TINY = {"n_train": 120, "n_eval": 8, "max_tokens": 300, "N": 1, "d_model": 32,
        "d_ff": 64, "h": 2, "steps": 12, "eval_every": 6, "keep": 2, "warmup": 10,
        "cooldown": 0.0}  # fmt: skip


@pytest.fixture(scope="module")
def finished(lib, cfg, data, tmp_path_factory):
    """A finished run (two evaluations), copied fresh into each test that damages it."""
    ckpt_dir = tmp_path_factory.mktemp("finished")
    lib.train(cfg, data, ckpt_dir, "cpu", log=quiet)
    return ckpt_dir


@pytest.fixture
def run_dir(finished, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(finished, target)
    return target


# --- configuration: checked when made, naming field, value and what is allowed --------


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
    ],
)
def test_bad_values_are_rejected_when_the_config_is_made(lib, change, words):
    with pytest.raises(lib.ConfigError) as err:
        lib.run_config("ci", **change)
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
    with pytest.raises(TypeError, match=field) as err:
        lib.run_config("ci", **change)
    assert isinstance(err.value, ValueError), "one ConfigError family for all"
    assert type(change[field]).__name__ in str(err.value)


def test_config_errors_come_before_any_data_is_read(lib, monkeypatch):
    def no_reading(*args, **kwargs):
        raise AssertionError("data was read before the config was checked")

    monkeypatch.setattr(lib.corpus, "read_split", no_reading)
    monkeypatch.setattr(lib, "prepare_data", no_reading)
    with pytest.raises(SystemExit):
        cli.train_cli(["--preset", "ci", "--set", "P_drop=1.5"])


def test_a_config_is_frozen(lib, cfg):
    with pytest.raises(AttributeError):
        cfg.steps = 5


# --- --fresh removes only what a run wrote, and only after the config checked out ----


def test_fresh_removes_only_run_files(lib, run_dir):
    (run_dir / "notes.txt").write_text("mine")
    (run_dir / "sub").mkdir()
    (run_dir / "sub" / "last.pt").write_bytes(b"not ours to delete")
    removed = lib.checkpoints.remove_run_files(run_dir)
    assert "last.pt" in removed and "step000006.pt" in removed
    left = sorted(p.name for p in run_dir.iterdir())
    assert left == [".lock", "notes.txt", "sub"], left
    assert (run_dir / "sub" / "last.pt").read_bytes() == b"not ours to delete"


def test_fresh_with_a_bad_setting_deletes_nothing(lib, run_dir):
    before = sorted(p.name for p in run_dir.iterdir())
    with pytest.raises(SystemExit):
        cli.train_cli(["--preset", "ci", "--fresh", "--ckpt-dir", str(run_dir),
                       "--set", "P_drop=1.5"])  # fmt: skip
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_fresh_on_a_folder_that_is_not_a_run_keeps_everything(lib, tmp_path):
    (tmp_path / "report.pdf").write_bytes(b"%PDF")
    assert lib.checkpoints.remove_run_files(tmp_path) == []
    assert (tmp_path / "report.pdf").exists()


def test_ckpt_dir_that_is_a_file_fails_before_training(lib, cfg, data, tmp_path,
                                                       monkeypatch):  # fmt: skip
    path = tmp_path / "a-file"
    path.write_text("x")
    monkeypatch.setattr(lib, "run_epoch", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises((NotADirectoryError, FileExistsError), match="a-file"):
        lib.train(cfg, data, path, "cpu", log=quiet)
    with pytest.raises(SystemExit):
        cli.train_cli(["--preset", "ci", "--ckpt-dir", str(path)])


# --- a run that goes wrong keeps the last good checkpoint -------------------


def test_a_non_finite_loss_stops_training_and_keeps_last_pt(lib, cfg, data, tmp_path,
                                                            monkeypatch):  # fmt: skip
    lib.train(cfg.updated(steps=6), data, tmp_path, "cpu", log=quiet)
    good = (tmp_path / "last.pt").read_bytes()
    original, calls = lib.SimpleLossCompute.__call__, [0]

    def poisoned(self, x, y, norm):
        calls[0] += 1
        loss_sum, loss = original(self, x, y, norm)
        if calls[0] == 3:  # the third step after the resumption goes wrong
            return loss_sum * math.nan, loss * math.nan
        return loss_sum, loss

    monkeypatch.setattr(lib.SimpleLossCompute, "__call__", poisoned)
    with pytest.raises(lib.NonFiniteLossError, match="step 9;"):
        lib.train(cfg, data, tmp_path, "cpu", log=quiet)
    assert (tmp_path / "last.pt").read_bytes() == good, "last.pt was overwritten"
    assert not (tmp_path / "step000012.pt").exists()


def test_non_finite_weights_are_never_saved(lib, cfg, data, tmp_path):
    ckpt_dir = lib.checkpoints.prepare_ckpt_dir(tmp_path)
    run = lib.start_run(cfg, data, ckpt_dir, "cpu")
    with torch.no_grad():
        next(run.model.parameters())[0, 0] = float("inf")
    with pytest.raises(resume.NonFiniteLossError, match="last.pt"):
        resume.save_run(run, lib.SingleProcess())
    assert not (tmp_path / "last.pt").exists()


def test_zero_steps_is_an_error_not_a_result(lib, cfg, data, tmp_path):
    with pytest.raises(lib.ConfigError, match="max_steps"):
        lib.train(cfg, data, tmp_path, "cpu", max_steps=0, log=quiet)
    with pytest.raises(lib.ConfigError, match="n_train"):
        lib.run_config("ci", n_train=0)
    assert not (tmp_path / "last.pt").exists()


# --- damaged checkpoints are reported by name -----------------------------------------


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_a_damaged_last_pt_is_reported_by_name(lib, cfg, data, run_dir, damage):
    last = run_dir / "last.pt"
    blob = last.read_bytes()
    last.write_bytes({"empty": b"", "truncated": blob[: len(blob) // 2],
                      "garbage": b"\x00not a checkpoint"}[damage])  # fmt: skip
    with pytest.raises(lib.checkpoints.CheckpointError, match=str(last)):
        lib.checkpoints.load_checkpoint(last)
    with pytest.raises(lib.checkpoints.CheckpointError, match="last.pt"):
        lib.model_from_checkpoint(last)
    # with a previous checkpoint at hand, the run resumes from it and says so
    messages = []
    more = cfg.updated(steps=18)
    if (run_dir / "prev.pt").exists():
        lib.train(more, data, run_dir, "cpu", log=messages.append)
        assert any("last.pt" in m and "prev.pt" in m for m in messages), messages
    (run_dir / "prev.pt").unlink(missing_ok=True)
    last.write_bytes(b"")
    with pytest.raises(lib.checkpoints.CheckpointError, match="last.pt"):
        lib.train(more, data, run_dir, "cpu", log=quiet)


def test_a_malicious_pickle_is_refused(lib, tmp_path):
    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"x": Boom()}, path)
    with pytest.raises(lib.checkpoints.CheckpointError, match="evil.pt"):
        lib.checkpoints.load_checkpoint(path)


def test_checkpoint_with_extra_or_missing_weights(lib, run_dir):
    ckpt = lib.checkpoints.load_checkpoint(run_dir / "step000006.pt")
    extra = {**ckpt, "model": {**ckpt["model"], "surprise": torch.zeros(1)}}
    with pytest.raises(lib.checkpoints.CheckpointError, match="surprise"):
        lib.model_from_checkpoint(extra)
    missing = {**ckpt, "model": {k: v for k, v in ckpt["model"].items()
                                 if "generator" not in k}}  # fmt: skip
    with pytest.raises(lib.checkpoints.CheckpointError, match="generator"):
        lib.model_from_checkpoint(missing)
    with pytest.raises(lib.checkpoints.CheckpointError, match="format"):
        lib.model_from_checkpoint({"model": ckpt["model"]})


def test_orphaned_temporary_files_are_removed(lib, run_dir):
    orphan = run_dir / ".last.pt.abc123.tmp"
    orphan.write_bytes(b"half a checkpoint")
    lib.checkpoints.prepare_ckpt_dir(run_dir)
    assert not orphan.exists()


def test_checkpoints_are_readable_like_other_files(lib, tmp_path):
    path = tmp_path / "c.pt"
    lib.checkpoints.save_checkpoint({"a": torch.ones(1)}, path)
    mode = path.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask, oct(mode)


def test_a_resumed_run_must_have_the_same_vocabulary(lib, cfg, data, run_dir):
    other = lib.prepare_data(cfg.updated(n_train=100))
    with pytest.raises(ValueError, match="other settings|vocabulary"):
        lib.train(cfg.updated(steps=18), other, run_dir, "cpu", log=quiet)


# --- public entry points: clear errors, never silent truncation or splitting ----------


@pytest.fixture(scope="module")
def model(lib, finished):
    return lib.model_from_checkpoint(finished / "step000012.pt")[0]


def test_translate_texts_rejects_a_single_string(lib, model, data):
    with pytest.raises(TypeError, match="list"):
        lib.translate_texts(model, "Ein Hund läuft.", data.vocab_src, data.vocab_tgt)
    with pytest.raises(TypeError, match="list"):
        lib.translate_texts(model, [b"bytes"], data.vocab_src, data.vocab_tgt)


def test_translate_ids_rejects_empty_and_malformed_input(lib, model):
    with pytest.raises(ValueError, match="nothing to translate"):
        lib.translate_ids(model, [])
    with pytest.raises(ValueError, match="nothing to translate"):
        lib.translate_ids(model, [[lib.BOS, 5, lib.EOS], []])
    with pytest.raises(TypeError, match="id lists"):
        lib.translate_ids(model, "abc")
    with pytest.raises(lib.ConfigError, match="decode_tokens"):
        lib.translate_ids(model, [[lib.BOS, 5, lib.EOS]], decode_tokens=0)
    with pytest.raises(ValueError, match="empty"):
        lib.translate_texts(model, [""], lib.Vocab(list(lib.SPECIALS)),
                            lib.Vocab(list(lib.SPECIALS)))  # fmt: skip
    too_long = [lib.BOS] + [5] * model.config.max_len + [lib.EOS]
    with pytest.raises(ValueError, match="positional"):
        lib.translate_ids(model, [too_long])


def test_translator_counts_subword_pieces_not_words(lib, cfg, tmp_path):
    """A BPE model reads pieces: a text of few words but many pieces is refused with
    the count of pieces, never cut to fit."""
    bpe_cfg = cfg.updated(vocab="bpe", bpe_size=200, tie="all", max_len=256,
                          max_sent_len=40, steps=6)  # fmt: skip
    bpe_data = lib.prepare_data(bpe_cfg)
    bpe_model, _ = lib.train(bpe_cfg, bpe_data, tmp_path, "cpu", log=quiet)
    translate = lib.Translator(bpe_model, bpe_data.vocab_src, bpe_data.vocab_tgt)
    words = "Donaudampfschifffahrtsgesellschaftskapitänsmützenabzeichen " * 12
    pieces = len(bpe_data.vocab_src.encode(words.split()))
    assert len(words.split()) < 254 < pieces
    with pytest.raises(ValueError, match=f"{pieces} ids"):
        translate(words)
    assert isinstance(translate("Ein Hund."), str)


@pytest.mark.parametrize("bad", [{"beam_size": 0}, {"beam_size": True},
                                 {"beam_size": 2.5}, {"alpha": float("inf")},
                                 {"alpha": float("nan")}])  # fmt: skip
def test_beam_settings(lib, bad):
    with pytest.raises(lib.ConfigError, match=next(iter(bad))):
        lib.beam(**bad)


@pytest.mark.parametrize("search", ["greedy_decode", "beam_search"])
@pytest.mark.parametrize("max_len", [0, -1])
def test_decoding_needs_a_positive_max_len(lib, model, search, max_len):
    src = torch.tensor([[lib.BOS, 5, 6, lib.EOS]])
    with pytest.raises(lib.ConfigError, match="max_len"):
        getattr(lib, search)(model, src, (src != lib.PAD).unsqueeze(-2), max_len,
                             lib.BOS, lib.EOS)  # fmt: skip


def test_an_empty_batch_is_an_error(lib):
    with pytest.raises(ValueError, match="non-empty"):
        lib.Batch(torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="non-empty"):
        lib.Batch(torch.zeros(3, 0, dtype=torch.long))


def test_average_checkpoints_wants_a_list(lib, finished):
    path = finished / "step000006.pt"
    for single in (path, str(path), lib.checkpoints.load_checkpoint(path)["model"]):
        with pytest.raises(TypeError, match="list"):
            lib.average_checkpoints(single)


def test_an_explicit_data_folder_is_checked_too(lib, tmp_path, cfg):
    from conftest import DATA

    for name in lib.corpus.MULTI30K_SHA256:
        shutil.copy(DATA / name, tmp_path / name)
    blob = bytearray((tmp_path / "val.en.gz").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (tmp_path / "val.en.gz").write_bytes(bytes(blob))
    with pytest.raises(lib.corpus.DataUnavailableError, match="val.en.gz"):
        lib.prepare_data(cfg, root=tmp_path)
    with pytest.raises(lib.corpus.DataUnavailableError, match="val.en.gz"):
        lib.corpus.read_split("val", root=tmp_path)


def test_unknown_splits_languages_and_vocabularies(lib):
    with pytest.raises(lib.ConfigError, match="split"):
        lib.corpus.read_split("test_2017")
    with pytest.raises(lib.ConfigError, match="lang"):
        lib.tokenize_all("fr", ["Bonjour"])
    with pytest.raises(TypeError, match="list"):
        lib.tokenize_all("de", "Ein Hund")
    with pytest.raises(ValueError, match="kind"):
        lib.vocab_from_state({"kind": "chars"})
    with pytest.raises(lib.ConfigError, match="src_lang"):
        lib.Translator(None, None, None, src_lang="fr")
    with pytest.raises(lib.ConfigError, match="device"):
        launch.setup_distributed("tpu")


def test_threads_rule_is_fixed_by_the_preset(lib):
    assert runtime.torch_threads("ci") == 1
    assert runtime.torch_threads("cpu", processes=2) >= 1
    assert runtime.torch_threads("cpu") >= runtime.torch_threads("cpu", processes=2)
    with pytest.raises(ValueError, match="preset"):
        runtime.torch_threads("tpu")


def test_relative_paths_are_fine_everywhere(lib, cfg, data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lib.train(cfg.updated(steps=6), data, Path("runs") / "a", "cpu", log=quiet)
    assert (tmp_path / "runs" / "a" / "last.pt").exists()


# --- odd paths and values on the command line: refused before any training ----------

CLI_TINY = ["--preset", "ci", "--set", "n_train=100", "--set", "steps=2",
            "--set", "eval_every=2"]  # fmt: skip


def refused(argv, capsys) -> str:
    """Run the command line, which must refuse `argv` with exit status 2 (a parser
    error or a refused run); returns what it wrote to stderr."""
    try:
        status = cli.train_cli([*CLI_TINY, *argv])
    except SystemExit as err:
        status = err.code
    err = capsys.readouterr().err
    assert status == 2, (status, err)
    assert "Traceback" not in err, err
    return err


def no_training(lib, monkeypatch, data_too=True):
    def fail(*args, **kwargs):
        pytest.fail("trained or prepared data before the error")

    names = ["run_epoch", "prepare_data", "copy_task_data"] if data_too else \
        ["run_epoch"]  # fmt: skip
    for name in names:
        monkeypatch.setattr(lib, name, fail)


def _fifo(t: Path) -> Path:
    os.mkfifo(t / "fifo")
    return t / "fifo"


def _self_link(t: Path) -> Path:
    (t / "loop").symlink_to(t / "loop")
    return t / "loop"


def _dangling(t: Path) -> Path:
    (t / "link").symlink_to(t / "nowhere")
    return t / "link"


def _lock_folder(t: Path) -> Path:
    (t / "run" / ".lock").mkdir(parents=True)
    return t / "run"


ON_PROC = Path("/proc/self").is_dir()
LONG = "a" * 300  # over the 255 bytes a file name may have on Linux file systems
TOO_LONG = os.strerror(errno.ENAMETOOLONG)


@pytest.mark.parametrize(
    "make_args, words",
    [  # the five of issue 33
        pytest.param(
            lambda t: ["--out", "/proc/x.json"],
            ["--out /proc", "cannot be written", "give a folder"],
            marks=pytest.mark.skipif(not ON_PROC, reason="no /proc here"),
        ),
        pytest.param(
            lambda t: ["--ckpt-dir", "/proc/x"],
            ["--ckpt-dir /proc/x", "cannot be", "give a folder"],
            marks=pytest.mark.skipif(not ON_PROC, reason="no /proc here"),
        ),
        (
            lambda t: ["--ckpt-dir", str(_self_link(t))],
            ["--ckpt-dir", "loop", "symbolic link"],
        ),
        (lambda t: ["--set", "P_drop=inf"], ["P_drop=inf", ">= 0 and < 1"]),
        # more of the same kind
        (lambda t: ["--set", "P_drop=nan"], ["P_drop=nan", ">= 0 and < 1"]),
        (lambda t: ["--set", "P_drop=-inf"], ["P_drop=-inf", ">= 0 and < 1"]),
        (lambda t: ["--set", "max_tokens=inf"], ["max_tokens=inf", "an integer"]),
        (lambda t: ["--set", "P_drop="], ["P_drop=''", "number", "not str"]),
        (lambda t: ["--ckpt-dir", str(_dangling(t))], ["--ckpt-dir", "nowhere"]),
        (lambda t: ["--ckpt-dir", str(t / LONG)], ["--ckpt-dir", TOO_LONG]),
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
        (lambda t: ["--ckpt-dir", str(_lock_folder(t))], ["lock", "give a folder"]),
    ],
)
def test_unusable_paths_and_values_fail_before_any_data(
    lib, tmp_path, monkeypatch, capsys, make_args, words
):
    no_training(lib, monkeypatch)
    args = ["--ckpt-dir", str(tmp_path / "run"), "--out", str(tmp_path / "r.json"),
            *make_args(tmp_path)]  # fmt: skip
    message = refused(args, capsys)
    for word in words:
        assert word in message, (word, message)
    if "--set" in args:
        assert "not str" not in message or "''" in message, message
    assert not (tmp_path / "r.json").exists()
    if (tmp_path / "fifo").exists():
        assert not (tmp_path / "fifo").is_file(), "the FIFO was replaced"


def test_a_token_budget_below_the_longest_sentence_is_refused(
    lib, tmp_path, monkeypatch, capsys
):
    cfg = lib.run_config("ci", n_train=100)
    pairs = lib.prepare_data(cfg).train
    longest = max(max(len(s), len(t) - 1) for s, t in pairs)  # t: decoder in/out
    no_training(lib, monkeypatch, data_too=False)
    base = ["--ckpt-dir", str(tmp_path / "run"), "--out", str(tmp_path / "r.json")]
    for budget in (1, longest - 1):
        message = refused([*base, "--set", f"max_tokens={budget}"], capsys)
        for word in (f"max_tokens={budget}", f"{longest} ids", f">= {longest}"):
            assert word in message, (word, message)
    lib.check_token_budget(cfg.updated(max_tokens=longest), pairs)  # fits exactly
    padded = -(-longest // 8) * 8
    with pytest.raises(lib.ConfigError, match=f"{padded} ids.*pad_multiple=8"):
        lib.check_token_budget(cfg.updated(max_tokens=longest, pad_multiple=8), pairs)
    assert not (tmp_path / "r.json").exists()


def test_the_results_folder_is_probed_with_a_real_file(lib, tmp_path, monkeypatch,
                                                       capsys):  # fmt: skip
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
    no_training(lib, monkeypatch)
    message = refused(["--ckpt-dir", str(tmp_path / "run"),
                       "--out", str(out_dir / "r.json")], capsys)  # fmt: skip
    assert f"--out {out_dir / 'r.json'} cannot be written" in message, message
    assert os.strerror(errno.EROFS) in message, message
    assert made == [(tmp_path / "run", ".write-test."), (out_dir, ".r.json.")], made
    assert list((tmp_path / "run").iterdir()) == [], "the probe's file was left"


@pytest.mark.parametrize("kind", ["a file", "an empty folder", "no folder"])
def test_a_multi30k_dir_without_the_data_is_refused(lib, tmp_path, monkeypatch,
                                                    capsys, kind):  # fmt: skip
    folder = tmp_path / "data"
    if kind == "a file":
        folder.write_text("x")
    elif kind == "an empty folder":
        folder.mkdir()
    monkeypatch.setenv("MULTI30K_DIR", str(folder))
    monkeypatch.setattr(lib, "run_epoch", lambda *a, **k: pytest.fail("trained"))
    message = refused(["--ckpt-dir", str(tmp_path / "run"),
                       "--out", str(tmp_path / "r.json")], capsys)  # fmt: skip
    expected = {"a file": "a file, not a folder", "no folder": "no such folder",
                "an empty folder": "missing ['train.de.gz'"}[kind]  # fmt: skip
    for word in (str(folder), expected, "MULTI30K_DIR"):
        assert word in message, (word, message)


def without_permission_override(argv: list[str]) -> list[str]:
    """`argv` run so that permission bits apply: as root, without the capabilities
    that let root read and write past them (setpriv); as a user, as it is."""
    if os.geteuid() != 0:
        return argv
    if not shutil.which("setpriv"):
        pytest.skip("root ignores permission bits, and setpriv is not here to stop it")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *argv]


@pytest.mark.parametrize("what", ["ckpt_dir", "data"])
def test_folders_without_read_permission_are_refused(tmp_path, what):
    """A checkpoint folder that can be written but not listed (--fresh would find
    nothing to delete, and say nothing), and data files that cannot be read."""
    import subprocess
    import sys

    from conftest import DATA, ROOT, clean_env

    run, data = tmp_path / "run", tmp_path / "data"
    run.mkdir()
    data.mkdir()
    for name in lib_files():
        shutil.copy(DATA / name, data / name)
    if what == "ckpt_dir":
        run.chmod(0o300)  # write and enter, not list
    else:
        (data / "val.en.gz").chmod(0o000)
    argv = [sys.executable, "-m", "tools.train", *CLI_TINY, "--ckpt-dir", str(run),
            "--out", str(tmp_path / "r.json")]  # fmt: skip
    proc = subprocess.run(
        without_permission_override(argv), capture_output=True, text=True,
        env=clean_env(MULTI30K_DIR=str(data)), cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    run.chmod(0o755)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    expected = {
        "ckpt_dir": [f"--ckpt-dir {run} cannot be read", "chmod u+r"],
        "data": ["val.en.gz (Permission denied)", "MULTI30K_DIR"],
    }[what]
    for word in expected:
        assert word in proc.stderr, (word, proc.stderr[-3000:])
    assert not (tmp_path / "r.json").exists()


def lib_files():
    from atkit import data

    return list(data.MULTI30K_SHA256)


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
    argv = [*CLI_TINY, "--task", "copy", "--set", "N=1", "--set", "d_model=16",
            "--set", "d_ff=32", "--set", "h=2"]  # fmt: skip
    assert cli.train_cli([*argv, "--ckpt-dir", "~/Läufe 1", "--out", str(link)]) == 0
    assert (home / "Läufe 1" / "last.pt").is_file()
    assert link.is_symlink() and json.loads(target.read_text())["steps"] == 2
    inside = home / "Läufe 1" / "results.json"
    assert cli.train_cli([*argv, "--ckpt-dir", str(home / "Läufe 1"), "--out",
                          str(inside)]) == 0  # fmt: skip
    assert json.loads(inside.read_text())["steps"] == 2
    capsys.readouterr()


def test_at_checkpoints_and_at_preset_are_checked(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    for value, words in ((tmp_path / "file", "is a file, not a folder"),
                         (tmp_path / "link", "symbolic link")):  # fmt: skip
        with pytest.raises(NotADirectoryError, match=words) as err:
            runtime.checkpoint_root("ci", {"AT_CHECKPOINTS": str(value)})
        assert "AT_CHECKPOINTS" in str(err.value)
    good = runtime.checkpoint_root("ci", {"AT_CHECKPOINTS": str(tmp_path / "new")})
    assert good == tmp_path / "new" / "ci" and not good.exists()
    monkeypatch.setenv("AT_PRESET", "tpu")
    try:
        status = cli.train_cli(["--ckpt-dir", str(tmp_path / "run")])
    except SystemExit as err:
        status = err.code
    assert status == 2
    assert "AT_PRESET='tpu'" in capsys.readouterr().err


def test_train_names_a_checkpoint_folder_it_cannot_use(lib, cfg, data, tmp_path):
    """The notebook's train() too: no bare FileNotFoundError or FileExistsError from
    deep inside pathlib."""
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(NotADirectoryError, match="symbolic link"):
        lib.train(cfg, data, tmp_path / "loop", "cpu", log=quiet)
    if ON_PROC:
        with pytest.raises(PermissionError, match="/proc/x.*cannot be"):
            lib.train(cfg, data, "/proc/x", "cpu", log=quiet)
    (tmp_path / "run" / "last.pt").mkdir(parents=True)
    with pytest.raises(lib.checkpoints.CheckpointError, match="last.pt is a folder"):
        lib.train(cfg, data, tmp_path / "run", "cpu", log=quiet)
