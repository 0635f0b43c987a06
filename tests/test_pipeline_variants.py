"""pipeline.train with a model built outside the book (since_2017.ipynb's rows): the
variant's own code joins the run's fingerprint (pipeline.run.model_code), so a run
trained by other code of the variant is trained again; and a variant's own batches
(`batches=`) are the ones it trains on."""

import importlib.util
import sys

from test_pipeline import SMALL

VARIANT = '''
import torch.nn as nn


def scale():
    return {value}


class Scaled(nn.Module):
    """A module of the book's model, its output times scale()."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        return self.inner(*args) * scale()
'''


def variant_module(tmp_path, name, value):
    """A module written to a file of its own, as a companion notebook's cell is."""
    path = tmp_path / f"{name}.py"
    path.write_text(VARIANT.format(value=value), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def variant(lib, cfg, data, module):
    lib.torch.manual_seed(cfg.seed)
    model = lib.build_model(cfg.model, len(data.vocab_src), len(data.vocab_tgt))
    model.encoder.norm = module.Scaled(model.encoder.norm)
    return model


def test_model_code_names_the_variants_own_code_only(lib, pl, tmp_path):
    cfg = pl.run_config("ci", **SMALL)
    data = lib.copy_task_data(cfg)
    book_model = lib.build_model(cfg.model, len(data.vocab_src), len(data.vocab_tgt))
    assert pl.run.model_code(book_model) == {}
    first = variant_module(tmp_path, "variant_a", "1.0")
    code = pl.run.model_code(variant(lib, cfg, data, first))
    assert sorted(code) == ["Scaled", "scale"]  # the helper its forward calls
    noted = variant_module(tmp_path, "variant_b", "1.0  # a comment")
    assert pl.run.model_code(variant(lib, cfg, data, noted)) == code
    other = variant_module(tmp_path, "variant_c", "1.0 + 0")
    changed = pl.run.model_code(variant(lib, cfg, data, other))
    assert changed["Scaled"] == code["Scaled"] and changed["scale"] != code["scale"]


def test_a_variant_trained_by_other_code_of_its_own_is_trained_again(lib, pl, tmp_path):
    cfg = pl.run_config("ci", **{**SMALL, "steps": 5})
    data = lib.copy_task_data(cfg)
    folder = tmp_path / "run"
    first = variant_module(tmp_path, "variant_d", "1.0")
    _, h1 = pl.train(
        cfg, data, folder, "cpu", model=variant(lib, cfg, data, first), log=print
    )
    assert (
        h1["code"]["scale"]
        == pl.run.model_code(variant(lib, cfg, data, first))["scale"]
    )
    assert set(pl.run.fingerprint()) < set(h1["code"]), "the book's code as well"
    said = []
    same = variant_module(tmp_path, "variant_e", "1.0  # a comment")
    model = variant(lib, cfg, data, same)
    _, h2 = pl.train(cfg, data, folder, "cpu", model=model, log=said.append)
    assert said[0].startswith("finished run loaded") and h2["run_id"] == h1["run_id"]
    said.clear()
    other = variant_module(tmp_path, "variant_f", "1.0 + 0")
    model = variant(lib, cfg, data, other)
    _, h3 = pl.train(cfg, data, folder, "cpu", model=model, log=said.append)
    assert said[0] == (
        f"{folder}: the code changed since it was trained: the model's own code "
        "(scale): training it again"
    ), said[0]
    assert h3["run_id"] != h1["run_id"]


def test_a_variant_trains_on_the_batches_it_is_given(lib, pl, tmp_path):
    cfg = pl.run_config("ci", **{**SMALL, "steps": 4, "eval_every": 4})
    data = lib.copy_task_data(cfg)
    one = lib.make_batches(data.train, cfg, "cpu")[:1]  # one batch, four times
    val = lib.make_batches(data.val, cfg, "cpu")
    model = lib.build_model(cfg.model, len(data.vocab_src), len(data.vocab_tgt))
    _, history = pl.train(
        cfg, data, tmp_path, "cpu", model=model, batches=(one, val), log=print
    )
    assert history["tokens"] == 4 * one[0].ntokens
