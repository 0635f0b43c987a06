"""Export a trained translation model for the page docs/translate.html and for
readers who cannot train (the notebook's AT_PRETRAINED=1).

    python -m tools.export_model --ckpt-dir checkpoints/cpu/part4-bpe-all \\
        --n-avg 3 --alpha 1.5 --preset cpu --out docs

takes the weights that Part 4's best row decodes (the average of the `--n-avg`
snapshots that end at the run's best one; 1: the best snapshot alone), stores them
with the run's sentencepiece model and spaCy's rules in `<out>/translate/<dir>.js`
(atkit/export.py: int8 matrices with a scale per row), scores the stored weights and
the PyTorch model on test_2016 with the notebook's own code (greedy, and beam search
with `--alpha`) and writes those scores into the file, and renders the page
`<out>/translate.html` for every model file in `<out>/translate/`. Part 4 runs this
command in `make run`; the `cpu` preset's run alone writes into the repository's
docs/, whose model files must stay under 12 MB together. A model file whose content
is unchanged is not rewritten.

    python -m tools.export_model --page-only --out docs   # the page alone (make page)
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
import time
from pathlib import Path

import torch

from atkit import export
from tools.errors import UsageError, run_main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGE_TEMPLATE = Path(__file__).resolve().parent / "page" / "translate.html"
BUDGET = 12_000_000  # bytes: the model files in docs/ together
SPLIT = "test_2016_flickr"


def cpu_name() -> str:
    from tools.seed_spread import cpu_name as name

    return name()


def detokenize_rules(lib) -> list:
    """Part 3's detokenize as (JavaScript pattern, replacement) pairs, in order."""
    return [
        [export.js_regex(lib._NO_SPACE_BEFORE.pattern), "$1"],
        [export.js_regex(lib._NO_SPACE_AFTER.pattern), "$1"],
    ]


def test_data(lib, cfg, vocab, root=None, n=None):
    """test_2016's sources in the run's direction, encoded with its vocabulary, and
    the references (the first `n`, else the run's n_eval): the TranslationData that
    the notebook's `bleu` needs."""
    root = str(lib.corpus.data_root(root))
    src_lang, n = cfg.src_lang, n or cfg.n_eval
    sides = dict(zip(lib.LANGS, lib.corpus.read_split(SPLIT, root), strict=True))
    text = (sides[src_lang][:n], sides[lib.other_lang(src_lang)][:n])
    tokens = lib.tokenized(SPLIT, src_lang, n, root)
    sources = {SPLIT: [lib.frame(vocab.encode(t)) for t in tokens]}
    return lib.TranslationData(vocab, vocab, [], [], sources, {SPLIT: text}, src_lang)


def scores(lib, model, data, alpha, beam_size) -> dict:
    """test_2016 BLEU, greedy and beam search, with the notebook's code."""
    out = {}
    for name, search in (
        ("greedy", lib.greedy_decode),
        ("beam", lib.beam(beam_size, alpha)),
    ):
        r = lib.bleu(model, data, SPLIT, search)
        out[name] = {"bleu": round(r["bleu"], 2), "ratio": round(r["ratio"], 3)}
    return out


def export_run(
    lib,
    ckpt_dir,
    n_avg,
    alpha,
    out,
    preset,
    *,
    quant="int8",
    beam_size=4,
    bleu=True,
    n_eval=None,
    root=None,
    log=print,
) -> Path:
    """Export one run (see the module docstring); returns the model file's path.
    `n_eval`: score the first n test sentences only (default: the run's n_eval)."""
    ckpt_dir, out = Path(ckpt_dir), Path(out)
    last = lib.checkpoints.load_checkpoint(ckpt_dir / "last.pt")
    history, cfg = last["history"], lib.RunConfig.from_dict(last["config"])
    if cfg.vocab != "bpe" or cfg.model.tie != "all":
        raise UsageError(
            f"{ckpt_dir}: the page needs a shared BPE vocabulary and "
            "tie='all' (the full recipe)"
        )
    if out.resolve() == DOCS.resolve() and preset != "cpu":
        raise UsageError(
            f"preset {preset}: only the cpu preset's run exports into "
            f"{DOCS}; pass another --out"
        )
    try:
        model = lib.averaged_model(ckpt_dir, history, "cpu", n_avg)
    except ValueError as err:  # n_avg larger than the snapshots kept, say
        raise UsageError(f"{ckpt_dir}: {err}") from None
    vocab = lib.vocab_from_state(last["vocab_src"])
    direction = f"{cfg.src_lang}-{lib.other_lang(cfg.src_lang)}"
    at = history["steps"].index(history["best_step"])
    entries, aliases, blob = export.pack_state(model.state_dict(), quant)
    exported = lib.build_model(cfg.model, len(vocab), len(vocab))
    exported.load_state_dict(export.unpack_state(entries, aliases, bytes(blob)))
    exported.eval()
    manifest = {
        "preset": preset,
        "machine": cpu_name(),
        "torch": torch.__version__.split("+")[0],
        "run": ckpt_dir.name,
        "best_step": history["best_step"],
        "n_avg": n_avg,
        "averaged_steps": history["steps"][at - n_avg + 1 : at + 1],
        "alpha": alpha,
        "beam_size": beam_size,
        "quant": quant,
        "config": cfg.to_dict(),
    }
    manifest["what"] = (
        f"Part 4's full recipe (shared BPE, tie='all'), {weights_of(manifest)}"
    )
    if bleu:
        start = time.perf_counter()
        data = test_data(lib, cfg, vocab, root, n_eval)
        manifest["bleu"] = {
            "split": SPLIT,
            "pytorch": scores(lib, model, data, alpha, beam_size),
            "exported": scores(lib, exported, data, alpha, beam_size),
        }
        log(f"scored both on {SPLIT} in {time.perf_counter() - start:.0f} s")
    spacy = export.spacy_rules(cfg.src_lang)
    path = out / "translate" / f"{direction}.js"
    text = export.model_js(
        direction,
        manifest,
        model.state_dict(),
        vocab.model_proto,
        spacy,
        detokenize_rules(lib),
        quant,
    )
    if out.resolve() == DOCS.resolve():
        others = sum(p.stat().st_size for p in model_files(out) if p != path)
        if others + len(text) > BUDGET:
            raise UsageError(
                f"{path.name} ({len(text):,} bytes) with the other model files "
                f"({others:,}) would exceed the {BUDGET:,} bytes of docs/"
            )
    changed = export.write_if_changed(path, text)
    log(
        f"{path.name} {'written' if changed else 'unchanged'}: {direction}, "
        f"{weights_of(manifest)}, {quant}"
    )
    if bleu:
        b = manifest["bleu"]
        for name in ("greedy", "beam"):
            p, e = b["pytorch"][name]["bleu"], b["exported"][name]["bleu"]
            label = "greedy" if name == "greedy" else f"beam {beam_size}, alpha {alpha}"
            log(
                f"{SPLIT} BLEU, {label}: PyTorch {p:.2f}, exported {e:.2f} "
                f"({e - p:+.2f})"
            )
    write_page(out)
    return path


# ------------------------------------------------------------------ the page


def model_files(out) -> list[Path]:
    return sorted((Path(out) / "translate").glob("*-*.js"))


def page_html(out) -> str:
    """docs/translate.html: the template with the translator's script, the attention
    view's script and style, and one entry per model file beside it."""
    out = Path(out)
    models = []
    for path in model_files(out):
        ex = _manifest_only(path)
        models.append(
            {
                "direction": path.stem,
                "src": f"translate/{path.name}",
                "bytes": path.stat().st_size,
                **ex,
            }
        )
    atkit = ROOT / "atkit"
    parts = {
        "TRANSLATOR_JS": (atkit / "translator.js").read_text(encoding="utf-8"),
        "VIEW_JS": (atkit / "attention_view.js").read_text(encoding="utf-8"),
        "VIEW_CSS": (atkit / "attention_view.css").read_text(encoding="utf-8"),
        "MODELS_JSON": json.dumps(models, ensure_ascii=True).replace("</", "<\\/"),
        "MODELS_TEXT": html.escape(describe(models)),
    }
    for key in ("TRANSLATOR_JS", "VIEW_JS"):
        if "</script" in parts[key].lower():
            raise ValueError(f"{key} holds </script and cannot be inlined")
    page = PAGE_TEMPLATE.read_text(encoding="utf-8")
    return re.sub(r"\{\{([A-Z_]+)\}\}", lambda m: parts[m.group(1)], page)


def _manifest_only(path: Path) -> dict:
    """The manifest of a model file without decoding its weights."""
    text = path.read_text(encoding="utf-8")
    at = text.index('"manifest":') + len('"manifest":')
    manifest, _ = json.JSONDecoder().raw_decode(text, at)
    return {"manifest": manifest}


def weights_of(manifest) -> str:
    """Which snapshots the stored weights are, in words."""
    steps = manifest["averaged_steps"]
    if len(steps) == 1:
        return f"the snapshot of step {steps[0]}"
    return f"the average of the {len(steps)} snapshots of steps " + ", ".join(
        map(str, steps)
    )


def describe(models) -> str:
    """One line per model: what the weights are."""
    lines = []
    for m in models:
        man = m["manifest"]
        line = (
            f"{m['direction']}: preset {man['preset']} on {man['machine']}, "
            f"{weights_of(man)}"
        )
        if "bleu" in man:
            e = man["bleu"]["exported"]
            line += (
                f"; test_2016 BLEU {e['greedy']['bleu']:.2f} greedy, "
                f"{e['beam']['bleu']:.2f} beam {man['beam_size']}"
            )
        lines.append(line)
    return "\n".join(lines) or "no model exported yet"


def write_page(out) -> Path | None:
    """Render `<out>/translate.html` for the model files beside it (none: no page)."""
    if not model_files(out):
        return None
    path = Path(out) / "translate.html"
    export.write_if_changed(path, page_html(out))
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--ckpt-dir", type=Path, help="a run folder of the notebook")
    ap.add_argument("--n-avg", type=int, default=1, help="snapshots averaged (1)")
    ap.add_argument("--alpha", type=float, default=0.6, help="the beam's alpha")
    ap.add_argument(
        "--preset", default="cpu", choices=("ci", "cpu", "gpu"), help="its preset"
    )
    ap.add_argument("--out", type=Path, default=DOCS, help="folder of the page")
    ap.add_argument("--quant", choices=export.QUANTS, default="int8")
    ap.add_argument("--no-bleu", action="store_true", help="skip the test scores")
    ap.add_argument("--page-only", action="store_true", help="render the page alone")
    args = ap.parse_args(argv)
    if args.page_only:
        page = write_page(args.out)
        print(page or f"no model file in {args.out / 'translate'}: no page written")
        return 0
    if args.ckpt_dir is None:
        ap.error("--ckpt-dir is needed (or --page-only)")
    if args.n_avg < 1 or not math.isfinite(args.alpha) or args.alpha < 0:
        ap.error("--n-avg must be >= 1 and --alpha a number >= 0")
    import nbexport
    from atkit import runtime

    lib = nbexport.load()
    torch.set_num_threads(runtime.torch_threads(args.preset))
    export_run(
        lib,
        args.ckpt_dir,
        args.n_avg,
        args.alpha,
        args.out,
        args.preset,
        quant=args.quant,
        bleu=not args.no_bleu,
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, "python -m tools.export_model"))
