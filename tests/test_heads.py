"""Part 6 counts layers and heads from 1, as the interactive view does (its buttons and
caption: tests/test_attention_view.py): the plots' titles, `show_attention`'s
arguments and the sentences `describe_heads` writes name the same layer and head for
the same weights."""

import types

import numpy as np
import pytest

from conftest import lazy

torch = lazy("torch")
fast = lazy("atkit.fast")
plt = lazy("matplotlib.pyplot")

TINY = {"n_train": 300, "n_eval": 10}
PATTERNS = ("previous", "same", "next", "aligned")


@pytest.fixture(scope="module")
def model(lib, cfg, toy_data):
    """An untrained model of the made-up sentences' vocabularies (tests/conftest.py):
    the counting of layers and heads is under test, not what a model makes of
    Multi30k."""
    torch.manual_seed(0)
    vocabs = len(toy_data.vocab_src), len(toy_data.vocab_tgt)
    model = lib.build_model(cfg.model, *vocabs)
    return model.eval()


@pytest.fixture
def shown(lib, monkeypatch):
    """The figures that plt.show() would display, in order."""
    figures = []
    monkeypatch.setattr("matplotlib.pyplot.show", lambda: figures.append(plt.gcf()))
    yield figures
    plt.close("all")


def test_show_attention_counts_from_one(lib, model, toy_data, shown):
    data = toy_data
    N, h = model.config.N, model.config.h
    for bad in (0, N + 1):
        with pytest.raises(ValueError, match=rf"layer must be in 1\.\.{N}"):
            lib.show_attention(model, data, layer=bad)
    for bad in (0, h + 1):
        with pytest.raises(ValueError, match=rf"head must be in 1\.\.{h}"):
            lib.show_attention(model, data, layer=1, head=bad)
    assert not shown

    lib.show_attention(model, data, index=0, layer=N, kind="cross", head=h)
    fig = shown[-1]
    assert fig._suptitle.get_text() == f"cross attention, layer {N}"
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in titled] == [f"head {h}"]
    src_ids, tgt_ids, *_ = lib.example_pair(model, data, 0)
    last = lib.attention_maps(model, src_ids, tgt_ids)["cross"][N - 1, h - 1]
    drawn = np.asarray(titled[0].collections[0].get_array()).reshape(last.shape)
    np.testing.assert_allclose(drawn, last.numpy(), rtol=0, atol=1e-6)

    lib.show_attention(model, data, index=0, layer=1, kind="encoder")
    titles = [ax.get_title() for ax in shown[-1].axes if ax.get_title()]
    assert titles == [f"head {k}" for k in range(1, h + 1)]


def test_describe_heads_counts_from_one(lib, capsys):
    N, h = 3, 4
    stats = {name: torch.full((N, h), 0.1) for name in PATTERNS}
    peaks = {"previous": (1, 2), "same": (0, 0), "next": (2, 3), "aligned": (2, 0)}
    for name, (i, j) in peaks.items():
        stats[name][i, j] = 0.9  # tensor index (i, j): layer i + 1, head j + 1
    stats["chance"] = dict.fromkeys(PATTERNS, 0.05)
    for name, (i, j) in peaks.items():
        assert lib.strongest_head(stats[name]) == (i + 1, j + 1)
    lib.describe_heads(stats)
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 88, out  # wrapped to the page
    text = " ".join(out.split())
    for name, (i, j) in peaks.items():
        assert (
            f"strongest in layer {i + 1}, head {j + 1} (90% of positions; median "
            f"head 10%, chance 5%); on average most common in layer {i + 1} (30% "
            "per head)"
        ) in text, (name, text)


def test_the_view_shows_the_sentences_asked_for_and_a_text_of_ones_own(
    lib, model, toy_data
):
    """Part 6's `attention_view`: each validation sentence with its model's own
    translation and its weights (`example_pair`, `attention_maps`), then a text of
    the reader's, tokenized and translated first."""
    data = toy_data
    text = "Ein Hund rennt."
    view = lib.attention_view(model, data, [2], extra=[text])
    assert len(view.sentences) == 2
    for s, index in zip(view.sentences, [2], strict=False):
        src_ids, tgt_ids, src_tok, tgt_tok = lib.example_pair(model, data, index)
        assert (s["src"], s["tgt"], s["label"]) == (src_tok, tgt_tok, f"val {index}")
        maps = lib.attention_maps(model, src_ids, tgt_ids)
        for kind in ("encoder", "decoder", "cross"):
            np.testing.assert_allclose(s[kind], maps[kind].numpy(), atol=1e-6)
    own = view.sentences[1]
    src_ids = lib.frame(data.vocab_src.encode(lib.tokenize_all("de", [text])[0]))
    tgt_ids = [lib.BOS, *lib.translate_ids(model, [src_ids])[0]]
    assert own["label"] == text
    assert own["src"] == [data.vocab_src.itos[i] for i in src_ids]
    assert own["tgt"] == [data.vocab_tgt.itos[i] for i in tgt_ids]
    maps = lib.attention_maps(model, src_ids, tgt_ids)
    np.testing.assert_allclose(own["cross"], maps["cross"].numpy(), atol=1e-6)


def test_attention_statistics_count_argmax_keys_against_chance(lib, monkeypatch):
    """The counting, on weights made up for a model of one layer and two heads:
    head 1 of the encoder looks at the previous token (the first token at itself),
    head 2 at the next one (the last at itself); in decoder-source attention head 1
    points at the source word being written, head 2 always at <s>. Two sentences of
    five source tokens: every share and chance level by hand."""
    src_tok = ["<s>", "a", "b", "c", "</s>"]  # S = 5
    tgt_tok = ["<s>", "b", "x", "a"]  # writes b, x, a, </s>
    S, T = len(src_tok), len(tgt_tok)
    enc = torch.zeros(1, 2, S, S)
    for q in range(S):
        enc[0, 0, q, max(q - 1, 0)] = 1.0
        enc[0, 1, q, min(q + 1, S - 1)] = 1.0
    cross = torch.zeros(1, 2, T, S)
    cross[0, 0, :, 3] = 1.0  # c: written nowhere
    cross[0, 0, 0, 2] = 1.0  # writing b: at b
    cross[0, 0, 0, 3] = 0.0
    cross[0, 0, 2, 1] = 1.0  # writing a: at a
    cross[0, 0, 2, 3] = 0.0
    cross[0, 1, :, 0] = 1.0
    pair = ([0, 5, 6, 7, 1], [0, 6, 9, 5], src_tok, tgt_tok)
    monkeypatch.setattr(lib, "example_pair", lambda model, data, i, split: pair)
    monkeypatch.setattr(
        lib, "attention_maps", lambda m, s, t: {"encoder": enc, "cross": cross}
    )
    model = types.SimpleNamespace(config=types.SimpleNamespace(N=1, h=2))
    data = types.SimpleNamespace(text={"val": (["one", "two", "three"], [])})
    stats = lib.attention_statistics(model, data, 2)
    # 4 of 5 queries have a previous token, and head 1 takes it at each
    assert stats["previous"].tolist() == [[1.0, 0.0]]
    assert stats["next"].tolist() == [[0.0, 1.0]]
    # the first query of head 1 and the last of head 2 look at themselves: 1 of 5
    assert stats["same"].tolist() == [[pytest.approx(0.2), pytest.approx(0.2)]]
    # b and a are written and appear once in the source; x is not in it; </s> is
    # a special token
    assert stats["n_aligned"] == 4
    assert stats["aligned"].tolist() == [[1.0, 0.0]]
    chance = stats["chance"]
    assert chance == {
        "previous": pytest.approx(1 / S),
        "same": pytest.approx(1 / S),
        "next": pytest.approx(1 / S),
        "aligned": pytest.approx(1 / S),
    }
    assert lib.attention_statistics(model, data, 99)["n_aligned"] == 6, "3 at most"


def test_attention_maps_read_part_1s_weights_also_from_a_fast_model(lib):
    """The weights come from Part 1's attention (`self.attn`); on a model with the
    fast path on (whose fused attention keeps none), attention_maps runs the pass on
    Part 1's classes, gives the same maps, and leaves the model fast and in the mode
    it was in."""
    import copy

    torch.manual_seed(0)
    plain = lib.make_model(16, 16, "tiny", N=2, d_model=32, d_ff=64, h=2, max_len=64)
    quick = fast.set_fast_path(copy.deepcopy(plain)).train()
    kinds = [type(m) for m in quick.modules()]
    src_ids, tgt_ids = lib.frame([5, 6, 7, 8]), [lib.BOS, 9, 10]
    want = lib.attention_maps(plain, src_ids, tgt_ids)
    got = lib.attention_maps(quick, src_ids, tgt_ids)
    for kind in ("encoder", "decoder", "cross"):
        torch.testing.assert_close(got[kind], want[kind])
    assert [type(m) for m in quick.modules()] == kinds and quick.training
    assert want["decoder"][..., 0, 1:].abs().max() == 0, "the causal mask holds"


def test_print_shares_prints_one_table_per_pattern_heads_from_one(capsys):
    from atkit import heads

    stats = {name: torch.full((2, 3), 0.25) for name in PATTERNS}
    stats["aligned"][1, 2] = 0.5
    stats["chance"] = dict.fromkeys(PATTERNS, 0.1)
    heads.print_shares(stats)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("share of query positions whose strongest key is")
    assert out.count(f"  {'':8}    h1    h2    h3") == 4
    assert "aligned (decoder-source; chance 10%):" in out
    assert out[-1] == "  layer 2:   25%   25%   50%"
