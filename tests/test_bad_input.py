"""Bad input never trains, deletes or saves garbage: each entry point rejects what it
cannot serve with an error that names the setting or file, before any data is read or
any file is removed, and a run that goes wrong keeps the last good checkpoint."""

import math
import os
import shutil
from pathlib import Path

import pytest
import torch

from atkit import cli, launch, resume, runtime
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
