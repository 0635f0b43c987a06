"""Part 4's table as library code: every run trained, the final systems chosen on val,
the table scored; a run whose loss turns NaN is reported in its row, and the rest of
the table goes on (issue 46, point 1)."""

import dataclasses
import functools
import json
import shutil
import types

import pytest

from atkit import config, report, schedule, scoring, searches, seeds
from atkit.settings import ConfigError
from conftest import COPY, lazy, needs, quiet

torch = lazy("torch")
fast = lazy("atkit.fast")
table = lazy("pipeline.table")

# the ci preset, shorter, scored on 8 sentences (a model of 40 steps decodes most to
# their length limit; these tests need a score in every row, not a good one)
STEPS = dict(steps=40, eval_every=10, keep=3, n_eval=8)


@pytest.fixture(scope="module")
@needs("training")
def recipe_with_a_nan(lib, tmp_path_factory):
    """Part 4 in the ci preset, its post-norm twin given a rate that turns its loss
    NaN within a few steps."""
    import pipeline as pl

    root = tmp_path_factory.mktemp("recipe")
    quiet = lambda *a, **k: None  # noqa: E731
    cfg = pl.run_config("ci", **STEPS)
    data = pl.prepare_data(cfg)
    _, history = pl.train(cfg, data, root / "part3", "cpu", log=quiet)
    bpe_cfg = cfg.updated(vocab="bpe", tie="all")
    bpe_data = pl.prepare_data(bpe_cfg)
    en_de_cfg = bpe_cfg.updated(src_lang="en")
    en_de = pl.prepare_data(en_de_cfg)
    recipe = lib.PRESETS["ci"].recipe
    runs = table.recipe_runs(bpe_cfg, bpe_data, en_de_cfg, en_de, recipe)
    c, d = runs["part4-bpe-all-post-same"]
    runs["part4-bpe-all-post-same"] = (c.updated(factor=1e15), d)
    said = []
    trained = {"part3": table.Trained(cfg, data, history)}
    trained |= table.train_recipe(runs, root, "cpu", recipe, log=said.append)
    finals = table.final_systems(trained, recipe, root, "cpu")
    summary = table.score_table(trained, finals, recipe, 0.5, root, "cpu", "ci")
    summary["averaging"] = table.averaging_analysis(
        trained, finals, recipe, root, "cpu"
    )
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
    post = next(r["no"] for r in summary["rows"] if r["key"] == "post")
    assert len(report.averaging_table(summary)) == 4
    # every gain between two scored rows with its paired interval, printed; none
    # against the diverged row
    compared = [r for r in others if r["vs"] not in (None, post)]
    assert all(r["interval"] is None for r in others if r["vs"] == post)
    assert compared and all(
        r["interval"]["low"] <= r["interval"]["high"] for r in compared
    )
    assert report.compare(summary)  # as Part 4
    lines = report.table(summary)
    assert sum(
        ln.startswith(f"{r['no']:>4} ") for r in compared for ln in lines
    ) == len(compared)


def test_the_table_compares_rows_of_the_same_trained_run_unmarked(recipe_with_a_nan):
    _, summary, _ = recipe_with_a_nan
    by_key = {r["key"]: r for r in summary["rows"]}
    assert not by_key["avg"]["trained"] and not by_key["beam"]["trained"]
    assert by_key["bpe"]["trained"] and by_key["bpe"]["vs"] == by_key["words"]["no"]


# ------------------------------------------------ the same functions, in the fast tier
# Part 4's table on copy-task runs of four steps each (a second in all): the folders,
# names and choices of the real table, on data whose BLEU is computed in milliseconds.

COPY4 = {
    **COPY,
    "steps": 4,
    "eval_every": 2,
    "keep": 2,
    "cooldown": 0.5,  # eq. 3 up to step 2, then down to zero at step 4
    "n_train": 48,
    "n_eval": 6,
    "max_len": 14,  # sequences of up to 12 framed symbols; short decodes
}
# one beam decode per direction: alpha 0 is both the largest tried and the cap
FAST_RECIPE = dict(beam_size=2, alphas=(0.0,), alpha_step=1.0, alpha_cap=0.0, n_avg=2)


def scored_copy_data(lib, cfg):
    """The copy task's data with its validation pairs as the text of val and
    test_2016 too (references: the sources' symbols), so that `bleu` scores it."""
    data = lib.copy_task_data(cfg)
    sources = [src for src, _ in data.val]
    refs = [lib.detokenize(data.vocab_tgt.decode(tgt)) for _, tgt in data.val]
    return dataclasses.replace(
        data,
        sources={split: sources for split in lib.EVAL_SPLITS},
        text={split: (refs, refs) for split in lib.EVAL_SPLITS},
    )


def eq3(s, d_model, factor, warmup):
    """Eq. 3 by hand."""
    return factor * d_model**-0.5 * min(s**-0.5, s * warmup**-1.5)


def test_schedule_helpers_are_eq3_until_the_cooldown_and_zero_at_the_end(lib):
    import pipeline as pl

    c = pl.run_config("ci", d_model=16, h=2, factor=2.0, warmup=4, steps=10)
    c = c.updated(cooldown=0.8)  # 10 * (1 - 0.8) is 1.9999999999999996 in floats
    assert schedule.cooldown_start(c) == 2
    for s in (1, 2):  # up to the cool-down: eq. 3's rate
        assert schedule.rates_at(c, lib.rate, [s])[0] == pytest.approx(
            eq3(s, 16, 2.0, 4), rel=1e-12
        )
    below = schedule.rates_at(c, lib.rate, [3, 6, 10])
    assert below == pytest.approx(
        [eq3(3, 16, 2.0, 4) * 7 / 8, eq3(6, 16, 2.0, 4) * 4 / 8, 0.0], rel=1e-12
    )
    assert schedule.end_rate(c, lib.rate) == 0.0
    # the highest rate: step 4, the warm-up's end, already 6/8 of the way down
    assert schedule.reached_peak(c, lib.rate) == pytest.approx(
        eq3(4, 16, 2.0, 4) * 6 / 8, rel=1e-12
    )
    plain = c.updated(cooldown=0.0)  # eq. 3 alone: the peak at warmup, never zero
    assert schedule.cooldown_start(plain) == 10
    assert schedule.end_rate(plain, lib.rate) == pytest.approx(
        eq3(10, 16, 2.0, 4), rel=1e-12
    )
    assert schedule.reached_peak(plain, lib.rate) == pytest.approx(
        2.0 / 4 / 2, rel=1e-12
    )
    late = c.updated(warmup=9, cooldown=0.3)  # the cool-down cuts the warm-up short
    assert schedule.cooldown_start(late) == 7
    assert schedule.reached_peak(late, lib.rate) == pytest.approx(
        eq3(7, 16, 2.0, 9), rel=1e-12
    )


def test_recipe_runs_change_one_setting_each(lib):
    import pipeline as pl

    cfg = pl.run_config("ci", **COPY4)
    en_de = cfg.updated(seed=5)
    own = config.RecipeConfig(post_schedule=True, post_factor=0.5, post_warmup=7)
    runs = table.recipe_runs(cfg, "bpe data", en_de, "en-de data", own)
    assert list(runs) == [
        "part4-bpe-all",
        "part4-bpe-all-eq3",
        "part4-bpe-all-post-same",
        "part4-bpe-all-post",
        "part4-bpe-all-en-de",
        "part4-bpe-all-en-de-eq3",
    ]
    assert runs["part4-bpe-all"] == (cfg, "bpe data")
    assert runs["part4-bpe-all-eq3"] == (cfg.updated(cooldown=0.0), "bpe data")
    assert runs["part4-bpe-all-post-same"][0] == cfg.updated(norm="post")
    post = cfg.updated(norm="post", factor=cfg.factor * 0.5, warmup=7)
    assert runs["part4-bpe-all-post"] == (post, "bpe data")
    assert runs["part4-bpe-all-en-de"] == (en_de, "en-de data")
    eq3_en_de = (en_de.updated(cooldown=0.0), "en-de data")
    assert runs["part4-bpe-all-en-de-eq3"] == eq3_en_de
    without = config.RecipeConfig(post_schedule=False)
    assert "part4-bpe-all-post" not in table.recipe_runs(cfg, 0, en_de, 1, without)


def test_choose_alpha_searches_upwards_until_a_larger_alpha_scores_worse(
    lib, monkeypatch
):
    """Val BLEU peaks at alpha 1.4: tried 0 and 0.6, the search goes on in steps of
    0.4 while the best is the largest tried, and stops at 1.8, which scores worse;
    with a cap at 1.0 it stops there and says so."""
    asked = []

    def bleu(model, data, split, search, decode_tokens):
        assert (model, data, split, decode_tokens) == ("m", "d", "val", 99)
        alpha = search.keywords["alpha"]
        asked.append((search.keywords["beam_size"], alpha))
        return {"bleu": 30 - (alpha - 1.4) ** 2, "ratio": alpha / 10}

    monkeypatch.setattr(lib, "bleu", bleu)
    run = table.Trained(types.SimpleNamespace(decode_tokens=99), "d")
    recipe = config.RecipeConfig(beam_size=3, alphas=(0.0, 0.6), alpha_step=0.4)
    best, sweep, capped = table.choose_alpha("m", run, recipe)
    assert asked == [(3, 0.0), (3, 0.6), (3, 1.0), (3, 1.4), (3, 1.8)]
    assert best == 1.4 and not capped
    assert [row[0] for row in sweep] == [0.0, 0.6, 1.0, 1.4, 1.8]
    assert sweep[3] == (1.4, 30.0, pytest.approx(0.14))
    asked.clear()
    capped_recipe = config.RecipeConfig(
        alphas=(0.0, 0.6), alpha_step=0.4, alpha_cap=1.0
    )
    best, sweep, capped = table.choose_alpha("m", run, capped_recipe)
    assert [a for _, a in asked] == [0.0, 0.6, 1.0] and best == 1.0 and capped


@pytest.fixture(scope="module")
def copy_table(lib, tmp_path_factory):
    """Part 3's run and the table's runs, on the copy task: the full recipe with a
    cool-down, eq. 3 alone (branched off it), and a post-norm twin and the second
    direction's run whose rates make their losses infinite at once."""
    import pipeline as pl

    root = tmp_path_factory.mktemp("copy-table")
    cfg = pl.run_config("ci", **COPY4)
    data = scored_copy_data(lib, cfg)
    runs = {
        "part4-bpe-all": (cfg, data),
        "part4-bpe-all-eq3": (cfg.updated(cooldown=0.0), data),
        "part4-bpe-all-post-same": (cfg.updated(norm="post", factor=1e15), data),
        "part4-bpe-all-en-de": (cfg.updated(seed=1, factor=1e15), data),
    }
    said = []
    recipe = config.RecipeConfig(**FAST_RECIPE, post_schedule=False)
    part3 = table.train_or_report(
        cfg.updated(seed=2), data, root / "part3", "cpu", quiet
    )
    trained = {
        "part3": part3,
        **table.train_recipe(runs, root, "cpu", recipe, log=said.append),
    }
    return types.SimpleNamespace(
        root=root, cfg=cfg, data=data, trained=trained, said=said
    )


def snapshot_weights(lib, folder, step):
    return lib.checkpoints.load_checkpoint(folder / f"step{step:06d}.pt")["model"]


def test_train_recipe_branches_eq3_at_the_cooldown_and_reports_a_divergence(
    lib, copy_table
):
    t, root = copy_table.trained, copy_table.root
    assert list(t) == ["part3", *(f"part4-bpe-all{s}" for s in ("", "-eq3"))] + [
        "part4-bpe-all-post-same",
        "part4-bpe-all-en-de",
    ]
    said = [s for s in copy_table.said if isinstance(s, str)]
    at = said.index("part4-bpe-all-eq3: branched from part4-bpe-all at step 2")
    # the full recipe's own steps after the branch are logged under its own name
    assert said[at + 1] == "part4-bpe-all, after step 2:"
    full, alone = t["part4-bpe-all"], t["part4-bpe-all-eq3"]
    assert full.diverged is None and alone.diverged is None
    assert full.history["steps"] == alone.history["steps"] == [2, 4]
    # the two share their first two steps exactly, and differ after them
    a = snapshot_weights(lib, root / "part4-bpe-all", 2)
    b = snapshot_weights(lib, root / "part4-bpe-all-eq3", 2)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert full.history["train_loss"][0] == alone.history["train_loss"][0]
    last = lib.checkpoints.load_checkpoint(root / "part4-bpe-all-eq3" / "last.pt")
    assert last["config"]["cooldown"] == 0.0 and last["progress"]["step"] == 4
    a = last["model"]
    b = lib.checkpoints.load_checkpoint(root / "part4-bpe-all" / "last.pt")["model"]
    assert not all(torch.equal(a[k], b[k]) for k in a), "eq. 3 alone after step 2"
    for name in ("part4-bpe-all-post-same", "part4-bpe-all-en-de"):
        gone = t[name]
        assert gone.history is None and gone.diverged == "loss not finite at step 2"
    assert sum(s.startswith("diverged: ") and "nan" in s for s in said) == 2
    assert t["part3"].history["steps"] == [2, 4]
    # trained again, every run is loaded as it is: nothing branches or trains
    again = []
    runs = {name: (t[name].cfg, t[name].data) for name in list(t)[1:3]}
    recipe = config.RecipeConfig(**FAST_RECIPE, post_schedule=False)
    table.train_recipe(runs, root, "cpu", recipe, log=again.append)
    assert not any("branched" in str(s) for s in again)


def test_choose_n_avg_keeps_the_best_val_score_of_the_snapshots_kept(
    lib, copy_table, monkeypatch, tmp_path
):
    import pipeline as pl

    t = copy_table.trained["part4-bpe-all"]
    folder, h = copy_table.root / "part4-bpe-all", t.history
    best = h["steps"].index(h["best_step"])
    for n in (1, 2, 5):
        assert (
            pl.run.resume.last_snapshots(h, n)
            == h["steps"][max(0, best - n + 1) : best + 1]
        )
    scores = iter([30.0, 31.5, 31.5, 29.0])
    averaged = []

    def bleu(model, data, split, search, decode_tokens):
        assert split == "val" and search is lib.greedy_decode
        averaged.append(model)
        return {"bleu": next(scores), "ratio": 1.0}

    monkeypatch.setattr(lib, "bleu", bleu)
    n, sweep = table.choose_n_avg(folder, t, 9, "cpu")
    assert len(sweep) == best + 1, "no more snapshots than end at the best one"
    assert n == min(2, best + 1) or best == 0
    for (k, steps, _, _), model in zip(sweep, averaged, strict=True):
        assert steps == pl.run.resume.last_snapshots(h, k)
        paths = [folder / f"step{s:06d}.pt" for s in steps]
        expected = lib.average_checkpoints(paths)
        assert not model.training
        for name, value in model.state_dict().items():
            assert torch.equal(value, expected[name]), (k, name)
    # a snapshot that was not kept is named
    shutil.copytree(folder, tmp_path / "run", ignore=shutil.ignore_patterns(".lock"))
    gone = pl.run.resume.last_snapshots(h, 2)[0]
    (tmp_path / "run" / f"step{gone:06d}.pt").unlink()
    with pytest.raises(FileNotFoundError, match=f"step{gone:06d}.pt.*smaller than"):
        pl.averaged_model(tmp_path / "run", h, "cpu", 2)


def fingerprint(model) -> float:
    return sum(v.double().sum().item() for v in model.state_dict().values())


def test_the_table_of_copy_runs_scores_each_row_on_its_own_weights(
    lib, copy_table, monkeypatch
):
    import pipeline as pl

    t, root, data = copy_table.trained, copy_table.root, copy_table.data
    recipe = config.RecipeConfig(**FAST_RECIPE, post_schedule=False)
    full, alone = "part4-bpe-all", "part4-bpe-all-eq3"

    @functools.cache
    def avg(name, k):

        import pipeline as pl

        return fingerprint(pl.averaged_model(root / name, t[name].history, "cpu", k))

    def sizes(name):
        h = t[name].history
        return range(1, min(2, h["steps"].index(h["best_step"]) + 1) + 1)

    # on val each model is scored by its weights (the untrained runs' BLEU says
    # little), so that the choice between the runs is known here
    real = lib.bleu

    def val_by_weights(model, data_, split, search, decode_tokens):
        if split == "val":
            return {"bleu": fingerprint(model), "ratio": 1.0}
        return real(model, data_, split, search, decode_tokens)

    monkeypatch.setattr(lib, "bleu", val_by_weights)
    finals = table.final_systems(t, recipe, root, "cpu")
    assert set(finals) == {"de-en"}, "none for the direction whose run diverged"
    f = finals["de-en"]
    n_of = {
        name: max(sizes(name), key=lambda k: avg(name, k)) for name in (full, alone)
    }
    want = max((full, alone), key=lambda name: avg(name, n_of[name]))
    assert (f["run"], f["branch"], f["n_avg"]) == (want, want == alone, n_of[want])
    assert set(f["candidates"]) == {full, alone}
    h = t[want].history
    assert [r[1] for r in f["avg_sweep"]] == [
        pl.run.resume.last_snapshots(h, k) for k in range(1, len(f["avg_sweep"]) + 1)
    ]
    assert fingerprint(f["weights"]) == avg(want, f["n_avg"])
    assert (f["alpha"], f["capped"], f["alpha_cap"]) == (0.0, True, 0.0)
    name = searches.search_name(f["search"], lib.SEARCHES)
    assert name == "beam(beam_size=2, alpha=0.0)"
    scored, outputs = [], []

    def spy(model, data_, split, search, decode_tokens):
        r = real(model, data_, split, search, decode_tokens)
        name = searches.search_name(search, lib.SEARCHES)
        scored.append((fingerprint(model), split, name, r["bleu"]))
        outputs.append(r["hyps"])
        return r

    monkeypatch.setattr(lib, "bleu", spy)
    summary = table.score_table(t, finals, recipe, 0.5, root, "cpu", "ci")
    rows = summary["rows"]
    # each row one change from the row it is compared with: the cool-down run's own
    # average (row 3) against its best snapshot; the eq. 3 branch's average, where it
    # is the final system, against that; the paper's alpha beside the chosen one
    branched = want == alone
    keys = ["words", "bpe", "avg", *["branch"] * branched, "beam paper", "beam"]
    assert [r["key"] for r in rows] == [
        *keys,
        *("post", "en-de", "en-de avg", "en-de beam"),
    ]
    assert [r["no"] for r in rows] == list(range(1, len(keys) + 5))
    greedy = 3 + branched  # the final system's weights, greedy
    vs = [None, 1, 2, *[3] * branched, greedy, greedy, 2, None, len(keys) + 2]
    assert [r["vs"] for r in rows] == vs + [len(keys) + 3]
    trained = [False, True, False, *[True] * branched, False, False, True]
    assert [r["trained"] for r in rows] == trained + [False] * 3
    assert [r["n_avg"] for r in rows[: len(keys)]] == [
        None,
        None,
        n_of[full],
        *[n_of[alone]] * branched,
        f["n_avg"],
        f["n_avg"],
    ]
    assert all(r["change"] for r in rows if r["vs"] is not None)
    assert rows[len(keys) - 2]["label"] == "+ beam 2, paper's alpha 0.6"
    post = rows[len(keys)]
    assert post["diverged"] == t["part4-bpe-all-post-same"].diverged
    assert post["bleu"] is None and post["interval"] is None
    assert post["peak"] == schedule.reached_peak(
        t["part4-bpe-all-post-same"].cfg, lib.rate
    )
    en_de = "part4-bpe-all-en-de"
    for row in rows[len(keys) + 1 :]:
        assert row["diverged"] == t[en_de].diverged and row["bleu"] is None
    assert [r["label"] for r in rows[-2:]] == ["+ averaging", "+ beam 2, alpha ?"]

    def best(name):

        import pipeline as pl

        return fingerprint(pl.best_model(root / name, t[name].history, "cpu"))

    beam = "beam(beam_size=2, alpha=0.0)"
    final = fingerprint(f["weights"])
    expected = [  # (weights, search) of each row scored, in order
        (best("part3"), "greedy"),
        (best("part4-bpe-all"), "greedy"),
        (avg(full, n_of[full]), "greedy"),
        *[(final, "greedy")] * branched,
        (final, "beam(beam_size=2, alpha=0.6)"),
        (final, beam),
    ]
    assert [(w, s) for w, _, s, _ in scored] == expected
    # each scored row's gain with its interval: its outputs against its reference
    # row's, by sacreBLEU's paired bootstrap
    refs = data.text["test_2016_flickr"][1]
    for i, r in enumerate(rows[: len(keys)]):
        if r["vs"] is None:
            assert r["interval"] is None
            continue
        want_interval = scoring.paired_bootstrap(outputs[r["vs"] - 1], outputs[i], refs)
        assert r["interval"] == {
            k: want_interval[k]
            for k in ("low", "high", "verdict", "p", "resamples", "seed")
        }, r["key"]
    assert summary["seeds"] is None  # no spread given
    assert {split for _, split, _, _ in scored} == {"test_2016_flickr"}
    assert [r["bleu"] for r in rows if not r["diverged"]] == [b for *_, b in scored]
    assert summary["choices"]["de-en"].keys() == {
        "run",
        "branch",
        "n_avg",
        "avg_sweep",
        "candidates",
        "alpha",
        "alpha_sweep",
        "capped",
        "alpha_cap",
    }
    assert (summary["steps"], summary["sentences"], summary["noise"]) == (4, 6, 0.5)

    # the other final system: row 3 still averages the cool-down run's own
    # snapshots, row 4 decodes the final (here: the other run's) weights
    other = alone if want == full else full
    weights = table.averaged_model(root / other, t[other].history, "cpu", n_of[other])
    swapped = {**f, "run": other, "branch": other == alone, "weights": weights}
    scored.clear()
    again = table.score_table(t, {"de-en": swapped}, recipe, 0.5, root, "cpu", "ci")
    greedy = [w for w, _, s, _ in scored if s == "greedy"]
    assert greedy[2] == avg(full, n_of[full])
    assert len(greedy) == 3 + (other == alone)
    if other == alone:
        assert [r["key"] for r in again["rows"]][2:4] == ["avg", "branch"]
        assert greedy[3] == fingerprint(weights) == avg(alone, n_of[alone])

    # eq. 3 alone against the cool-down, every model scored by its weights. The
    # cool-down's run averages 2 snapshots, as if its sweep had chosen so (made up).
    def by_weights(model, data_, split, search, decode_tokens):
        assert search is lib.greedy_decode and data_ is data
        return {"bleu": fingerprint(model), "ratio": 1.0}

    monkeypatch.setattr(lib, "bleu", by_weights)
    steps = [pl.run.resume.last_snapshots(t[full].history, k) for k in (1, 2)]
    made_up = [(1, steps[0], 10.0, 1.0), (2, steps[1], 11.0, 1.0)]
    candidates = {**f["candidates"], full: {"n_avg": 2, "sweep": made_up}}
    chosen = {"de-en": {**f, "candidates": candidates}}
    a = table.averaging_analysis(t, chosen, recipe, root, "cpu")
    assert a["shared"] == schedule.cooldown_start(copy_table.cfg) == 2
    cool = a["eq. 3, cool-down"]
    assert (cool["n"], cool["val_one"], cool["val_avg"]) == (2, 10.0, 11.0)
    assert (cool["one"], cool["avg"]) == (avg(full, 1), avg(full, 2))
    e = a["eq. 3 alone"]
    n = n_of[alone]
    assert (e["n"], e["one"], e["avg"]) == (n, avg(alone, 1), avg(alone, n))
    assert (e["val_one"], e["val_avg"]) == (e["one"], e["avg"])
    for label, name in (("eq. 3 alone", alone), ("eq. 3, cool-down", full)):
        s, c = a[label], t[name].cfg
        assert s["steps"] == pl.run.resume.last_snapshots(t[name].history, s["n"])
        assert s["rates"] == schedule.rates_at(c, lib.rate, s["steps"])
        assert (s["end_rate"], s["peak"]) == (
            schedule.end_rate(c, lib.rate),
            schedule.reached_peak(c, lib.rate),
        )
    assert cool["end_rate"] == 0.0 < e["end_rate"]
    summary["averaging"] = a
    lines = report.averaging_table(summary)
    assert lines[0].endswith("the runs share their first 2 steps and end at step 4")
    assert lines[3].startswith("eq. 3, cool-down    0.0e+00")
    # no final system where a direction's run diverged; no analysis without eq. 3
    monkeypatch.setattr(lib, "bleu", val_by_weights)
    gone = table.Trained(copy_table.cfg, data, diverged="loss not finite at step 3")
    both_gone = {**t, "part4-bpe-all": gone, en_de: gone}
    assert table.final_systems(both_gone, recipe, root, "cpu") == {}
    no_eq3 = {**t, "part4-bpe-all-eq3": gone}
    assert table.averaging_analysis(no_eq3, finals, recipe, root, "cpu") is None
    # without its branch, a direction's final system is its cool-down run's
    alone_gone = table.final_systems(no_eq3, recipe, root, "cpu")
    assert alone_gone["de-en"]["run"] == full and not alone_gone["de-en"]["branch"]


def test_the_final_system_is_the_candidate_better_on_val():
    """choose_weights keeps the run whose chosen average scores higher on val with
    beam search at its own chosen alpha, the cool-down run on a tie; neither its
    greedy score nor another alpha's counts."""
    cool, branch = "part4-bpe-all", "part4-bpe-all-eq3"

    def cand(alpha, *beam, greedy=38.0):
        sweep = [(1, [8], greedy, 1.0)]
        return dict(n_avg=1, sweep=sweep, alpha=alpha, alpha_sweep=list(beam))

    a = cand(1.5, (0.6, 38.9, 1.0), (1.5, 39.2, 1.0), greedy=38.5)
    b = cand(2.5, (1.5, 39.0, 1.0), (2.5, 39.4, 1.0), greedy=37.0)
    assert table.choose_weights({cool: a, branch: b}) == branch
    assert table.choose_weights({cool: b, branch: a}) == cool
    tie = cand(0.6, (0.6, 39.2, 1.0))
    assert table.choose_weights({cool: a, branch: tie}) == cool
    # the chosen alpha's score counts, not the sweep's best
    odd = cand(0.6, (0.6, 39.0, 1.0), (1.5, 40.0, 1.0))
    assert table.choose_weights({cool: a, branch: odd}) == cool


def test_the_eq3_branch_begins_where_the_recipe_says_and_never_after_the_cooldown(lib):
    import pipeline as pl

    cfg = pl.run_config("ci", **COPY4).updated(steps=10, cooldown=0.3)
    assert table.branch_step(cfg, config.RecipeConfig(eq3_branch=0.3)) == 7
    assert table.branch_step(cfg, config.RecipeConfig(eq3_branch=0.5)) == 5
    with pytest.raises(ConfigError, match="eq3_branch=0.2 is shorter than"):
        table.branch_step(cfg, config.RecipeConfig(eq3_branch=0.2))


def test_table_rows_name_the_final_systems_choices(lib):
    recipe = config.RecipeConfig(beam_size=5, post_schedule=True)
    final = {"run": "part4-bpe-all", "branch": False, "n_avg": 3, "alpha": 1.5}
    rows = table.table_rows(recipe, {"de-en": final})
    labels = {key: label for key, label, *_ in rows}
    assert labels["avg"] == "+ average of 3 snapshots"
    assert labels["beam paper"] == "+ beam 5, paper's alpha 0.6"
    assert labels["beam"] == "+ beam 5, alpha 1.5"
    assert labels["en-de avg"] == "+ averaging"  # no final system
    assert labels["en-de beam"] == "+ beam 5, alpha ?"
    assert "en-de beam paper" not in labels
    assert [r[0] for r in rows][6] == "post own"
    assert rows[6][3:6] == ("part4-bpe-all-post", "best", "post")
    assert all(r[6] for r in rows if r[5] is not None), "each says what differs"
    single = table.table_rows(recipe, {"de-en": {**final, "n_avg": 1}})
    assert single[2][1] == "+ averaging (none beat best)"
    paper = table.table_rows(recipe, {"de-en": {**final, "alpha": 0.6}})
    assert [r[0] for r in paper][2:4] == ["avg", "beam"], "0.6 chosen: one row"
    # the eq. 3 branch chosen: the cool-down run's own average (2 snapshots, as val
    # chose for it) against its best snapshot, then the branch's against that
    cands = {"part4-bpe-all": {"n_avg": 2}, "part4-bpe-all-eq3": {"n_avg": 3}}
    branch = {**final, "run": "part4-bpe-all-eq3", "branch": True}
    rows = table.table_rows(recipe, {"de-en": {**branch, "candidates": cands}})
    keyed = {r[0]: r for r in rows}
    assert keyed["avg"][1:6] == (
        "+ average of 2 snapshots",
        "de-en",
        "part4-bpe-all",
        "average",
        "bpe",
    )
    assert keyed["branch"][1:6] == (
        "+ eq. 3 branch, average of 3",
        "de-en",
        "part4-bpe-all-eq3",
        "final",
        "avg",
    )
    assert "not the cool-down, over the last 30%" in keyed["branch"][6]
    assert keyed["beam"][3:6] == ("part4-bpe-all-eq3", "beam", "branch")
    assert keyed["beam paper"][3:6] == ("part4-bpe-all-eq3", "paper", "branch")


def test_seed_noise_reads_the_committed_spread_of_these_settings(
    lib, tmp_path, monkeypatch
):
    import pipeline as pl

    monkeypatch.setattr(seeds, "RUNS", tmp_path)
    cfgs = {"part3": pl.run_config("ci"), "full recipe": pl.run_config("ci", seed=3)}
    spread, noise = table.seed_noise("ci", cfgs, "cpu")
    assert noise is None
    assert spread == {
        "why_not": "not measured for preset ci (seed-spread-ci.json is missing)"
    }
    precision = fast.choose_precision("cpu", cfgs["part3"].precision).name
    measured = {
        "precision": precision,
        "machine": "here",
        "torch": "2.13.0",
        "command": "python -m tools.seed_spread --preset ci",
        "models": {
            name: {
                "seeds": [0, 1, 2],
                "config": {**c.to_dict(), "seed": 0},
                "bleu_test_2016_flickr": seeds.summary(values),
            }
            for (name, c), values in zip(
                cfgs.items(), ([20.0, 21.5, 20.7], [25.1, 24.0]), strict=True
            )
        },
    }
    seeds.spread_path("ci").write_text(json.dumps(measured))
    spread, noise = table.seed_noise("ci", cfgs, "cpu")
    assert spread == measured and noise == 1.5  # the larger range: 21.5 - 20.0
    other = {**cfgs, "part3": cfgs["part3"].updated(steps=7)}
    spread, noise = table.seed_noise("ci", other, "cpu")
    assert noise is None and "other settings of 'part3'" in spread["why_not"]
    elsewhere = {**measured, "precision": "bf16" if precision != "bf16" else "fp32"}
    seeds.spread_path("ci").write_text(json.dumps(elsewhere))
    spread, noise = table.seed_noise("ci", cfgs, "cpu")
    assert noise is None and f"this run computes in {precision}" in spread["why_not"]


# ------------------------------------------------------ val chooses, test reports


def val_only(data):
    """`data` without its test split: what a function that chooses may be given."""
    if isinstance(data, types.SimpleNamespace):
        return types.SimpleNamespace(
            sources={"val": data.sources["val"]}, text={"val": data.text["val"]}
        )
    return dataclasses.replace(
        data, sources={"val": data.sources["val"]}, text={"val": data.text["val"]}
    )


def test_the_functions_that_choose_never_read_a_test_split(lib, tmp_path, monkeypatch):
    """final_systems (with choose_n_avg, choose_alpha and choose_weights inside it)
    chooses the snapshots to average, alpha and the final system of both directions
    from data that has no test split; every split it decodes is val."""
    decoded = []

    def bleu(model, data, split, search, decode_tokens):
        decoded.append(split)
        sources, refs = data.sources[split], data.text[split][1]  # as the real one
        _, run, n = model
        alpha = search[1] if search != "greedy" else 0.0
        score = 30 + n / 10 + ("eq3" in run) - (alpha - 1.5) ** 2
        return {"bleu": score, "ratio": len(sources) / len(refs)}

    average = lambda folder, history, device, n: ("average", folder.name, n)  # noqa: E731
    monkeypatch.setattr("pipeline.table.averaged_model", average)
    monkeypatch.setattr(lib, "bleu", bleu)
    monkeypatch.setattr(lib, "greedy_decode", "greedy")
    monkeypatch.setattr(
        lib, "make_search", lambda name, beam_size, alpha: (name, alpha)
    )
    pairs = (["ein Hund ."], ["a dog ."])
    data = types.SimpleNamespace(
        sources={"val": pairs[0], "test_2016_flickr": pairs[0]},
        text={"val": pairs, "test_2016_flickr": pairs},
    )
    with pytest.raises(KeyError):  # the guard: a test split is not there to read
        bleu(("average", "run", 1), val_only(data), "test_2016_flickr", "greedy", 9)
    decoded.clear()
    history = {"steps": [2, 4, 6], "best_step": 6}
    cfg = types.SimpleNamespace(decode_tokens=9)
    trained = {
        run: table.Trained(cfg, val_only(data), history)
        for name in table.DIRECTIONS.values()
        for run in (name, table.eq3(name))
    }
    recipe = config.RecipeConfig(n_avg=3, alphas=(0.0, 0.6), alpha_step=0.9)
    finals = table.final_systems(trained, recipe, tmp_path, "cpu")
    assert set(finals) == {"de-en", "en-de"}
    for f in finals.values():
        assert (f["branch"], f["n_avg"], f["alpha"]) == (True, 3, 1.5)
    assert decoded and set(decoded) == {"val"}


def test_the_notebooks_training_and_choices_need_no_test_split(
    lib, copy_table, monkeypatch
):
    """The notebook's own functions: a run trains and keeps its best snapshot, and
    final_systems chooses, on copy-task data from which the test split is gone."""
    t, root = copy_table.trained, copy_table.root
    decoded = []
    real = lib.bleu

    def spy(model, data, split, search, decode_tokens):
        decoded.append(split)
        return real(model, data, split, search, decode_tokens)

    monkeypatch.setattr(lib, "bleu", spy)
    recipe = config.RecipeConfig(**FAST_RECIPE, post_schedule=False)
    guarded = {
        name: dataclasses.replace(run, data=val_only(run.data))
        for name, run in t.items()
    }
    finals = table.final_systems(guarded, recipe, root, "cpu")
    assert set(finals) == {"de-en"} and set(decoded) == {"val"}
    cfg = copy_table.cfg.updated(seed=3)
    run = table.train_or_report(
        cfg, val_only(copy_table.data), root / "no-test", "cpu", quiet
    )
    assert run.diverged is None and run.history["best_step"] in run.history["steps"]


def test_the_seeds_are_put_beside_the_rows_of_the_models_they_measured():
    scores = {"values": [38.39, 37.88], "mean": 38.14, "min": 37.88, "max": 38.39}
    spread = {
        "models": {
            "part3": {"seeds": [0, 1], "bleu_test_2016_flickr": scores},
            "full recipe": {"seeds": [0, 1], "bleu_test_2016_flickr": scores},
        }
    }
    seeds = table.seed_scores(spread)
    assert set(seeds) == {"words", "bpe"}
    assert seeds["words"] == {"seeds": [0, 1], **scores}
    assert table.seed_scores({"why_not": "measured in bf16"}) is None
    assert table.seed_scores(None) is None
