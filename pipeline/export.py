"""The page's model: tools/export_model.py run on Part 4's chosen system
(`export_final`), and a model file it wrote read back (`load_exported`,
`committed_model`)."""

from __future__ import annotations

from pathlib import Path

import annotated_transformer_lib as book
from atkit import export
from atkit.config import PRESETS
from atkit.programs import run_tool
from atkit.prose import say
from pipeline.config import config_from_dict
from pipeline.data import prepare_data

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "translate" / "de-en.js"


def load_exported(path, device="cpu"):
    """(model in eval mode, RunConfig, shared vocabulary, manifest) of a model file
    written by tools.export_model, its weights as the page computes with them."""
    exported = export.read_model(path)
    cfg = config_from_dict(exported.manifest["config"])
    vocab = book.SharedBPE(exported.spm_proto)
    model = book.build_model(cfg.model, len(vocab), len(vocab))
    model.load_state_dict(exported.state_dict)
    return model.to(device).eval(), cfg, vocab, exported.manifest


def committed_model(device="cpu", root=None, path=COMMITTED):
    """The model this repository commits for the page (Part 4's German→English
    final system) and its data, encoded with its own vocabulary: what Part 6 looks
    inside when nothing was trained (AT_PRETRAINED=1). Says what the model is."""
    from atkit import report

    model, cfg, vocab, manifest = load_exported(path, device)
    say(report.committed_model(manifest))
    return model, prepare_data(cfg, root, vocabs=(vocab, vocab))


def export_final(final: dict, preset: str, root: Path) -> Path:
    """tools/export_model.py, in a process of its own, on a direction's final system
    (`final`: one entry of table.final_systems, its run, snapshots averaged and
    alpha), into docs/ for the preset that publishes the page, else into
    <root>/export; returns that folder."""
    out = Path("docs") if PRESETS[preset].publishes else Path(root) / "export"
    args = ["--preset", preset, "--ckpt-dir", Path(root) / final["run"], "--out", out]
    args += ["--n-avg", final["n_avg"], "--alpha", final["alpha"]]
    run_tool("tools.export_model", *args)
    return out
