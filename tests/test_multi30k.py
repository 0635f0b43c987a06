"""Part 3 (Multi30k German->English): reading the splits, the text pipeline
(tokenizers, vocabularies, batches by length), scoring with sacreBLEU, and a preset
that gives the same numbers twice.

The data comes from $MULTI30K_DIR, by default ../shared/data/multi30k beside the
repository (fetching and checking it: tests/test_download.py). Training runs and their
folder: tests/test_run_folder.py; decoding: tests/test_decoding.py.
"""

import json
from collections import Counter

import pytest

from atkit import data as corpus
from atkit.settings import ConfigError
from conftest import RUN_TINY, lazy
from tools import train as cli

torch = lazy("torch")
atconfig = lazy("atkit.config")

TINY = RUN_TINY


# --- data --------------------------------------------------------------------------


@pytest.mark.data
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


@pytest.mark.data
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


def test_unknown_vocabulary_kinds(lib):
    """The paper's pipeline checks nothing a setting has checked already (src_lang:
    RunConfig); a checkpoint of an unknown vocabulary kind is refused."""
    import pipeline as pl

    with pytest.raises(ConfigError, match="src_lang"):
        pl.run_config("ci", src_lang="fr")
    with pytest.raises(ValueError, match="kind"):
        pl.vocab_from_state({"kind": "chars"})


def test_each_vocabulary_kind_is_defined_where_its_record_says(lib):
    """config.VOCAB_KINDS names, for each kind of RunConfig.vocab, the Part and the
    cell of the notebook that define its class; the pipeline builds it from there
    (no registry: it imports the notebook's classes by name)."""
    import nbexport
    import pipeline as pl
    from atkit import config

    for kind, where in config.VOCAB_KINDS.items():
        cls = pl.data.VOCABS[kind][0]
        (block,) = [
            b for b in nbexport.library_blocks() if f"class {cls.__name__}" in b.source
        ]
        part, section = block.section.split(" › ")[:2]
        assert part.startswith(where.part.split(" (")[0] + ":"), (kind, part)
        assert section.startswith(where.cell), (kind, section)


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
    bucketed = corpus.padding_fraction(data.train, batches)
    assert bucketed < corpus.padding_fraction(data.train, [r.tolist() for r in random])
    assert bucketed < corpus.padding_fraction(data.train, [range(len(data.train))])
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


# --- BLEU ---------------------------------------------------------------------------


def test_evaluate_scores_against_raw_references(lib, cfg, data, tiny_run, monkeypatch):
    model = tiny_run.model
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


# --- a preset's numbers ---------------------------------------------------------------


@pytest.mark.training
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
    timing = {"train_time_s", "tokens_per_s_per_process", "ckpt_dir"}  # not numbers
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
