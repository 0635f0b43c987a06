"""tools.seed_spread: the summary Part 4's table reads (refused in another precision
or with other settings), every seed trained in a folder of its own, and reusing
finished runs. Its flags: tests/test_settings_cli.py."""

import json
import shutil
from pathlib import Path

import pytest

from atkit import runtime, seeds
from conftest import needs
from tools import seed_spread
from tools import train as cli

SETTINGS = ("n_train=200", "n_eval=4", "steps=10", "eval_every=5")
SMALL = [part for setting in SETTINGS for part in ("--set", setting)]


@pytest.fixture
@needs("training")
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
        runs = [
            json.loads(Path(f"results/ci-seed-{folder}-{seed}.json").read_text())
            for seed in (0, 3)
        ]
        assert [r["config"]["seed"] for r in runs] == [0, 3]
        assert m["bleu_test_2016_flickr"]["values"] == [
            r["bleu_test_2016_flickr"] for r in runs
        ]
    # every seed trained in a folder of its own, never in the notebook's
    root = Path("ckpt/ci")
    assert sorted(p.name for p in root.iterdir()) == ["seeds"]
    folders = sorted(p.name for p in (root / "seeds").iterdir())
    assert folders == sorted(
        f"{f}-{seed}" for _, f, _ in small_models for seed in (0, 3)
    )
    # the notebook accepts it for these configs in this precision, and no other
    configs = {name: spread["models"][name]["config"] for name, *_ in small_models}
    cls, precision = lib.RunConfig, spread["precision"]
    assert seeds.load_spread("ci", configs, cls, precision) == (spread, "")
    other = {**configs, "part3": {**configs["part3"], "steps": 21}}
    found, why = seeds.load_spread("ci", other, cls, precision)
    assert found is None and "other settings of 'part3'" in why
    elsewhere = "bf16" if precision != "bf16" else "fp32"
    found, why = seeds.load_spread("ci", configs, cls, elsewhere)
    assert found is None and f"measured in {precision}" in why
    assert spread["command"] in why
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
    import pipeline as pl

    words = pl.run_config("ci").to_dict()
    bpe = pl.run_config("ci", vocab="bpe", tie="all").to_dict()

    def same(a, b):
        return seeds.same_settings(lib.RunConfig, a, b)

    assert same(words, {**words, "seed": 7})
    assert same(words, {**words, "bpe_size": 77})  # words: no BPE
    assert not same(words, {**words, "min_freq": 3})
    assert same(bpe, {**bpe, "min_freq": 3})  # BPE: no word counts
    assert not same(bpe, {**bpe, "bpe_size": 77})
    assert not same(words, {**bpe, "tie": "tgt"})  # another vocab


def test_a_summary_from_before_settings_were_retired_still_applies(lib):
    """runs/seed-spread-cpu.json was written when the model config still had
    P_drop_attn, P_drop_ff and attn_impl; at the values that changed nothing they
    are the same model, at any other value another one."""
    import pipeline as pl

    now = pl.run_config("ci").to_dict()
    old = {**now, "model": {**now["model"], "P_drop_attn": 0.0, "P_drop_ff": 0.0}}
    old["model"]["attn_impl"] = "didactic"
    assert seeds.same_settings(lib.RunConfig, old, now)
    assert "attn_impl" in old["model"]  # the caller's dict is left as it was
    other = {**old, "model": {**old["model"], "P_drop_attn": 0.1}}
    assert not seeds.same_settings(lib.RunConfig, other, now)


def test_a_model_the_summary_holds_is_not_trained_again(lib, small_models, capsys):
    """A change that only the BPE model reads (bpe_size, as a preset change gives to
    both models) trains the BPE model again and keeps Part 3's measured seeds, even
    with its results files gone."""
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "1"]) == 0
    out = seeds.spread_path("ci")
    before = json.loads(out.read_text())
    for f in Path("results").iterdir():
        f.unlink()
    seeds_dir = Path("ckpt/ci/seeds")  # the BPE model's old runs: refused by train
    for seed in (0, 1):
        shutil.rmtree(seeds_dir / f"{small_models[1][1]}-{seed}")
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


def test_a_score_summary_is_mean_min_max_and_range():
    assert seeds.summary([20.0, 21.5, 20.7]) == {
        "values": [20.0, 21.5, 20.7],
        "mean": 20.73,
        "min": 20.0,
        "max": 21.5,
        "range": 1.5,
    }
    assert seeds.summary([3.0, 3.0])["range"] == 0.0


def opts_pairs(argv):
    """(flag, value) pairs of a command line of flags that each take a value."""
    return list(zip(argv[::2], argv[1::2], strict=True))


class FakeTraining:
    """tools.train's program as seed_spread calls it: it writes the results file a
    finished run writes (the settings as tools.train reads them; BLEU made up from
    the seed and the model), and records each command line."""

    def __init__(self, lib):
        self.lib, self.argv = lib, []

    def __call__(self, argv):
        self.argv.append(argv)
        opts = dict(opts_pairs(argv))
        changes = [cli.parse_setting(v) for k, v in opts_pairs(argv) if k == "--set"]
        cfg = cli.config_from_args(self.lib, opts["--preset"], changes)
        bleu = 20.0 + 0.7 * cfg.seed + (cfg.vocab == "bpe")
        results = {
            "preset": opts["--preset"],
            "config": cfg.to_dict(),
            "steps": cfg.steps,
            "history": {"steps": [cfg.steps]},
            "bleu_test_2016_flickr": bleu,
            "bleu_val": bleu + 1,
        }
        out = Path(opts["--out"])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results))
        return 0


def test_the_summary_is_written_from_each_seeds_results_and_reused(
    lib, monkeypatch, tmp_path, capsys
):
    """The tool's bookkeeping with the training faked: where each seed trains, the
    summary it writes, and a second and third call that train nothing again."""
    import pipeline as pl

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AT_CHECKPOINTS", str(tmp_path / "ckpt"))
    monkeypatch.setattr(seeds, "RUNS", tmp_path / "runs")
    fake = FakeTraining(lib)
    monkeypatch.setattr(cli, "train_cli", fake)
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "2"]) == 0
    ckpts = [argv[argv.index("--ckpt-dir") + 1] for argv in fake.argv]
    assert ckpts == [
        str(tmp_path / "ckpt" / "ci" / "seeds" / f"{folder}-{seed}")
        for folder in ("part3", "full-recipe")
        for seed in (0, 2)
    ]
    spread = json.loads(seeds.spread_path("ci").read_text())
    assert seeds.spread_path("ci") == tmp_path / "runs" / "seed-spread-ci.json"
    assert spread["command"] == "python -m tools.seed_spread --preset ci --seeds 0 2"
    assert spread["machine"].endswith(seed_spread.cpu_name())
    assert spread["precision"] == runtime.auto_precision("cpu")[0]
    part3, full = spread["models"]["part3"], spread["models"]["full recipe"]
    assert part3["bleu_test_2016_flickr"] == seeds.summary([20.0, 21.4])
    assert full["bleu_val"] == seeds.summary([22.0, 23.4])
    assert part3["config"] == pl.run_config("ci").to_dict()
    assert full["config"] == pl.run_config("ci", vocab="bpe", tie="all").to_dict()
    out = capsys.readouterr().out
    assert "part3: test_2016 BLEU [20.0, 21.4] (mean 20.7, range 1.4)" in out
    # a results file is a finished run of these settings, this seed and preset only
    res = Path("results/ci-seed-part3-0.json")
    assert seed_spread.finished(res, "ci", 0, [])["bleu_val"] == 21.0
    assert seed_spread.finished(res, "ci", 2, []) is None
    assert seed_spread.finished(res, "ci", 0, ["--set", "eps_ls=0.2"]) is None
    assert seed_spread.finished(res, "gpu", 0, []) is None
    stopped = json.loads(res.read_text())
    stopped["history"]["steps"] = [stopped["steps"] - 1]  # stopped before the end
    Path("stopped.json").write_text(json.dumps(stopped))
    assert seed_spread.finished(Path("stopped.json"), "ci", 0, []) is None
    # the summary holds both models with these seeds: nothing is trained again
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "2"]) == 0
    assert len(fake.argv) == 4
    assert capsys.readouterr().out.count("holds seeds [0, 2]") == 2
    # without the summary, the finished runs' results files are read again
    seeds.spread_path("ci").unlink()
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "2"]) == 0
    assert len(fake.argv) == 4
    assert capsys.readouterr().out.count("holds the finished run") == 4
    assert json.loads(seeds.spread_path("ci").read_text()) == spread
    # a results file cut short is not a finished run: that seed trains again
    seeds.spread_path("ci").unlink()
    Path("results/ci-seed-part3-2.json").write_text("{")
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "2"]) == 0
    assert fake.argv[4][fake.argv[4].index("--out") + 1] == str(
        Path("results/ci-seed-part3-2.json")
    )
    assert len(fake.argv) == 5
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "2", "--rerun"]) == 0
    assert len(fake.argv) == 9, "--rerun trains every seed again"
    # other seeds are another measurement: seed 3 trains, seed 0's results are read
    assert seed_spread.main(["--preset", "ci", "--seeds", "0", "3"]) == 0
    assert len(fake.argv) == 11
