"""tools.seed_spread: the summary Part 4's table reads, and reusing finished runs."""

import json
import shutil
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
    # with the summary gone, a second call reuses the finished runs' results and
    # writes the same summary
    out.unlink()
    capsys.readouterr()
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "3"]) == 0
    said = capsys.readouterr().out
    assert said.count("holds the finished run") == 4 and "tools.train" not in said
    assert json.loads(out.read_text()) == spread
    # with the summary there, a third call keeps its models as they are
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "3"]) == 0
    said = capsys.readouterr().out
    assert said.count("holds seeds [0, 3]") == 2 and "finished run" not in said
    assert json.loads(out.read_text()) == spread
    # other seeds, or another precision on a machine of the same name, are another
    # measurement
    where = {k: spread[k] for k in ("preset", "machine", "torch", "precision")}
    name, _, sets = small_models[0]
    assert seed_spread.measured(spread, where, [0, 3], sets, name) is not None
    assert seed_spread.measured(spread, where, [0, 1], sets, name) is None
    other = {**where, "precision": "bf16" if where["precision"] != "bf16" else "fp32"}
    assert seed_spread.measured(spread, other, [0, 3], sets, name) is None


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


def test_settings_a_model_never_reads_do_not_count(lib):
    words = lib.run_config("ci").to_dict()
    bpe = lib.run_config("ci", vocab="bpe", tie="all").to_dict()
    assert seeds.same_settings(words, {**words, "seed": 7})
    assert seeds.same_settings(words, {**words, "bpe_size": 77})  # words: no BPE
    assert not seeds.same_settings(words, {**words, "min_freq": 3})
    assert seeds.same_settings(bpe, {**bpe, "min_freq": 3})  # BPE: no word counts
    assert not seeds.same_settings(bpe, {**bpe, "bpe_size": 77})
    assert not seeds.same_settings(words, {**bpe, "tie": "tgt"})  # another vocab


def test_a_model_the_summary_holds_is_not_trained_again(lib, small_models, capsys):
    """A change that only the BPE model reads (bpe_size, as a preset change gives to
    both models) trains the BPE model again and keeps Part 3's measured seeds, even
    with its results files gone."""
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "1"]) == 0
    out = seeds.spread_path("ci")
    before = json.loads(out.read_text())
    for f in Path("results").iterdir():
        f.unlink()
    root = Path("ckpt/ci")  # the BPE model's old runs: its trainer would refuse them
    for d in (root / small_models[1][1], root / "seeds" / f"{small_models[1][1]}-1"):
        shutil.rmtree(d)
    sized = tuple(
        (n, f, [*sets, "--set", "bpe_size=300"]) for n, f, sets in small_models
    )
    seed_spread.MODELS = sized  # restored by monkeypatch (small_models)
    capsys.readouterr()
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "1"]) == 0
    said = capsys.readouterr().out
    after = json.loads(out.read_text())
    (part3, _, _), (full, folder, _) = sized
    assert f"--- {part3}: {out} holds seeds [0, 1]" in said
    assert said.count("python -m tools.train") == 2 and "bpe_size=300" in said
    assert after["models"][part3] == before["models"][part3]
    assert after["models"][full]["config"]["bpe_size"] == 300
    assert before["models"][full]["config"]["bpe_size"] != 300
    # --rerun measures Part 3 again (its runs' checkpoints are still there)
    capsys.readouterr()
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "1", "--rerun"]) == 0
    assert "holds seeds" not in capsys.readouterr().out
