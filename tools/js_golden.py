"""Golden files for the JavaScript unit tests (tests/js/*.test.js, `make test-js`):
small fixed inputs and what the notebook's own Python code makes of them, so that
Node can check atkit/page/translator.js and atkit/page/attention_view.js without a
browser.

    python -m tools.js_golden           # write tests/js/golden/ (make js-golden)
    python -m tools.js_golden --check   # exit 1 if a committed file differs

tests/js/golden/de-en.js: a model file of atkit/export.py for a tiny Transformer (2
  layers, d_model 8, 32 positions, int8 weights drawn from a fixed seed, untrained),
  a sentencepiece BPE of 160 pieces learnt from the first 300 Multi30k training
  sentences of each language, spaCy's German rules and Part 3's detokenizer.
tests/js/golden/cases.json: texts and what the notebook's code gives for them: spaCy's
  tokens (`tokenize_all`), the BPE's pieces and ids (`SharedBPE`), decoded ids and
  detokenized text, `greedy_decode` and `beam_search` outputs of the tiny model in its
  pre-norm and post-norm forms (beam sizes, alphas and length limits varied), and the
  weights of `attention_maps` for one sentence pair.
tests/js/golden/attention.json: specs of `atkit.attention_view.AttentionView` (deflated
  and raw, two levels, different layer counts, opening states) and the weights that
  `attention_view.decode` reads back, with the averages over heads.

Everything here is deterministic: integer seeds, weights that are ratios of integers,
sentencepiece trained with one thread, no time stamps. tests/test_js_golden.py fails
when a committed file differs from what this program writes now (the floats of
PyTorch's forward passes within a tolerance, as another CPU may round differently).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

from atkit import attention_view, searches
from atkit.files import check_outputs, check_writable, write_text_atomic
from atkit.settings import with_overrides
from tools.errors import run_main

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "js" / "golden"
PROG = "python -m tools.js_golden"
MODEL_FILE = "de-en.js"
SEED = 20240611
BPE_SENTENCES = 300  # per language
BPE_SIZE = 160
MODEL = {"N": 2, "d_model": 8, "d_ff": 16, "h": 2, "max_len": 32}
EOS_BIAS = 2.1  # the output layer's bias for </s>: outputs end at varied lengths
MATRIX_SCALE = 0.5  # weights of this size make outputs that depend on the source
MARGIN = 1e-3  # greedy cases whose best and second log-probability are closer: left out

# Text for spaCy's rules: special cases, prefixes, suffixes, infixes, URLs, every kind
# of whitespace, and characters outside the BPE's pieces.
EDGE_TEXTS = [
    "Ein Hund rennt über die Wiese.",
    "Zwei Kinder, ein Ball – und viel Sonne!",
    "Sie kommt um 9 Uhr, d.h. gleich; bzw. später?",
    "Das kostet 3,50 € bzw. 4 US$ (inkl. MwSt.)",
    "Sie wohnt in der Str. 12, z.B. bei Dr. Meier usw.",
    "Mail an team@example.org oder https://example.org/a/b?x=1&y=2 lesen",
    "www.test-seite.de ist mit 10km/h & 5°C im Netz",
    "geht's? So'n Wetter! Gib's mir, auf'm Tisch.",
    'Er rief: „Halt!“ und sie sagte ‚nein‘ – «leise» "laut"',
    "Fragen??? Ausrufe!!! Punkte... und...Ende",
    "(Klammern) [eckig] {geschweift} <spitz>",
    "A/B-Test, 1990er-Jahre, E-Mail-Adresse und Nord-Süd",
    "   führende und folgende Leerzeichen   ",
    "Tab\tund\nneue Zeile\r\nund  zwei  Leerzeichen",
    "\u00a0geschützt\u00a0und\u2009schmal\u3000breit\u2028Zeile",
    "Ein 😀 Hund 🐕🐕 auf 東京 und Привет",
    "Ligatur ﬁ, Strich ▁ und ▁▁ doppelt",
    "ÄÖÜ äöü ß ẞ Ǆ ǅ ǆ",
    "'Anführung' `Gravis´ 12:30 1.000.000 3.5 -5 +7",
    "Mo.-Fr. 8-17 Uhr; Nr. 5; S. 3 ff.",
    "",
    " ",
    "\t\n",
    ".",
    "...",
    "a",
]
FUZZ_WORDS = [
    "z.B.",
    "Dr.",
    "usw.",
    "auf'm",
    "http://x.de",
    "km",
    "US$",
    "...",
    "E-Mail",
]
FUZZ_CHARS = (
    list("aeinrstAMHDzBkmhäöüßÄ0123456789")
    + list(".,;:!?'\"()[]-–—/&%$€°…«»„“‚‘’`´+*#@_~=<>|")
    + [" ", " ", " ", "\t", "\n", "\u00a0", "😀", "▁", "ﬁ"]
)
# (beam size, alpha) of the beam-search cases: alphas from 0 (no length penalty) to 3
# (long outputs preferred), where the best finished hypothesis changes with the exact
# penalty; a beam of one is greedy decoding.
BEAMS = [(4, 0.6), (2, 1.0), (1, 0.6), (5, 1.5)] + [
    (4, a) for a in (0.0, 0.3, 1.0, 1.5, 2.0, 3.0)
]
# Raw text for sentencepiece alone (no spaCy first): its normalisation of spaces.
RAW_TEXTS = [
    "",
    " ",
    "   ",
    "ein hund",
    "  ein   hund  ",
    "ein\thund",
    "▁ein ▁▁hund",
    "😀",
    "ein 😀😀 hund 東京",
    "Straße ﬁ ẞ",
    "<s> </s> <unk> <blank>",
]


def fuzz_texts(n: int, seed: int) -> list[str]:
    """Random strings of characters and words that spaCy's German rules treat
    specially."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        size = rng.randint(1, 24)
        out.append(
            "".join(
                rng.choice(FUZZ_WORDS)
                if rng.random() < 0.15
                else rng.choice(FUZZ_CHARS)
                for _ in range(size)
            )
        )
    return out


def seeded_weights(lib, model, seed: int) -> None:
    """Every parameter of `model` from integers of a fixed seed: matrices within
    +-MATRIX_SCALE, vectors near 0, LayerNorm gains near 1 (no randomness of torch's,
    whose normal draws differ between CPUs)."""
    rng = np.random.default_rng(seed)
    with lib.torch.no_grad():
        for name, p in model.named_parameters():  # a tied matrix comes once
            codes = rng.integers(-127, 128, tuple(p.shape))
            if name.endswith(".gamma"):
                values = 1 + codes / 1016
            elif p.dim() == 1:
                values = codes / 1016
            else:
                values = codes / 127 * MATRIX_SCALE
            p.copy_(lib.torch.from_numpy(values.astype(np.float32)))
        model.generator.proj.bias[lib.EOS] = EOS_BIAS


def post_norm(lib, cfg, state):
    """The same weights in the post-norm Transformer (no final LayerNorms)."""
    size = state["generator.proj.weight"].shape[0]
    post = with_overrides(cfg.model, "model", norm="post")
    model = lib.build_model(post, size, size)
    model.load_state_dict({k: v for k, v in state.items() if k in model.state_dict()})
    return model.eval()


def greedy_margin(lib, model, src, out, ended) -> float:
    """The smallest gap between the best and the second log-probability over the
    steps greedy decoding decided (teacher-forced on its own output)."""
    tgt = lib.torch.tensor([[lib.BOS, *out]])
    s = lib.torch.tensor([src])
    with lib.torch.no_grad():
        x = model(
            s, tgt, (s != lib.PAD).unsqueeze(-2), lib.subsequent_mask(tgt.size(1))
        )
        logp = model.generator(x)[0]
    steps = logp[: len(out) + (1 if ended else 0)]
    if not len(steps):
        return float("inf")
    top = steps.topk(2, dim=-1).values
    return float((top[:, 0] - top[:, 1]).min())


def decoded(lib, ys) -> list[int]:
    row = ys[0, 1:].tolist()
    return row[: row.index(lib.EOS)] if lib.EOS in row else row


def search(lib, model, src, limit, beam=None):
    """(output ids, whether it ended with </s>) of one framed source."""
    s = lib.torch.tensor([src])
    mask = (s != lib.PAD).unsqueeze(-2)
    limits = lib.torch.tensor([limit])
    step = lib.CachedDecoderStepper
    if beam is None:
        ys = lib.greedy_decode(model, s, mask, limits, lib.BOS, lib.EOS, stepper=step)
    else:
        k, alpha = beam
        ys = lib.beam_search(
            model, s, mask, limits, lib.BOS, lib.EOS, k, alpha, stepper=step
        )
    return decoded(lib, ys), lib.EOS in ys[0, 1:].tolist()


def cases(lib, model_path: Path) -> dict:
    """What the notebook's code gives for the golden inputs (see the docstring)."""
    import pipeline

    model, cfg, vocab, manifest = pipeline.load_exported(model_path)
    models = {"pre": model, "post": post_norm(lib, cfg, model.state_dict())}
    de, _ = lib.corpus.read_split("test_2016_flickr", str(lib.corpus.data_root()))
    texts = EDGE_TEXTS + de[:8] + fuzz_texts(40, SEED)
    words = lib.tokenize_all("de", texts)
    ids = [vocab.encode(w) for w in words]
    spaced = [p for w in words for p in vocab.pieces(w) if " " in p]
    if spaced:
        raise ValueError(f"pieces with a space cannot be joined by spaces: {spaced}")
    out: dict = {
        "note": f"written by `{PROG}`; do not edit",
        "model": MODEL_FILE,
        "vocab": vocab.itos,  # sentencepiece's piece of each id
        # spaCy's tokens of each text, and the BPE's pieces (joined by spaces: no
        # piece holds one) and ids of the tokens joined
        "tokenize": [
            {"text": t, "words": w, "pieces": " ".join(vocab.pieces(w)), "ids": i}
            for t, w, i in zip(texts, words, ids, strict=True)
        ],
        "bpe_raw": [
            {
                "text": t,
                "pieces": " ".join(vocab.sp.encode(t, out_type=str)),
                "ids": vocab.sp.encode(t),
            }
            for t in RAW_TEXTS
        ],
    }
    rng = random.Random(SEED)
    id_lists = [
        [rng.randrange(len(vocab)) for _ in range(rng.randint(0, 12))]
        for _ in range(40)
    ]
    id_lists += [[0, 5, 1, 6], [3, 3, 7, 3], [2, 2], []]
    out["decode"] = [
        {"ids": i, "tokens": vocab.decode(i), "text": lib.detokenize(vocab.decode(i))}
        for i in id_lists
    ]
    limit_of = lambda src: min(cfg.model.max_len, len(src) + lib.MAX_EXTRA)
    short = [lib.frame(i) for i in ids if 0 < len(i) <= 16]  # small files
    greedy, beam = [], []
    for norm, m in models.items():
        for n, src in enumerate(short[:20]):
            for limit in [limit_of(src)] + ([1, 2, 3, 6] if n < 3 else []):
                got, ended = search(lib, m, src, limit)
                if greedy_margin(lib, m, src, got, ended) < MARGIN:
                    continue  # a near tie: another CPU's rounding could flip it
                greedy.append(
                    {
                        "norm": norm,
                        "src": src,
                        "limit": limit,
                        "out": got,
                        "ended": ended,
                    }
                )
        for n, src in enumerate(short[:6]):
            for k, alpha in BEAMS:
                limits = [limit_of(src)]
                if n < 2 and (k, alpha) in BEAMS[:2]:
                    limits += [1, 2, 3, 6]
                for limit in limits:
                    got, _ = search(lib, m, src, limit, (k, alpha))
                    beam.append(
                        {
                            "norm": norm,
                            "src": src,
                            "limit": limit,
                            "k": k,
                            "alpha": alpha,
                            "out": got,
                        }
                    )
    out["greedy"], out["beam"] = greedy, beam
    # the page's whole pipeline for a few texts (greedy, pre-norm as in the file)
    # the first ten texts the model can read, and three whose output stops at its limit
    found = []
    for t, w, i in zip(texts, words, ids, strict=True):
        if not w or len(i) > cfg.model.max_len - 2:
            continue
        src = lib.frame(i)
        got, ended = search(lib, model, src, limit_of(src))
        pieces = vocab.pieces(w)
        found.append(
            {
                "text": t,
                "words": w,
                "ids": i,
                "out": got,
                "tokens": vocab.decode(got),
                "translation": lib.detokenize(vocab.decode(got)),
                "limit": limit_of(src),
                "hitLimit": not ended,
                "unknown": [p for p, j in zip(pieces, i, strict=True) if j == lib.UNK],
            }
        )
    out["translate"] = found[:10] + [c for c in found[10:] if c["hitLimit"]][:3]
    # attention_maps of one pair: the source and its greedy output
    for src in short:  # a pair of a few tokens each
        got, _ = search(lib, model, src, limit_of(src))
        if len(src) <= 10 and 3 <= len(got) <= 10:
            break
    maps = lib.attention_maps(model, src, [lib.BOS, *got])
    out["attention"] = {
        "src": src,
        "tgt": [lib.BOS, *got],
        **{
            k: np.round(v.numpy().astype(np.float64), 6).tolist()
            for k, v in maps.items()
        },
    }
    return out


def view_sentences(rng, S, T, N_enc, N_dec, h) -> dict:
    """Attention-like weights of one sentence: rows of integers over their sum (exact
    in any float arithmetic), the decoder's masked above its diagonal."""

    def rows(n, q, k, causal=False):
        counts = rng.integers(0, 9, (n, h, q, k)).astype(np.float64)
        if causal:
            counts *= np.tril(np.ones((q, k)))
        counts[..., 0] += 1  # no empty row
        return counts / counts.sum(-1, keepdims=True)

    return {
        "src_tokens": [f"s{i}" for i in range(S)],
        "tgt_tokens": ["<s>", *(f"t{i}" for i in range(T - 1))],
        "encoder": rows(N_enc, S, S),
        "decoder": rows(N_dec, T, T, causal=True),
        "cross": rows(N_dec, T, S),
    }


def attention_cases() -> dict:
    """AttentionView specs and what `attention_view.decode` reads from them."""
    rng = np.random.default_rng(SEED)
    views = {
        "deflate": attention_view.AttentionView(
            [view_sentences(rng, 6, 5, 2, 3, 3), view_sentences(rng, 4, 7, 2, 3, 3)],
            kind="decoder",
            layer=3,
            head="average",
        ),
        "raw": attention_view.AttentionView(
            [view_sentences(rng, 5, 4, 1, 2, 2)], levels=7, compress=False
        ),
    }
    out = {"note": f"written by `{PROG}`; do not edit", "views": {}}
    for name, view in views.items():
        spec = view.spec()
        back = attention_view.decode(spec)
        out["views"][name] = {
            "spec": spec,
            "decoded": [
                {
                    kind: {
                        "codes": np.rint(s[kind] * spec["levels"]).astype(int).tolist(),
                        "average": np.round(s[kind].mean(axis=1), 9).tolist(),
                    }
                    for kind in attention_view.KINDS
                }
                for s in back
            ],
        }
    return out


def model_file(lib) -> str:
    """The tiny model as a model file of atkit/export.py (see the docstring)."""
    from atkit import export

    root = str(lib.corpus.data_root())
    sentences = [
        s
        for lang in lib.LANGS
        for s in lib.tokenized("train", lang, BPE_SENTENCES, root)
    ]
    vocab = lib.train_shared_bpe(sentences, BPE_SIZE)
    from pipeline import run_config

    cfg = run_config("ci", vocab="bpe", tie="all", bpe_size=BPE_SIZE, **MODEL)
    model = lib.build_model(cfg.model, len(vocab), len(vocab))
    seeded_weights(lib, model, SEED)
    manifest = {
        "what": "a tiny untrained model for the JavaScript unit tests",
        "preset": "ci",
        "machine": "none: its weights are drawn from a seed",
        "torch": "none",
        "run": "none",
        "best_step": 0,
        "n_avg": 1,
        "averaged_steps": [0],
        "searches": {  # the records' defaults, as tools.export_model writes them
            name: searches.manifest_entry(lib.SEARCHES, name)
            for name in ("greedy", "beam")
        },
        "max_extra": lib.MAX_EXTRA,
        "quant": "int8",
        "config": cfg.to_dict(),
    }
    detok = [
        [export.js_regex(lib._NO_SPACE_BEFORE.pattern), "$1"],
        [export.js_regex(lib._NO_SPACE_AFTER.pattern), "$1"],
    ]
    return export.model_js(
        "de-en",
        manifest,
        model.state_dict(),
        vocab.model_proto,
        export.spacy_rules("de"),
        detok,
    )


def golden(lib) -> dict[str, str]:
    """{file name: text} of the golden files. The cases are computed from the model
    file as the pipeline loads it (`pipeline.load_exported`)."""
    import tempfile

    text = model_file(lib)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / MODEL_FILE
        path.write_text(text, encoding="utf-8")
        found = cases(lib, path)
    return {
        MODEL_FILE: text,
        "cases.json": dump(found),
        "attention.json": dump(attention_cases()),
    }


NAMES = (MODEL_FILE, "cases.json", "attention.json")  # the files golden() makes


def sources() -> list[tuple[str, Path]]:
    """What the golden files are made from, as (what, path): the notebook, the
    module made from it, atkit's code and the Multi30k files."""
    import nbexport
    from atkit import data

    found = [("the notebook", nbexport.NOTEBOOK), ("its module", nbexport.EXPORT)]
    found += [("atkit's", p) for p in sorted((ROOT / "atkit").glob("*.*"))]
    return found + [("the Multi30k file", p) for p in data.data_files()]


def dump(obj: dict) -> str:
    """JSON with one line per entry of each top-level list (short diffs)."""
    one = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    parts = []
    for key, value in obj.items():
        if isinstance(value, list):
            value = "[\n" + ",\n".join(map(one, value)) + "\n]"
        elif isinstance(value, dict) and key == "views":
            value = "{\n" + ",\n".join(f"{one(k)}:{one(v)}" for k, v in value.items())
            value += "\n}"
        else:
            value = one(value)
        parts.append(f"{one(key)}:{value}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=GOLDEN, help="folder of the files")
    ap.add_argument(
        "--check", action="store_true", help="exit 1 if a file in --out differs"
    )
    args = ap.parse_args(argv)
    if not args.check:  # before the work: a folder, whose files are no inputs
        check_writable(args.out, "--out")
        check_outputs([("--out", args.out / n) for n in NAMES], sources())
    import annotated_transformer_lib as lib

    lib.torch.set_num_threads(1)
    files = golden(lib)
    if args.check:
        stale = [
            n
            for n, t in files.items()
            if not (args.out / n).is_file()
            or (args.out / n).read_text(encoding="utf-8") != t
        ]
        for n in stale:
            state = "is stale" if (args.out / n).is_file() else "is missing"
            print(f"{args.out / n} {state}: run `{PROG}`", file=sys.stderr)
        return 1 if stale else 0
    for name, text in files.items():
        write_text_atomic(args.out / name, text)
        print(f"{args.out / name}: {len(text.encode()):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
