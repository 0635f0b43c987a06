"""Part 6 counts layers and heads from 1, as the interactive view does (its buttons and
caption: tests/test_attention_view.py): the plots' titles, `show_attention`'s
arguments and the sentences `describe_heads` writes name the same layer and head for
the same weights."""

import numpy as np
import pytest

from conftest import lazy

torch = lazy("torch")

TINY = {"n_train": 300, "n_eval": 10}
PATTERNS = ("previous", "same", "next", "aligned")


@pytest.fixture(scope="module")
def model(lib, cfg, data):
    torch.manual_seed(0)
    model = lib.build_model(cfg.model, len(data.vocab_src), len(data.vocab_tgt))
    return model.eval()


@pytest.fixture
def shown(lib, monkeypatch):
    """The figures that plt.show() would display, in order."""
    figures = []
    monkeypatch.setattr(lib.plt, "show", lambda: figures.append(lib.plt.gcf()))
    yield figures
    lib.plt.close("all")


def test_show_attention_counts_from_one(lib, model, data, shown):
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
