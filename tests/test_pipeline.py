"""The floors: programs -> pipeline -> the book (annotated_transformer_lib) -> atkit.
One loop trains every model (the pipeline's run is the book's `train` plus its
bookkeeping), a run made by other code is trained again, and the model's bounds are
ModelConfig's own."""

import ast
import dataclasses
from pathlib import Path

import pytest

import nbexport

ROOT = Path(__file__).resolve().parents[1]

# the copy task in a dozen steps: evaluations at 5, 10 and 12, the second window
# crossing an epoch's end
SMALL = dict(steps=12, eval_every=5, n_train=300, n_eval=30, keep=2)
SMALL |= dict(N=1, d_model=16, d_ff=32, h=2, fast=False, precision="fp32")


def imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_committed_book_is_what_the_notebook_gives():
    """annotated_transformer_lib.py is committed; `python nbexport.py` writes it
    again after a change to the notebook's code (make lint checks it too)."""
    assert nbexport.is_current(), "annotated_transformer_lib.py is stale: make export"


def test_the_floors_point_one_way():
    """atkit imports neither the book nor the pipeline nor a program; the book
    imports no pipeline and no program; the pipeline no program."""
    for path in (ROOT / "atkit").glob("*.py"):
        up = imported(path) & {"annotated_transformer_lib", "pipeline", "tools"}
        assert not up, f"{path.name} imports {up}"
    book = imported(nbexport.EXPORT)
    assert not book & {"pipeline", "tools", "nbexport"}, book
    for path in (ROOT / "pipeline").glob("*.py"):
        assert "tools" not in imported(path), path.name
        assert "annotated_transformer_lib" in imported(path) or path.name in (
            "__init__.py",
        ), f"{path.name} needs neither the book nor... then it belongs in atkit"


def test_atkit_has_no_circle():
    """No two atkit modules import each other (config and data did, in functions)."""
    graph = {}
    for path in (ROOT / "atkit").glob("*.py"):
        tree = ast.parse(path.read_text())
        mods = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "atkit":
                    mods |= {a.name for a in node.names}
                elif node.module.startswith("atkit."):
                    mods.add(node.module.split(".")[1])
        graph[path.stem] = mods
    pairs = [(a, b) for a in graph for b in graph[a] if a in graph.get(b, ())]
    assert not pairs, pairs


def test_a_pipeline_run_has_the_losses_of_the_books_loop(lib, pl, tmp_path):
    """Part 3's `train`, the loop the reader reads, and the pipeline's resumable run
    of the same config and seed: the same losses at every evaluation."""
    cfg = pl.run_config("ci", **SMALL)
    data = lib.copy_task_data(cfg)
    book_model, book = lib.train(cfg, data, "cpu")
    model, history = pl.train(cfg, data, tmp_path, "cpu", log=lambda *a: None)
    assert [s for s, _, _ in book] == history["steps"] == [5, 10, 12]
    assert [t for _, t, _ in book] == pytest.approx(history["train_loss"], rel=1e-6)
    assert [v for _, _, v in book] == history["val_loss"]
    best = pl.best_model(tmp_path, history, "cpu").state_dict()
    for name, weight in book_model.state_dict().items():
        assert lib.torch.equal(weight, best[name]), name


def test_the_pipeline_trains_a_model_built_elsewhere(lib, pl, tmp_path):
    """A companion notebook's variant goes through the same run, no callback."""
    cfg = pl.run_config("ci", **{**SMALL, "steps": 5})
    data = lib.copy_task_data(cfg)
    variant = lib.build_model(cfg.model, len(data.vocab_src), len(data.vocab_tgt))
    variant.generator.proj.bias.requires_grad_(False)  # a change of its own
    before = variant.generator.proj.bias.clone()
    model, history = pl.train(cfg, data, tmp_path, "cpu", model=variant, log=print)
    assert model is variant and history["steps"] == [5]
    assert lib.torch.equal(variant.generator.proj.bias, before)


def changed_book(lib, old: str, new: str) -> str:
    import inspect

    source = inspect.getsource(lib)
    assert source.count(old) == 1, old
    return source.replace(old, new)


def test_a_changed_line_of_the_model_trains_the_run_again(
    lib, pl, tmp_path, monkeypatch
):
    """One line of MultiHeadedAttention changed: the finished run is not loaded but
    trained again, and the log says which part of the code changed. A comment
    changed: the run is loaded."""
    cfg = pl.run_config("ci", **{**SMALL, "steps": 5})
    data = lib.copy_task_data(cfg)
    _, first = pl.train(cfg, data, tmp_path, "cpu", log=lambda *a: None)
    said = []
    comment = changed_book(
        lib, "class MultiHeadedAttention", "# a note\nclass MultiHeadedAttention"
    )
    monkeypatch.setattr(pl.run, "book_source", lambda: comment)
    _, same = pl.train(cfg, data, tmp_path, "cpu", log=said.append)
    assert said[0].startswith("finished run loaded") and same == first
    line = "self.d_k, self.h = d_model // h, h"
    edited = changed_book(lib, line, line + " + 0")
    monkeypatch.setattr(pl.run, "book_source", lambda: edited)
    said.clear()
    _, again = pl.train(cfg, data, tmp_path, "cpu", log=said.append)
    assert said[0] == (
        f"{tmp_path}: the book's code changed since it was trained: model "
        "(MultiHeadedAttention): training it again"
    ), said[0]
    assert again["run_id"] != first["run_id"]
    assert (
        again["code"]["MultiHeadedAttention"] != first["code"]["MultiHeadedAttention"]
    )
    snapshot = lib.checkpoints.load_checkpoint(tmp_path / "step000005.pt")
    assert snapshot["code"] == again["code"], "every checkpoint records it"


def test_a_run_that_records_no_fingerprint_is_trained_again(lib, pl, tmp_path):
    cfg = pl.run_config("ci", **{**SMALL, "steps": 5})
    data = lib.copy_task_data(cfg)
    pl.train(cfg, data, tmp_path, "cpu", log=lambda *a: None)
    state = lib.checkpoints.load_checkpoint(tmp_path / "last.pt")
    del state["history"]["code"]
    lib.torch.save(state, tmp_path / "last.pt")
    said = []
    pl.train(cfg, data, tmp_path, "cpu", log=said.append)
    assert "record no fingerprint of the code that trained it: training it" in said[0]


def test_every_definition_the_fingerprint_names_is_the_books(lib, pl):
    code = pl.run.fingerprint()
    names = [n for names in pl.run.TRAINED_BY.values() for n in names]
    assert sorted(code) == sorted(names) and all(hasattr(lib, n) for n in names)


def test_the_model_bounds_are_model_configs_own(lib, pl):
    """Every ModelConfig field declares what it allows; nothing else lists them; a
    config made or changed with a bad value is refused where it is made."""
    from atkit import settings
    from atkit.settings import ConfigError

    assert not hasattr(settings, "MODEL_BOUNDS")
    assert all("check" in f.metadata for f in dataclasses.fields(lib.ModelConfig))
    lib.ModelConfig(h=3)  # a plain dataclass: the book checks nothing
    with pytest.raises(ConfigError, match=r"ModelConfig.N=0: .*>= 1"):
        pl.model_config("tiny", N=0)
    with pytest.raises(ConfigError, match="d_model=30: must be even .* h=4"):
        pl.run_config("ci", d_model=30, h=4)
    with pytest.raises(ConfigError, match=r"ModelConfig.tie='both'"):
        pl.run_config("ci").updated(tie="both")
    with pytest.raises(ConfigError, match=r"size='huge' is unknown"):
        pl.model_config("huge")


def test_the_vocabulary_kinds_are_the_books_classes(lib, pl):
    from atkit import config

    assert set(pl.data.VOCABS) == set(config.VOCAB_KINDS)
    assert pl.data.VOCABS["words"][0] is lib.Vocab
    assert pl.data.VOCABS["bpe"][0] is lib.SharedBPE


def test_the_default_preset_is_a_field_of_its_record(monkeypatch):
    """runtime.choose_preset asks the records (Preset.default_on), no `if` on a
    preset's name."""
    import torch

    from atkit import config, runtime

    for cuda, name in ((False, "cpu"), (True, "gpu")):
        monkeypatch.setattr(torch.cuda, "is_available", lambda cuda=cuda: cuda)
        assert runtime.choose_preset({}) == name
    assert config.default_preset("cuda") == "gpu"


# ------------------------------------------- what left the notebook's main path


def test_the_export_cell_runs_export_model_on_the_chosen_system(pl, monkeypatch):
    """pipeline.export.export_final: tools.export_model on the final system's run,
    snapshots and alpha, into docs/ for the preset that publishes, else beside the
    runs (the notebook's export cell before it left the main path)."""
    calls = []
    monkeypatch.setattr(pl.export, "run_tool", lambda *a: calls.append(a))
    final = {"run": "part4-bpe-all-eq3", "n_avg": 6, "alpha": 1.5}
    root = Path("checkpoints") / "cpu"
    assert pl.export.export_final(final, "cpu", root) == Path("docs")
    assert pl.export.export_final(final, "ci", root) == root / "export"
    (tool, *args), _ = calls
    assert tool == "tools.export_model"
    expected = f"--preset cpu --ckpt-dir {root / final['run']} --out docs"
    assert [str(a) for a in args] == (expected + " --n-avg 6 --alpha 1.5").split()


def test_the_bench_cell_returns_the_figures_the_program_wrote(pl, monkeypatch):
    """pipeline.run.bench: tools.bench with --json into a folder of its own; the
    figures it wrote come back as a dict, the folder goes."""
    import json

    seen = {}

    def fake_tool(module, *args):
        out = Path(args[args.index("--json") + 1])
        seen.update(module=module, args=[str(a) for a in args], out=out)
        out.write_text(json.dumps({"speedup": 1.2}), encoding="utf-8")

    monkeypatch.setattr(pl.run, "run_tool", fake_tool)
    assert pl.run.bench("ci", steps=2, rounds=1) == {"speedup": 1.2}
    assert seen["module"] == "tools.bench" and not seen["out"].exists()
    assert seen["args"][:6] == ["--preset", "ci", "--steps", "2", "--rounds", "1"]


def test_the_table_cell_passes_the_seed_spread():
    """Part 4's table is scored with the seed spread, so the seeds' mean and range
    print beside the rows they measured (atkit.report.beside_seeds) and the final
    systems meet the published figures at the seeds' mean too."""
    md = (ROOT / "annotated_transformer.md").read_text(encoding="utf-8")
    calls = [ln for ln in md.splitlines() if "pipeline.table.score_table(" in ln]
    assert calls and all("spread=spread" in ln for ln in calls), calls


def test_part6_reads_the_committed_model_with_its_own_vocabulary(
    pl, capsys, on_toy_corpus
):
    """pipeline.export.committed_model (Part 6 with AT_PRETRAINED=1): the page's
    model, its data encoded with the model's own vocabulary (here the made-up
    sentences), and a sentence that says which model it is."""
    model, data = pl.export.committed_model("cpu", on_toy_corpus)
    said = capsys.readouterr().out
    assert said.startswith("the committed model: Part 4's full recipe"), said
    assert data.vocab_src is data.vocab_tgt
    assert model.src_embed[0].lut.num_embeddings == len(data.vocab_src)
    assert data.val and all(i < len(data.vocab_src) for s, _ in data.val for i in s)
