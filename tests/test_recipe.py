"""Part 4's table as library code: every run trained, the final systems chosen on val,
the table scored; a run whose loss turns NaN is reported in its row, and the rest of
the table goes on (issue 46, point 1)."""

import pytest

from atkit import report
from conftest import needs

STEPS = dict(steps=40, eval_every=10, keep=3)  # the ci preset, shorter


@pytest.fixture(scope="module")
@needs("training")
def recipe_with_a_nan(lib, tmp_path_factory):
    """Part 4 in the ci preset, its post-norm twin given a rate that turns its loss
    NaN within a few steps."""
    root = tmp_path_factory.mktemp("recipe")
    quiet = lambda *a, **k: None  # noqa: E731
    cfg = lib.run_config("ci", **STEPS)
    data = lib.prepare_data(cfg)
    _, history = lib.train(cfg, data, root / "part3", "cpu", log=quiet)
    bpe_cfg = cfg.updated(vocab="bpe", tie="all")
    bpe_data = lib.prepare_data(bpe_cfg)
    en_de_cfg = bpe_cfg.updated(src_lang="en")
    en_de = lib.prepare_data(en_de_cfg)
    recipe = lib.PRESETS["ci"].recipe
    runs = lib.recipe_runs(bpe_cfg, bpe_data, en_de_cfg, en_de, recipe)
    c, d = runs["part4-bpe-all-post-same"]
    runs["part4-bpe-all-post-same"] = (c.updated(factor=1e15), d)
    said = []
    trained = {"part3": lib.Trained(cfg, data, history)}
    trained |= lib.train_recipe(runs, root, "cpu", log=said.append)
    finals = lib.final_systems(trained, recipe, root, "cpu")
    summary = lib.score_table(trained, finals, recipe, 0.5, root, "cpu", "ci")
    summary["averaging"] = lib.averaging_analysis(trained, finals, recipe, root, "cpu")
    return trained, summary, said


def test_the_diverged_run_is_reported_not_raised(recipe_with_a_nan):
    trained, summary, said = recipe_with_a_nan
    post = trained["part4-bpe-all-post-same"]
    assert post.history is None and post.diverged.startswith("loss not finite at step")
    assert any("diverged:" in line and "nan" in line for line in said)
    row = next(r for r in summary["rows"] if r["key"] == "post")
    assert row["diverged"] == post.diverged and row["bleu"] is None
    line = next(ln for ln in report.table(summary) if ln.startswith(f"{row['no']} "))
    assert "diverged: loss not finite at step" in line


def test_every_other_row_is_scored(recipe_with_a_nan):
    trained, summary, _ = recipe_with_a_nan
    others = [r for r in summary["rows"] if r["key"] != "post"]
    assert len(others) == len(summary["rows"]) - 1
    for r in others:
        assert r["diverged"] is None, r["key"]
        assert isinstance(r["bleu"], float) and r["ratio"] >= 0, r["key"]
    assert set(summary["choices"]) == {"de-en", "en-de"}
    assert summary["averaging"] is not None  # eq. 3 and the cool-down both trained
    said = report.what_the_table_says(summary)
    assert any("row 5's run diverged" in s for s in said)
    assert len(report.conclusion(summary, 1.0)) == 4


def test_the_table_compares_rows_of_the_same_trained_run_unmarked(recipe_with_a_nan):
    _, summary, _ = recipe_with_a_nan
    by_key = {r["key"]: r for r in summary["rows"]}
    assert not by_key["avg"]["trained"] and not by_key["beam"]["trained"]
    assert by_key["bpe"]["trained"] and by_key["bpe"]["vs"] == by_key["words"]["no"]
