"""Export a trained translation model for the page docs/translate.html and for
readers who cannot train (the notebook's AT_PRETRAINED=1).

    python -m tools.export_model --ckpt-dir checkpoints/cpu/part4-bpe-all \\
        --n-avg 3 --alpha 1.5 --preset cpu --out docs

takes the weights that Part 4's best row decodes (the average of the `--n-avg`
snapshots that end at the run's best one, or of all up to it if there are fewer; 1:
the best snapshot alone; the manifest records those averaged), stores them
with the run's sentencepiece model and spaCy's rules in `<out>/translate/<dir>.js`
(atkit/export.py: int8 matrices with a scale per row), scores the stored weights and
the PyTorch model on test_2016 with the notebook's own code (greedy, and beam search
with the beam size of the preset's recipe, `RecipeConfig.beam_size`, as Part 4's table
decodes, and `--alpha`: the manifest records both, and the page decodes with them)
and writes those scores into the file, with what the page needs to
tell a reader that a sentence is far from what the model was trained on (`domain`:
which pieces its training sources hold rarely, and how many unfamiliar words the
validation captions have), and renders the page
`<out>/translate.html` (atkit/page/translate.py) for every model file in
`<out>/translate/` (named as a direction is, de-en.js; each checked as the page
checks it). `--out` is checked
before the work: a folder that takes no new file, or a disk without room for the
model file, is refused at once. Part 4 runs this
command in `make run`; the `cpu` preset's run alone writes into the repository's
docs/, whose model files must stay under 12 MB together. A model file whose content
is unchanged is not rewritten.

    python -m tools.export_model --page-only --out docs   # the page alone (make page)
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import time
from pathlib import Path

from atkit import config, export, searches
from atkit.files import (
    check_outputs,
    input_folder,
    probe_writable,
    writable_folder,
)
from atkit.page.translate import model_files, weights_of, write_page
from tools.errors import UsageError, run_main

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
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
    text = (sides[src_lang][:n], sides[lib.corpus.other_lang(src_lang)][:n])
    tokens = lib.tokenized(SPLIT, src_lang, n, root)
    sources = {SPLIT: [lib.frame(vocab.encode(t)) for t in tokens]}
    return lib.TranslationData(vocab, vocab, [], [], sources, {SPLIT: text}, src_lang)


RARE_BELOW = 5  # a piece seen fewer times in the training sources is rare
NOTE_QUANTILE = 0.99  # the note: more unfamiliar words than 99% of the val captions
CORPUS = "Multi30k: 29,000 image captions (Flickr30k) with their translations"


def word_pieces(itos, ids) -> list[list[int]]:
    """Source ids grouped by word: a piece that starts with "▁" starts a word
    (as the page groups them, atkitDomain in atkit/page/translator.js)."""
    words: list[list[int]] = []
    for k, i in enumerate(ids):
        if k == 0 or itos[i].startswith("▁"):
            words.append([])
        words[-1].append(i)
    return words


def unfamiliar_share(itos, rare, ids) -> tuple[int, int]:
    """(unfamiliar words, words) of a source: a word is unfamiliar when the vocabulary
    has no single piece for it (BPE merged what was frequent in training) or one of
    its pieces is rare."""
    words = word_pieces(itos, ids)
    odd = sum(len(w) > 1 or any(rare[i] for i in w) for w in words)
    return odd, len(words)


def domain(lib, cfg, vocab, root=None) -> dict:
    """The manifest's `domain`: the corpus in words; the pieces seen fewer than
    RARE_BELOW times in the training split's sources (a bitmap over the ids, bit i of
    byte i // 8, base64); `note_above`: the share of unfamiliar words that fewer than
    1% of the validation sources exceed; `min_words`: unfamiliar words a sentence
    needs besides (one odd word in a short sentence is no sign)."""
    import base64

    import numpy as np

    root = str(lib.corpus.data_root(root))
    counts = np.zeros(len(vocab), dtype=np.int64)
    for tokens in lib.tokenized("train", cfg.src_lang, cfg.n_train, root):
        np.add.at(counts, vocab.encode(tokens), 1)
    rare = counts < RARE_BELOW
    shares = []
    for tokens in lib.tokenized("val", cfg.src_lang, cfg.n_eval, root):
        odd, words = unfamiliar_share(vocab.itos, rare, vocab.encode(tokens))
        shares.append(odd / max(words, 1))
    bits = np.packbits(rare, bitorder="little").tobytes()
    return {
        "corpus": CORPUS,
        "rare_below": RARE_BELOW,
        "rare": base64.b64encode(bits).decode("ascii"),
        "note_above": round(float(np.quantile(shares, NOTE_QUANTILE)), 3),
        "min_words": 2,
    }


def page_searches(lib, alpha, beam_size) -> dict:
    """The searches the page offers (the schema's list of them: PAGE_SEARCHES of
    tools/model_schema.py), with their settings as the manifest records them (the
    page reads them from there only): beam search with the recipe's beam size
    (`RecipeConfig.beam_size`, which Part 4's table decodes with) and the run's
    `alpha` (None: the record's default), every other option at its default in the
    notebook's record."""
    beam = {"beam_size": beam_size} | ({} if alpha is None else {"alpha": alpha})
    chosen = {"beam": beam}
    names = export.schema()["properties"]["manifest"]["properties"]["searches"]
    return {
        name: searches.manifest_entry(lib.SEARCHES, name, **chosen.get(name, {}))
        for name in names["properties"]
    }


def scores(lib, model, data, settings) -> dict:
    """test_2016 BLEU of each search of `settings` (name -> options), with the
    notebook's code."""
    out = {}
    for name, options in settings.items():
        r = lib.bleu(model, data, SPLIT, lib.make_search(name, **options))
        out[name] = {"bleu": round(r["bleu"], 2), "ratio": round(r["ratio"], 3)}
    return out


def file_bytes(state: dict, quant: str) -> int:
    """About how many bytes the model file of `state` takes, at most: its tensors as
    stored (a tied one once), base64-encoded, and 2 MB for the rest."""
    seen, raw = set(), 0
    for t in state.values():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key in seen:
            continue
        seen.add(key)
        if t.dim() == 2:
            raw += t.numel() * (1 if quant == "int8" else 2) + 4 * t.shape[0]
        else:
            raw += 4 * t.numel()
    return raw * 4 // 3 + 2_000_000


def check_out(out: Path, direction: str, state: dict, quant: str) -> None:
    """The model file and the page can be written into `out` (a folder that takes
    new files, on a disk with room for them), or a refusal naming --out: before the
    snapshots are averaged and scored, not after."""
    for path in (out / "translate" / f"{direction}.js", out / "translate.html"):
        if path.is_dir():
            raise UsageError(
                f"--out {out}: {path} is a folder where the export writes a file; "
                "move it out of the way (or give another --out)"
            )
    writable_folder(out / "translate", "--out", f"{direction}.js")
    probe_writable(out, "--out", "translate.html")
    need = file_bytes(state, quant)
    free = shutil.disk_usage(out).free
    if free < need:
        raise UsageError(
            f"--out {out}: the disk has {free / 1e6:,.1f} MB free, the model file and "
            f"its page need about {need / 1e6:,.1f} MB; free some space (or give an "
            "--out on another disk)"
        )


# ---------------------------------------- issue 69: --out and --preset, before the work


def run_preset(lib, cfg) -> str | None:
    """The preset whose model shape (N, d_model, d_ff, h) the run trained, when one
    preset's alone has it; None for a shape of no preset's (sizes set by hand)."""
    import pipeline

    shape = lambda m: (m.N, m.d_model, m.d_ff, m.h)  # noqa: E731
    names = config.preset_names()
    found = [
        n for n in names if shape(pipeline.run_config(n).model) == shape(cfg.model)
    ]
    return found[0] if len(found) == 1 else None


def check_preset(lib, cfg, ckpt_dir, preset: str | None) -> str:
    """The preset the manifest records: the run's own. A --preset that names
    another is refused (the manifest would say "cpu" of a ci run); without --preset,
    the run's own, and a run of no preset's shape needs --preset."""
    own, m = run_preset(lib, cfg), cfg.model
    shape = f"N={m.N}, d_model={m.d_model}, d_ff={m.d_ff}, h={m.h}"
    if own is not None and preset not in (None, own):
        raise UsageError(
            f"--preset {preset}: the run in {ckpt_dir} trained the {own} preset's "
            f"model ({shape}); give --preset {own} (or leave it out)"
        )
    if own is None and preset is None:
        raise UsageError(
            f"the run in {ckpt_dir} has a model of no preset's shape ({shape}); "
            "give --preset, the preset it was trained from"
        )
    return own or preset


def check_paths(out: Path, direction: str, ckpt_dir: Path) -> None:
    """The model file and the page may not be written over the run's checkpoints
    (through a link, say) nor be notebooks (atkit.files.check_outputs)."""
    written = [
        ("--out", out / "translate" / f"{direction}.js"),
        ("--out", out / "translate.html"),
    ]
    read = [("--ckpt-dir", p) for p in sorted(Path(ckpt_dir).glob("*.pt"))]
    check_outputs(written, read, writes="the export")


def check_page_out(out: Path) -> None:
    """--page-only's --out: a folder that exists (docs), whose page is no model file
    (through a link), else a refusal."""
    input_folder("--out", out, "the folder that holds translate/ (e.g. --out docs)")
    read = [("the model file", p) for p in sorted(out.glob("translate/*.js"))]
    check_outputs([("--out", out / "translate.html")], read, writes="the page")


def snapshots_to_average(lib, ckpt_dir, history, n_avg, log) -> list[int]:
    """The steps of the snapshots that `--n-avg` averages: the `n_avg` that end at
    the best one, or all up to it if the run has fewer (said); a refusal if the
    run did not keep them."""
    from atkit import resume

    steps = resume.last_snapshots(history, n_avg)
    path = resume.snapshot_path
    kept = 0
    while kept < len(steps) and path(ckpt_dir, steps[-1 - kept]).exists():
        kept += 1
    if kept == 0:
        raise UsageError(
            f"{ckpt_dir}: the best snapshot, "
            f"{path(ckpt_dir, steps[-1]).name}, is missing; train the "
            "run again (or give the folder of another run)"
        )
    if kept < len(steps):
        raise UsageError(
            f"--n-avg {n_avg}: {ckpt_dir} kept {kept} snapshot(s) up to its best "
            f"one; give --n-avg {kept} or less"
        )
    if len(steps) < n_avg:
        log(
            f"--n-avg {n_avg}: the run has {len(steps)} snapshot(s) up to its best "
            f"one; averaging those {len(steps)}"
        )
    return steps


def export_run(
    lib,
    ckpt_dir,
    n_avg,
    alpha,
    out,
    preset,
    *,
    quant="int8",
    bleu=True,
    n_eval=None,
    root=None,
    log=print,
) -> Path:
    """Export one run (see the module docstring); returns the model file's path.
    `n_eval`: score the first n test sentences only (default: the run's n_eval). The
    page decodes with the beam size of the preset's recipe, and with `alpha`."""
    import torch

    import pipeline

    ckpt_dir, out = Path(ckpt_dir), Path(out)
    last = lib.checkpoints.load_checkpoint(ckpt_dir / "last.pt")
    history, cfg = last["history"], pipeline.config_from_dict(last["config"])
    if cfg.vocab != "bpe" or cfg.model.tie != "all":
        raise UsageError(
            f"{ckpt_dir}: the page needs a shared BPE vocabulary and "
            "tie='all' (the full recipe)"
        )
    preset = check_preset(lib, cfg, ckpt_dir, preset)  # issue 69: the run's own
    if out.resolve() == DOCS.resolve() and not config.preset(preset).publishes:
        raise UsageError(
            f"preset {preset}: only the {config.publisher()} preset's run exports into "
            f"{DOCS} (the record's `publishes`); pass another --out"
        )
    direction = f"{cfg.src_lang}-{lib.corpus.other_lang(cfg.src_lang)}"
    check_paths(out, direction, ckpt_dir)  # issue 69: not over the run's files
    check_out(out, direction, last["model"], quant)  # before the long work
    steps = snapshots_to_average(lib, ckpt_dir, history, n_avg, log)
    try:
        model = pipeline.averaged_model(ckpt_dir, history, "cpu", len(steps))
    except ValueError as err:  # a snapshot of another run, say
        raise UsageError(f"{ckpt_dir}: {err}") from None
    vocab = pipeline.vocab_from_state(last["vocab_src"])
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
        "n_avg": len(steps),  # what was averaged, not what was asked for
        "averaged_steps": steps,
        # name -> options, from SEARCHES: the beam size the recipe's table used
        "searches": page_searches(lib, alpha, config.preset(preset).recipe.beam_size),
        "max_extra": lib.MAX_EXTRA,  # an output at most this much longer (§6.1)
        "quant": quant,
        "config": cfg.to_dict(),
    }
    manifest["what"] = (
        f"Part 4's full recipe (shared BPE, tie='all'), {weights_of(manifest)}"
    )
    manifest["domain"] = domain(lib, cfg, vocab, root)
    if bleu:
        start = time.perf_counter()
        data = test_data(lib, cfg, vocab, root, n_eval)
        manifest["bleu"] = {
            "split": SPLIT,
            "pytorch": scores(lib, model, data, manifest["searches"]),
            "exported": scores(lib, exported, data, manifest["searches"]),
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
        for name, options in manifest["searches"].items():
            p, e = b["pytorch"][name]["bleu"], b["exported"][name]["bleu"]
            label = ", ".join([name, *(f"{k} {v}" for k, v in options.items())])
            log(
                f"{SPLIT} BLEU, {label}: PyTorch {p:.2f}, exported {e:.2f} "
                f"({e - p:+.2f})"
            )
    write_page(out)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--ckpt-dir", type=Path, help="a run folder of the notebook")
    ap.add_argument("--n-avg", type=int, default=1, help="snapshots averaged (1)")
    ap.add_argument(
        "--alpha", type=float, default=None, help="the beam's alpha (the record's)"
    )
    config.add_preset_option(
        ap, help="the run's preset (default: the run's own, from its model's shape)"
    )
    ap.add_argument("--out", type=Path, default=DOCS, help="folder of the page")
    ap.add_argument("--quant", choices=export.QUANTS, default="int8")
    ap.add_argument("--no-bleu", action="store_true", help="skip the test scores")
    ap.add_argument("--page-only", action="store_true", help="render the page alone")
    args = ap.parse_args(argv)
    if args.page_only:
        check_page_out(args.out)
        page = write_page(args.out)
        print(page or f"no model file in {args.out / 'translate'}: no page written")
        return 0
    if args.ckpt_dir is None:
        ap.error("--ckpt-dir is needed (or --page-only)")
    input_folder("--ckpt-dir", args.ckpt_dir, "a run folder of the notebook")
    alpha = 0.0 if args.alpha is None else args.alpha
    if args.n_avg < 1 or not math.isfinite(alpha) or alpha < 0:
        ap.error("--n-avg must be >= 1 and --alpha a number >= 0")
    import annotated_transformer_lib as lib
    from atkit import runtime

    lib.torch.set_num_threads(runtime.torch_threads(args.preset or config.publisher()))
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
