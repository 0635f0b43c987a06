"""The trained model in one file that the browser and the notebook both read.

`model_js` writes a translation model for the page `docs/translate.html`: its
weights (each matrix as int8 with one float32 scale per row, or as float16; vectors as
float32; a tied matrix once), the run's sentencepiece model (the proto bytes
`SharedBPE.state()` holds) and spaCy's tokenizer rules for the source language (see
`spacy_rules`), with a manifest (the run's config, where the weights come from, the
preset, the machine, BLEU). The file is JavaScript: one statement that stores an
object in `globalThis.atkitModels[direction]`, so that a page opened from disk can
load it with a `<script src>` (Chromium refuses `fetch()` of file:// URLs). The object
holds the direction, `meta` (the JSON text of everything but the bytes: the manifest,
where each tensor lies, spaCy's rules), `data` (the bytes, deflated and
base64-encoded) and `sha256`, the SHA-256 of every other byte of the file. The file is
exactly that statement after its header line (`file_text`): `read_model` here and the
page's reader (atkit/page/translator.js) refuse, as damaged and with how to restore
it, a file with anything before, between or after its parts, one whose hash differs,
one whose `meta` breaks the schema both read (atkit/page/model_schema.json, written by
`python -m tools.model_schema`: the manifest's fields with their types and bounds,
the search options' bounds from the notebook's SEARCHES), and one whose tensors do
not have the shapes that its manifest's settings give or do not lie within its data.
`read_model` gives the content back to Python; dequantized as the page dequantizes
it, the weights load into the notebook's `build_model` (see `pipeline.export`'s
`load_exported`).

The same content gives the same bytes: no time stamps, a fixed order, deflate at one
level, so the committed file changes only when the model does.

Nothing here imports the notebook: the caller hands in a state dict and plain data.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from atkit.files import write_text_atomic
from atkit.settings import current_config

if TYPE_CHECKING:
    import torch

FORMAT = 3  # 3: the hash covers every byte but its own (2: the JSON only; 1: none)
QUANTS = ("int8", "float16")
GLOBAL = "atkitModels"  # the page reads globalThis.atkitModels[direction]
_HEADER = (
    "/* The Annotated Transformer, rebuilt: the {direction} model of "
    "translate.html, written by `python -m tools.export_model`; do not edit. */\n"
)
_HEADER_RE = re.compile(
    r"/\* The Annotated Transformer, rebuilt: the ([a-z]+-[a-z]+) model of "
    r"translate\.html, written by `python -m tools\.export_model`; do not edit\. \*/\n"
)
_OTHER_FORMAT = re.compile(
    r'\(globalThis\.atkitModels = globalThis\.atkitModels \|\| \{\}\)\["[a-z-]+"\] = '
    r'\{"format":(\d+),'
)
_META, _DATA, _END = '","meta":', ',"data":"', '"};\n'
_CONFLICT = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.MULTILINE)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


ROOT = Path(__file__).resolve().parents[1]
# The schema of `meta` that this module and the page (atkit/page/translator.js) both
# check a model file against, written by `python -m tools.model_schema`.
SCHEMA = ROOT / "atkit" / "page" / "model_schema.json"
# the order of the fields in `meta`
META_KEYS = (
    "manifest",
    "quant",
    "tensors",
    "aliases",
    "sentencepiece",
    "spacy",
    "detokenize",
    "encoding",
    "size",
)
AFFIXES = ("prefix", "suffix", "infix", "url")  # spaCy's patterns in `spacy`


class ExportError(ValueError):
    """An exported model file that cannot be used; the message names the file."""


# ------------------------------------------------------------------ spaCy's rules


@functools.cache
def python_whitespace() -> str:
    """Every character for which Python's str.isspace() is true: where spaCy's
    tokenizer splits, and what Python's regex \\s matches."""
    return "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())


def _class_of(chars: str) -> str:
    return "".join(f"\\u{{{ord(c):x}}}" for c in chars)


# Escapes that mean the same in Python's re and in a JavaScript RegExp with the u flag.
_JS_SYNTAX = set("^$\\.*+?()[]{}|/")


def js_regex(pattern: str) -> str:
    """A Python `re` pattern (spaCy's tokenizer rules) as a JavaScript RegExp source
    for the `u` flag, with the same matches: \\UXXXXXXXX becomes \\u{X}; \\w, \\d
    and \\s take Python's Unicode meaning; escaped punctuation that JavaScript's u mode
    refuses (\\', \\!, \\#) becomes the character itself; the inline (?u) goes.
    Anything this function does not know (other flags, \\b, named groups) is an error
    rather than a silent change of meaning."""
    space = _class_of(python_whitespace())
    word, digit = "\\p{L}\\p{N}_", "\\p{Nd}"
    out, i, in_class = [], 0, False
    if pattern.startswith("(?u)"):
        i = 4
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1]
            if nxt == "U":
                out.append(f"\\u{{{int(pattern[i + 2 : i + 10], 16):x}}}")
                i += 10
                continue
            if nxt in "ux":
                n = 4 if nxt == "u" else 2
                out.append(pattern[i : i + 2 + n])
                i += 2 + n
                continue
            known = {"w": word, "d": digit, "s": space}
            if nxt in known:
                out.append(known[nxt] if in_class else f"[{known[nxt]}]")
            elif nxt == "S" and not in_class:
                out.append(f"[^{space}]")
            elif nxt.isalnum():
                raise ValueError(f"js_regex: \\{nxt} is not supported ({pattern[:60]})")
            elif nxt in _JS_SYNTAX or (nxt == "-" and in_class):
                out.append(c + nxt)
            else:
                out.append(nxt)
            i += 2
            continue
        if c == "(" and pattern.startswith("(?", i):
            if not any(pattern.startswith(s, i) for s in ("(?:", "(?=", "(?!", "(?<")):
                raise ValueError(f"js_regex: {pattern[i : i + 4]!r} is not supported")
            if pattern.startswith("(?P", i):
                raise ValueError("js_regex: named groups are not supported")
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            if pattern.startswith("^", i + 1):
                out.append("^")
                i += 1
            if pattern.startswith("]", i + 1):  # a literal ] first in the class
                out.append("\\]")
                i += 1
            i += 1
            continue
        if c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


def spacy_rules(lang: str) -> dict:
    """spaCy's tokenizer for `lang` (`spacy.blank(lang).tokenizer`, the one Part 3
    uses) as data for the page: prefix, suffix and infix patterns and the URL pattern
    as JavaScript RegExp sources, the special cases (text -> token texts), and the
    characters spaCy splits on. atkit/page/translator.js runs spaCy's algorithm on
    them."""
    import spacy
    from spacy.attrs import ORTH

    tok = spacy.blank(lang).tokenizer
    if tok.token_match is not None:
        raise ValueError(f"spacy.blank({lang!r}) has a token_match; not supported")

    def source(fn):
        return None if fn is None else js_regex(fn.__self__.pattern)

    return {
        "spacy": spacy.__version__,
        "lang": lang,
        "prefix": source(tok.prefix_search),
        "suffix": source(tok.suffix_search),
        "infix": source(tok.infix_finditer),
        "url": source(tok.url_match),
        "faster_heuristics": bool(tok.faster_heuristics),
        "specials": {
            text: [t[ORTH] if ORTH in t else t["ORTH"] for t in tokens]
            for text, tokens in sorted(tok.rules.items())
        },
        "whitespace": python_whitespace(),
    }


# ------------------------------------------------------------------ the weights


def quantize_rows(w: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes and one float32 scale per row: w ~ codes * scale, |codes| <= 127."""
    import torch

    w = w.detach().float().cpu()
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return codes.numpy(), scale.numpy().astype("<f4")


def dequantize_rows(codes: np.ndarray, scale: np.ndarray) -> torch.Tensor:
    """The float32 matrix the page computes with (one float32 product per entry)."""
    import torch

    return torch.from_numpy(codes.astype(np.float32)) * torch.from_numpy(scale)[:, None]


def _aligned(blob: bytearray) -> int:
    blob.extend(b"\0" * (-len(blob) % 4))  # Float32Array views need 4-byte offsets
    return len(blob)


def pack_state(state: dict, quant: str = "int8") -> tuple[list, dict, bytearray]:
    """(tensor entries, aliases, blob): each distinct tensor of `state` once, in its
    order; a tensor under several names (a tied matrix) is stored under the first and
    the others are aliases of it. Matrices become `quant`, vectors float32."""
    import torch

    if quant not in QUANTS:
        raise ValueError(f"quant={quant!r}: use one of {QUANTS}")
    entries, aliases, blob, seen = [], {}, bytearray(), {}
    for name, t in state.items():
        if not torch.is_tensor(t) or not t.is_floating_point():
            raise ValueError(f"{name}: only floating-point tensors can be exported")
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.shape)
        if key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        entry = {"name": name, "shape": list(t.shape)}
        if t.dim() == 2 and quant == "int8":
            codes, scale = quantize_rows(t)
            entry.update(dtype="int8", offset=_aligned(blob))
            blob.extend(codes.tobytes())
            entry["scales"] = _aligned(blob)
            blob.extend(scale.tobytes())
        elif t.dim() == 2:
            entry.update(dtype="float16", offset=_aligned(blob))
            blob.extend(t.detach().cpu().numpy().astype("<f2").tobytes())
        else:
            entry.update(dtype="float32", offset=_aligned(blob))
            blob.extend(t.detach().float().cpu().numpy().astype("<f4").tobytes())
        entries.append(entry)
    return entries, aliases, blob


def unpack_state(entries: list, aliases: dict, blob: bytes) -> dict:
    """The float32 state dict the page computes with: every name, aliases too."""
    import torch

    out = {}
    for e in entries:
        shape, at = tuple(e["shape"]), e["offset"]
        n = int(np.prod(shape))
        if e["dtype"] == "int8":
            codes = np.frombuffer(blob, np.int8, n, at).reshape(shape).copy()
            scale = np.frombuffer(blob, "<f4", shape[0], e["scales"]).copy()
            out[e["name"]] = dequantize_rows(codes, scale)
        elif e["dtype"] == "float16":
            a = np.frombuffer(blob, "<f2", n, at).reshape(shape).astype(np.float32)
            out[e["name"]] = torch.from_numpy(a)
        else:
            a = np.frombuffer(blob, "<f4", n, at).reshape(shape).copy()
            out[e["name"]] = torch.from_numpy(a)
    for name, target in aliases.items():
        out[name] = out[target]
    return out


# ------------------------------------------------------------------ the shapes


def expected_shapes(config: dict) -> dict[str, list[int]]:
    """Every state-dict name of the notebook's model for a run config (a dict, as
    the manifest holds it) with its shape: what `build_model` makes for a shared
    BPE vocabulary of `bpe_size` pieces. atkit/page/translator.js has the same rule."""
    m = config["model"]
    n, d, ff, v = m["N"], m["d_model"], m["d_ff"], config["bpe_size"]
    out = {}
    for stack, sublayers in (("encoder", 2), ("decoder", 3)):
        for layer in range(n):
            p = f"{stack}.layers.{layer}."
            attention = ["self_attn"] + (["src_attn"] if stack == "decoder" else [])
            for a in attention:
                for w in ("w_q", "w_k", "w_v", "w_o"):
                    out[f"{p}{a}.{w}.weight"] = [d, d]
                    out[f"{p}{a}.{w}.bias"] = [d]
            out[p + "feed_forward.w_1.weight"] = [ff, d]
            out[p + "feed_forward.w_1.bias"] = [ff]
            out[p + "feed_forward.w_2.weight"] = [d, ff]
            out[p + "feed_forward.w_2.bias"] = [d]
            for i in range(sublayers):
                out[f"{p}sublayer.{i}.norm.gamma"] = [d]
                out[f"{p}sublayer.{i}.norm.beta"] = [d]
        if m["norm"] == "pre":  # the pre-norm stacks end in a norm of their own
            out[f"{stack}.norm.gamma"] = [d]
            out[f"{stack}.norm.beta"] = [d]
    out["src_embed.0.lut.weight"] = [v, d]
    out["tgt_embed.0.lut.weight"] = [v, d]
    out["generator.proj.weight"] = [v, d]
    out["generator.proj.bias"] = [v]
    return out


def shape_problems(manifest: dict, entries: list, aliases: dict) -> list[str]:
    """How the stored tensors (`entries`, `aliases`) differ from what the manifest's
    settings give (none: they agree), in words, the first few."""
    try:
        config = manifest["config"]
        m = config["model"]
        for key in ("N", "d_model", "d_ff", "h"):
            if not isinstance(m[key], int) or isinstance(m[key], bool) or m[key] < 1:
                return [f"config.model.{key}={m[key]!r} is not a size"]
        if m["d_model"] % m["h"]:
            return [f"d_model={m['d_model']} is not a multiple of h={m['h']}"]
        if config["vocab"] != "bpe":
            return [f"vocab={config['vocab']!r}: the page reads a shared BPE model"]
        want = expected_shapes(config)
    except KeyError as err:
        return [f"the manifest's config lacks {err}"]
    except TypeError as err:
        return [f"the manifest's config cannot be read ({err})"]
    have = {e["name"]: list(e["shape"]) for e in entries}
    have.update({name: have.get(target) for name, target in aliases.items()})
    problems = [f"{name} is missing" for name in want if name not in have]
    problems += [f"{name} is not in the model" for name in have if name not in want]
    problems += [
        f"{name} is {have[name]}, the settings give {shape}"
        for name, shape in want.items()
        if name in have and have[name] != shape
    ]
    return problems[:3]


# ------------------------------------------------------------------ the file


@dataclass
class Exported:
    """What `read_model` found: the manifest, the float32 weights (every state-dict
    name), the sentencepiece model proto, spaCy's rules and the detokenizer's."""

    manifest: dict
    state_dict: dict
    spm_proto: bytes
    spacy: dict
    detokenize: list
    path: Path | None = None


def file_text(direction: str, meta_text: str, data: str) -> str:
    """The text of a model file, and the only one its content has: the header line,
    then one statement that stores {"format", "direction", "sha256", "meta", "data"}
    in globalThis.atkitModels[direction], `meta_text` written as json.dumps writes
    a string; "sha256" is the SHA-256 of every other byte of the file."""
    head = _HEADER.format(direction=direction) + _statement_start(direction)
    tail = _META + json.dumps(meta_text) + _DATA + data + _END
    sha = hashlib.sha256((head + tail).encode("ascii")).hexdigest()
    return head + sha + tail


def _statement_start(direction: str) -> str:
    return (
        f'(globalThis.{GLOBAL} = globalThis.{GLOBAL} || {{}})["{direction}"] = '
        f'{{"format":{FORMAT},"direction":"{direction}","sha256":"'
    )


def wrap(direction: str, meta: dict, data: str) -> str:
    """The text of a model file: `meta` (its fields in the order of META_KEYS) as
    JSON text, `data` (deflated, base64), and the hash of the rest."""
    meta_text = json.dumps(
        {key: meta[key] for key in META_KEYS}, ensure_ascii=True, separators=(",", ":")
    )
    return file_text(direction, meta_text, data)


def model_js(
    direction: str,
    manifest: dict,
    state: dict,
    spm_proto: bytes,
    spacy: dict,
    detokenize: list,
    quant: str = "int8",
) -> str:
    """The text of a model file (see the module docstring). `detokenize`: the
    notebook's detokenize as (JavaScript pattern, replacement) pairs, applied in
    order to the output tokens joined by spaces."""
    if not re.fullmatch(r"[a-z]+-[a-z]+", direction):
        raise ValueError(f"direction={direction!r}: like 'de-en'")
    entries, aliases, blob = pack_state(state, quant)
    problems = shape_problems(manifest, entries, aliases)
    if problems:
        raise ValueError(
            f"the weights do not fit the manifest's settings: {'; '.join(problems)}"
        )
    proto_at = len(blob)
    blob.extend(spm_proto)
    payload = zlib.compress(bytes(blob), 9)
    meta = {
        "manifest": manifest,
        "quant": quant,
        "tensors": entries,
        "aliases": aliases,
        "sentencepiece": {"offset": proto_at, "size": len(spm_proto)},
        "spacy": spacy,
        "detokenize": detokenize,
        "encoding": "deflate",
        "size": len(blob),
    }
    problem = meta_problem(meta)
    if problem:
        raise ValueError(f"the model file would break its schema: {problem}")
    return wrap(direction, meta, base64.b64encode(payload).decode("ascii"))


def write_if_changed(path, text: str) -> bool:
    """Write `text` to `path` unless the file holds it already; True if written."""
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_text_atomic(path, text)
    return True


def restore_advice(path) -> str:
    """What to do about a missing or damaged model file: a committed one (in the
    repository's docs/translate/) comes back with git."""
    try:
        rel = Path(path).resolve().relative_to(ROOT)
    except (ValueError, OSError):
        rel = None
    again = "export it again with `python -m tools.export_model`"
    if rel is not None and rel.parts[:2] == ("docs", "translate"):
        return f"restore it with `git checkout {rel.as_posix()}` (or {again})"
    return again


# ------------------------------------------------------------------ reading, checked


class _Damaged(ValueError):
    """Why a model file is damaged, in words (the caller adds the file and what to
    do)."""


@functools.cache
def schema() -> dict:
    """atkit/page/model_schema.json (see `SCHEMA`)."""
    return json.loads(SCHEMA.read_text(encoding="utf-8"))


def js_regex_compiles(source: str) -> bool:
    """Whether a pattern that keeps to the schema's grammar of patterns compiles as
    a JavaScript RegExp with the u flag: Python's `re` compiles it with the few
    escapes that differ made Python's (\\u{X}; \\p{L} and \\p{N} as \\w, \\p{Nd} as
    \\d: a class escape, as in JavaScript, so that a range to or from one is an
    error in both); the grammar keeps out what the two read differently."""
    import warnings

    if not isinstance(source, str):
        return True  # a format speaks of strings only; `type` checks the rest

    def python(m):
        if m[2] is not None:
            return (
                f"\\U{int(m[2], 16):08x}" if int(m[2], 16) <= sys.maxunicode else "\\q"
            )
        if m[3] is not None:
            return "\\d" if m[3] == "Nd" else "\\w"
        return m[0]

    text = re.sub(r"\\(u\{([0-9a-fA-F]+)\}|p\{(L|N|Nd)\}|.)", python, source)
    if _repeated_lookahead(source):
        return False  # Python repeats an assertion, JavaScript's u mode refuses to
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            re.compile(text)
    except (re.error, OverflowError, RecursionError):
        return False
    return True


_TOKEN = re.compile(r"\\.|\[(?:\\.|[^\]\\])*\]|\(\?<?[=!:]?|[()]|[*+?{]|.", re.DOTALL)


def _repeated_lookahead(source: str) -> bool:
    """Whether a quantifier follows a lookahead group (`(?=a)*`)."""
    opened, closed = [], None
    for m in _TOKEN.finditer(source):
        token = m[0]
        if token[0] in "*+?{" and closed in ("(?=", "(?!"):
            return True
        closed = None
        if token.startswith("("):
            opened.append(token)
        elif token == ")" and opened:
            closed = opened.pop()
    return False


def _base64(value) -> bool:
    if not isinstance(value, str):
        return True
    return _BASE64.fullmatch(value) is not None and len(value) % 4 == 0


@functools.cache
def _validator():
    import jsonschema

    formats = jsonschema.FormatChecker(formats=())
    formats.checks("js-regex")(js_regex_compiles)
    formats.checks("base64")(_base64)
    return jsonschema.Draft202012Validator(schema(), format_checker=formats)


def _where(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".") or "meta"


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _error_words(err) -> str:
    """One schema error in the words atkit/page/translator.js uses for it."""
    where, key, want = _where(err.absolute_path), err.validator, err.validator_value
    value = err.instance
    if key == "required":
        return f"{where}.{next(k for k in want if k not in value)} is missing"
    if key == "additionalProperties":
        extra = next(k for k in value if k not in err.schema.get("properties", {}))
        return f"{where}.{extra} is not a field of a model file"
    if key == "type":
        return f"{where}={_short(value)} is not of type {want}"
    words = {
        "enum": f"must be one of {_short(want)}",
        "const": f"must be {_short(want)}",
        "minimum": f"must be >= {want}",
        "maximum": f"must be <= {want}",
        "exclusiveMinimum": f"must be > {want}",
        "multipleOf": f"must be a multiple of {want}",
        "minLength": f"must be at least {want} characters long",
        "maxLength": f"must be at most {want} characters long",
        "minItems": f"must have at least {want} items",
        "maxItems": f"must have at most {want} items",
        "minProperties": f"must have at least {want} fields",
        "maxProperties": f"must have at most {want} fields",
        "pattern": "is not of the form the exporter writes",
    }
    if key == "format":
        words[key] = {
            "js-regex": "is not a pattern the page can compile",
            "base64": "is not base64",
        }.get(want, f"is not {want}")
    return f"{where}={_short(value)}: {words.get(key, err.message)}"


def meta_problem(meta) -> str | None:
    """What breaks the schema in a file's `meta` (None: nothing), in words."""
    import jsonschema

    err = jsonschema.exceptions.best_match(_validator().iter_errors(meta))
    if err is None:
        return None
    while err.context:  # anyOf: the branch that got furthest
        err = jsonschema.exceptions.best_match(err.context)
    return _error_words(err)


def layout_problems(meta: dict) -> list[str]:
    """Where the tensors and the sentencepiece model lie in the data, against its
    size: each within it, an int8 matrix with its scales, an alias of a tensor."""
    size, problems = meta["size"], []
    width = {"int8": 1, "float16": 2, "float32": 4}
    names = {e["name"] for e in meta["tensors"]}
    for e in meta["tensors"]:
        n = 1
        for dim in e["shape"]:
            n *= dim
        if e["offset"] + n * width[e["dtype"]] > size:
            problems.append(f"{e['name']} lies beyond the {size} bytes of data")
        if e["dtype"] == "int8" and len(e["shape"]) != 2:
            problems.append(f"{e['name']} is int8 but not a matrix")
        elif e["dtype"] == "int8" and "scales" not in e:
            problems.append(f"{e['name']} is int8 without its scales")
        elif e["dtype"] == "int8" and e["scales"] + 4 * e["shape"][0] > size:
            problems.append(f"{e['name']}'s scales lie beyond the {size} bytes of data")
    problems += [
        f"the alias {name} names no tensor ({target})"
        for name, target in meta["aliases"].items()
        if target not in names
    ]
    sp = meta["sentencepiece"]
    if sp["offset"] + sp["size"] > size:
        problems.append(f"the sentencepiece model lies beyond the {size} bytes of data")
    return problems[:3]


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_model_text(raw: bytes) -> tuple[str, str, str, dict]:
    """(direction, meta text, data, meta) of a model file's bytes, or _Damaged (or
    ExportError: not a model file, another format) saying why. The file must be
    exactly `file_text` of its direction, meta and data: anything before, between or
    after its parts, or a hash that differs from the SHA-256 of every other byte, is
    damage; so is a meta that breaks the schema or whose tensors do not fit it.
    atkit/page/translator.js's `parseModelText` checks the same, in this order."""
    if not raw.isascii():
        at = next(i for i, b in enumerate(raw) if b > 127)
        raise _Damaged(f"byte {at} is not ASCII, and a model file is ASCII text")
    text = raw.decode("ascii")
    if _CONFLICT.search(text):
        raise _Damaged("it holds git's conflict markers (a merge left unfinished)")
    head = _HEADER_RE.match(text)
    if head is None:
        if GLOBAL not in text:
            raise ExportError("not a model file of tools.export_model")
        raise _Damaged("its first line is not a model file's")
    direction, at = head[1], head.end()
    start = _statement_start(direction)
    if not text.startswith(start, at):
        other = _OTHER_FORMAT.match(text, at)
        if other and int(other[1]) != FORMAT:
            raise ExportError(
                f"format {other[1]}, this code reads {FORMAT} (a file whose hash "
                "covers every byte)"
            )
        raise _Damaged("its statement does not start as a model file's does")
    sha_at = at + len(start)
    sha = text[sha_at : sha_at + 64]
    if not re.fullmatch(r"[0-9a-f]{64}", sha) or not text.startswith(
        _META, sha_at + 64
    ):
        raise _Damaged("its SHA-256 is not where a model file has it")
    if not text.endswith(_END):
        raise _Damaged(
            "it does not end where its statement does (cut short, or text after it)"
        )
    meta_at, data_at = sha_at + 64 + len(_META), text.rfind(_DATA, sha_at)
    data = text[data_at + len(_DATA) : len(text) - len(_END)]
    if data_at < meta_at or not _base64(data):
        raise _Damaged("its data is not where a model file has it, as base64")
    rest = text[:sha_at] + text[sha_at + 64 :]
    if hashlib.sha256(rest.encode("ascii")).hexdigest() != sha:
        raise _Damaged(
            "its content does not match the SHA-256 it carries (it was edited or cut "
            "short)"
        )
    literal = text[meta_at:data_at]
    try:
        meta_text = json.loads(literal)
    except ValueError:
        meta_text = None
    if not isinstance(meta_text, str) or json.dumps(meta_text) != literal:
        raise _Damaged("its meta is not one JSON string as the exporter writes it")
    if not meta_text.isascii():
        raise _Damaged("its meta is not ASCII text")
    try:
        meta = json.loads(meta_text, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as err:
        raise _Damaged(f"its meta is not JSON ({str(err)[:100]})") from None
    problem = meta_problem(meta)
    if problem:
        raise _Damaged(f"its content breaks the model file's schema: {problem}")
    problems = shape_problems(meta["manifest"], meta["tensors"], meta["aliases"])
    if problems:
        raise _Damaged(
            f"its tensors do not fit its manifest's settings ({'; '.join(problems)})"
        )
    problems = layout_problems(meta)
    if problems:
        raise _Damaged(f"its data does not hold its tensors ({'; '.join(problems)})")
    return direction, meta_text, data, meta


def _open(path: Path) -> tuple[str, str, dict]:
    """(direction, data, meta) of a model file, checked (`parse_model_text`)."""
    if not path.is_file():
        what = "a folder, not" if path.is_dir() else "no such"
        raise ExportError(f"{path}: {what} exported model file; {restore_advice(path)}")
    try:
        direction, _, data, meta = parse_model_text(path.read_bytes())
    except _Damaged as err:
        raise ExportError(f"{path} is damaged: {err}; {restore_advice(path)}") from None
    except ExportError as err:
        raise ExportError(
            f"{path}: {err}; {restore_advice(path)}, or move it out of the way"
        ) from None
    return direction, data, meta


def read_manifest(path) -> tuple[str, dict]:
    """(direction, manifest) of a model file, checked as `read_model` checks it, its
    weights not decoded."""
    direction, _, meta = _open(Path(path))
    return direction, meta["manifest"]


def inflate(data: str) -> bytes:
    """The bytes of a file's data: base64, then one whole zlib stream, nothing after
    it (as the browser's DecompressionStream("deflate") reads it)."""
    stream = zlib.decompressobj()
    out = stream.decompress(base64.b64decode(data, validate=True))
    if not stream.eof or stream.unused_data:
        raise ValueError("the deflated data is cut short or has bytes after its end")
    return out


def read_model(path) -> Exported:
    """The content of a model file written by `model_js`, checked: a file that is
    not exactly what the exporter writes (its hash, its schema, its tensors against
    its manifest's settings and its data) is an ExportError that says so and how to
    restore it."""
    path = Path(path)
    _, data, meta = _open(path)
    try:
        blob = inflate(data)
        if len(blob) != meta["size"]:
            raise ValueError(f"{len(blob)} bytes of data, {meta['size']} said")
    except (ValueError, zlib.error) as err:
        raise ExportError(
            f"{path} is damaged: {str(err)[:200]}; {restore_advice(path)}"
        ) from None
    sp = meta["sentencepiece"]
    proto = blob[sp["offset"] : sp["offset"] + sp["size"]]
    state = unpack_state(meta["tensors"], meta["aliases"], blob)
    current_config(meta["manifest"].get("config"))  # an earlier notebook's settings
    return Exported(
        meta["manifest"], state, proto, meta["spacy"], meta["detokenize"], path
    )
