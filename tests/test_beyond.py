"""Part 4: shared BPE vocabulary, three-way tying, checkpoint averaging (beam search:
tests/test_decoding.py).

Runs in the `ci` preset, with Multi30k from $MULTI30K_DIR.
"""

import shutil

import pytest

from conftest import COPY, lazy, needs, quiet

torch = lazy("torch")
resume = lazy("atkit.resume")
nn = lazy("torch.nn")

TINY = {
    "n_train": 300,
    "n_eval": 12,
    "max_tokens": 400,
    "N": 1,
    "d_model": 32,
    "d_ff": 64,
    "h": 2,
    "steps": 36,
    "eval_every": 12,
    "keep": 3,
    "warmup": 10,
    "max_len": 256,
    "max_sent_len": 48,
}
BPE_SIZE = 300


@pytest.fixture(scope="module")
def bpe_cfg(cfg):
    return cfg.updated(vocab="bpe", bpe_size=BPE_SIZE, tie="all")


@pytest.fixture(scope="module")
@needs("data")
def bpe_data(lib, bpe_cfg):
    """Multi30k in BPE_SIZE pieces: the tests that use it are in the `data` tier."""
    import pipeline as pl

    return pl.prepare_data(bpe_cfg)


# --- shared BPE vocabulary ----------------------------------------------------------


def test_bpe_has_part3_specials_and_vocab_interface(lib, bpe_data):
    bpe = bpe_data.vocab_src
    assert bpe is bpe_data.vocab_tgt, "one vocabulary for both sides"
    assert len(bpe) == BPE_SIZE == len(bpe.itos)
    assert bpe.itos[: len(lib.SPECIALS)] == list(lib.SPECIALS)
    assert (lib.BOS, lib.EOS, lib.PAD, lib.UNK) == tuple(
        bpe.stoi[s] for s in lib.SPECIALS
    )
    tokens = ["Ein", "Mann", "spielt", "Gitarre", "."]
    ids = bpe.encode(tokens)
    assert all(isinstance(i, int) and 0 <= i < len(bpe) for i in ids)
    assert len(ids) > len(tokens), "a small vocabulary cuts words into pieces"
    assert bpe.decode(ids) == tokens
    assert bpe.decode([lib.BOS, *ids, lib.EOS]) == tokens, "specials decode to nothing"
    assert bpe.encode([]) == [] and bpe.decode([]) == []


def test_bpe_round_trips_training_sentences(lib, cfg, bpe_data):
    root = str(lib.corpus.fetch_multi30k())
    for lang in ("de", "en"):
        for tokens in lib.tokenized("train", lang, cfg.n_train, root)[:50]:
            ids = bpe_data.vocab_src.encode(tokens)
            assert lib.UNK not in ids
            assert bpe_data.vocab_src.decode(ids) == tokens


def test_bpe_is_learnt_from_the_training_split_only(lib, cfg, bpe_data):
    root = str(lib.corpus.fetch_multi30k())
    train = [
        tokens
        for lang in ("de", "en")
        for tokens in lib.tokenized("train", lang, cfg.n_train, root)
    ]
    again = lib.train_shared_bpe(train, BPE_SIZE)  # the same text, the same pieces
    assert again.itos == bpe_data.vocab_src.itos, "the same text gives the same pieces"
    text = " ".join(" ".join(t) for t in train)
    for piece in bpe_data.vocab_src.itos[len(lib.SPECIALS) :]:
        assert piece.strip("\u2581") in text, piece
    # a character that never occurs in the training slice cannot have a piece
    assert lib.UNK in bpe_data.vocab_src.encode(["\u00e6\u00f8\u00e5"])


def test_bpe_state_survives_a_weights_only_checkpoint(lib, bpe_data, tmp_path):
    bpe = bpe_data.vocab_src
    path = tmp_path / "ckpt.pt"
    lib.checkpoints.save_checkpoint({"bpe": bpe.state()}, path)
    state = torch.load(path, weights_only=True)["bpe"]
    assert state["model"].dtype == torch.uint8
    restored = lib.SharedBPE.from_state(state)
    assert restored.itos == bpe.itos
    tokens = ["Zwei", "Hunde", "rennen", "durch", "den", "Schnee", "."]
    assert restored.encode(tokens) == bpe.encode(tokens)


@pytest.mark.parametrize("size", [0, 4, 10**6])
def test_bpe_rejects_impossible_sizes(lib, size):
    with pytest.raises(ValueError):
        lib.train_shared_bpe([["ein", "Hund"], ["a", "dog"]] * 20, size)


def test_directions_are_one_setting_apart(lib, cfg, bpe_cfg, bpe_data):
    import pipeline as pl

    en_de = pl.prepare_data(bpe_cfg.updated(src_lang="en"))
    assert en_de.vocab_src.itos == bpe_data.vocab_src.itos
    assert [(t, s) for s, t in en_de.train] == bpe_data.train
    assert [(t, s) for s, t in en_de.val] == bpe_data.val
    for split, (de, en) in bpe_data.text.items():
        assert en_de.text[split] == (en, de)
    de, en = lib.corpus.read_split("test_2016_flickr", lib.corpus.fetch_multi30k())
    assert bpe_data.text["test_2016_flickr"] == (de[: cfg.n_eval], en[: cfg.n_eval])
    with pytest.raises(ValueError, match="src_lang"):
        bpe_cfg.updated(src_lang="fr")


# --- a BPE model in Part 3's pipeline, tied three ways ------------------------------


@pytest.fixture(scope="module")
@needs("training")
def bpe_run(trained):
    run = trained(**TINY, vocab="bpe", bpe_size=BPE_SIZE, tie="all")
    return run.folder, run.model, run.history


def test_tied_bpe_model_trains_and_translates_with_part3_code(lib, bpe_data, bpe_run):
    _, model, history = bpe_run
    emb = model.src_embed[0].lut.weight
    assert emb is model.tgt_embed[0].lut.weight is model.generator.proj.weight
    assert history["val_loss"][-1] < history["val_loss"][0]
    translate = lib.Translator(model, bpe_data.vocab_src, bpe_data.vocab_tgt)
    out = translate("Ein Mann fährt Fahrrad.")
    assert isinstance(out, str) and "<s>" not in out and "\u2581" not in out
    sources = [s for s, _ in bpe_data.val[:6]]
    greedy = lib.translate_ids(model, sources, decode_tokens=60)
    one = lib.make_search("beam", beam_size=1)
    assert lib.translate_ids(model, sources, 60, search=one) == greedy


def test_bpe_checkpoint_carries_and_restores_the_vocabulary(
    lib, bpe_cfg, bpe_data, bpe_run
):
    import pipeline as pl

    ckpt_dir, model, _ = bpe_run
    ckpt = torch.load(ckpt_dir / "last.pt", weights_only=True)
    assert ckpt["vocab_src"]["kind"] == "bpe"
    assert ckpt["vocab_src"]["model"].dtype == torch.uint8
    loaded, cfg, vs, vt = pl.model_from_checkpoint(ckpt_dir / "last.pt")
    assert isinstance(vs, lib.SharedBPE) and vs.itos == bpe_data.vocab_src.itos
    assert cfg == bpe_cfg
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
    # a run whose data has another vocabulary is refused
    other = pl.prepare_data(bpe_cfg.updated(bpe_size=BPE_SIZE + 20))
    with pytest.raises(ValueError, match="vocabulary|other settings"):
        pl.train(bpe_cfg, other, ckpt_dir, "cpu", log=quiet)


def test_snapshots_average_around_the_best_step(lib, bpe_cfg, bpe_run):
    import pipeline as pl

    ckpt_dir, model, history = bpe_run
    assert history["steps"] == [12, 24, 36]
    paths = [resume.snapshot_path(ckpt_dir, s) for s in history["steps"]]
    steps = [torch.load(p, weights_only=True)["step"] for p in paths]
    assert steps == history["steps"]
    final = model.state_dict()
    first = torch.load(paths[0], weights_only=True)["model"]
    assert any(not torch.equal(first[k], final[k]) for k in final), "not earlier"
    best = history["steps"].index(history["best_step"])
    n_avg = min(2, best + 1)
    avg = pl.averaged_model(ckpt_dir, history, "cpu", n_avg=n_avg)
    expected = lib.average_checkpoints(paths[best - n_avg + 1 : best + 1])
    for name, value in avg.state_dict().items():
        assert torch.equal(value, expected[name]), name


# --- checkpoint averaging -----------------------------------------------------------


def random_model(lib, seed, V=13):
    torch.manual_seed(seed)
    return lib.make_model(V, V, "tiny", N=1, d_model=16, d_ff=32, h=2).eval()


def tiny_state(lib, seed, **kw):
    return {k: v.clone() for k, v in random_model(lib, seed, **kw).state_dict().items()}


@pytest.mark.parametrize("k", [1, 3])
def test_averaging_identical_checkpoints_is_the_identity(lib, k):
    state = tiny_state(lib, 0)
    avg = lib.average_checkpoints([state] * k)
    assert avg.keys() == state.keys()
    for name in state:
        assert torch.equal(avg[name], state[name])
        assert avg[name].dtype == state[name].dtype


def test_averaging_two_checkpoints_gives_the_midpoint(lib):
    a, b = tiny_state(lib, 0), tiny_state(lib, 1)
    avg = lib.average_checkpoints([a, b])
    for name in a:
        mid = ((a[name].double() + b[name].double()) / 2).float()
        assert torch.equal(avg[name], mid), name
    model = random_model(lib, 2)
    model.load_state_dict(avg)  # an averaged state dict loads into the architecture
    tied = lib.make_model(13, 13, "tiny", N=1, d_model=16, d_ff=32, h=2, tie="all")
    states = [{k: v + i for k, v in tied.state_dict().items()} for i in range(3)]
    tied.load_state_dict(lib.average_checkpoints(states))
    assert tied.generator.proj.weight is tied.src_embed[0].lut.weight


def test_buffers_and_non_float_entries(lib):
    states = []
    for i in range(3):
        bn = nn.BatchNorm1d(4)
        bn.train()
        bn(torch.randn(8, 4) + i)  # moves running_mean/var, counts one batch
        bn.num_batches_tracked += i  # counters differ between checkpoints
        s = dict(bn.state_dict())
        s["mask"] = torch.tensor([True, False])
        s["half"] = torch.full((2,), float(i), dtype=torch.float16)
        states.append(s)
    avg = lib.average_checkpoints(states)
    mean = sum(s["running_mean"] for s in states) / 3
    torch.testing.assert_close(avg["running_mean"], mean)
    assert avg["num_batches_tracked"].dtype == torch.long
    assert int(avg["num_batches_tracked"]) == int(states[-1]["num_batches_tracked"])
    assert torch.equal(avg["mask"], states[-1]["mask"])
    assert avg["half"].dtype == torch.float16 and avg["half"].tolist() == [1.0, 1.0]


def test_averaging_reads_checkpoint_files(lib, tmp_path):
    a, b = tiny_state(lib, 0), tiny_state(lib, 1)
    lib.checkpoints.save_checkpoint({"model": a, "step": 1}, tmp_path / "a.pt")
    lib.checkpoints.save_checkpoint(b, tmp_path / "b.pt")  # a bare state dict
    from_files = lib.average_checkpoints([str(tmp_path / "a.pt"), tmp_path / "b.pt"])
    from_dicts = lib.average_checkpoints([a, b])
    for name in a:
        assert torch.equal(from_files[name], from_dicts[name])


def test_averaging_rejects_empty_and_mixed_architectures(lib):
    with pytest.raises(ValueError, match="at least one"):
        lib.average_checkpoints([])
    base = tiny_state(lib, 0)
    deeper = {
        k: v
        for k, v in lib.make_model(13, 13, "tiny", N=2, d_model=16, d_ff=32, h=2)
        .state_dict()
        .items()
    }
    with pytest.raises(ValueError, match="keys"):
        lib.average_checkpoints([base, deeper])
    wider = {
        k: v
        for k, v in lib.make_model(13, 13, "tiny", N=1, d_model=32, d_ff=32, h=2)
        .state_dict()
        .items()
    }
    with pytest.raises(ValueError, match="architecture"):
        lib.average_checkpoints([base, wider])
    halved = {k: v.half() for k, v in base.items()}
    with pytest.raises(ValueError, match="architecture"):
        lib.average_checkpoints([base, halved])


def test_average_checkpoints_wants_a_list(lib, tmp_path):
    path = tmp_path / "a.pt"
    lib.checkpoints.save_checkpoint({"model": tiny_state(lib, 0)}, path)
    for single in (path, str(path), tiny_state(lib, 0)):
        with pytest.raises(TypeError, match="list"):
            lib.average_checkpoints(single)


# --- averaging refuses snapshots of other runs ---------------------------------------


@pytest.fixture(scope="module")
@needs("training")
def two_runs(trained):
    """The folders of two copy-task runs of 4 steps that differ in the seed alone."""
    return {
        name: trained(
            "copy", **{**COPY, "seed": seed, "steps": 4, "eval_every": 2}
        ).folder
        for name, seed in (("a", 0), ("b", 1))
    }


def test_averaging_checkpoints_of_different_runs_is_refused(lib, two_runs):
    a, b = two_runs["a"] / "step000004.pt", two_runs["b"] / "step000004.pt"
    with pytest.raises(lib.checkpoints.CheckpointError, match="different runs") as e:
        lib.average_checkpoints([a, b])
    assert str(a) in str(e.value) and str(b) in str(e.value)
    assert "'seed'" in str(e.value)
    # the same run's snapshots average
    lib.average_checkpoints([two_runs["a"] / "step000002.pt", a])


def test_averaging_compares_the_vocabularies(lib, two_runs, tmp_path):
    a = two_runs["a"] / "step000004.pt"
    state = lib.checkpoints.load_checkpoint(a)
    itos = list(state["vocab_tgt"]["itos"])
    itos[-2], itos[-1] = itos[-1], itos[-2]  # same size, same config, other words
    other = tmp_path / "other.pt"
    torch.save({**state, "vocab_tgt": {**state["vocab_tgt"], "itos": itos}}, other)
    with pytest.raises(lib.checkpoints.CheckpointError, match="target vocabulary"):
        lib.average_checkpoints([a, other])


def test_averaged_model_refuses_a_foreign_snapshot_in_the_folder(
    lib, two_runs, tmp_path
):
    import pipeline as pl

    folder = tmp_path / "a"
    shutil.copytree(two_runs["a"], folder)
    shutil.copy(two_runs["b"] / "step000002.pt", folder / "step000002.pt")
    history = lib.checkpoints.load_checkpoint(folder / "last.pt")["history"]
    history = {**history, "best_step": 4}
    with pytest.raises(lib.checkpoints.CheckpointError, match="step000002.pt"):
        pl.averaged_model(folder, history, "cpu", 2)


def test_bpe_pieces_are_the_pieces_of_the_ids(lib, bpe_data):
    """`pieces` (what the page's tokenizer is compared with) names each id's piece:
    the pieces of a sentence look up to its ids, and joined they give back its text
    with sentencepiece's word marks."""
    bpe = bpe_data.vocab_src
    tokens = ["Ein", "Mann", "spielt", "Gitarre", "."]
    pieces = bpe.pieces(tokens)
    assert [bpe.stoi[p] for p in pieces] == bpe.encode(tokens)
    assert "".join(pieces) == "\u2581" + "\u2581".join(tokens)
    assert len(pieces) > len(tokens) and bpe.pieces([]) == []
