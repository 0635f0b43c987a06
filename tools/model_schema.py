"""The schema of a model file's content: atkit/page/model_schema.json, which the
Python reader (atkit/export.py, with the `jsonschema` package) and the page's reader
(atkit/page/translator.js, with the few lines that check the keywords used here) both
check a model file against, so that they refuse the same files.

    python -m tools.model_schema           # write atkit/page/model_schema.json
    python -m tools.model_schema --check   # exit 1 if the committed file differs

It is a JSON Schema (draft 2020-12) of the file's `meta`: the manifest's fields with
their types and bounds, where each tensor lies, the sentencepiece model, spaCy's
rules and the detokenizer. Two parts come from elsewhere:

- `searches`: the searches the page implements (PAGE_SEARCHES, the one list of
  them: the page and tools.export_model read it from the schema), each option with
  the type of its default and the bounds of the notebook's record in `SEARCHES`
  (atkit/searches.py's Option);
- the model's sizes: the lower bounds that the notebook's ModelConfig declares on its
  fields (`setting(...)`, atkit/settings.py), and upper bounds of the page's own
  (PAGE_LIMITS: a browser tab computes with the model).

Two formats are the project's own: `js-regex`, a pattern that compiles as a
JavaScript RegExp with the `u` flag and keeps to what atkit/export.py's `js_regex`
writes (REGEX_GRAMMAR, checked as the schema's `pattern`, so that Python's `re` and
JavaScript agree on which patterns compile); `base64`. Every `pattern` ends in
`(?![\\s\\S])`, not `$`, which in Python also matches before a final newline.
tests/test_translate.py fails when the committed file differs from what this
program writes now.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.errors import run_main

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "atkit" / "page" / "model_schema.json"
PROG = "python -m tools.model_schema"
PAGE_SEARCHES = ("greedy", "beam")  # what atkit/page/translator.js implements
# What a browser tab computes with: positions (a table of max_len x d_model floats),
# layers, sizes and vocabulary pieces, and the bytes of the weights.
PAGE_LIMITS = {
    "N": 64,
    "d_model": 8192,
    "d_ff": 65536,
    "h": 256,
    "max_len": 8192,
    "bpe_size": 1_000_000,
    "bytes": 1_000_000_000,
    "tensors": 10_000,
}
END = r"(?![\s\S])"  # the end of the text (Python's $ also matches before a \n)
ESCAPE = r"u\{[0-9a-fA-F]{1,6}\}|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|p\{(?:L|N|Nd)\}"
ATOM_CHAR = r"[^\\\[\](){}|*+?\n\r]"
CLASS = r"\[\^?(?:[^\\\[\]\n\r]|\\(?:" + ESCAPE + r"|[\^$\\.*+?()\[\]{}|/\-]))+\]"
OUTSIDE_ESCAPE = r"\\(?:" + ESCAPE + r"|[\^$\\.*+?()\[\]{}|/])"
QUANTIFIER = r"(?:[*+?]|\{[0-9]{1,4}(?:,[0-9]{0,4})?\})\??(?![*+?{])"
LOOKBEHIND = r"\(\?<[=!](?:" + CLASS + "|" + OUTSIDE_ESCAPE + "|" + ATOM_CHAR + r")+\)"
REGEX_GRAMMAR = (
    "^(?:"
    + "|".join(
        [
            LOOKBEHIND + r"(?![*+?{])",  # characters looked back at (a fixed width)
            r"\((?:\?:|\?[=!]|(?!\?))",  # a group, a lookahead
            r"\)",
            r"\|",
            QUANTIFIER,
            CLASS,
            OUTSIDE_ESCAPE,
            ATOM_CHAR,
        ]
    )
    + ")*"
    + END
)
NAME = "^[A-Za-z0-9_.]{1,200}" + END  # a state-dict name


def integer(low=None, high=None, **more) -> dict:
    out = {"type": "integer", **more}
    if low is not None:
        out["minimum"] = low
    if high is not None:
        out["maximum"] = high
    return out


def string(max_length=10_000, **more) -> dict:
    return {"type": "string", "maxLength": max_length, **more}


def obj(properties: dict, required=None, extra=False) -> dict:
    """An object of these properties (all required unless `required` says which);
    others refused unless `extra` (True, or the schema of each other value)."""
    return {
        "type": "object",
        "required": list(properties if required is None else required),
        "properties": properties,
        "additionalProperties": extra,
    }


def option_schema(default, bounds) -> dict:
    """An option of a search: the type of its default, the record's bounds."""
    kind = "integer" if isinstance(default, int) else "number"
    out = {"type": kind}
    for key, word in (("low", "minimum"), ("high", "maximum")):
        if getattr(bounds, key) is not None:
            out[word] = getattr(bounds, key)
    if bounds.above is not None:
        out["exclusiveMinimum"] = bounds.above
    return out


def searches_schema(searches: dict) -> dict:
    """The manifest's `searches`: each search the page implements (optional: one the
    file does not record is refused when asked for), every option of it required,
    with the record's bounds."""
    props = {}
    for name in PAGE_SEARCHES:
        record = searches[name]
        defaults = record.defaults()
        props[name] = obj(
            {k: option_schema(defaults[k], b) for k, b in record.options.items()}
        )
    return {**obj(props, required=[]), "minProperties": 1}


def field_bounds(config_cls) -> dict:
    """{field name: the bounds it declares with `setting(...)`} of a dataclass."""
    from dataclasses import fields

    return {f.name: dict(f.metadata.get("check", {})) for f in fields(config_cls)}


def model_schema(bounds: dict) -> dict:
    """config.model: the sizes the page reads, the lower bounds that ModelConfig's
    fields declare (`bounds`: see field_bounds) and the page's upper ones; the other
    fields as RunConfig checks them on reading."""
    sizes = {
        k: integer(bounds[k].get("low", 1), PAGE_LIMITS[k])
        for k in ("N", "d_model", "d_ff", "h", "max_len")
    }
    sizes["max_len"]["minimum"] = max(sizes["max_len"]["minimum"], 2)  # <s>, </s>
    return obj(
        {
            **sizes,
            "norm": {"enum": list(bounds["norm"]["choices"])},
            "tie": {"enum": list(bounds["tie"]["choices"])},
        },
        extra=True,
    )


def schema(searches: dict, model_config) -> dict:
    """The schema (see the module docstring) for the notebook's SEARCHES and its
    ModelConfig (the class)."""
    from atkit import export

    limit = PAGE_LIMITS["bytes"]
    steps = integer(0)
    manifest = obj(
        {
            "what": string(),
            "preset": string(100),
            "machine": string(),
            "torch": string(100),
            "run": string(),
            "best_step": steps,
            "n_avg": integer(1),
            "averaged_steps": {"type": "array", "minItems": 1, "items": steps},
            "searches": searches_schema(searches),
            "max_extra": integer(0, PAGE_LIMITS["max_len"]),
            "quant": {"enum": list(export.QUANTS)},
            "config": obj(
                {
                    "model": model_schema(field_bounds(model_config)),
                    "vocab": {"const": "bpe"},
                    "bpe_size": integer(5, PAGE_LIMITS["bpe_size"]),
                    "src_lang": string(10, pattern="^[a-z]{2,3}" + END),
                },
                extra=True,
            ),
            "domain": obj(
                {
                    "corpus": string(),
                    "rare_below": integer(1),
                    "rare": {"type": "string", "format": "base64"},
                    "note_above": {"type": "number", "minimum": 0, "maximum": 1},
                    "min_words": integer(0),
                }
            ),
            "bleu": {"type": "object"},
        },
        required=[
            *("what", "preset", "machine", "torch", "run", "best_step", "n_avg"),
            *("averaged_steps", "searches", "max_extra", "quant", "config"),
        ],
    )
    offset = integer(0, limit, multipleOf=4)  # float32 views need 4-byte offsets
    tensor = obj(
        {
            "name": string(200, pattern=NAME),
            "shape": {
                "type": "array",
                "minItems": 1,
                "maxItems": 2,
                "items": integer(1, limit),
            },
            "dtype": {"enum": ["int8", "float16", "float32"]},
            "offset": offset,
            "scales": offset,  # int8: the float32 scale of each row
        },
        required=["name", "shape", "dtype", "offset"],
    )
    regex = {"$ref": "#/$defs/regex"}
    spacy = obj(
        {
            "spacy": string(100),
            "lang": string(10, pattern="^[a-z]{2,3}" + END),
            **{key: {"anyOf": [regex, {"type": "null"}]} for key in export.AFFIXES},
            "faster_heuristics": {"type": "boolean"},
            "specials": {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "minItems": 1,
                    "items": string(1000),
                },
            },
            "whitespace": string(1000, minLength=1),
        }
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"Written by `{PROG}` (tools/model_schema.py); do not edit.",
        "title": "The content (`meta`) of a model file of atkit/export.py",
        **obj(
            {
                "manifest": manifest,
                "quant": {"enum": list(export.QUANTS)},
                "tensors": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": PAGE_LIMITS["tensors"],
                    "items": tensor,
                },
                "aliases": {
                    "type": "object",
                    "maxProperties": PAGE_LIMITS["tensors"],
                    "additionalProperties": string(200, pattern=NAME),
                },
                "sentencepiece": obj(
                    {"offset": integer(0, limit), "size": integer(1, limit)}
                ),
                "spacy": spacy,
                "detokenize": {
                    "type": "array",
                    "maxItems": 64,
                    "items": {
                        "type": "array",
                        "minItems": 2,
                        "maxItems": 2,
                        "prefixItems": [regex, string(1000)],
                    },
                },
                "encoding": {"const": "deflate"},
                "size": integer(0, limit),
            },
            required=list(export.META_KEYS),
        ),
        "$defs": {
            "regex": {
                "type": "string",
                "maxLength": 100_000,
                "pattern": REGEX_GRAMMAR,
                "format": "js-regex",
            }
        },
    }


def text(searches: dict, model_config) -> str:
    out = schema(searches, model_config)
    return json.dumps(out, indent=1, ensure_ascii=True) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--check", action="store_true", help="exit 1 if the committed file differs"
    )
    args = ap.parse_args(argv)
    import annotated_transformer_lib as book
    from atkit.files import write_text_atomic

    fresh = text(book.SEARCHES, book.ModelConfig)
    if args.check:
        if not SCHEMA.is_file() or SCHEMA.read_text(encoding="utf-8") != fresh:
            print(f"{SCHEMA} is stale: run `{PROG}`", file=sys.stderr)
            return 1
        return 0
    write_text_atomic(SCHEMA, fresh)
    print(f"{SCHEMA}: {len(fresh):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main, PROG))
