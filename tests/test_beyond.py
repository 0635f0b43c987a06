"""Part 4: shared BPE vocabulary, three-way tying, beam search, checkpoint averaging.

Runs in the `ci` preset, with Multi30k from $MULTI30K_DIR.
"""

import itertools
import math

import pytest
import torch
import torch.nn as nn

from atkit import resume
from conftest import quiet

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
def bpe_data(lib, bpe_cfg):
    return lib.prepare_data(bpe_cfg)


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
    en_de = lib.prepare_data(bpe_cfg.updated(src_lang="en"))
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
def bpe_run(lib, bpe_cfg, bpe_data, tmp_path_factory):
    ckpt_dir = tmp_path_factory.mktemp("bpe-all")
    model, history = lib.train(bpe_cfg, bpe_data, ckpt_dir, "cpu", log=quiet)
    return ckpt_dir, model, history


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
    assert lib.translate_ids(model, sources, 60, search=lib.beam(1)) == greedy


def test_bpe_checkpoint_carries_and_restores_the_vocabulary(
    lib, bpe_cfg, bpe_data, bpe_run
):
    ckpt_dir, model, _ = bpe_run
    ckpt = torch.load(ckpt_dir / "last.pt", weights_only=True)
    assert ckpt["vocab_src"]["kind"] == "bpe"
    assert ckpt["vocab_src"]["model"].dtype == torch.uint8
    loaded, cfg, vs, vt = lib.model_from_checkpoint(ckpt_dir / "last.pt")
    assert isinstance(vs, lib.SharedBPE) and vs.itos == bpe_data.vocab_src.itos
    assert cfg == bpe_cfg
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name
    # a run whose data has another vocabulary is refused
    other = lib.prepare_data(bpe_cfg.updated(bpe_size=BPE_SIZE + 20))
    with pytest.raises(ValueError, match="vocabulary|other settings"):
        lib.train(bpe_cfg, other, ckpt_dir, "cpu", log=quiet)


def test_snapshots_average_around_the_best_step(lib, bpe_cfg, bpe_run):
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
    avg = lib.averaged_model(ckpt_dir, history, "cpu", n_avg=n_avg)
    expected = lib.average_checkpoints(paths[best - n_avg + 1 : best + 1])
    for name, value in avg.state_dict().items():
        assert torch.equal(value, expected[name]), name
    with pytest.raises(ValueError, match="only .* snapshots end at the best step"):
        lib.averaged_model(ckpt_dir, history, "cpu", n_avg=best + 2)


# --- beam search --------------------------------------------------------------------


def random_model(lib, seed, V=13):
    torch.manual_seed(seed)
    return lib.make_model(V, V, "tiny", N=1, d_model=16, d_ff=32, h=2).eval()


@pytest.mark.parametrize("seed", range(4))
def test_beam_size_one_is_greedy_on_a_random_model(lib, seed):
    model = random_model(lib, seed)
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 13, (6, 7), generator=gen)
    src[1, 5:] = 0  # some padding
    mask = (src != 0).unsqueeze(-2)
    for max_len, end in ((1, 2), (9, 2), (15, 3), (6, None)):
        greedy = lib.greedy_decode(model, src, mask, max_len, 1, end)
        beam = lib.beam_search(model, src, mask, max_len, 1, end, beam_size=1)
        assert torch.equal(beam, greedy), (max_len, end)


def test_beam_on_the_trained_copy_model(lib, copy_model):
    """The copy model is trained to convergence (the notebook's 20 epochs), so both
    searches must copy every sequence, on any CPU's rounding."""
    copy_model, losses = copy_model
    assert losses[-1] < 0.01 * losses[0], "the copy task did not converge"
    gen = torch.Generator().manual_seed(4321)
    fresh = next(lib.copy_batches(11, 16, 1, generator=gen))
    greedy = lib.greedy_decode(copy_model, fresh.src, fresh.src_mask, 10, 1)
    beam1 = lib.beam_search(copy_model, fresh.src, fresh.src_mask, 10, 1, None, 1)
    assert torch.equal(beam1, greedy)
    beam4 = lib.beam_search(copy_model, fresh.src, fresh.src_mask, 10, 1, None, 4)
    correct = lambda out: int((out == fresh.src).all(1).sum())  # noqa: E731
    assert correct(greedy) == correct(beam4) == 16


class PrefixModel:
    """A hand-built 'model': next-token log-probabilities looked up from the prefix.

    `table(first_source_id, prefix)` gives the probabilities; encode passes the source
    through, so sentences in one batch can have different tables.
    """

    def __init__(self, table):
        self.table = table

    def encode(self, src, src_mask):
        return src.float().unsqueeze(-1)  # (B, S, 1)

    def decode(self, memory, src_mask, ys, tgt_mask):
        rows = [
            self.table(int(m[0, 0]), tuple(y[1:]))
            for m, y in zip(memory, ys.tolist(), strict=True)
        ]
        return torch.tensor(rows, dtype=torch.float).log().unsqueeze(1)  # (B, 1, V)

    def generator(self, x):
        return x[:, -1] if x.dim() == 3 else x


S, E, A, B = 0, 1, 2, 3


def greedy_trap(src_id, prefix):
    """Greedy takes A (0.6) then ends with 0.34; B then </s> is 0.4 * 0.9."""
    if prefix == ():
        return [0, 0.001, 0.6, 0.399]
    if prefix == (A,):
        return [0, 0.34, 0.33, 0.33]
    if prefix == (B,):
        return [0, 0.9, 0.05, 0.05]
    return [0, 1.0, 0.0, 0.0]


def run(lib, model, k, alpha=0.0, max_len=6, n=1):
    src = torch.full((n, 3), 5, dtype=torch.long)
    mask = torch.ones(n, 1, 3, dtype=torch.bool)
    if k == 0:
        return lib.greedy_decode(model, src, mask, max_len, S, E)
    return lib.beam_search(model, src, mask, max_len, S, E, beam_size=k, alpha=alpha)


def test_beam_finds_the_sequence_greedy_misses(lib):
    model = PrefixModel(greedy_trap)
    assert run(lib, model, 0).tolist() == [[S, A, E]]
    assert run(lib, model, 1).tolist() == [[S, A, E]]
    for k, alpha in ((2, 0.0), (2, 0.6), (4, 0.6)):
        assert run(lib, model, k, alpha).tolist() == [[S, B, E]], (k, alpha)


def random_table(src_id, prefix):
    """Next-token probabilities over {</s>, 2, 3, 4} drawn from the prefix."""
    gen = torch.Generator().manual_seed(hash((src_id, prefix)) % 2**31)
    p = torch.rand(4, generator=gen) ** 3 + 0.01
    return [0.0, *(p / p.sum()).tolist()]


def best_by_enumeration(src_id, max_len, alpha):
    """The best length-normalised score over every possible output."""
    best = -math.inf
    for n in range(1, max_len):
        for body in itertools.product((2, 3, 4), repeat=n - 1):
            for last in (E, 2, 3, 4) if n == max_len - 1 else (E,):
                ys = (*body, last)
                logp = sum(
                    math.log(random_table(src_id, ys[:i])[tok])
                    for i, tok in enumerate(ys)
                )
                best = max(best, logp / ((5 + n) / 6) ** alpha)
    return best


def score(src_id, row, alpha):
    ys = row[1:]
    ys = ys[: ys.index(E) + 1] if E in ys else ys
    logp = sum(
        math.log(random_table(src_id, tuple(ys[:i]))[t]) for i, t in enumerate(ys)
    )
    return logp / ((5 + len(ys)) / 6) ** alpha


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_a_wide_beam_finds_the_best_scored_output(lib, alpha):
    """With more beams than prefixes, beam search is exhaustive: it must find the
    best output under the length penalty, which keeps finished hypotheses."""
    model, max_len = PrefixModel(random_table), 5
    src = torch.tensor([[7, 0], [8, 0], [9, 0]])
    mask = torch.ones(3, 1, 2, dtype=torch.bool)
    out = lib.beam_search(model, src, mask, max_len, S, E, beam_size=64, alpha=alpha)
    for src_id, row in zip((7, 8, 9), out.tolist(), strict=True):
        expected = best_by_enumeration(src_id, max_len, alpha)
        assert score(src_id, row, alpha) == pytest.approx(expected, abs=1e-5)


def test_length_penalty_changes_the_winner(lib):
    def table(src_id, prefix):  # short: A </s> = 0.5; long: B B B </s> = 0.405
        if prefix == ():
            return [0, 0.0, 0.5, 0.5]
        if prefix in ((B,), (B, B)):
            return [0, 0.1, 0.0, 0.9]
        return [0, 1.0, 0.0, 0.0]

    model = PrefixModel(table)
    assert run(lib, model, 4, alpha=0.0, max_len=8).tolist() == [[S, A, E]]
    # lp(2) = (7/6)^2, lp(4) = (9/6)^2: log 0.5 / lp(2) < log 0.405 / lp(4)
    assert run(lib, model, 4, alpha=2.0, max_len=8).tolist() == [[S, B, B, B, E]]


def test_beam_batched_over_sentences_equals_one_by_one(lib):
    model = PrefixModel(random_table)
    src = torch.tensor([[7, 1], [8, 1], [9, 1], [10, 1], [11, 1]])
    mask = torch.ones(5, 1, 2, dtype=torch.bool)
    batched = lib.beam_search(model, src, mask, 7, S, E, beam_size=3, alpha=0.6)
    for i in range(5):
        one = lib.beam_search(model, src[i : i + 1], mask[i : i + 1], 7, S, E, 3, 0.6)
        row = batched[i, : one.size(1)]
        assert torch.equal(row, one[0]), i
        assert (batched[i, one.size(1) :] == E).all()


@pytest.mark.parametrize("seed", range(3))
def test_beam_same_with_and_without_cache(lib, seed):
    """The cache must follow the beams when they are re-ranked (reorder)."""
    model = random_model(lib, seed)
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 13, (5, 6), generator=gen)
    src[2, 3:] = 0
    mask = (src != 0).unsqueeze(-2)
    for k in (1, 3, 5):
        cached = lib.beam_search(
            model, src, mask, 12, 1, 2, k, 0.6, stepper=lib.CachedDecoderStepper
        )
        plain = lib.beam_search(model, src, mask, 12, 1, 2, k, 0.6)
        assert torch.equal(cached, plain), k


def test_beam_output_respects_max_len_and_ends(lib):
    model = random_model(lib, 7)
    src = torch.randint(4, 13, (5, 6))
    mask = (src != 0).unsqueeze(-2)
    out = lib.beam_search(model, src, mask, 8, 1, 2, beam_size=3, alpha=0.6)
    assert out.size(1) <= 8 and (out[:, 0] == 1).all()
    for row in out.tolist():
        if 2 in row:
            assert set(row[row.index(2) :]) == {2}


def test_length_penalty_formula(lib):
    assert lib.length_penalty(1, 0.6) == pytest.approx(1.0)
    assert lib.length_penalty(7, 0.0) == 1.0
    assert lib.length_penalty(13, 0.6) == pytest.approx(3.0**0.6)


@pytest.mark.parametrize(
    "beam_size, alpha, word",
    [
        (0, 0.6, "beam_size"),
        (-2, 0.6, "beam_size"),
        (2.5, 0.6, "beam_size"),
        (4, -0.1, "alpha"),
        (4, float("nan"), "alpha"),
    ],
)
def test_bad_beam_settings(lib, beam_size, alpha, word):
    model = random_model(lib, 0)
    src = torch.randint(4, 13, (2, 5))
    mask = (src != 0).unsqueeze(-2)
    with pytest.raises(ValueError, match=word):
        lib.beam_search(model, src, mask, 8, 1, 2, beam_size=beam_size, alpha=alpha)
    with pytest.raises(ValueError, match=word):
        lib.beam(beam_size=beam_size, alpha=alpha)


# --- checkpoint averaging -----------------------------------------------------------


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
