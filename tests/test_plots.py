"""The plots of Parts 1 and 2 (atkit.plots) draw the numbers they are given and
print what the cells promise; atkit.measure counts FLOPs and times a call."""

import pytest

from conftest import lazy

torch = lazy("torch")
plt = lazy("matplotlib.pyplot")
plots = lazy("atkit.plots")
measure = lazy("atkit.measure")


@pytest.fixture
def shown(monkeypatch):
    """The figures that plt.show() would display, in order."""
    figures = []
    monkeypatch.setattr("matplotlib.pyplot.show", lambda: figures.append(plt.gcf()))
    yield figures
    plt.close("all")


def test_positional_encoding_draws_the_columns_and_the_table(shown):
    pe = torch.arange(30.0).view(10, 3)  # (positions, d_model)
    plots.positional_encoding(pe, dims=(0, 2))
    lines, table = shown[0].axes[:2]
    assert [list(line.get_ydata()) for line in lines.get_lines()] == [
        pe[:, 0].tolist(),
        pe[:, 2].tolist(),
    ]
    assert table.images[0].get_array().shape == (3, 10)  # dimensions x positions


def test_learning_rates_print_each_peak_and_last_rate(shown, capsys):
    plots.learning_rates({"a": [0.1, 0.3, 0.2], "b": [0.5, 0.25]})
    assert capsys.readouterr().out.splitlines() == [
        "a: peak 3.00e-01 at step 2, last step 2.00e-01",
        "b: peak 5.00e-01 at step 1, last step 2.50e-01",
    ]
    assert [line.get_label() for line in shown[0].axes[0].get_lines()] == ["a", "b"]


def test_smoothed_targets_write_every_cell(shown):
    q = torch.tensor([[0.9, 0.05, 0.05], [0.1, 0.8, 0.1]])
    plots.smoothed_targets(q, "position")
    texts = [t.get_text() for t in shown[0].axes[0].texts]
    assert texts == ["0.90", "0.05", "0.05", "0.10", "0.80", "0.10"]


def test_loss_curves_print_the_lowest_loss_and_where(shown, capsys):
    xs = torch.tensor([0.0, 1.0, 2.0])
    plots.loss_curves({"eps=0": (xs, [3.0, 2.0, 1.0])}, "margin", "logit margin")
    assert capsys.readouterr().out == "eps=0: lowest loss 1.000 at logit margin 2.00\n"
    assert shown[0].axes[0].get_xlabel() == "margin"


def test_measure_counts_the_flops_of_a_call_and_times_it():
    linear = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    assert measure.flops(linear, x) == 2 * 2 * 4 * 3  # a multiply and an add each
    calls = []
    seconds = measure.fastest(lambda y: calls.append(y), x, repeats=3)
    assert len(calls) == 4 and isinstance(seconds, float)  # a warm-up, three timed


def test_show_source_prints_the_code_under_its_full_name(capsys):
    """What a deep dive shows of atkit: the code the main path calls, not a copy."""
    from atkit.prose import show_source
    from atkit.schedule import cooldown_start

    show_source(cooldown_start)
    out = capsys.readouterr().out
    assert out.startswith("# atkit.schedule.cooldown_start\ndef cooldown_start(c)")
    assert "math.floor(round(c.steps * (1 - c.cooldown), 6))" in out
