"""Part 3 (Multi30k German->English): data, text pipeline, training, decoding.

The data comes from $MULTI30K_DIR, by default ../shared/data/multi30k beside the
repository; the download path is tested against a local HTTP server on 127.0.0.1.
"""

import functools
import http.server
import json
import pickle
import socket
import threading
from collections import Counter
from pathlib import Path

import pytest
import torch

from atkit import resume
from tools import train as cli
from atkit import data as corpus
from conftest import DATA, quiet

FILES = [
    f"{s}.{lang}.gz"
    for s in ("train", "val", "test_2016_flickr")
    for lang in ("de", "en")
]
TINY = {
    "n_train": 200,
    "n_eval": 16,
    "min_freq": 2,
    "max_tokens": 300,
    "N": 1,
    "d_model": 32,
    "d_ff": 64,
    "h": 2,
    "steps": 20,
    "eval_every": 8,
    "keep": 2,
    "warmup": 10,
    "max_len": 40,
    "max_sent_len": 40,
}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """No MULTI30K_DIR; an empty cache under XDG_CACHE_HOME."""
    monkeypatch.delenv("MULTI30K_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "annotated-transformer" / "multi30k"


def serve(directory: Path):
    """Start an HTTP server for `directory`; returns (server, base url, request log)."""
    log = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            log.append(self.path.lstrip("/"))
            super().do_GET()

        def log_message(self, *args):
            pass

    handler = functools.partial(Handler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}", log


@pytest.fixture
def mirror():
    server, url, log = serve(DATA)
    yield url, log
    server.shutdown()
    server.server_close()


@pytest.fixture
def offline_url():
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- data --------------------------------------------------------------------------


def test_shared_data_matches_notebook_digests(lib):
    assert sorted(corpus.MULTI30K_SHA256) == sorted(FILES)
    assert corpus.fetch_multi30k() == DATA
    for name, digest in corpus.MULTI30K_SHA256.items():
        assert corpus.sha256sum(DATA / name) == digest


def test_download_verifies_and_caches(lib, cache, mirror):
    url, log = mirror
    assert corpus.fetch_multi30k(base_url=url) == cache
    assert sorted(log) == sorted(FILES)
    for name in FILES:
        assert (cache / name).read_bytes() == (DATA / name).read_bytes()
    assert corpus.fetch_multi30k(base_url=url) == cache
    assert len(log) == len(FILES), "a verified cache must not be downloaded again"
    names = sorted(p.name for p in cache.iterdir() if p.name != ".lock")
    assert names == sorted(FILES), "stray temp files"


def test_default_url_is_the_multi30k_repository(lib, cache, mirror, monkeypatch):
    assert corpus.MULTI30K_URL.startswith("https://raw.githubusercontent.com/multi30k/")
    url, log = mirror
    monkeypatch.setattr(corpus, "MULTI30K_URL", url)
    assert corpus.fetch_multi30k() == cache and sorted(log) == sorted(FILES)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupted_cache_is_fetched_again(lib, cache, mirror, damage):
    url, log = mirror
    corpus.fetch_multi30k(base_url=url)
    path = cache / "train.en.gz"
    blob = bytearray(path.read_bytes())
    if damage == "truncate":
        blob = blob[: len(blob) // 2]
    else:
        blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    log.clear()
    corpus.fetch_multi30k(base_url=url)
    assert log == ["train.en.gz"]
    assert path.read_bytes() == (DATA / "train.en.gz").read_bytes()


def test_offline_error_names_files_and_variable(lib, cache, offline_url):
    with pytest.raises(corpus.DataUnavailableError) as err:
        corpus.fetch_multi30k(base_url=offline_url)
    message = str(err.value)
    assert "MULTI30K_DIR" in message
    for name in FILES:
        assert name in message
    left = [p.name for p in cache.iterdir() if p.name != ".lock"]
    assert not left, f"no partial files may be left behind: {left}"


def test_offline_with_corrupted_cache_is_an_error(lib, cache, mirror, offline_url):
    url, _ = mirror
    corpus.fetch_multi30k(base_url=url)
    (cache / "val.de.gz").write_bytes(b"not gzip")
    with pytest.raises(corpus.DataUnavailableError) as err:
        corpus.fetch_multi30k(base_url=offline_url)
    message = str(err.value)
    assert "val.de.gz" in message and "MULTI30K_DIR" in message
    assert "train.de.gz" not in message, "only the damaged file is missing"


def test_download_with_wrong_content_is_rejected(lib, cache, tmp_path):
    bad = tmp_path / "bad_mirror"
    bad.mkdir()
    for name in FILES:
        (bad / name).write_bytes((DATA / name).read_bytes())
    (bad / "test_2016_flickr.de.gz").write_bytes(b"something else")
    server, url, _ = serve(bad)
    try:
        with pytest.raises(corpus.DataUnavailableError, match="test_2016_flickr.de.gz"):
            corpus.fetch_multi30k(base_url=url)
    finally:
        server.shutdown()
        server.server_close()
    assert not (cache / "test_2016_flickr.de.gz").exists()
    assert (cache / "train.de.gz").exists()


def test_local_folder_without_the_files(lib, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path))
    (tmp_path / "val.en.gz").write_bytes((DATA / "val.en.gz").read_bytes())
    with pytest.raises(corpus.DataUnavailableError) as err:
        corpus.fetch_multi30k()
    message = str(err.value)
    assert "MULTI30K_DIR" in message and str(tmp_path) in message
    assert "train.de.gz" in message and "val.en.gz" not in message


def test_read_split_aligned(lib):
    sizes = {split: len(corpus.read_split(split)[0]) for split in ("train", "val")}
    de, en = corpus.read_split("test_2016_flickr")
    assert len(de) == len(en) > 0 and sizes["train"] > sizes["val"] > 0
    assert all(isinstance(s, str) and "\n" not in s for s in de[:50] + en[:50])


# --- text pipeline -----------------------------------------------------------------


def test_tokenizers(lib):
    assert lib.tokenize_all("de", ["Ein Mann, der  läuft."]) == [
        ["Ein", "Mann", ",", "der", "läuft", "."]
    ]
    assert lib.tokenize_all("en", ["It isn't."]) == [["It", "is", "n't", "."]]


def test_detokenize(lib):
    assert lib.detokenize(["A", "man", "'s", "hat", ",", "(", "red", ")", "."]) == (
        "A man's hat, (red)."
    )
    _, refs = corpus.read_split("val")
    same = sum(
        lib.detokenize(t) == s
        for t, s in zip(lib.tokenize_all("en", refs), refs, strict=True)
    )
    assert same / len(refs) > 0.9


def test_vocab_from_training_pairs_only(lib, cfg, data):
    assert [data.vocab_tgt.itos[i] for i in (lib.BOS, lib.EOS, lib.PAD, lib.UNK)] == [
        "<s>",
        "</s>",
        "<blank>",
        "<unk>",
    ]
    for lang, vocab in (("de", data.vocab_src), ("en", data.vocab_tgt)):
        texts = corpus.read_split("train")[0 if lang == "de" else 1][: cfg.n_train]
        counts = Counter(t for s in lib.tokenize_all(lang, texts) for t in s)
        frequent = {w for w, c in counts.items() if c >= cfg.min_freq}
        assert set(vocab.itos[len(lib.SPECIALS) :]) == frequent
    val_tokens = lib.tokenize_all("de", corpus.read_split("val")[0][: cfg.n_eval])
    unseen = [t for s in val_tokens for t in s if t not in data.vocab_src.stoi]
    assert unseen, "a 200-pair vocabulary must miss some validation words"
    assert data.vocab_src.encode(unseen) == [lib.UNK] * len(unseen)
    framed = [i for s, _ in data.val for i in s]
    assert framed.count(lib.UNK) == len(unseen)


def test_vocab_checks_its_list(lib):
    with pytest.raises(ValueError):
        lib.Vocab(["a", "b"])
    with pytest.raises(ValueError):
        lib.Vocab(list(lib.SPECIALS) + ["a", "a"])
    v = lib.build_vocab([["b", "a", "b"], ["c"]], min_freq=1)
    assert v.itos == list(lib.SPECIALS) + ["b", "a", "c"]
    assert lib.Vocab(v.itos).stoi == v.stoi


def test_bucket_batches(lib, data):
    budget = 300
    batches = lib.bucket_batches(lib.pair_lengths(data.train), budget)
    assert sorted(i for b in batches for i in b) == list(range(len(data.train)))
    for b in batches:
        longest = max(max(lib.pair_lengths(data.train)[i]) for i in b)
        assert len(b) * longest <= budget or len(b) == 1
    g = torch.Generator().manual_seed(0)
    random = torch.randperm(len(data.train), generator=g).tensor_split(len(batches))
    bucketed = lib.padding_fraction(data.train, batches)
    assert bucketed < lib.padding_fraction(data.train, [r.tolist() for r in random])
    assert bucketed < lib.padding_fraction(data.train, [range(len(data.train))])
    b = lib.collate(data.train, batches[0])
    assert b.src.shape[0] == len(batches[0]) and int(b.ntokens) > 0


@pytest.mark.parametrize("multiple", [1, 8])
def test_pad_multiple_is_honoured_within_the_budget(lib, data, multiple):
    budget = 300
    buckets = lib.bucket_batches(lib.pair_lengths(data.train), budget, multiple)
    assert sorted(i for b in buckets for i in b) == list(range(len(data.train)))
    for b in buckets:
        batch = lib.collate(data.train, b, multiple)
        S, T = batch.src.size(1), batch.tgt.size(1)
        assert S % multiple == 0 and T % multiple == 0, (S, T)
        assert len(b) * max(S, T) <= budget or len(b) == 1, (len(b), S, T)


def test_config_rejects_unknown_settings(lib):
    with pytest.raises(ValueError, match="epochs"):
        lib.run_config("ci", epochs=3)
    with pytest.raises(ValueError, match="preset"):
        lib.run_config("tpu")
    with pytest.raises(ValueError):
        lib.run_config("ci", d_model=30, h=4)
    assert lib.run_config("ci", d_model=32, h=2).model.d_model == 32


def test_every_preset_is_one_whole_record(lib):
    """One list of names (atkit.runtime's, which AT_PRESET and --preset accept) and
    one record per name in the notebook, holding all a preset decides: a preset
    missing from either, or a record missing a part, fails here, not an hour into
    a run."""
    from atkit import runtime

    assert tuple(lib.PRESETS) == runtime.PRESET_NAMES
    for name, preset in lib.PRESETS.items():
        assert isinstance(preset, lib.Preset), name
        assert isinstance(preset.run, lib.RunConfig), name
        assert isinstance(preset.run.model, lib.ModelConfig), name
        assert isinstance(preset.recipe, lib.RecipeConfig), name
        assert isinstance(preset.machine, str) and preset.machine, name
        assert all(isinstance(v, int | float) for v in preset.minutes.values()), name
        assert lib.expected_time(name, "part3")


# --- training and checkpoints ------------------------------------------------------


def params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def trained(lib, cfg, data, tmp_path_factory):
    ckpt_dir = tmp_path_factory.mktemp("full")
    model, history = lib.train(cfg, data, ckpt_dir, "cpu", log=quiet)
    return ckpt_dir, model, history


def test_resume_gives_the_same_parameters(lib, cfg, data, trained, tmp_path):
    _, model, history = trained
    per_epoch = len(lib.make_batches(data.train, cfg, "cpu"))
    k = per_epoch + per_epoch // 2  # in the middle of the second epoch
    assert cfg.eval_every < k < cfg.steps and k % per_epoch and k % cfg.eval_every
    lib.train(cfg, data, tmp_path, "cpu", max_steps=k, log=quiet)
    state = lib.checkpoints.load_checkpoint(tmp_path / "last.pt")
    assert state["progress"]["step"] == k
    assert len(state["history"]["val_loss"]) == k // cfg.eval_every
    resumed, resumed_history = lib.train(cfg, data, tmp_path, "cpu", log=quiet)
    expected, got = params(model), params(resumed)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    assert resumed_history["val_loss"] == history["val_loss"]
    assert resumed_history["train_loss"] == history["train_loss"]
    torch.manual_seed(cfg.seed)
    untrained = params(
        lib.build_model(cfg.model, len(data.vocab_src), len(data.vocab_tgt))
    )
    assert any(not torch.equal(untrained[n], got[n]) for n in got), "nothing trained"


def test_a_branch_shares_the_first_steps_and_ends_as_a_run_from_step_0(
    lib, cfg, data, trained, tmp_path
):
    """Part 4's eq. 3 run branches off the full recipe's run where its cool-down
    begins: both must end exactly as if each had been trained on its own."""
    _, model, history = trained
    eq3 = cfg.updated(cooldown=0.0)
    at = lib.cooldown_start(cfg)
    assert 0 < at < cfg.steps and at % cfg.eval_every  # between two evaluations
    alone, alone_history = lib.train(eq3, data, tmp_path / "alone", "cpu", log=quiet)
    src, dst = tmp_path / "src", tmp_path / "dst"
    trained_to = []

    def train_src(n):
        trained_to.append(n)
        lib.train(cfg, data, src, "cpu", max_steps=n, log=quiet)

    assert resume.share_steps(train_src, src, dst, eq3, at, {"cooldown"}, quiet)
    assert trained_to == [at]
    full, full_history = lib.train(cfg, data, src, "cpu", log=quiet)
    branch, branch_history = lib.train(eq3, data, dst, "cpu", log=quiet)
    for got, want in ((full, model), (branch, alone)):
        expected, actual = params(want), params(got)
        assert all(torch.equal(expected[k], actual[k]) for k in expected)
    assert full_history["val_loss"] == history["val_loss"]
    assert branch_history["val_loss"] == alone_history["val_loss"]
    assert not torch.equal(params(branch)["generator.proj.weight"],
                           params(full)["generator.proj.weight"])  # fmt: skip
    # a second call finds the branch; a source past the step has nothing to share
    assert not resume.share_steps(train_src, src, dst, eq3, at, {"cooldown"}, quiet)
    said = []
    assert not resume.share_steps(
        train_src, src, tmp_path / "late", eq3, at, {"cooldown"}, said.append
    )
    assert trained_to == [at] and "trains from step 0" in said[0]
    # only the named settings may differ
    with pytest.raises(lib.ConfigError, match="differ"):
        other = eq3.updated(eps_ls=0.2)
        resume.share_steps(train_src, tmp_path / "alone", tmp_path / "other", other,
                           cfg.steps, {"cooldown"}, quiet)  # fmt: skip


def test_checkpoint_is_plain_data(lib, cfg, trained):
    ckpt_dir, model, history = trained
    ckpt = torch.load(ckpt_dir / "last.pt", weights_only=True)
    assert ckpt["progress"]["step"] == history["steps"][-1] == cfg.steps
    assert ckpt["vocab_src"]["kind"] == "words"
    assert isinstance(ckpt["vocab_src"]["itos"], list)
    assert {"optimizer", "scheduler", "ranks", "config", "progress", "history"} <= set(
        ckpt
    )
    loaded, saved_cfg, vs, vt = lib.model_from_checkpoint(ckpt)
    assert saved_cfg == cfg == lib.RunConfig.from_dict(ckpt["config"])
    assert vs.itos == ckpt["vocab_src"]["itos"]
    assert len(vt) == model.generator.proj.out_features
    for name, tensor in params(model).items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
    evals = -(-cfg.steps // cfg.eval_every)
    assert len(history["train_loss"]) == len(history["val_loss"]) == evals
    assert all(loss > 0 for loss in history["val_loss"])
    best = history["steps"].index(history["best_step"])
    assert history["val_loss"][best] == min(history["val_loss"])
    # the snapshots kept are those averaging may need, in the same format
    kept = sorted(int(p.stem[4:]) for p in ckpt_dir.glob("step*.pt"))
    assert kept == sorted(resume.kept_steps(history, cfg.keep))
    assert len(kept) <= 2 * cfg.keep
    for step in kept:
        snap = lib.model_from_checkpoint(resume.snapshot_path(ckpt_dir, step))
        assert snap[1] == cfg


def test_resume_refuses_another_config(lib, cfg, data, trained):
    ckpt_dir, _, _ = trained
    other = lib.run_config("ci", **{**TINY, "d_model": 48, "h": 2})
    with pytest.raises(ValueError, match="other settings"):
        lib.train(other, data, ckpt_dir, "cpu", log=quiet)


def test_save_is_atomic(lib, tmp_path):
    path = tmp_path / "ckpt.pt"
    lib.checkpoints.save_checkpoint({"a": torch.ones(2)}, path)
    with pytest.raises((AttributeError, pickle.PicklingError)):
        lib.checkpoints.save_checkpoint({"a": lambda: 0}, path)  # cannot be pickled
    assert torch.equal(lib.checkpoints.load_checkpoint(path)["a"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_a_finished_run_is_loaded_and_left_unchanged(
    lib, cfg, data, trained, monkeypatch
):
    ckpt_dir, model, history = trained
    before = (ckpt_dir / "last.pt").read_bytes()

    def no_training(*args, **kwargs):
        raise AssertionError("trained although the run is finished")

    monkeypatch.setattr(lib, "run_epoch", no_training)
    messages = []
    loaded, again = lib.train(cfg, data, ckpt_dir, "cpu", log=messages.append)
    assert "finished" in messages[0] and again == history
    assert messages[1:] == [
        lib.history_line(history, i) for i in range(len(messages) - 1)
    ]
    assert (ckpt_dir / "last.pt").read_bytes() == before, "a rerun changed last.pt"
    x = torch.tensor([[lib.BOS, 5, 6, lib.EOS]])
    model.eval()
    with torch.no_grad():
        mask = (x != lib.PAD).unsqueeze(-2)
        assert torch.equal(model.encode(x, mask), loaded.encode(x, mask))


# --- decoding, BLEU and translate --------------------------------------------------


def test_batched_decoding_matches_one_by_one(lib, data, trained):
    _, model, _ = trained
    sources = [s for s, _ in data.val[:12]]
    batched = lib.translate_ids(model, sources, decode_tokens=60)
    single = [lib.translate_ids(model, [s])[0] for s in sources]
    assert batched == single
    for search in (lib.beam(3, 0.6), lib.beam(2, 0.0)):
        batched = lib.translate_ids(model, sources, decode_tokens=60, search=search)
        assert batched == [lib.translate_ids(model, [s], search=search)[0]
                           for s in sources]  # fmt: skip
    assert all(lib.EOS not in ids and lib.BOS not in ids for ids in batched)
    limit = model.config.max_len
    assert all(
        len(ids) <= min(limit, len(s) + 50)
        for ids, s in zip(batched, sources, strict=True)
    )


def test_evaluate_scores_against_raw_references(lib, cfg, data, trained, monkeypatch):
    _, model, _ = trained
    for split in ("val", "test_2016_flickr"):
        scores = lib.bleu(model, data, split)
        assert "tok:13a" in scores["signature"]
        assert len(scores["hyps"]) == cfg.n_eval
        assert 0 <= scores["bleu"] < 100 and scores["ratio"] > 0
    # a "model" whose output is the reference scores 100: references are the raw text
    lookup = {
        de: en
        for des, ens in data.text.values()
        for de, en in zip(des, ens, strict=True)
    }
    by_ids = {
        tuple(ids): lookup[text]
        for split in data.sources
        for ids, text in zip(data.sources[split], data.text[split][0], strict=True)
    }
    monkeypatch.setattr(lib, "translate_ids", lambda m, src, *a, **k: src)
    monkeypatch.setattr(lib, "detokenize", lambda tokens: tokens)
    monkeypatch.setattr(data.vocab_tgt, "decode", lambda ids: by_ids[tuple(ids)])
    perfect = lib.bleu(model, data, "val")
    assert perfect["bleu"] == pytest.approx(100)


@pytest.fixture(scope="module")
def translate(lib, data, trained):
    _, model, _ = trained
    return lib.Translator(model, data.vocab_src, data.vocab_tgt)


@pytest.mark.parametrize("bad", [None, 42, b"Ein Hund", ["Ein", "Hund"]])
def test_translate_rejects_non_strings(translate, bad):
    with pytest.raises(TypeError):
        translate(bad)


@pytest.mark.parametrize("blank", ["", "   ", "\n\t "])
def test_translate_rejects_empty_text(translate, blank):
    with pytest.raises(ValueError, match="empty"):
        translate(blank)


def test_translate_length_limit(translate):
    limit = translate.model.config.max_len - 2
    out = translate(" ".join(["Hund"] * limit))  # exactly at the limit: fine
    assert isinstance(out, str)
    with pytest.raises(ValueError, match=str(limit)):
        translate(" ".join(["Hund"] * (limit + 1)))


def test_translate_unseen_words(lib, translate):
    word = "Quetzalcoatlverkleidung"
    assert translate.vocab_src.encode([word]) == [lib.UNK]
    out = translate(f"Ein {word} läuft.")
    assert isinstance(out, str) and "<s>" not in out and "</s>" not in out


# --- the command-line trainer ------------------------------------------------------


def test_train_cli_writes_results(lib, tmp_path):
    out = tmp_path / "results.json"
    args = [
        "--preset", "ci", "--ckpt-dir", str(tmp_path), "--out", str(out),
        "--set", "n_train=48", "--set", "n_eval=8", "--set", "steps=4",
        "--set", "eval_every=4",
        "--set", "d_model=32", "--set", "h=2",
    ]  # fmt: skip
    assert cli.train_cli(args) == 0
    results = json.loads(out.read_text())
    assert results["preset"] == "ci" and results["config"]["n_train"] == 48
    assert results["steps"] > 0 and results["train_time_s"] > 0
    assert results["tokens_per_s_per_process"] > 0 and results["best_step"] == 4
    assert 0 <= results["bleu_test_2016_flickr"] <= 100
    assert "tok:13a" in results["sacrebleu_signature"]
    assert (tmp_path / "last.pt").exists() and (tmp_path / "step000004.pt").exists()
    with pytest.raises(SystemExit):
        cli.train_cli(args[:-2] + ["--set", "nonsense"])


def test_same_preset_and_seed_reproduce_the_run(lib, tmp_path):
    """Two fresh runs of the ci preset (fewer steps, to save time): the same loss
    curves, the same best step, the same BLEU. Budgets are steps, never seconds, so
    a busy machine changes the time a run takes, not its numbers."""
    runs = []
    for name in ("first", "second"):
        out = tmp_path / f"{name}.json"
        args = ["--preset", "ci", "--ckpt-dir", str(tmp_path / name), "--out", str(out)]
        assert cli.train_cli([*args, "--set", "steps=60"]) == 0
        runs.append(json.loads(out.read_text()))
    first, second = runs
    timing = {"train_time_s", "tokens_per_s_per_process"}
    for run in runs:
        assert len(run["history"].pop("time_s")) == 2
    assert first["steps"] == 60 and len(first["history"]["val_loss"]) == 2
    assert {k: v for k, v in first.items() if k not in timing} == {
        k: v for k, v in second.items() if k not in timing
    }
    assert first["bleu_test_2016_flickr"] == second["bleu_test_2016_flickr"]
    h1 = lib.checkpoints.load_checkpoint(tmp_path / "first" / "last.pt")["history"]
    h2 = lib.checkpoints.load_checkpoint(tmp_path / "second" / "last.pt")["history"]
    for key in ("train_loss", "val_loss", "steps", "tokens", "best_step"):
        assert h1[key] == h2[key], key


def test_resume_every_writes_last_pt_less_often_and_keeps_what_it_needs(
    lib, cfg, data, trained, tmp_path
):
    """With resume_every=2, last.pt is written at every second evaluation and at the
    end; a run stopped in between resumes from the older last.pt, finds every
    snapshot its history needs, and ends as the uninterrupted run."""
    _, model, history = trained
    sparse = cfg.updated(resume_every=2)
    written = []
    lib.train(sparse, data, tmp_path, "cpu", log=written.append)
    assert [("MB" in m) for m in written] == [True] * len(history["steps"])
    mb = [float(m.rsplit("wrote ", 1)[1].split()[0]) for m in written]
    assert mb[0] < mb[1] and mb[0] < mb[2], mb  # last.pt at evaluations 2 and 3
    cut = tmp_path / "cut"
    lib.train(sparse, data, cut, "cpu", max_steps=cfg.eval_every + 2, log=quiet)
    state = lib.checkpoints.load_checkpoint(cut / "last.pt")
    assert state["progress"]["step"] == cfg.eval_every + 2
    resumed, h = lib.train(sparse, data, cut, "cpu", log=quiet)
    for name, value in params(model).items():
        assert torch.equal(value, resumed.state_dict()[name]), name
    for step in resume.kept_steps(h, cfg.keep):
        assert resume.snapshot_path(cut, step).exists(), step
