"""tools.seed_spread: the summary Part 4's table reads, and reusing finished runs."""

import json
from pathlib import Path

import pytest

from atkit import seeds
from tools import seed_spread

SMALL = ["--set", "n_train=200", "--set", "n_eval=20", "--set", "steps=20",
         "--set", "eval_every=10"]  # fmt: skip


@pytest.fixture
def small_models(monkeypatch, tmp_path):
    """The tool's two models, made small, trained under tmp_path."""
    monkeypatch.chdir(tmp_path)  # results/ is relative, as for a user
    monkeypatch.setenv("AT_CHECKPOINTS", str(tmp_path / "ckpt"))
    models = tuple((n, f, [*sets, *SMALL]) for n, f, sets in seed_spread.MODELS)
    monkeypatch.setattr(seed_spread, "MODELS", models)
    monkeypatch.setattr(seeds, "RUNS", tmp_path / "runs")
    return models


def test_the_summary_holds_every_seed_and_is_reused(lib, small_models, capsys):
    out = seeds.spread_path("ci")
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "3"]) == 0
    spread = json.loads(out.read_text())
    assert spread["command"] == "python -m tools.seed_spread --preset ci --seeds 0 3"
    for name, folder, _ in small_models:
        m = spread["models"][name]
        assert m["seeds"] == [0, 3] and m["config"]["seed"] == 0
        for key in seed_spread.SCORES:
            s = m[key]
            assert s["min"] == min(s["values"]) and s["max"] == max(s["values"])
            assert s["range"] == round(s["max"] - s["min"], 2)
        runs = [json.loads(Path(f"results/ci-seed-{folder}-{seed}.json").read_text())
                for seed in (0, 3)]  # fmt: skip
        assert [r["config"]["seed"] for r in runs] == [0, 3]
        assert m["bleu_test_2016_flickr"]["values"] == [
            r["bleu_test_2016_flickr"] for r in runs
        ]
    # the notebook accepts it for these configs, refuses it for others
    configs = {name: spread["models"][name]["config"] for name, *_ in small_models}
    assert seeds.load_spread("ci", configs)[0] == spread
    other = {**configs, "part3": {**configs["part3"], "steps": 21}}
    assert seeds.load_spread("ci", other)[0] is None
    # a second call reuses the finished runs' results and writes the same summary
    capsys.readouterr()
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "3"]) == 0
    said = capsys.readouterr().out
    assert said.count("holds the finished run") == 4 and "tools.train" not in said
    assert json.loads(out.read_text()) == spread


def test_a_results_file_of_other_settings_is_not_reused(lib, small_models):
    name, folder, sets = small_models[0]
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "1"]) == 0
    res = Path("results") / f"ci-seed-{folder}-1.json"
    assert seed_spread.finished(res, "ci", 1, sets) is not None
    assert seed_spread.finished(res, "ci", 2, sets) is None  # another seed
    assert seed_spread.finished(res, "ci", 1, [*sets, "--set", "eps_ls=0.2"]) is None
    assert seed_spread.finished(res, "gpu", 1, sets) is None
    res.write_text("{")  # cut short: not a finished run
    assert seed_spread.finished(res, "ci", 1, sets) is None
